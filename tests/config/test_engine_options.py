"""vLLM engine options: checked against vLLM 0.26.0's own argument list, refused where the project
sets the value, kept equal on both sides where NIXL or the P/D hand-over needs it, and delivered
into each side's engine_kwargs. No CDK needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app_config import ConfigError, load_settings
from app_config import engine_options as options
from app_config.rules import engine_options as engine_option_rules
from app_config.rules import evaluate
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


def _problems(configuration: str = "default", **overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        load_settings(context_for(configuration, **overrides), {})
    return raised.value


NAME, VALUE, SCHEDULER = "engine-options", "engine-option-value", "engine-option-scheduler"
PD, HARDWARE, LOADER = "engine-option-pd", "engine-option-hardware", "engine-option-loader"
OFFLOAD = "engine-option-offload"
EXCLUSIVE, RELATION = "engine-option-exclusive", "engine-option-relation"
IMPORT = "engine-option-import"
G6E = "trial-g6e"  # L40S (Ada, 48 GiB); "default" is p5.48xlarge (H100, Hopper, 80 GiB)

# (configuration, overrides, the setting named, its code, a fragment of the message): each rule
# of app_config/rules/engine_options.py once per thing it checks.
BAD_OPTIONS = [
    # What the project sets itself: refused with the setting to use instead.
    ("default", {DECODE: '{"tensor_parallel_size": 4}'}, f"{DECODE}.tensor_parallel_size", NAME,
     "serving.<side>.tensor_parallel_size"),
    ("default", {PREFILL: '{"data_parallel_size": 2}'}, f"{PREFILL}.data_parallel_size", NAME,
     "use serving.<side>.data_parallel_size"),
    ("default", {BOTH: '{"block_size": 64}'}, f"{BOTH}.block_size", NAME,
     "serving.kv_transfer.block_size"),
    ("default", {BOTH: '{"kv_transfer_config": {"kv_connector": "NixlConnector"}}'},
     f"{BOTH}.kv_transfer_config", NAME, "serving.kv_transfer"),
    ("default", {BOTH: '{"model": "x/y"}'}, f"{BOTH}.model", NAME, "serving.model.id"),
    ("default", {BOTH: '{"max_model_len": 8192}'}, f"{BOTH}.max_model_len", NAME,
     "serving.max_model_len"),
    ("default", {BOTH: '{"distributed_executor_backend": "mp"}'},
     f"{BOTH}.distributed_executor_backend", NAME, "refuses any other backend"),
    ("default", {BOTH: '{"hf_token": "hf_abc"}'}, f"{BOTH}.hf_token", NAME, "hf_token_secret_arn"),
    # Not vLLM 0.26.0's, or not for an engine under Ray Serve.
    ("default", {DECODE: '{"max_num_seq": 64}'}, f"{DECODE}.max_num_seq", NAME,
     "did you mean 'max_num_seqs'"),
    ("default", {DECODE: '{"port": 9000}'}, f"{DECODE}.port", NAME, "vLLM's own HTTP server"),
    ("default", {DECODE: '{"_api_process_count": 2}'}, f"{DECODE}._api_process_count", NAME,
     "internal to vLLM"),
    # Values vLLM would refuse: choices (a Literal, an enum), types, bounds, parser names.
    ("default", {BOTH: '{"kv_cache_dtype": "fp9"}'}, f"{BOTH}.kv_cache_dtype", VALUE,
     "not one of auto"),
    ("default", {BOTH: '{"quantization": "awq2"}'}, f"{BOTH}.quantization", VALUE, "not one of"),
    ("default", {BOTH: '{"dtype": "bf16"}'}, f"{BOTH}.dtype", VALUE, "not one of auto"),
    ("default", {BOTH: '{"attention_backend": "FLASH"}'}, f"{BOTH}.attention_backend", VALUE,
     "FLASH_ATTN, "),
    ("default", {DECODE: '{"performance_mode": "fast"}'}, f"{DECODE}.performance_mode", VALUE,
     "balanced, interactivity, throughput"),
    ("default", {DECODE: '{"max_num_seqs": "lots"}'}, f"{DECODE}.max_num_seqs", VALUE,
     "does not fit"),
    ("default", {BOTH: '{"optimization_level": true}'}, f"{BOTH}.optimization_level", VALUE,
     "does not fit"),
    ("default", {DECODE: '{"max_num_seqs": true}'}, f"{DECODE}.max_num_seqs", VALUE,
     "does not fit"),
    ("default", {DECODE: '{"enable_prefix_caching": "maybe"}'}, f"{DECODE}.enable_prefix_caching",
     VALUE, "does not fit"),
    ("default", {DECODE: '{"compilation_config": 3}'}, f"{DECODE}.compilation_config", VALUE,
     "does not fit"),
    ("default", {DECODE: '{"max_num_seqs": 0}'}, f"{DECODE}.max_num_seqs", VALUE,
     "max_num_seqs >= 1 (vllm/config/scheduler.py SchedulerConfig.max_num_seqs)"),
    ("default", {PREFILL: '{"max_num_batched_tokens": -8}'}, f"{PREFILL}.max_num_batched_tokens",
     VALUE, "max_num_batched_tokens >= 1"),
    ("default", {DECODE: '{"watermark": 1.0}'}, f"{DECODE}.watermark", VALUE,
     "watermark >= 0.0 and watermark < 1.0"),
    ("default", {DECODE: '{"cpu_offload_gb": -1}'}, f"{DECODE}.cpu_offload_gb", VALUE,
     "vllm/config/offload.py"),
    # A plain-text argument whose config field is a Literal (offload_backend: str in EngineArgs,
    # OffloadBackend in OffloadConfig).
    ("default", {DECODE: '{"offload_backend": "prefech"}'}, f"{DECODE}.offload_backend", VALUE,
     "not one of auto, uva, prefetch"),
    ("default", {BOTH: '{"tool_call_parser": "hermes2", "enable_auto_tool_choice": true}'},
     f"{BOTH}.tool_call_parser", VALUE, "not a parser vLLM 0.26.0 registers"),
    ("default", {DECODE: '{"reasoning_parser": "qwen4"}'}, f"{DECODE}.reasoning_parser", VALUE,
     "qwen3"),
    # A nested config option's keys and bounds, from the config class it becomes.
    ("default", {DECODE: '{"compilation_config": {"cudagraph_mod": "PIECEWISE"}}'},
     f"{DECODE}.compilation_config", VALUE, "did you mean 'cudagraph_mode'"),
    ("default", {DECODE: '{"profiler_config": {"active_iterations": 0}}'},
     f"{DECODE}.profiler_config", VALUE, "profiler_config.active_iterations >= 1"),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": 0}}'},
     f"{DECODE}.speculative_config", VALUE, "speculative_config.num_speculative_tokens > 0"),
    # ... and the values its fields' annotations take (the catalog's field_values).
    ("default", {BOTH: '{"structured_outputs_config": {"backend": "nope"}}'},
     f"{BOTH}.structured_outputs_config", VALUE, "one of 'auto', 'xgrammar', 'guidance'"),
    ("default", {DECODE: '{"compilation_config": {"cudagraph_mode": "BOGUS"}}'},
     f"{DECODE}.compilation_config", VALUE, "'FULL_AND_PIECEWISE', 0, 1, 2 (any case)"),
    ("default", {DECODE: '{"compilation_config": {"mode": "bogus"}}'},
     f"{DECODE}.compilation_config", VALUE, "'VLLM_COMPILE', 0, 1, 2, 3 (any case)"),
    ("default", {DECODE: '{"compilation_config": {"cudagraph_capture_sizes": "abc"}}'},
     f"{DECODE}.compilation_config", VALUE, "takes a list there"),
    ("default", {BOTH: '{"attention_config": {"backend": "NOPE"}}'},
     f"{BOTH}.attention_config", VALUE, "backend = 'NOPE'"),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", "num_speculative_tokens": 2, '
                         '"prompt_lookup_maxx": 3}}'},
     f"{DECODE}.speculative_config", VALUE, "did you mean 'prompt_lookup_max'"),
    ("default", {DECODE: '{"speculative_config": {"method": "bogus", '
                         '"num_speculative_tokens": 2}}'},
     f"{DECODE}.speculative_config", VALUE, "method = 'bogus'"),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": "two"}}'},
     f"{DECODE}.speculative_config", VALUE, "takes an int"),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": "1e3"}}'},
     f"{DECODE}.speculative_config", VALUE, "takes an int"),  # pydantic parses no exponent
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": false}}'},
     f"{DECODE}.speculative_config", VALUE, "num_speculative_tokens > 0"),  # false reads as 0
    ("default", {DECODE: '{"compilation_config": {"cudagraph_capture_sizes": null}}'},
     f"{DECODE}.compilation_config", VALUE, "takes a list there"),  # no wrap-validator skips it
    # numpy's seed range, which every worker's set_random_seed meets.
    ("default", {BOTH: '{"seed": 4294967296}'}, f"{BOTH}.seed", VALUE, "outside 0 to 4294967295"),
    ("default", {DECODE: '{"seed": -1}'}, f"{DECODE}.seed", VALUE, "np.random.seed"),
    # DEPRECATED_QUANTIZATION_METHODS without allow_deprecated_quantization.
    ("default", {BOTH: '{"quantization": "fbgemm_fp8"}'}, f"{BOTH}.quantization", VALUE,
     "unless allow_deprecated_quantization is true"),
    # An option beside the nested config field it overrides (the catalog's "exclusive").
    ("default", {BOTH: '{"attention_backend": "FLASH_ATTN", '
                       '"attention_config": {"backend": "FLASHINFER"}}'},
     f"{BOTH}.attention_backend", EXCLUSIVE, "beside attention_config.backend"),
    ("default", {DECODE: '{"max_cudagraph_capture_size": 64, '
                         '"compilation_config": {"max_cudagraph_capture_size": 128}}'},
     f"{DECODE}.max_cudagraph_capture_size", EXCLUSIVE, "EngineArgs.create_engine_config"),
    ("default", {DECODE: '{"spec_tokens": 2, "speculative_config": '
                         '{"method": "ngram", "num_speculative_tokens": null}}'},
     f"{DECODE}.spec_tokens", EXCLUSIVE, "EngineArgs.create_speculative_config"),
    # An option that needs another's value (REQUIREMENTS).
    ("default", {DECODE: '{"collect_detailed_traces": ["model"]}'},
     f"{DECODE}.collect_detailed_traces", RELATION, "needs an otlp_traces_endpoint"),
    ("default", {BOTH: '{"numa_bind_nodes": [0, 1]}'}, f"{BOTH}.numa_bind_nodes", RELATION,
     "needs numa_bind true"),
    ("default", {DECODE: '{"dcp_comm_backend": "a2a"}'}, f"{DECODE}.dcp_comm_backend", RELATION,
     "decode context parallel 1 on every side"),
    ("default", {PREFILL: '{"mamba_block_size": 512, "enable_prefix_caching": false}'},
     f"{PREFILL}.mamba_block_size", RELATION, "VllmConfig.validate_mamba_block_size"),
    ("default", {DECODE: '{"enable_mamba_cache_stochastic_rounding": true}'},
     f"{DECODE}.enable_mamba_cache_stochastic_rounding", RELATION,
     "mamba_ssm_cache_dtype is 'auto'"),
    ("default", {BOTH: '{"structured_outputs_config": {"disable_any_whitespace": true}}'},
     f"{BOTH}.structured_outputs_config", RELATION, "needs backend xgrammar or guidance"),
    ("default", {BOTH: '{"structured_outputs_config": {"backend": "xgrammar", '
                       '"disable_additional_properties": true}}'},
     f"{BOTH}.structured_outputs_config", RELATION, "needs backend guidance"),
    ("default", {DECODE: '{"profiler_config": {"profiler": "torch"}}'},
     f"{DECODE}.profiler_config", RELATION, "needs a torch_profiler_dir"),
    ("default", {DECODE: '{"profiler_config": {"profiler": "cuda", "torch_profiler_dir": "/p"}}'},
     f"{DECODE}.profiler_config", RELATION, "torch_profiler_dir '/p' needs profiler torch"),
    ("default", {DECODE: '{"profiler_config": {"capture_torch_profiler": true}}'},
     f"{DECODE}.profiler_config", RELATION, "capture_torch_profiler True needs profiler torch"),
    ("default", {DECODE: '{"enable_lora": true, "max_loras": 4, "max_cpu_loras": 2}'},
     f"{DECODE}.max_cpu_loras", RELATION, "max_cpu_loras >= max_loras"),
    ("default", {DECODE: '{"async_scheduling": true, "speculative_config": '
                         '{"method": "ngram", "num_speculative_tokens": 2}}'},
     f"{DECODE}.async_scheduling", RELATION, "speculative_config.method is 'ngram'"),
    ("default", {DECODE: '{"async_scheduling": true, "spec_method": "suffix"}'},
     f"{DECODE}.async_scheduling", RELATION, "spec_method is 'suffix'"),
    ("default", {DECODE: '{"async_scheduling": true, "speculative_config": '
                         '{"method": "ngram_gpu", "disable_padded_drafter_batch": true}}'},
     f"{DECODE}.speculative_config", RELATION, "async scheduling not forced on"),
    ("default", {DECODE: '{"async_scheduling": true, "speculative_config": '
                         '{"method": "ngram_gpu", "disable-padded-drafter-batch": true}}'},
     f"{DECODE}.speculative_config", RELATION, "async scheduling not forced on"),  # '-' as '_'
    ("default", {DECODE: '{"logits_processors": ["m:P"], "spec_tokens": 2}'},
     f"{DECODE}.logits_processors", RELATION, "speculative decoding off"),
    ("default", {BOTH: '{"logits_processors": ["m:P"], "speculative_config": {"method": "ngram"}}'},
     f"{BOTH}.logits_processors", RELATION, "build_logitsprocs"),
    # Names vLLM imports when a worker starts: resolve_obj_by_qualname, the processors' loader.
    ("default", {BOTH: '{"worker_cls": "MyWorker"}'}, f"{BOTH}.worker_cls", IMPORT,
     "'package.module.ClassName' (or 'auto' for vLLM's own)"),
    ("default", {DECODE: '{"worker_extension_cls": "ext."}'}, f"{DECODE}.worker_extension_cls",
     IMPORT, "not an import path"),
    ("default", {PREFILL: '{"scheduler_cls": "pkg..sched.S"}'}, f"{PREFILL}.scheduler_cls",
     IMPORT, "not a Python import path"),
    ("default", {PREFILL: '{"scheduler_cls": "pkg.sched.My Scheduler"}'},
     f"{PREFILL}.scheduler_cls", IMPORT, "not a Python import path"),
    ("default", {DECODE: '{"logits_processors": ["pkg.mod.Proc"]}'},
     f"{DECODE}.logits_processors", IMPORT, "'package.module:ClassName'"),
    ("default", {DECODE: '{"logits_processors": ["pkg.mod:Proc", "a:b:C"]}'},
     f"{DECODE}.logits_processors", IMPORT, "more than one ':'"),
    # vLLM's scheduler: SchedulerConfig.verify_max_model_len, EngineArgs._check_feature_supported.
    ("default", {DECODE: '{"max_num_seqs": 256, "max_num_batched_tokens": 128}'},
     f"{DECODE}.max_num_batched_tokens", SCHEDULER, ">= max_num_seqs"),
    ("default", {PREFILL: '{"enable_chunked_prefill": false, "max_num_batched_tokens": 8192}'},
     f"{PREFILL}.max_num_batched_tokens", SCHEDULER, "chunked prefill off"),
    ("default", {PREFILL: '{"max_num_partial_prefills": 2}'},
     f"{PREFILL}.max_num_partial_prefills", SCHEDULER, "concurrent partial prefill"),
    ("default", {DECODE: '{"max_long_partial_prefills": 2}'},
     f"{DECODE}.max_long_partial_prefills", SCHEDULER, "concurrent partial prefill"),
    # Layer-group weight offload: OffloadConfig.validate_offload_config.
    ("default", {DECODE: '{"offload_group_size": 2, "offload_num_in_group": 3}'},
     f"{DECODE}.offload_num_in_group", OFFLOAD, "3 is above offload_group_size 2"),
    ("default", {BOTH: '{"offload_backend": "prefetch"}'}, f"{BOTH}.offload_backend", OFFLOAD,
     "needs offload_group_size above 0"),
    ("default", {PREFILL: '{"offload_group_size": 8, "offload_prefetch_step": 0}'},
     f"{PREFILL}.offload_prefetch_step", OFFLOAD, "offload_prefetch_step >= 1"),
    # What undoes the prefill/decode split.
    ("default", {PREFILL: '{"kv_offloading_size": 64}'}, f"{PREFILL}.kv_offloading_size", PD,
     "replaces the side's NixlConnector with the offloading connector"),
    ("default", {BOTH: '{"kv_offloading_backend": "lmcache"}'}, f"{BOTH}.kv_offloading_backend",
     PD, "prefill would no longer hand its KV to decode"),
    ("default", {DECODE: '{"enable_return_routed_experts": true}'},
     f"{DECODE}.enable_return_routed_experts", PD, "incompatible with KV connectors"),
    # Unequal where the handshake or prefill's rendering of the request needs one value.
    ("default", {PREFILL: '{"kv_cache_dtype": "fp8"}'}, f"{DECODE}.kv_cache_dtype", PD,
     "NIXL compatibility"),
    ("default", {DECODE: '{"dtype": "float16"}'}, f"{DECODE}.dtype", PD, "must agree"),
    ("default", {PREFILL: '{"attention_backend": "FLASHINFER"}',
                 DECODE: '{"attention_backend": "flash_attn"}'},
     f"{DECODE}.attention_backend", PD, "prefill has 'FLASHINFER', decode 'FLASH_ATTN'"),
    ("default", {DECODE: '{"enable_auto_tool_choice": true, "tool_call_parser": "hermes"}'},
     f"{DECODE}.tool_call_parser", PD, "prefill renders the tools"),
    ("default", {PREFILL: '{"chat_template": "/templates/a.jinja"}'}, f"{DECODE}.chat_template",
     PD, "prefill renders the chat request"),
    # What the side's GPUs decide.
    (G6E, {DECODE: '{"max_num_seqs": 4096}'}, f"{DECODE}.max_num_seqs", HARDWARE,
     "exceeds the 2048 tokens vLLM 0.26.0 batches by default on a g6e.12xlarge"),
    ("default", {DECODE: '{"max_num_seqs": 16384}'}, f"{DECODE}.max_num_seqs", HARDWARE,
     "8192 tokens"),
    (G6E, {BOTH: '{"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8"}'},
     f"{BOTH}.attention_backend", HARDWARE, "only on Hopper"),
    (G6E, {BOTH: '{"attention_config": {"backend": "flash_attn"}, "kv_cache_dtype": "fp8"}'},
     f"{BOTH}.attention_config", HARDWARE, "leave attention_config unset"),
    # What Ray 2.58's loader cannot do.
    ("default", {"serving.model.s3_uri": "s3://models/qwen/Qwen3-32B",
                 BOTH: '{"load_format": "runai_streamer"}'}, f"{BOTH}.load_format", LOADER,
     "ray-project/ray#64978"),
]  # fmt: skip


@pytest.mark.parametrize(("configuration", "overrides", "setting", "code", "fragment"), BAD_OPTIONS)
def test_a_bad_engine_option_is_named_with_the_reason(
    configuration: str, overrides: dict[str, str], setting: str, code: str, fragment: str
) -> None:
    error = _problems(configuration, **overrides)
    by_path = {(problem.path, problem.code): problem.message for problem in error.problems}
    assert (setting, code) in by_path, str(error)
    assert fragment in by_path[setting, code]


REMOTE_CODE = "engine-option-remote-code"
IGNORED = "engine-option-offload-ignored"
# (overrides, the setting named, its code, a fragment of the message): what loads but warns.
WARNED_OPTIONS = [
    ({BOTH: '{"trust_remote_code": true}'}, f"{BOTH}.trust_remote_code", REMOTE_CODE,
     "no revision pins it (code_revision)"),
    ({BOTH: '{"trust_remote_code": "true", "code_revision": "a1b2c3d"}'},
     f"{BOTH}.trust_remote_code", REMOTE_CODE, "at revision 'a1b2c3d'"),
    ({PREFILL: '{"trust_remote_code": true}'}, f"{PREFILL}.trust_remote_code", REMOTE_CODE,
     "on every prefill node"),
    # The other weight offloader's settings (create_offloader builds one).
    ({DECODE: '{"offload_group_size": 8, "cpu_offload_gb": 4}'}, f"{DECODE}.cpu_offload_gb",
     IGNORED, "offload_backend 'auto' with offload_group_size 8"),
    ({BOTH: '{"offload_backend": "prefetch", "offload_group_size": 4, "cpu_offload_gb": 2}'},
     f"{BOTH}.cpu_offload_gb", IGNORED, "UVA offload's size is then unused"),
    ({PREFILL: '{"offload_backend": "uva", "cpu_offload_gb": 2, "offload_group_size": 8}'},
     f"{PREFILL}.offload_group_size", IGNORED, "offload_backend is 'uva'"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "setting", "code", "fragment"), WARNED_OPTIONS)
def test_an_option_that_loads_but_is_ignored_or_runs_outside_code_warns_at_its_setting(
    overrides: dict[str, str], setting: str, code: str, fragment: str
) -> None:
    found = {(f.path, f.code): f.message for f in evaluate(settings_for("default", **overrides))}
    assert (setting, code) in found, found
    assert fragment in found[setting, code]
    assert [f for f in evaluate(settings_for("default")) if f.code == code] == []


def test_remote_code_turned_off_does_not_warn() -> None:
    settings = settings_for("default", **{BOTH: '{"trust_remote_code": false}'})
    assert REMOTE_CODE not in {f.code for f in evaluate(settings)}


def test_every_engine_option_rule_has_a_row() -> None:
    tested = {code for _, _, _, code, _ in BAD_OPTIONS} | {c for _, _, c, _ in WARNED_OPTIONS}
    assert tested == {rule.code for rule in engine_option_rules.RULES}


# What vLLM takes, by the same rules: each row would be refused by a rule written too wide.
GOOD_OPTIONS = [
    ("default", {DECODE: '{"max_num_seqs": 4096}'}),  # 8192 tokens by default on an H100
    (G6E, {DECODE: '{"max_num_seqs": 4096, "performance_mode": "throughput"}'}),  # twice 2048
    (G6E, {DECODE: '{"max_num_seqs": 4096, "enable_chunked_prefill": false}'}),  # max_model_len
    (G6E, {DECODE: '{"max_num_seqs": 4096, "max_num_batched_tokens": 4096}'}),
    ("default", {BOTH: '{"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8"}'}),
    ("default", {BOTH: '{"attention_backend": "auto", "kv_cache_dtype": "fp8_e5m2"}'}),
    ("default", {DECODE: '{"watermark": 0.01, "cpu_offload_gb": 0, "max_num_seqs": 1}'}),
    ("default", {DECODE: '{"optimization_level": 2, "kv_offloading_size": null}'}),
    ("default", {DECODE: '{"compilation_config": {"cudagraph_mode": "PIECEWISE"}}'}),
    ("default", {DECODE: '{"compilation_config": {"cudagraph_mode": "full_and_piecewise", '
                         '"mode": 3, "cudagraph_capture_sizes": [1, 2, 4]}}'}),
    ("default", {DECODE: '{"compilation_config": {"mode": "vllm_compile"}}'}),
    ("default", {BOTH: '{"structured_outputs_config": {"backend": "xgrammar"}}'}),
    ("default", {BOTH: '{"seed": 4294967295}'}),
    ("default", {DECODE: '{"ir_op_priority": {"rms_norm": "vllm_c,native"}}'}),  # "*" validator
    ("default", {DECODE: '{"compilation_config": {"mode": 3.0, "cudagraph_mode": true, '
                         '"max_cudagraph_capture_size": null}}'}),  # lax Literal; null skipped
    ("default", {BOTH: '{"attention_config": {"flash_attn_version": 3.0}}'}),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": "2"}}'}),  # pydantic's lax int
    ("default", {PREFILL: '{"max_num_partial_prefills": 1, "max_long_partial_prefills": 1}'}),
    ("default", {DECODE: '{"offload_group_size": 8, "offload_num_in_group": 8}'}),
    ("default", {DECODE: '{"offload_backend": "uva", "cpu_offload_gb": 2}'}),
    ("default", {BOTH: '{"offload_backend": "auto", "offload_prefetch_step": 0}'}),  # off
    ("default", {BOTH: '{"quantization": "fp_quant", "allow_deprecated_quantization": true}'}),
    ("default", {DECODE: '{"profiler_config": {"profiler": "torch", "torch_profiler_dir": "/p", '
                         '"active_iterations": 1, "delay_iterations": 0}}'}),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"num_speculative_tokens": 1, "prompt-lookup-max": 4}}'}),
    # Each side of an exclusive pair alone, and a nested field vLLM reads as unset.
    ("default", {BOTH: '{"attention_backend": "FLASH_ATTN", '
                       '"attention_config": {"backend": "auto"}}'}),
    ("default", {BOTH: '{"attention_config": {"backend": "FLASHINFER"}}'}),
    ("default", {DECODE: '{"max_cudagraph_capture_size": 64, '
                         '"compilation_config": {"max_cudagraph_capture_size": null}}'}),
    ("default", {DECODE: '{"spec_tokens": 2, "speculative_config": {"method": "ngram"}}'}),
    # Each requirement met at its boundary.
    ("default", {DECODE: '{"collect_detailed_traces": ["model"], '
                         '"otlp_traces_endpoint": "http://127.0.0.1:4317"}'}),
    ("default", {DECODE: '{"collect_detailed_traces": []}'}),
    ("default", {BOTH: '{"numa_bind_nodes": [0, 1], "numa_bind": true}'}),
    ("default", {DECODE: '{"dcp_comm_backend": "ag_rs"}'}),
    ("default", {PREFILL: '{"mamba_block_size": 512}'}),  # prefix caching the model's default
    ("default", {PREFILL: '{"mamba_block_size": 32768, "enable_prefix_caching": false}'}),
    ("default", {BOTH: '{"enable_mamba_cache_stochastic_rounding": true, '
                       '"mamba_ssm_cache_dtype": "float16"}'}),
    ("default", {BOTH: '{"structured_outputs_config": {"backend": "guidance", '
                       '"disable_any_whitespace": true, "disable_additional_properties": true}}'}),
    ("default", {BOTH: '{"structured_outputs_config": {"backend": "xgrammar", '
                       '"disable_any_whitespace": true}}'}),
    ("default", {DECODE: '{"profiler_config": {"profiler": "torch", "torch_profiler_dir": "/p", '
                         '"capture_torch_profiler": true}}'}),
    ("default", {DECODE: '{"profiler_config": {"profiler": "cuda"}}'}),
    ("default", {DECODE: '{"enable_lora": true, "max_loras": 4, "max_cpu_loras": 4}'}),
    ("default", {DECODE: '{"max_loras": 4, "max_cpu_loras": 2}'}),  # LoRA off: no LoRAConfig
    ("default", {DECODE: '{"async_scheduling": true, "speculative_config": '
                         '{"method": "ngram_gpu", "num_speculative_tokens": 2}}'}),
    ("default", {DECODE: '{"speculative_config": {"method": "ngram", '
                         '"disable_padded_drafter_batch": true}}'}),  # async left to vLLM
    ("default", {DECODE: '{"async_scheduling": true}'}),
    ("default", {DECODE: '{"logits_processors": [], "spec_tokens": 2, '
                         '"speculative_config": {"method": "ngram"}}'}),
    # Import paths vLLM's loaders split, and the values that leave vLLM's own choice.
    ("default", {BOTH: '{"worker_cls": "auto", "worker_extension_cls": "", '
                       '"scheduler_cls": null, "logits_processors": null}'}),
    ("default", {BOTH: '{"worker_cls": "vllm.v1.worker.gpu_worker.Worker", '
                       '"worker_extension_cls": "ext.Mixin", '
                       '"scheduler_cls": "vllm.v1.core.sched.async_scheduler.AsyncScheduler", '
                       '"logits_processors": ["pkg.mod:Outer.Proc", "m:P"]}'}),
]  # fmt: skip


@pytest.mark.parametrize(("configuration", "overrides"), GOOD_OPTIONS)
def test_options_vllm_takes_are_accepted(configuration: str, overrides: dict[str, str]) -> None:
    settings_for(configuration, **overrides)


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
    assert set(engine_option_rules.BREAKS_KV_TRANSFER) <= set(options.accepted())
    assert set(data["values"]) == set(known)


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
    gpu_memory_utilization: float = CacheConfig.gpu_memory_utilization
    max_num_seqs: int | None = None
    offload_backend: str = OffloadConfig.offload_backend
    attention_config: AttentionConfig = get_field(VllmConfig, "attention_config")
    spec_tokens: int | None = None
    speculative_config: dict[str, Any] | None = None
    profiler_config: ProfilerConfig = get_field(VllmConfig, "profiler_config")
    registry: ClassVar[dict] = {}
    def create_engine_config(self):
        attention_config = copy.deepcopy(self.attention_config)
        if self.attention_backend is not None:
            if attention_config.backend is not None:
                raise ValueError("mutually exclusive")
        return SchedulerConfig(max_num_seqs=self.max_num_seqs)
    def create_speculative_config(self):
        for flag, key, value in (("--spec-tokens", "num_speculative_tokens", self.spec_tokens),):
            if value is None:
                continue
            if key in self.speculative_config:
                raise ValueError("mutually exclusive")
        self.speculative_config = {
            k.replace("-", "_"): v for k, v in self.speculative_config.items()
        }
        return SpeculativeConfig(**self.speculative_config)
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
    "vllm/config/cache.py": (
        'CacheDType = Literal["auto", Fp8Kind]\nFp8Kind = Literal["fp8"]\n'
        "class CacheConfig:\n"
        "    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)\n"
    ),
    "vllm/config/offload.py": (
        'OffloadBackend = Literal["auto", "uva", "prefetch"]\n'
        'class OffloadConfig:\n    offload_backend: OffloadBackend = "auto"\n'
    ),
    "vllm/config/profiler.py": (
        "class Traced:\n    trace_dir: str = ''\n"
        "class ProfilerConfig(Traced):\n    profiler: str | None = None\n"
        "    active_iterations: int = Field(default=5, ge=1)\n"
        "    started: float = field(default=0.0, init=False)\n"
        "    kinds: ClassVar[list[str]] = []\n"
    ),
    "vllm/config/speculative.py": (
        "class SpeculativeConfig:\n    num_speculative_tokens: int = Field(default=None, gt=0)\n"
        '    method: Literal["ngram", "eagle"] | None = None\n'
        "    max_model_len: int = None\n"
        '    @field_validator("max_model_len", mode="wrap")\n'
        "    def _skip_none_validation(cls, value, handler): ...\n"
        "    mode: CompilationMode = CompilationMode.NONE\n"
        "    target: ModelConfig = None\n"
        '    @field_validator("mode", mode="before")\n'
        "    def validate_mode(cls, value):\n"
        "        name = value.upper()\n"
        "        return CompilationMode[name]\n"
        "class CompilationMode(IntEnum):\n    NONE = 0\n    VLLM_COMPILE = 3\n"
        "class ModelConfig:\n    model: str = 'm'\n"
    ),
    "vllm/config/scheduler.py": (
        "class SchedulerConfig:\n    max_num_seqs: int = Field(default=128, ge=1)\n"
    ),
    "vllm/config/attention.py": """
