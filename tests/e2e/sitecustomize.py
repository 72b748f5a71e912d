"""Loaded at start-up by every Python process of the local Ray cluster (the harness puts this
folder on their PYTHONPATH); active only with PD_LOOPBACK_ONLY=1, so nothing listens beyond
127.0.0.1.

Ray Serve 2.58.0 replicas bind their inter-deployment gRPC server to ``[::]:0``, hard-coded
(ray/serve/_private/replica.py: ``add_port_to_grpc_server(self._server, "[::]:0")``), whatever
the node's IP. This rewrites wildcard binds made through
``ray._common.tls_utils.add_port_to_grpc_server`` to 127.0.0.1. The module is patched when it is
first imported (before replica.py imports the name), so nothing is imported early.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGET = "ray._common.tls_utils"
WILDCARD_HOSTS = ("[::]", "0.0.0.0", "", "[::0]")


def _patch(module: ModuleType) -> None:
    original = module.add_port_to_grpc_server

    def add_port_to_grpc_server(server: Any, address: str) -> Any:
        host, _, port = address.rpartition(":")
        if host in WILDCARD_HOSTS:
            address = f"127.0.0.1:{port}"
        return original(server, address)

    module.add_port_to_grpc_server = add_port_to_grpc_server


class LoopbackFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of TARGET so the patch runs right after it."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if os.environ.get("PD_LOOPBACK_ONLY") == "1":
    sys.meta_path.insert(0, LoopbackFinder())
