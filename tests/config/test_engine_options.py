"""vLLM engine options: checked against vLLM 0.26.0's own argument list, refused where the project
sets the value, kept equal on both sides where NIXL or the P/D hand-over needs it, and delivered
into each side's engine_kwargs. No CDK needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app_config import ConfigError, load_settings
from app_config import engine_options as options
from catalog.ray_llm_image import DEFAULT_IMAGE_TAG, IMAGES
from serving_manifests.serve_config import render_serve_config
from tests.configurations import context_for, settings_for
from tools import vllm_engine_args

DECODE = "serving.decode.engine_options"
PREFILL = "serving.prefill.engine_options"
BOTH = "serving.engine_options"


def _engine_kwargs(settings: Any, role: str) -> dict[str, Any]:
    (application,) = render_serve_config(settings)["applications"]
    return application["args"][f"{role}_config"]["engine_kwargs"]


def _problems(**overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        load_settings(context_for("default", **overrides), {})
    return raised.value


BAD_OPTIONS = [
    # What the project sets itself: refused with the setting to use instead.
    ({DECODE: '{"tensor_parallel_size": 4}'}, f"{DECODE}.tensor_parallel_size",
     "serving.<side>.tensor_parallel_size"),
    ({PREFILL: '{"data_parallel_size": 2}'}, f"{PREFILL}.data_parallel_size",
     "use serving.<side>.data_parallel_size"),
    ({BOTH: '{"block_size": 64}'}, f"{BOTH}.block_size", "serving.kv_transfer.block_size"),
    ({BOTH: '{"kv_transfer_config": {"kv_connector": "NixlConnector"}}'},
     f"{BOTH}.kv_transfer_config", "serving.kv_transfer"),
    ({BOTH: '{"model": "x/y"}'}, f"{BOTH}.model", "serving.model.id"),
    ({BOTH: '{"max_model_len": 8192}'}, f"{BOTH}.max_model_len", "serving.max_model_len"),
    ({BOTH: '{"distributed_executor_backend": "mp"}'}, f"{BOTH}.distributed_executor_backend",
     "refuses any other backend"),
    ({BOTH: '{"hf_token": "hf_abc"}'}, f"{BOTH}.hf_token", "hf_token_secret_arn"),
    # Not vLLM 0.26.0's, or not for an engine under Ray Serve.
    ({DECODE: '{"max_num_seq": 64}'}, f"{DECODE}.max_num_seq", "did you mean 'max_num_seqs'"),
    ({DECODE: '{"port": 9000}'}, f"{DECODE}.port", "vLLM's own HTTP server"),
    ({DECODE: '{"_api_process_count": 2}'}, f"{DECODE}._api_process_count", "internal to vLLM"),
    # Values vLLM would refuse at engine start.
    ({BOTH: '{"kv_cache_dtype": "fp9"}'}, f"{BOTH}.kv_cache_dtype", "not one of auto"),
    ({BOTH: '{"quantization": "awq2"}'}, f"{BOTH}.quantization", "not one of"),
    ({BOTH: '{"dtype": "bf16"}'}, f"{BOTH}.dtype", "not one of auto"),
    ({DECODE: '{"max_num_seqs": "lots"}'}, f"{DECODE}.max_num_seqs", "does not fit"),
    ({BOTH: '{"attention_backend": "FLASH"}'}, f"{BOTH}.attention_backend", "FLASH_ATTN, "),
    ({BOTH: '{"optimization_level": true}'}, f"{BOTH}.optimization_level", "does not fit"),
    ({DECODE: '{"max_num_seqs": true}'}, f"{DECODE}.max_num_seqs", "does not fit"),
    ({DECODE: '{"enable_prefix_caching": "maybe"}'}, f"{DECODE}.enable_prefix_caching",
     "does not fit"),
    ({BOTH: '{"tool_call_parser": "hermes2", "enable_auto_tool_choice": true}'},
     f"{BOTH}.tool_call_parser", "not a parser vLLM 0.26.0 registers"),
    ({DECODE: '{"reasoning_parser": "qwen4"}'}, f"{DECODE}.reasoning_parser", "qwen3"),
    ({DECODE: '{"max_num_seqs": 256, "max_num_batched_tokens": 128}'},
     f"{DECODE}.max_num_batched_tokens", ">= max_num_seqs"),
    ({PREFILL: '{"enable_chunked_prefill": false, "max_num_batched_tokens": 8192}'},
     f"{PREFILL}.max_num_batched_tokens", "chunked prefill off"),
    ({"serving.model.s3_uri": "s3://models/qwen/Qwen3-32B",
      BOTH: '{"load_format": "runai_streamer"}'}, f"{BOTH}.load_format", "ray-project/ray#64978"),
    # Unequal where the handshake or prefill's rendering of the request needs one value.
    ({PREFILL: '{"kv_cache_dtype": "fp8"}'}, f"{DECODE}.kv_cache_dtype", "NIXL compatibility"),
    ({DECODE: '{"dtype": "float16"}'}, f"{DECODE}.dtype", "must agree"),
    ({PREFILL: '{"attention_backend": "FLASHINFER"}',
      DECODE: '{"attention_backend": "flash_attn"}'},
     f"{DECODE}.attention_backend", "prefill has 'FLASHINFER', decode 'FLASH_ATTN'"),
    ({DECODE: '{"enable_auto_tool_choice": true, "tool_call_parser": "hermes"}'},
     f"{DECODE}.tool_call_parser", "prefill renders the tools"),
    ({PREFILL: '{"chat_template": "/templates/a.jinja"}'}, f"{DECODE}.chat_template",
     "prefill renders the chat request"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "setting", "fragment"), BAD_OPTIONS)
def test_a_bad_engine_option_is_named_with_the_reason(
    overrides: dict[str, str], setting: str, fragment: str
) -> None:
    error = _problems(**overrides)
    by_path = {problem.path: problem.message for problem in error.problems}
    assert setting in by_path, str(error)
    assert fragment in by_path[setting]


def test_options_must_be_a_mapping() -> None:
    error = _problems(**{DECODE: '["max_num_seqs", 64]'})
    assert [p.path for p in error.problems] == [DECODE]


def test_every_problem_of_both_sides_is_reported_at_once() -> None:
    error = _problems(**{PREFILL: '{"block_size": 64}', DECODE: '{"max_num_seq": 1, "port": 1}'})
    assert {p.path for p in error.problems} == {
        f"{PREFILL}.block_size",
        f"{DECODE}.max_num_seq",
        f"{DECODE}.port",
    }


def test_options_reach_each_sides_engine_kwargs_with_the_side_over_both() -> None:
    settings = settings_for(
        "default",
        **{
            BOTH: '{"kv_cache_dtype": "fp8", "max_num_seqs": 64}',
            DECODE: '{"max_num_seqs": 256}',
            PREFILL: '{"enable_prefix_caching": true}',
        },
    )
    prefill, decode = (_engine_kwargs(settings, role) for role in ("prefill", "decode"))
    assert prefill["kv_cache_dtype"] == decode["kv_cache_dtype"] == "fp8"
    assert (prefill["max_num_seqs"], decode["max_num_seqs"]) == (64, 256)
    assert prefill["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in decode


def test_text_from_the_command_line_becomes_the_type_vllm_wants() -> None:
    settings = settings_for(
        "default",
        **{
            "serving.decode.engine_options.max_num_seqs": "64",
            "serving.decode.engine_options.enable_prefix_caching": "false",
            "serving.engine_options.kv_cache_dtype": "fp8",
        },
    )
    decode = _engine_kwargs(settings, "decode")
    assert decode["max_num_seqs"] == 64
    assert decode["enable_prefix_caching"] is False
    assert decode["kv_cache_dtype"] == "fp8"


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_every_engine_kwarg_the_project_writes_is_refused_as_an_option(role: str) -> None:
    """A key the renderer sets would silently win over the user's: each one must be refused
    with a pointer to its setting instead."""
    written = _engine_kwargs(settings_for("default"), role)
    assert set(written) <= set(options.OWNED), set(written) - set(options.OWNED)


def test_the_rules_name_real_vllm_arguments() -> None:
    data = options.vllm_args()
    known = {**data["engine_args"], **data["frontend_args"]}
    assert set(options.OWNED) <= set(data["engine_args"])
    assert set(options.SAME_ON_BOTH_SIDES) <= set(known)
    assert set(options.STRICT_CHOICES) <= set(known)
    assert set(options.REGISTRIES) | set(options.PLUGINS.values()) <= set(known)
    assert not set(options.OWNED) & set(options.SAME_ON_BOTH_SIDES)


def test_the_argument_list_is_the_images_vllm() -> None:
    data = options.vllm_args()
    assert data["vllm_version"] == IMAGES[DEFAULT_IMAGE_TAG].vllm_version
    # The options the docs and the examples use exist in it.
    for name in ("kv_cache_dtype", "enable_prefix_caching", "max_num_seqs",
                 "max_num_batched_tokens", "quantization", "reasoning_parser"):  # fmt: skip
        assert name in data["engine_args"]
    for name in ("tool_call_parser", "enable_auto_tool_choice", "chat_template"):
        assert name in data["frontend_args"]
    assert {"host", "port", "ssl_keyfile"} <= set(data["server_args"])


# The generator, on a vLLM source tree laid out like the real one (file paths and class names of
# vLLM 0.26.0), so a change of its parsing shows here without the 300 MB wheel.
FAKE_VLLM = {
    "vllm/engine/arg_utils.py": """