class AttentionConfig:
    backend: AttentionBackendEnum | None = None
    @field_validator("backend", mode="before")
    def validate_backend_before(cls, value):
        if value.lower() == "auto":
            return None
        return AttentionBackendEnum[value.upper()]
""",
    "vllm/v1/attention/backends/registry.py": (
        "class AttentionBackendEnum(Enum, metaclass=M):\n"
        '    FLASH_ATTN = "vllm.FlashAttentionBackend"\n'
        "    CUSTOM = None\n"
        "    def get_class(self): ...\n"
    ),
    "vllm/model_executor/layers/quantization/__init__.py": """
QuantizationMethods = Literal["awq", "fbgemm_fp8"]
DEPRECATED_QUANTIZATION_METHODS = ["fbgemm_fp8"]
def get_quantization_config(quantization):
    from vllm.config.quantization import _ONLINE_SHORTHANDS
    from .awq import AWQConfig
    from .fp8 import Fp8Config, FBGEMMFp8Config
    from .online.base import OnlineQuantizationConfig
    method_to_config: dict[str, type[QuantizationConfig]] = {
        "awq": AWQConfig,
        "fp8": Fp8Config,
        "fbgemm_fp8": FBGEMMFp8Config,
        "online": OnlineQuantizationConfig,
    }
