"""Who may open which Session Manager session, and where a port-forwarding session may lead.

The rules, from the Systems Manager user guide:

- ``ssm:StartSession`` is authorized against the target instance and against the Session
  document ("Start a session with a document by specifying the session documents in IAM
  policies": when a user names a document, the system checks their IAM policy for it).
- Without ``--document-name`` the session runs SSM-SessionManagerRunShell, a shell, and its
  document is *not* checked unless the statement that allows StartSession carries the condition
  ``ssm:SessionDocumentAccessCheck`` true; with it, the shell document must be allowed
  explicitly ("Enforce a session document permission check for the AWS CLI").
- A port-forwarding session goes where its document's ``properties.host`` and
  ``properties.portNumber`` say; only what the document declares in ``parameters`` can the caller
  set ("Session document schema"). AWS-StartPortForwardingSessionToRemoteHost declares ``host``
  and ``portNumber``: the caller chooses both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tests.iam_model import Request, is_allowed

DEFAULT_SHELL_DOCUMENT = "SSM-SessionManagerRunShell"
AWS_REMOTE_HOST_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
# AWS-StartPortForwardingSessionToRemoteHost's content (document version 1, as
# `aws ssm get-document` returns it): both destination fields come from parameters.
AWS_REMOTE_HOST_CONTENT = {
    "schemaVersion": "1.0",
    "sessionType": "Port",
    "parameters": {"portNumber": {}, "localPortNumber": {}, "host": {}},
    "properties": {
        "portNumber": "{{ portNumber }}",
        "type": "LocalPortForwarding",
        "localPortNumber": "{{ localPortNumber }}",
        "host": "{{ host }}",
    },
}
_PARAMETER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
CALLERS_CHOICE = "<the caller's choice>"


@dataclass(frozen=True)
class Instance:
    arn: str
    tags: dict[str, str]


def document_arn(region: str, account: str, name: str) -> str:
    """AWS-owned documents have no account in their ARN; the account's own do."""
    owner = "" if name.startswith("AWS-") else account
    return f"arn:aws:ssm:{region}:{owner}:document/{name}"


def may_start_session(
    identity: list[dict[str, Any]],
    principal_arn: str,
    account: str,
    region: str,
    instance: Instance,
    document: str | None,
) -> bool:
    """StartSession as Session Manager decides it for a caller with these identity policies."""
    tags = {f"ssm:resourceTag/{key}": value for key, value in instance.tags.items()}
    on_instance = Request(principal_arn, account, "ssm:StartSession", instance.arn, tags)
    if not is_allowed(on_instance, identity=identity):
        return False
    if document is None and not _checks_documents(identity):
        return True  # the shell, unchecked
    name = document or DEFAULT_SHELL_DOCUMENT
    with_document = Request(
        principal_arn, account, "ssm:StartSession", document_arn(region, account, name)
    )
    return is_allowed(with_document, identity=identity)


def _checks_documents(identity: list[dict[str, Any]]) -> bool:
    return any(
        "ssm:SessionDocumentAccessCheck" in json_keys
        for policy in identity
        for statement in policy.get("Statement", [])
        for json_keys in [
            {key for pairs in statement.get("Condition", {}).values() for key in pairs}
        ]
    )


def destination(content: dict[str, Any]) -> tuple[Any, Any]:
    """(host, port) a port-forwarding document leads to; CALLERS_CHOICE where a parameter the
    caller passes decides it."""
    assert content["sessionType"] == "Port"
    properties = content["properties"]
    assert properties["type"] == "LocalPortForwarding"
    declared = set(content.get("parameters", {}))

    def value(field: str) -> Any:
        raw = properties[field]
        if isinstance(raw, str) and any(p in declared for p in _PARAMETER.findall(raw)):
            return CALLERS_CHOICE
        return raw

    return value("host"), value("portNumber")
