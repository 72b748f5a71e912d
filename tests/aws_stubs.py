"""One boto3 session for the tests that stub AWS clients (botocore's Stubber), with throw-away
credentials and the configurations' region.

A new session loads each service's model (JSON of several MB for EC2) again; one session per
test process loads each once and hands every test a new client of its own, so a Stubber's
queued answers never reach another test.
"""

from __future__ import annotations

import functools

import boto3


@functools.cache
def session() -> boto3.Session:
    return boto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-west-2"
    )


def client(service: str):
    """A new client of the shared session."""
    return session().client(service)


class Unanswered:
    """A client whose every call answers an empty response: each check then reads what it
    cannot find, and reports under its planned name (for tests of which checks run)."""

    def __getattr__(self, operation: str):
        return lambda *args, **kwargs: {}
