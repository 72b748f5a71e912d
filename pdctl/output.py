"""How pdctl speaks: results on stdout, errors on stderr (JSON under `--json`), exit codes that
tell "the check failed" from "the check could not run", and every foreign text printed as text.

Text from servers, logs, files and AWS reaches the terminal through here only: rich never
interprets it as markup or emoji codes (the consoles have both off), and control characters
(escape sequences that would repaint the terminal, carriage returns that hide what came before)
are shown escaped.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

EXIT_OK = 0
# The check ran and the system under test answered wrongly (a verdict of "no").
EXIT_CHECK_FAILED = 1
# The check could not run or could not decide: bad options or files, no credentials or
# kubeconfig, nothing reachable, evidence that cannot tell. click's usage errors use 2 as well.
EXIT_CANNOT_RUN = 2

# markup/emoji off: "[red]" or ":warning:" in a model name stays what it is.
stdout = Console(markup=False, emoji=False, highlight=False)
stderr = Console(stderr=True, markup=False, emoji=False, highlight=False)

_state = {"json": False}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
ONE_LINE_MAX = 400


class CannotRunError(Exception):
    """The check could not run or decide; `hint` says what to do next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def json_mode(value: bool) -> bool:
    """typer callback of every --json option: errors raised later follow the mode."""
    _state["json"] = bool(value)
    return value


def is_json() -> bool:
    return _state["json"]


def plain(text: object, limit: int = ONE_LINE_MAX) -> str:
    """Foreign text as one printable line: control characters escaped, whitespace runs
    collapsed, long text cut with a mark."""
    flat = " ".join(str(text).split())
    shown = _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode(), flat)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def styled(text: object, style: str = "") -> Text:
    """A table cell or line whose content is never parsed as markup."""
    return Text(plain(text, limit=10_000), style=style)


def fail(message: str, hint: str = "", code: int = EXIT_CANNOT_RUN) -> NoReturn:
    """One line on stderr (a JSON object under --json), then the exit code."""
    # Our own messages may list several problems (a configuration's); foreign text inside them
    # was cut to ONE_LINE_MAX where it was quoted.
    message, hint = plain(message, 4 * ONE_LINE_MAX), plain(hint, 4 * ONE_LINE_MAX)
    if is_json():
        body = {"error": message, "hint": hint, "exit_code": code}
        print(json.dumps(body), file=sys.stderr)
    else:
        stderr.print(Text(f"pdctl: {message}", style="red"), soft_wrap=True)
        if hint:
            stderr.print(Text(f"  fix: {hint}"), soft_wrap=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    if is_json():
        print(json.dumps({"warning": plain(message)}), file=sys.stderr)
    else:
        stderr.print(Text(plain(message), style="yellow"), soft_wrap=True)


def emit_json(value: Any) -> None:
    """Results for machines; json escapes control characters itself, and a figure that is not
    a finite number is written as null (strict JSON has no NaN)."""
    print(json.dumps(_finite(value), indent=2, allow_nan=False, default=str))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
