"""app.py ends a successful synth without the interpreter's teardown (`exit_without_teardown`):
what a normal exit does outside the process must still happen, in a real process with jsii's
Node.js running."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.configurations import PROJECT_ROOT

# argv: the file an atexit handler writes.
_APP_ENDS = """
import atexit, sys
import aws_cdk
import app
aws_cdk.App()  # a request: jsii's Node.js runs, with its temporary folders
atexit.register(lambda: open(sys.argv[1], "w").write("ran"))
sys.stdout.write("unflushed")
app.exit_without_teardown()
sys.stdout.write(", returned")
"""


def _run(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    marker, temporary = tmp_path / "atexit", tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", _APP_ENDS, str(marker)],
        cwd=PROJECT_ROOT,
        env={"PATH": str(Path(sys.executable).parent), "TMPDIR": str(temporary)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result, marker, temporary


def test_the_exit_runs_the_atexit_handlers_flushes_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    """jsii's own handler stops Node.js, which removes its folders, and removes the runtime's:
    the temporary folder is as empty as after a normal exit."""
    result, marker, temporary = _run(tmp_path)
    assert (result.returncode, result.stdout) == (0, "unflushed"), result.stderr
    assert marker.read_text() == "ran"
    assert list(temporary.iterdir()) == []


class _EndedError(Exception):
    pass


def test_a_running_thread_keeps_the_normal_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-daemon thread is waited for by Python's own exit, so that exit is kept: the call
    returns. In this process, with the exit and the atexit run replaced by ones that raise, so
    that a regression fails here instead of ending the test run or stopping jsii."""
    import app

    def ended(*_: object) -> None:
        raise _EndedError

    monkeypatch.setattr(atexit, "_run_exitfuncs", ended)
    monkeypatch.setattr(os, "_exit", ended)
    release = threading.Event()
    worker = threading.Thread(target=release.wait, args=(5,))
    worker.start()
    try:
        app.exit_without_teardown()
    finally:
        release.set()
        worker.join()
