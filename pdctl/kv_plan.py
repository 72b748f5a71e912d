"""KV-cache sizing for prefill/decode disaggregation, from a model's Hugging Face config.json.

KV bytes per token = 2 (K and V) x layers x KV heads x head dim x bytes per element. Grouped-query
attention is handled through num_key_value_heads. Not handled, and refused with a clear error:
multi-head latent attention (DeepSeek's kv_lora_rank), whose cache is a compressed latent.
Sliding-window layers are counted at full length (an upper bound). Weights are sized at the
precision the checkpoint's quantization_config gives each kind of layer (weight_precision.py).
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from catalog.instances import GpuInstance
from pdctl.http_call import within
from pdctl.weight_precision import UNQUANTIZED, QuantizationError, WeightPrecision, weight_precision

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "fp8": 1}

# Share of EFA's line rate a NIXL READ achieves (NIXL over LIBFABRIC, large blocks).
EFA_EFFICIENCY = 0.7
# EC2 limits one TCP flow to 10 Gbps inside a cluster placement group (EC2 user guide, "Amazon
# EC2 instance network bandwidth"): the path UCX falls back to on EFA.
TCP_SINGLE_FLOW_GBPS = 10.0
# Model FLOPs utilisation of a prefill pass; published vLLM/SGLang prefill runs reach 0.4-0.6.
PREFILL_MFU = 0.4
# Calibration: DistServe (Zhong et al., OSDI 2024) and Splitwise (Patel et al., ISCA 2024) gain
# from disaggregation when prompts are long enough that prefill interferes with decode, and lose
# it when the KV transfer is no longer small against the prefill it replaces.
MIN_INPUT_TOKENS = 1024
MAX_TRANSFER_SHARE = 0.2


class UnsupportedModelError(ValueError):
    """The config describes an attention layout this estimate cannot size."""


@dataclass(frozen=True)
class ModelShape:
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    experts: int
    experts_per_token: int
    dtype_bytes: int
    precision: WeightPrecision = field(default=UNQUANTIZED)

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes_per_token_per_gpu(self, tensor_parallel: int) -> int:
        """Each rank holds its share of KV heads, and at least one: with TP above the KV head
        count vLLM replicates heads across ranks."""
        heads = math.ceil(self.kv_heads / tensor_parallel)
        return 2 * self.layers * heads * self.head_dim * self.dtype_bytes

    def _parameters(self, experts: int) -> int:
        """Attention and gated MLP (times the experts counted) per layer, plus the embeddings;
        norms and biases are negligible."""
        h, q = self.hidden_size, self.attention_heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h
        mlp = 3 * h * self.intermediate_size * max(experts, 1)
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return self.layers * (attention + mlp) + embeddings

    @property
    def parameters(self) -> int:
        """All weights: what must sit in GPU memory."""
        return self._parameters(self.experts)

    @property
    def weight_bytes(self) -> int:
        """All weights at the precision the checkpoint stores each kind of layer in: attention
        and MLP (or experts) as quantized, embeddings in the model's dtype."""
        h, q = self.hidden_size, self.attention_heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attention = self.layers * (h * q + 2 * h * kv + q * h)
        mlp = self.layers * 3 * h * self.intermediate_size * max(self.experts, 1)
        embedding = self.vocab_size * h
        lm_head = 0 if self.tied_embeddings else self.vocab_size * h
        size, dtype = self.precision.bytes_for, self.dtype_bytes
        total = (
            attention * size("attention", dtype)
            + mlp * size("expert" if self.experts else "mlp", dtype)
            + embedding * dtype
            + lm_head * size("lm_head", dtype)
        )
        return math.ceil(total)

    @property
    def active_parameters(self) -> int:
        """Weights one token passes through: what the compute costs (MoE routes to a few)."""
        return self._parameters(self.experts_per_token if self.experts else 0)


# Hugging Face answers a config download in well under this; a stalled one ends here.
DOWNLOAD_TIMEOUT_SECONDS = 20
CONFIG_BYTES_MAX = 10_000_000
# Hugging Face repository ids: `owner/name`, letters, digits, '-', '_', '.', at most 96 each.
HF_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
# The largest size any config key here holds in a real model is below 2**31 (vLLM keeps them in
# int32); beyond it the estimate's floats would overflow.
SIZE_MAX = 2**31 - 1
REQUIRED_SIZES = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "vocab_size",
)


