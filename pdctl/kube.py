"""The cluster as pdctl's commands reach it: a kubeconfig, or a message that says how to get
one, and Kubernetes calls bounded as a whole.

The cluster stack prints the command that writes the kubeconfig (its `UpdateKubeconfigCommand`
output, stacks/cluster_stack.py); every command that needs the cluster names it when no usable
kubeconfig is there, instead of the client's ConfigException.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from pdctl.output import CannotRunError, plain

if TYPE_CHECKING:
    from app_config import Settings
KUBECONFIG_OUTPUT = "UpdateKubeconfigCommand"


def kubeconfig_hint(settings: Settings | None) -> str:
    if settings is None:  # an error met outside a command's own handling: no names at hand
        return (
            "write a kubeconfig with `aws eks update-kubeconfig --name <cluster.name> --region "
            f"<region>` (the cluster stack's {KUBECONFIG_OUTPUT} output), as one of "
            "cluster.admin_principal_arns or operator_principal_arns"
        )
    stack = settings.stack_name("cluster")
    return (
        f"write a kubeconfig with `aws eks update-kubeconfig --name {settings.cluster_name} "
        f"--region {settings.region}` (the {stack} stack's {KUBECONFIG_OUTPUT} output), as one of "
        "cluster.admin_principal_arns or operator_principal_arns; the API endpoint is private "
        "unless configured otherwise, so run it from inside the VPC or through the README's "
        "port-forwarding recipe"
    )


def load_kubeconfig(settings: Settings) -> None:
    """Loads the kubeconfig (KUBECONFIG or ~/.kube/config), or raises with the hint."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        # KUBECONFIG read now: the client reads it once, when it is first imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        # the client raises more than ConfigException for a file that is not a kubeconfig
        raise CannotRunError(
            f"no usable kubeconfig ({type(error).__name__}: {plain(error, 200)})",
            kubeconfig_hint(settings),
        ) from None


def api_message(error: BaseException) -> str:
    """What the API server said: its Status object's message (the body of an ApiException, as
    the Kubernetes API returns it: `{"kind": "Status", "message": ...}`), else the reason."""
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str) and body:
        try:
            said = json.loads(body[:100_000]).get("message")
        except (ValueError, AttributeError, RecursionError):
            said = None
        if isinstance(said, str) and said:
            return plain(said, 200)
    return plain(getattr(error, "reason", "") or "", 200)


def describe_api_error(error: BaseException, settings: Settings | None) -> CannotRunError:
    """A Kubernetes API failure as one line with what to do next: the status, what the API
    server said, and the fix for its class (refused caller, any other status, an answer that
    cannot be read, no answer)."""
    status = getattr(error, "status", None)
    said = api_message(error)
    if status in (401, 403):
        return CannotRunError(
            f"the Kubernetes API refused the caller (HTTP {status}: {said})",
            "use an identity with an EKS access entry (cluster.admin_principal_arns, or "
            "operator_principal_arns with the Roles of manifests/operator-rbac.yaml); "
            f"{kubeconfig_hint(settings)}",
        )
    if isinstance(status, int) and status:
        hint = (
            "the object or namespace is not there: is the serving stack deployed to this cluster?"
            if status == 404
            else "run the command again; if it persists, read the API server's events"
        )
        return CannotRunError(f"the Kubernetes API answered HTTP {status} ({said})", hint)
    if isinstance(error, ValueError | TypeError | KeyError | AttributeError | RecursionError):
        return CannotRunError(
            "the Kubernetes API answered something pdctl cannot read "
            f"({type(error).__name__}: {plain(error, 200)})"
        )
    return CannotRunError(
        f"the Kubernetes API is out of reach ({type(error).__name__}: {plain(error, 200)})",
        kubeconfig_hint(settings),
    )