""",
    "vllm/model_executor/layers/quantization/awq.py": """
from vllm.model_executor.layers.quantization.files import FileConfig
class AWQConfig(FileConfig):
    def __init__(self, weight_bits: int, group_size: int = 128): ...
""",
    # A base re-exported by its package: the method's files come from there.
    "vllm/model_executor/layers/quantization/files/__init__.py": "from .base import FileConfig\n",
    "vllm/model_executor/layers/quantization/files/base.py": """
class FileConfig(QuantizationConfig):
    @classmethod
    def get_config_filenames(cls) -> list[str]:
        return ["quantize_config.json", "quant_config.json"]
""",
    "vllm/model_executor/layers/quantization/fp8.py": """
class Fp8Config(QuantizationConfig):
    def __init__(self, ignored_layers: list[str] | None = None, *, scheme: str = "dynamic"): ...
    @classmethod
    def get_config_filenames(cls) -> list[str]:
        return []
class FBGEMMFp8Config(Fp8Config):
    def __init__(self, ignore_list, *, input_scale_ub): ...
""",
    "vllm/model_executor/layers/quantization/online/base.py": """
class OnlineQuantizationConfig(QuantizationConfig):
    def __init__(self, args): ...
    @classmethod
    def get_config_filenames(cls) -> list[str]:
        return []
