"""Model ids the app knows by their exact spelling: the default, the examples' and the bundled
model configurations' (catalog/model_configs), as their Hugging Face repositories spell them.

The Hub resolves a repository id whatever its case, so a wrongly cased id loads; but Ray Serve
LLM serves the model under the id exactly as configured, and clients send the canonical spelling
as `model`, which then matches nothing (HTTP 404, "model not found").
"""

from __future__ import annotations

from pathlib import Path

MODEL_IDS = (
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "deepseek-ai/DeepSeek-V3",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
)


# The config.json the app bundles for a model it knows (catalog/model_configs; each file's source
# in that folder's README).
BUNDLED_CONFIGS = {
    "Qwen/Qwen3-32B": "Qwen3-32B.json",
    "Qwen/Qwen3-8B": "Qwen3-8B.json",
    "Qwen/Qwen3-30B-A3B": "Qwen3-30B-A3B.json",
    "deepseek-ai/DeepSeek-V3": "DeepSeek-V3.json",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct.json",
}
MODEL_CONFIGS = Path(__file__).resolve().parent / "model_configs"


def bundled_config(model_id: str) -> Path | None:
    name = BUNDLED_CONFIGS.get(model_id)
    return MODEL_CONFIGS / name if name else None


def canonical_spelling(model_id: str) -> str | None:
    """The known spelling of an id that differs from it only in case, else None."""
    return next(
        (known for known in MODEL_IDS if known.lower() == model_id.lower() and known != model_id),
        None,
    )
