"""The settings, loaded on a thread of their own while jsii's Node.js loads its assemblies.

Why: `import aws_cdk` and `import cdk_nag` start Node.js and load aws-cdk-lib's and cdk-nag's
JavaScript; Python waits for it (about 0.35 s of a `cdk synth`, docs/verification.md, "where `cdk
synth`'s time goes"). Importing the configuration's models and validating the settings is pure
Python (about 0.6 s of CPU) and sends no jsii request, so it can run in that wait.

What keeps the thread away from jsii, whose kernel pipe is not thread-safe: this module imports
no CDK library, and the thread runs `_load` alone, which imports only `app_config`.
`tests/config/test_settings_prefetch.py` asserts from the module graph that nothing the thread
imports is aws_cdk, jsii, constructs or cdk_nag, and that it shares no module with `import
aws_cdk, cdk_nag` beyond `SHARED_MODULES`, which `start` imports first, so that the two threads
never import one module at the same time.

What keeps the result the app's: the thread reads the context the way aws-cdk-lib's `App` does
(core/lib/app.ts, `loadContext`: `CDK_CONTEXT_JSON`, then the overflow file the CLI names), but
`settings` uses it only when that context is, value for value and type for type, the one the
`App` holds; otherwise it loads the settings again from the `App`'s. An error the thread met is
raised where `load_settings` would have raised it, as it was.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the annotations only: importing app_config is the thread's work
    from app_config import Settings

# aws-cdk-lib 2.275, cx-api/lib/cxapi.ts: CONTEXT_ENV and CONTEXT_OVERFLOW_LOCATION_ENV.
CONTEXT_ENV = "CDK_CONTEXT_JSON"
CONTEXT_OVERFLOW_ENV = "CONTEXT_OVERFLOW_LOCATION_ENV"

# Modules both `import aws_cdk, cdk_nag` (jsii's runtime) and the thread's imports load: imported
# here, on the main thread, before the thread starts. Two threads importing the same module at
# once is safe in Python except across a circular import, where one of them may get the module
# half-initialized; with none shared, the question does not arise. The test lists what to add.
SHARED_MODULES = (
    "atexit", "base64", "bisect", "calendar", "dataclasses", "datetime", "decimal",
    "importlib.resources", "inspect", "locale", "platform", "random", "selectors", "string",
    "tempfile", "textwrap", "traceback", "typing_extensions", "unicodedata", "zipfile",
)  # fmt: skip


def context_from_environment(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The context `cdk.App()` reads when the CLI runs the app; None when the CLI did not (no
    `CDK_CONTEXT_JSON`: a test or a script building the app with a context of its own) or when
    it cannot be read here (then the `App` fails on it as it always did)."""
    if CONTEXT_ENV not in environ:
        return None
    try:
        context = json.loads(environ[CONTEXT_ENV] or "{}")
        if overflow := environ.get(CONTEXT_OVERFLOW_ENV):
            with open(overflow, encoding="utf-8") as file:
                context.update(json.load(file))
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # the App reports it as it always did; nothing is loaded ahead
    return context if isinstance(context, dict) else None


def _same(left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
    """Equal as JSON: 1 and 1.0, or 1 and True, are different settings to strict validators."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def _load(context: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """The thread's whole work: app_config imported here, off the main thread."""
    from app_config import load_settings

    return load_settings(context, environ)


class SettingsPrefetch:
    """The settings for one context, loading on a daemon thread (never keeping the process alive
    after the app has failed), or not at all where the CLI gave no context."""

    def __init__(self, context: Mapping[str, Any] | None, environ: Mapping[str, str]) -> None:
        self._context = context
        self._environ = environ
        self._result: Settings | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if context is not None:
            self._thread = threading.Thread(target=self._run, name="settings", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._context is not None
        try:
            self._result = _load(self._context, self._environ)
        except BaseException as error:  # raised again on the main thread, in `settings`
            self._error = error

    def wait(self) -> None:
        """Until the thread is done: after this the main thread may import what it imported."""
        if self._thread is not None:
            self._thread.join()

    def settings(
        self, context: Mapping[str, Any], load: Callable[[Mapping[str, Any]], Settings]
    ) -> Settings:
        """The settings of ``context`` (the `App`'s): the thread's when it read the same context,
        its error raised here when it failed; else ``load(context)`` on this thread."""
        self.wait()
        if self._context is None or not _same(self._context, context):
            return load(context)
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def start(environ: Mapping[str, str] = os.environ) -> SettingsPrefetch:
    """Import the shared modules, then start loading the CLI's settings on a thread."""
    for name in SHARED_MODULES:
        importlib.import_module(name)
    return SettingsPrefetch(context_from_environment(environ), environ)