""",
    "vllm/config/quantization.py": (
        '_ONLINE_SHORTHANDS: dict[str, QuantizationConfigArgs] = {"fp8_per_tensor": A()}\n'
    ),
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
        "attention_config": "AttentionConfig",
        "enable_log_requests": "bool",
        "gpu_memory_utilization": "float",
        "kv_cache_dtype": "CacheDType",
        "max_num_seqs": "int | None",
        "model": "str",
        "offload_backend": "str",
        "profiler_config": "ProfilerConfig",
        "quantization": "QuantizationMethods | str | None",
        "spec_tokens": "int | None",
        "speculative_config": "dict[str, Any] | None",
    }
    assert data["frontend_args"] == {"tool_call_parser": "str | None"}
    assert data["server_args"] == {"port": "int"}
    assert data["literals"] == {
        "CacheDType": ["auto", "fp8"],
        "QuantizationMethods": ["awq", "fbgemm_fp8"],
    }
    assert data["enums"] == {
        "AttentionBackendEnum": {"FLASH_ATTN": "vllm.FlashAttentionBackend", "CUSTOM": None}
    }
    assert (data["tool_call_parsers"], data["reasoning_parsers"]) == (["hermes"], ["qwen3"])
    values = data["values"]
    # Bounds from the config field the argument becomes: by its default, or by the keyword
    # create_engine_config passes it as.
    assert values["gpu_memory_utilization"] == {
        "types": ["float"],
        "bounds": [
            {"gt": 0, "le": 1, "source": "vllm/config/cache.py CacheConfig.gpu_memory_utilization"}
        ],
    }
    assert values["max_num_seqs"]["bounds"] == [
        {"ge": 1, "source": "vllm/config/scheduler.py SchedulerConfig.max_num_seqs"}
    ]
    assert values["kv_cache_dtype"] == {
        "types": ["choice"],
        "choices": ["auto", "fp8"],
        "choices_from": ["CacheDType (vllm/config/cache.py)"],
    }
    # An enum a validator looks up by name: member names, any case, and its "auto".
    assert values["attention_backend"] == {
        "types": ["choice", "none"],
        "choices": ["FLASH_ATTN", "CUSTOM", "auto"],
        "choices_from": ["AttentionBackendEnum (vllm/v1/attention/backends/registry.py)"],
        "case_insensitive": True,
    }
    assert values["quantization"]["types"] == ["choice", "str", "none"]
    # Plain text in EngineArgs, a Literal in the config class it becomes, which judges it.
    assert values["offload_backend"] == {
        "types": ["choice"],
        "choices": ["auto", "uva", "prefetch"],
        "choices_from": ["OffloadBackend (vllm/config/offload.py), OffloadConfig.offload_backend"],
    }
    # Text a Literal-or-text field takes stays text: the model's name is not narrowed.
    assert values["model"] == {"types": ["str"]}
    # An option beside the nested config field it overrides: both set (the field's "auto",
    # which its before-validator makes None, is unset), or the key given at all.
    assert data["exclusive"] == [
        {"option": "attention_backend", "config": "attention_config", "field": "backend",
         "nested": "set", "unset": ["auto"],
         "source": "vllm/engine/arg_utils.py EngineArgs.create_engine_config"},
        {"option": "spec_tokens", "config": "speculative_config",
         "field": "num_speculative_tokens", "nested": "given", "unset": [],
         "source": "vllm/engine/arg_utils.py EngineArgs.create_speculative_config"},
    ]  # fmt: skip
    assert data["deprecated_quantization"] == ["fbgemm_fp8"]
    # What each method needs where config.json has no quantization config: a file (awq's,
    # from its base), nothing (fp8 builds with no argument; a shorthand resolves online), or
    # what it cannot have (fbgemm_fp8 and "online" miss arguments).
    assert data["quantization"] == {
        "awq": {
            "config_class": "AWQConfig",
            "files": ["quantize_config.json", "quant_config.json"],
            "builds_without_checkpoint": False,
        },
        "fbgemm_fp8": {
            "config_class": "FBGEMMFp8Config",
            "files": [],
            "builds_without_checkpoint": False,
        },
        "fp8": {"config_class": "Fp8Config", "files": [], "builds_without_checkpoint": True},
        "fp8_per_tensor": {
            "config_class": "OnlineQuantizationConfig",
            "files": [],
            "builds_without_checkpoint": True,
        },
        "online": {
            "config_class": "OnlineQuantizationConfig",
            "files": [],
            "builds_without_checkpoint": False,
        },
    }
    # A nested config argument: the fields of the class it becomes (with its bases), each key
    # one of them, and their bounds; a plain dict splatted into a class (Config(**self.arg))
    # has the bounds only, as vLLM may read a dict otherwise.
    profiler = "vllm/config/profiler.py ProfilerConfig"
    assert values["profiler_config"] == {
        "types": ["config"],
        "config_class": profiler,
        "fields": ["active_iterations", "profiler", "trace_dir"],
        "field_values": {
            "active_iterations": {"types": ["int"], "source": f"{profiler}.active_iterations"},
            "profiler": {"types": ["str", "none"], "source": f"{profiler}.profiler"},
            "trace_dir": {"types": ["str"], "source": "vllm/config/profiler.py Traced.trace_dir"},
        },
        "field_bounds": {"active_iterations": {"ge": 1, "source": f"{profiler}.active_iterations"}},
    }
    # Splatted into its class as keywords (with '-' read as '_'): every key one of its fields,
    # and each field's values by its annotation: a Literal; a field a before-validator looks
    # up by name (any case, or by the enum's value); null where vLLM's wrap-validator skips
    # it (pydantic refuses it for `x: int = None` otherwise); not a nested config
    # (ModelConfig), which vLLM builds itself.
    speculative = "vllm/config/speculative.py SpeculativeConfig"
    assert values["speculative_config"] == {
        "types": ["dict", "none"],
        "config_class": speculative,
        "fields": ["max_model_len", "method", "mode", "num_speculative_tokens", "target"],
        "field_values": {
            "max_model_len": {"types": ["int", "none"], "source": f"{speculative}.max_model_len"},
            "method": {
                "types": ["choice", "none"],
                "choices": ["ngram", "eagle"],
                "choices_from": ["the annotation's Literal"],
                "source": f"{speculative}.method",
            },
            "mode": {
                "types": ["choice"],
                "choices": ["NONE", "VLLM_COMPILE", 0, 3],
                "choices_from": ["CompilationMode (vllm/config/speculative.py)"],
                "case_insensitive": True,
                "source": f"{speculative}.mode",
            },
            "num_speculative_tokens": {
                "types": ["int"],
                "source": f"{speculative}.num_speculative_tokens",
            },
        },
        "field_bounds": {
            "num_speculative_tokens": {"gt": 0, "source": f"{speculative}.num_speculative_tokens"}
        },
        "dashes_in_keys": True,
    }
