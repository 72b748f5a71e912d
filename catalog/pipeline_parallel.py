"""Which architectures the image's vLLM runs with pipeline parallel: vLLM's own answer for every
class its registry maps an architecture name to, generated in the e2e venv into
catalog/vllm_pipeline_parallel.json (tools/vllm_pipeline_parallel.py, checked by `make e2e`)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PIPELINE_PARALLEL_FILE = Path(__file__).resolve().parent / "vllm_pipeline_parallel.json"
# vLLM's Transformers modelling backend (model_executor/models/transformers/), which
# model_impl "transformers" asks for and "auto" falls back to for an architecture vLLM does not
# register: it supports pipeline parallel (the catalog's TransformersForCausalLM).
TRANSFORMERS_BACKEND = "TransformersForCausalLM"


@cache
def _catalog() -> dict[str, Any]:
    return json.loads(PIPELINE_PARALLEL_FILE.read_text())


def pipeline_parallel_class(architectures: list[str], model_impl: str = "auto") -> tuple[str, bool]:
    """The registered architecture vLLM 0.26 resolves the config's ``architectures`` to and
    whether it supports pipeline parallel; ("", True) where the answer is not known here (an
    architecture whose class did not import when the catalog was made). As
    model_executor/models/registry.py ``inspect_model_cls`` resolves them: model_impl
    "transformers" takes the Transformers backend, "terratorch" its own class (not judged); with
    "auto", an architecture list none of which vLLM registers falls back to the Transformers
    backend; else the first registered one decides (with "vllm" and none registered vLLM refuses
    the model for that, not for pipeline parallel)."""
    catalog = _catalog()
    supported = set(catalog["supports_pipeline_parallel"])
    registered = supported | set(catalog["without_pipeline_parallel"])
    known = registered | set(catalog["not_inspected"])
    if model_impl == "terratorch":
        return "", True
    if model_impl == "transformers" or (
        model_impl == "auto" and not any(name in known for name in architectures)
    ):
        return TRANSFORMERS_BACKEND, TRANSFORMERS_BACKEND in supported
    for name in architectures:
        if name in registered:
            return name, name in supported
        if name in known:
            return "", True
    return "", True
