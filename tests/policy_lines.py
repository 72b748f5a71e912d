"""The latency policy's log lines, as a test reads them: Serve's "ray.serve" logger, which the
policy writes to (serve_extensions/latency_autoscaler.py), stops propagating once ray.serve is
imported (Ray 2.58 configures it), so pytest's caplog, on the root logger, sees its records only
in a process that has not imported it. Attached to the logger itself, it sees them in both."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def policy_lines(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    logger = logging.getLogger("ray.serve")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # once, not again through the root logger
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)
        logger.propagate = propagate
