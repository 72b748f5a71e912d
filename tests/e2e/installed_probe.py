"""Read the installed vLLM/Ray in a child interpreter: importing them here would start Ray's and
vLLM's module state in the pytest process before the local cluster's environment is set.

Every probe of the session runs in a fork of one server process (``python installed_probe.py``,
started on the first probe): the server imports the heavy packages once (torch, Ray Serve and
vLLM's top level: about half of a probe's time, once per probe before), and each probe then runs
in a fresh fork of it, so nothing one probe sets (vLLM's platform, a patched class, an
environment variable) reaches another. What the server imports must not have read at import
anything a probe sets before its own imports:
- vLLM's platform: ``import vllm`` resolves it (no GPU: ``UnspecifiedPlatform``) in the server
  as in any interpreter, but vLLM's config and engine modules bind it by name (``from
  vllm.platforms import current_platform``), so a probe that sets
  ``vllm.platforms._current_platform`` first would not reach a preloaded one;
- the Hub's offline switch, read once when huggingface_hub.constants is imported (a probe sets
  ``HF_HUB_OFFLINE`` first).
The server checks both and refuses to serve otherwise.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

# Imported once by the server: the packages every probe imports and none binds vLLM's platform.
PRELOAD = ("torch", "pydantic", "fastapi", "ray", "ray.serve", "vllm")
PROBE_TIMEOUT_S = 600.0


# ------------------------------------------------------------------------ the pytest side
class _Server:
    """The server process of this session; one probe at a time (a lock: pytest may not, but a
    fixture's thread could)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            atexit.register(self.stop)
        return self._process

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            process = self._started()
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()  # the server bounds each probe (its timeout)
        if not line:
            raise RuntimeError(f"the probe server exited ({process.poll()}); its stderr above")
        return json.loads(line)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # the server's loop ends at end of input
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


_SERVER = _Server()


def run_forked(
    *,
    code: str | None = None,
    script: Path | None = None,
    args: tuple[str, ...] = (),
    timeout: float = PROBE_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``python -c code args...`` or ``python script args...``, run in a fork of the server
    and killed after ``timeout`` seconds; what subprocess.run(capture_output=True, text=True)
    would return (a killed probe's return code is -9)."""
    request = {"code": code, "script": str(script) if script else None, "args": list(args)}
    reply = _SERVER.run({**request, "timeout": timeout})
    argv = ["-c", code] if code is not None else [str(script)]
    return subprocess.CompletedProcess(
        [*argv, *args], reply["returncode"], reply["stdout"], reply["stderr"]
    )


def probe(code: str, argument: object) -> dict[str, Any]:
    """Run ``code`` with ``argument`` (as JSON in argv[1]); its last stdout line is JSON."""
    result = run_forked(code=code, args=(json.dumps(argument),))
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------ the server side
def _run_child(request: dict[str, Any]) -> int:
    """In the fork: the request as its own interpreter would run it."""
    if request["script"]:
        sys.argv = [request["script"], *request["args"]]
        sys.path[0] = str(Path(request["script"]).parent)  # as `python script` sets it
        runpy.run_path(request["script"], run_name="__main__")
    else:
        sys.argv = ["-c", *request["args"]]
        sys.path[0] = ""  # as `python -c` sets it
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
    return 0


def _fork(request: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the probe
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                code = _run_child(request)
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + request["timeout"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                returncode = -9
                break
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        return {"returncode": returncode, "stdout": out.read(), "stderr": err.read()}


def serve() -> int:
    for name in PRELOAD:
        importlib.import_module(name)
    bound = [
        name
        for name, module in list(sys.modules.items())
        if name != "vllm.platforms" and "current_platform" in vars(module or object)
    ]
    if bound:
        raise SystemExit(f"the preload {PRELOAD} bound vLLM's platform in {bound}")
    if "huggingface_hub.constants" in sys.modules:
        raise SystemExit(f"the preload {PRELOAD} read the Hub's offline switch")
    if threading.active_count() != 1:  # a fork carries only the thread that forks
        raise SystemExit(f"the preload started Python threads: {threading.enumerate()}")
    for line in sys.stdin:
        reply = _fork(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
