#!/usr/bin/env python3
"""CDK entry point: load the configuration, build the stacks, register the nag packs, synth.

The settings load on a thread while `import aws_cdk` and `import cdk_nag` wait for Node.js
(settings_prefetch.py says why and what keeps that thread away from jsii); hence the imports in
three groups: the prefetch, the CDK libraries, then, once the thread is done, the app's own.
"""

from __future__ import annotations

import settings_prefetch

PREFETCH = settings_prefetch.start()

import aws_cdk as cdk  # noqa: E402  (after the thread's start: its wait is the thread's time)
import cdk_nag  # noqa: E402, F401  (its assembly loads here, still beside the thread)

PREFETCH.wait()  # the thread's imports are done before this thread imports the app's modules

import atexit  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from app_config import ConfigError, Settings, load_settings  # noqa: E402
from stacks.assembly import Stacks, build_stacks  # noqa: E402
from stacks.nag import register_nag_packs  # noqa: E402


@dataclass(frozen=True)
class BuiltApp:
    app: cdk.App
    settings: Settings
    stacks: Stacks


def build(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> BuiltApp:
    """Everything but synthesis; ``context`` None means the CLI's (cdk.json and -c)."""
    app = cdk.App(context=dict(context) if context is not None else None, outdir=outdir)
    # Raises before any construct exists; the thread's settings when it read this same context.
    settings = PREFETCH.settings(app.node.get_all_context(), load_settings)
    stacks = build_stacks(app, settings)
    register_nag_packs(app)
    return BuiltApp(app, settings, stacks)


def main() -> None:
    try:
        build().app.synth()
    except ConfigError as error:
        sys.exit(str(error))
    except RuntimeError as error:
        if "ValidationFailed" not in str(error):
            raise
        # The report itself was already printed by the CDK; the jsii traceback adds nothing.
        sys.exit("cdk-nag found unacknowledged findings; see the report above and cdk.out/*.json")


def exit_without_teardown() -> None:
    """End the process once the assembly is written, without the interpreter's teardown.

    Why: freeing every module and object (aws-cdk-lib's bindings, the stacks' proxies) took
    about 0.4 s of each `cdk synth` and changes nothing outside the process. What an exit must
    do still runs first: the atexit handlers, jsii's among them (it asks Node.js to exit, waits
    for it, forwards what Node.js printed last and removes its runtime's temporary folder), then
    the flush of stdout and stderr. A thread the normal exit would wait for keeps that exit.
    """
    main_thread = threading.main_thread()
    if any(not t.daemon for t in threading.enumerate() if t is not main_thread):
        return
    atexit._run_exitfuncs()  # what Py_Finalize runs before tearing the interpreter down
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    exit_without_teardown()  # reached only when the synth succeeded; errors exit as before