def is_model_id(source: str) -> bool:
    """Only `owner/name` is a model id: what names a file (a .json name, a leading '.', '/' or
    '~', more than one '/', a backslash) or exists here is a path, never downloaded."""
    if Path(source).expanduser().exists():
        return False
    if source.startswith((".", "/", "~")) or source.endswith(".json") or "\\" in source:
        return False
    return HF_MODEL_ID.fullmatch(source) is not None and ".." not in source


def load_model_config(source: str) -> dict[str, Any]:
    """A config.json path (or a model folder holding one), or a Hugging Face model id whose
    config.json is fetched (public models; gated ones need the file downloaded with a token
    first). Raises OSError for what cannot be read and UnsupportedModelError for what is not a
    model config."""
    if is_model_id(source):
        text = _download(source)
    else:
        path = Path(source).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise OSError(f"{source}: no such file (a path; a Hugging Face model id is owner/name)")
        with path.open("rb") as file:
            data = file.read(CONFIG_BYTES_MAX + 1)
        if len(data) > CONFIG_BYTES_MAX:
            raise UnsupportedModelError(f"larger than {CONFIG_BYTES_MAX:,} bytes: not a config")
        text = data.decode(errors="replace")
    try:
        config = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise UnsupportedModelError("not a model config: JSON nested too deeply") from None
    except ValueError as error:
        raise UnsupportedModelError(f"not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise UnsupportedModelError("not a model config: expected a JSON object")
    return config


def _download(model_id: str) -> str:
    url = f"https://huggingface.co/{model_id}/resolve/main/config.json"

    def read() -> bytes:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            return response.read(CONFIG_BYTES_MAX + 1)

    try:
        data = within(DOWNLOAD_TIMEOUT_SECONDS, read, f"downloading {url}")
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise OSError(
                f"{url}: HTTP {error.code}: a gated or private model; download its config.json "
                "with your token and pass the file"
            ) from None
        raise OSError(f"{url}: HTTP {error.code}") from None
    except TimeoutError as error:
        raise OSError(str(error)) from None
    if len(data) > CONFIG_BYTES_MAX:
        raise UnsupportedModelError(f"{url}: larger than {CONFIG_BYTES_MAX:,} bytes")
    return data.decode(errors="replace")


def _no_constant(name: str) -> Any:
    """json accepts NaN and Infinity; a model size never is either."""
    raise ValueError(f"{name} is not a number a model config can hold")


def _size(config: dict[str, Any], key: str, default: int | None = None) -> int:
    """A positive whole number, or a clear error naming the key."""
    value = config.get(key)
    if value is None:  # absent, or null as some configs write it
        value = default
    if value is None:
        raise UnsupportedModelError(f"{key} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SIZE_MAX:
        raise UnsupportedModelError(
            f"{key} = {str(value)[:40]}; expected a whole number from 1 to {SIZE_MAX}"
        )
    return value


def model_shape(model_config: dict[str, Any]) -> ModelShape:
    # Multimodal configs nest the language model; the quantization_config stays on top.
    config = model_config.get("text_config", model_config)
    if not isinstance(config, dict):
        raise UnsupportedModelError("text_config is not a JSON object")
    try:
        precision = weight_precision(
            model_config if "quantization_config" in model_config else config
        )
    except QuantizationError as error:
        raise UnsupportedModelError(str(error)) from None
    if "kv_lora_rank" in config:
        raise UnsupportedModelError("multi-head latent attention (kv_lora_rank) is not handled")
    sizes = {key: _size(config, key) for key in REQUIRED_SIZES}
    heads = sizes["num_attention_heads"]
    kv_heads = _size(config, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise UnsupportedModelError(
            f"num_key_value_heads = {kv_heads} does not divide num_attention_heads = {heads}"
        )
    head_dim = _size(config, "head_dim", sizes["hidden_size"] // heads or None)
    intermediate_key = (
        "moe_intermediate_size" if config.get("moe_intermediate_size") else "intermediate_size"
    )
    experts_key = "num_experts" if config.get("num_experts") else "num_local_experts"
    experts = _size(config, experts_key) if config.get(experts_key) else 0
    experts_per_token = (
        _size(config, "num_experts_per_tok") if config.get("num_experts_per_tok") else 0
    )
    if experts_per_token > max(experts, 1) and experts:
        raise UnsupportedModelError(
            f"num_experts_per_tok = {experts_per_token} exceeds the {experts} experts"
        )
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise UnsupportedModelError(f"dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return ModelShape(
        layers=sizes["num_hidden_layers"],
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=sizes["hidden_size"],
        intermediate_size=_size(config, intermediate_key),
        vocab_size=sizes["vocab_size"],
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts,
        experts_per_token=experts_per_token,
        dtype_bytes=DTYPE_BYTES[dtype],
        precision=precision,
    )


@dataclass(frozen=True)
class KvPlan:
    kv_bytes_per_token: int
    kv_bytes_per_request: int
    transfer_seconds_efa: float
    transfer_seconds_tcp: float
    prefill_seconds: float
    weights_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    max_concurrent_sequences: int
    verdict: str
    pays_off: bool
    weight_precision: str = "none"

    @property
    def fits(self) -> bool:
        return self.max_concurrent_sequences >= 1

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


def plan(
    shape: ModelShape,
    instance: GpuInstance,
    *,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    input_tokens: int,
    output_tokens: int,
    gpu_memory_utilization: float = 0.9,
) -> KvPlan:
    per_request = shape.kv_bytes_per_token * input_tokens
    efa_bytes_per_second = instance.efa_bandwidth_gbps * 1e9 / 8 * EFA_EFFICIENCY
    transfer_efa = per_request / efa_bytes_per_second
    transfer_tcp = per_request / (TCP_SINGLE_FLOW_GBPS * 1e9 / 8)
    gpus = tensor_parallel * pipeline_parallel
    weights_per_gpu = shape.weight_bytes // gpus
    usable = int(instance.gpu_memory_gib * 2**30 * gpu_memory_utilization)
    kv_budget = max(usable - weights_per_gpu, 0)
    # Each pipeline stage holds its layers' KV; each rank its heads' share of it.
    per_gpu_token = shape.kv_bytes_per_token_per_gpu(tensor_parallel) // pipeline_parallel
    sequences = kv_budget // (per_gpu_token * (input_tokens + output_tokens))
    flops = 2 * shape.active_parameters * input_tokens
    prefill = flops / (instance.gpu_bf16_tflops * 1e12 * gpus * PREFILL_MFU)
    verdict, pays_off = _verdict(input_tokens, transfer_efa, prefill, sequences)
    return KvPlan(
        kv_bytes_per_token=shape.kv_bytes_per_token,
        kv_bytes_per_request=per_request,
        transfer_seconds_efa=transfer_efa,
        transfer_seconds_tcp=transfer_tcp,
        prefill_seconds=prefill,
        weights_bytes_per_gpu=weights_per_gpu,
        kv_budget_bytes_per_gpu=kv_budget,
        max_concurrent_sequences=sequences,
        verdict=verdict,
        pays_off=pays_off,
        weight_precision=shape.precision.method,
    )


def _verdict(
    input_tokens: int, transfer: float, prefill: float, sequences: int
) -> tuple[str, bool]:
    if sequences < 1:
        return "does not fit: weights leave no room for one sequence's KV cache at this TP", False
    share = transfer / prefill if prefill else math.inf
    if share > MAX_TRANSFER_SHARE:
        return (
            f"unlikely to pay off: moving the KV cache takes {share:.0%} of the prefill it "
            "replaces",
            False,
        )
    if input_tokens < MIN_INPUT_TOKENS:
        return (
            f"unlikely to pay off: {input_tokens}-token prompts interfere little with decode; "
            f"disaggregation helps from about {MIN_INPUT_TOKENS} tokens",
            False,
        )
    return f"likely to pay off: KV transfer is {share:.1%} of prefill time", True
