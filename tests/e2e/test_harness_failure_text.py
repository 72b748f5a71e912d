"""A failed scenario script is reported by where its failure began, not only by its end, which
Ray's shutdown after a failure can fill with errors of its own (harness.failure_text)."""

from __future__ import annotations

from harness import failure_text

CAUSE = "Traceback (most recent call last):\n  ...\nKeyError: 'prefill'\n"
SHUTDOWN = "ValueError: An application is trying to access a Ray object whose owner is unknown\n"


def test_the_first_traceback_leads_and_the_end_follows() -> None:
    stderr = "starting\n" + CAUSE + SHUTDOWN * 500 + "the last line\n"
    text = failure_text(stderr)
    assert text.startswith(CAUSE)
    assert text.endswith("the last line\n")


def test_a_short_stderr_is_shown_whole() -> None:
    stderr = "starting\n" + CAUSE + "the last line\n"
    assert failure_text(stderr) == stderr
