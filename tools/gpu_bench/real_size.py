"""The real-size model: an 8B-class model of the configured family, with vLLM's dummy weights.

Engine speed decides what the figures mean, so the benchmark runs a model of real size: the
family's 8B member (for the default Qwen3-32B, Qwen3-8B: same ``Qwen3ForCausalLM`` class,
GQA with 8 KV heads of 128, qk-norm), small enough that prefill and decode share one H200
(16 GiB of bf16 weights each, ``gpu_memory_utilization`` 0.35 each). Weights are vLLM's
``load_format: dummy`` (random, nothing downloaded: vllm/model_executor/model_loader/
dummy_loader.py, v0.26.0); the folder holds only config.json and the family's tokenizer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DUMMY = "random weights, nothing downloaded (the real-size model)"


def tokenizer_size(tokenizer_dir: Path) -> int:
    """Tokens the tokenizer can decode: its BPE vocabulary and its added (special) tokens."""
    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = set(data["model"]["vocab"].values()) | {token["id"] for token in data["added_tokens"]}
    return max(ids) + 1


def build(
    config: dict[str, Any], tokenizer_dir: Path, out: Path, layers: int | None = None
) -> list[str]:
    """Write the model folder; return one line per change to the published config.

    ``layers`` keeps only that many decoder layers: engines many times faster per token at the
    same width, vocabulary and KV shape per layer, so that the Serve path, not the engines,
    is what saturates (the ingress's ceiling).

    The published Qwen3 configs pad the vocabulary (151,936 rows) past the tokenizer's 151,669
    tokens. Trained weights never pick a padding row; random weights do (their logits are
    nearly flat), and a token id the tokenizer cannot decode fails the request, so the
    embedding and LM head are cut to the tokenizer's size (0.2% of their rows)."""
    out.mkdir(parents=True, exist_ok=True)
    small = dict(config)
    changes = []
    size = tokenizer_size(tokenizer_dir)
    if int(small.get("vocab_size", size)) > size:
        changes.append(
            f"vocab_size: {small['vocab_size']} -> {size} (the tokenizer's tokens: random "
            "weights would sample padding rows it cannot decode)"
        )
        small["vocab_size"] = size
    if layers is not None and layers < int(small["num_hidden_layers"]):
        changes.append(
            f"num_hidden_layers: {small['num_hidden_layers']} -> {layers} (fast engines: the "
            "Serve path saturates first)"
        )
        small["num_hidden_layers"] = layers
        if "layer_types" in small:
            small["layer_types"] = small["layer_types"][:layers]
    (out / "config.json").write_text(json.dumps(small, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, out / name)
    return changes


def with_dummy_weights(serve_config: dict[str, Any]) -> list[str]:
    """Both sides load vLLM's dummy weights (in place); one line per change."""
    (application,) = serve_config["applications"]
    lines = []
    for role in ("prefill", "decode"):
        kwargs = application["args"][f"{role}_config"]["engine_kwargs"]
        lines.append(f"{role}_config.engine_kwargs.load_format: unset -> 'dummy' ({DUMMY})")
        kwargs["load_format"] = "dummy"
    return lines