from dataclasses import dataclass
from typing import ClassVar
@dataclass
class EngineArgs:
    model: str = "m"
    kv_cache_dtype: CacheDType = "auto"
    attention_backend: AttentionBackendEnum | None = None
    quantization: QuantizationMethods | str | None = None
    registry: ClassVar[dict] = {}
@dataclass
class AsyncEngineArgs(EngineArgs):
    enable_log_requests: bool = False
""",
    "vllm/entrypoints/openai/cli_args.py": """
class BaseFrontendArgs:
    tool_call_parser: str | None = None
class FrontendArgs(BaseFrontendArgs):
    port: int = 8000
""",
    "vllm/config/cache.py": 'CacheDType = Literal["auto", Fp8Kind]\nFp8Kind = Literal["fp8"]\n',
    "vllm/v1/attention/backends/registry.py": (
        "class AttentionBackendEnum(Enum, metaclass=M):\n"
        '    FLASH_ATTN = "vllm.FlashAttentionBackend"\n'
        "    CUSTOM = None\n"
        "    def get_class(self): ...\n"
    ),
    "vllm/model_executor/layers/quantization/__init__.py": 'QuantizationMethods = Literal["awq"]\n',
    "vllm/tool_parsers/__init__.py": '_TOOL_PARSERS_TO_REGISTER = {"hermes": ("a", "B")}\n',
    "vllm/reasoning/__init__.py": '_REASONING_PARSERS_TO_REGISTER = {"qwen3": ("a", "B")}\n',
    "vllm/broken.py": "def (:\n",
    "vllm-9.9.9.dist-info/METADATA": "Name: vllm\nVersion: 9.9.9\n",
}


def test_the_generator_reads_fields_literals_and_registries(tmp_path: Path) -> None:
    for name, text in FAKE_VLLM.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    data = vllm_engine_args.generate(tmp_path)
    assert data["vllm_version"] == "9.9.9"
    assert data["engine_args"] == {
        "attention_backend": "AttentionBackendEnum | None",
        "enable_log_requests": "bool",
        "kv_cache_dtype": "CacheDType",
        "model": "str",
        "quantization": "QuantizationMethods | str | None",
    }
    assert data["frontend_args"] == {"tool_call_parser": "str | None"}
    assert data["server_args"] == {"port": "int"}
    assert data["literals"] == {"CacheDType": ["auto", "fp8"], "QuantizationMethods": ["awq"]}
    assert data["enums"] == {
        "AttentionBackendEnum": {"FLASH_ATTN": "vllm.FlashAttentionBackend", "CUSTOM": None}
    }
    assert (data["tool_call_parsers"], data["reasoning_parsers"]) == (["hermes"], ["qwen3"])
