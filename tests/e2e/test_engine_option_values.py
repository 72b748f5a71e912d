"""vLLM 0.26's own config classes on what the app renders and on what its rules judge: each
side's engine kwargs of the synthesized Serve config build a whole vLLM engine config the way
Ray Serve LLM builds it on the GPU nodes, and the app's engine-option rules
(app_config/rules/engine_options.py, catalog/vllm_engine_args.json) refuse exactly what vLLM
refuses for a sample of values and relations. No Ray cluster, no GPU, no model download.

How far it goes on a CPU: Ray's own path (``VLLMEngineConfig.from_llm_config``, Ray's
``_normalize_vllm_engine_kwargs``, ``AsyncEngineArgs(**kwargs)``) and then vLLM's whole
``create_engine_config`` (ModelConfig from the bundled config.json of catalog/model_configs,
CacheConfig, SchedulerConfig, ParallelConfig, KVTransferConfig, VllmConfig.__post_init__), with
vLLM's CPU platform standing in for the CUDA one: no GPU is visible here. So what a platform
decides (the attention backend, block sizes per backend, the batch defaults by GPU memory) is
not what CUDA would decide; the batch defaults are compared separately, with the GPU's memory
and name given to vLLM's own ``EngineArgs.get_batch_defaults``.

The child interpreter (installed_probe.probe) keeps vLLM's and Ray's imports out of pytest's
process, as tests/e2e/test_engine_options.py does."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from harness import Synthesized
from installed_probe import probe

from app_config import ConfigError, engine_options, load_settings
from app_config.rules import engine_options as rules
from app_config.rules import evaluate
from catalog.instances import CATALOG
from catalog.models import bundled_config
from tests.configurations import context_for

ROLES = ("prefill", "decode")

# Runs in the child: argv[1] is {"model_dir": ..., "cases": {name: config of one side}}; prints
# {name: {"refused": message} | {"connector": ..., ...}}.
BUILD = """
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()  # no GPU here: vLLM's CPU platform stands in
from ray.llm._internal.serve.engines.vllm.vllm_engine import _normalize_vllm_engine_kwargs
from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
from ray.serve.llm import LLMConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.usage.usage_lib import UsageContext

argument = json.loads(sys.argv[1])
results = {}
for name, side in argument["cases"].items():
    try:
        config = LLMConfig(
            model_loading_config={
                "model_id": side["model_loading_config"]["model_id"],
                "model_source": argument["model_dir"],
            },
            engine_kwargs=side["engine_kwargs"],
        )
        engine = VLLMEngineConfig.from_llm_config(config)
        kwargs = _normalize_vllm_engine_kwargs(engine.get_initialization_kwargs())
        built = AsyncEngineArgs(**kwargs).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
    except Exception as error:
        results[name] = {"refused": f"{type(error).__name__}: {error}"[:600]}
        continue
    transfer = built.kv_transfer_config
    results[name] = {
        "connector": transfer.kv_connector if transfer else None,
        "kv_role": transfer.kv_role if transfer else None,
        "block_size": built.cache_config.block_size,
        "tensor_parallel_size": built.parallel_config.tensor_parallel_size,
        "pipeline_parallel_size": built.parallel_config.pipeline_parallel_size,
        "max_model_len": built.model_config.max_model_len,
        "gpu_memory_utilization": built.cache_config.gpu_memory_utilization,
    }
print(json.dumps(results))
"""

# Runs in the child: vLLM's batch defaults for each GPU (memory, name) of argv[1].
BATCH_DEFAULTS = """
import json, sys
import vllm.engine.arg_utils as arg_utils
from vllm.usage.usage_lib import UsageContext

class Gpu:  # what current_platform answers on the side's GPU node
    def __init__(self, memory, name):
        self.memory, self.name = memory, name
    def get_device_total_memory(self):
        return self.memory
    def get_device_name(self):
        return self.name
    def is_tpu(self):
        return False
    def is_cpu(self):
        return False

found = {}
for name, (memory, device) in json.loads(sys.argv[1]).items():
    arg_utils.current_platform = Gpu(memory, device)
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=8)
    found[name] = tokens[UsageContext.OPENAI_API_SERVER]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def synthesized_sides(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    (application,) = synthesized.serve_config["applications"]
    return {role: application["args"][f"{role}_config"] for role in ROLES}


@pytest.fixture(scope="module")
def model_dir(synthesized_sides: dict[str, dict[str, Any]]) -> Path:
    model_id = synthesized_sides["decode"]["model_loading_config"]["model_id"]
    config = bundled_config(model_id)
    if config is None:
        pytest.skip(f"no bundled config.json for {model_id} in catalog/model_configs")
    folder = Path(tempfile.mkdtemp(prefix="pd-llm-model-"))
    (folder / "config.json").write_text(config.read_text())
    return folder


def _build(model_dir: Path, cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return probe(BUILD, {"model_dir": str(model_dir), "cases": cases})


def test_each_sides_rendered_engine_kwargs_build_vllms_engine_config(
    synthesized_sides: dict[str, dict[str, Any]], model_dir: Path
) -> None:
    built = _build(model_dir, synthesized_sides)
    for role, side in synthesized_sides.items():
        kwargs = side["engine_kwargs"]
        assert "refused" not in built[role], built[role]
        assert built[role]["connector"] == kwargs["kv_transfer_config"]["kv_connector"]
        assert built[role]["kv_role"] == kwargs["kv_transfer_config"]["kv_role"]
        for key in ("block_size", "tensor_parallel_size", "pipeline_parallel_size"):
            assert built[role][key] == kwargs[key], key
        assert built[role]["max_model_len"] == kwargs["max_model_len"]
        assert built[role]["gpu_memory_utilization"] == kwargs["gpu_memory_utilization"]


# Options for both sides (serving.engine_options) of the default configuration: valid ones
# both accept, invalid ones both refuse. vLLM "refuses" one that undoes the KV connector path
# (a side built without the NixlConnector) as the app's engine-option-pd rule does.
SAMPLES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "max_num_seqs 64": {"max_num_seqs": 64},
    "max_num_seqs 0": {"max_num_seqs": 0},
    "max_num_batched_tokens 0": {"max_num_batched_tokens": 0},
    "kv_cache_dtype fp8": {"kv_cache_dtype": "fp8"},
    "kv_cache_dtype fp9": {"kv_cache_dtype": "fp9"},
    "dtype bfloat16": {"dtype": "bfloat16"},
    "dtype bf16": {"dtype": "bf16"},
    "watermark 0.5": {"watermark": 0.5},
    "watermark 1.0": {"watermark": 1.0},
    "cpu_offload_gb -1": {"cpu_offload_gb": -1},
    "performance_mode throughput": {"performance_mode": "throughput"},
    "performance_mode fast": {"performance_mode": "fast"},
    "optimization_level 2": {"optimization_level": 2},
    "batched below seqs": {"max_num_batched_tokens": 128, "max_num_seqs": 256},
    "batched equal to seqs": {"max_num_batched_tokens": 256, "max_num_seqs": 256},
    "chunked prefill off, batched below context": {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 8192,
    },
    "chunked prefill off, batched the context": {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": 32768,
    },
    "partial prefills at vLLM's default": {
        "max_num_partial_prefills": 1,
        "max_long_partial_prefills": 1,
    },
    "concurrent partial prefills": {"max_num_partial_prefills": 4},
    "long partial prefills": {"max_long_partial_prefills": 2},
    "kv offloading": {"kv_offloading_size": 64},
    "kv offloading to lmcache": {"kv_offloading_size": 8, "kv_offloading_backend": "lmcache"},
    "routed experts returned": {"enable_return_routed_experts": True},
    "layer-group offload, 2 of 8": {"offload_group_size": 8, "offload_num_in_group": 2},
    "layer-group offload, 3 of 2": {"offload_group_size": 2, "offload_num_in_group": 3},
    "prefetch without a group size": {"offload_backend": "prefetch"},
    "prefetch step 0 with a group": {"offload_group_size": 8, "offload_prefetch_step": 0},
    "prefetch step 0, no group": {"offload_prefetch_step": 0},
    "offload_backend uva": {"offload_backend": "uva", "cpu_offload_gb": 1},
    "offload_backend prefech": {"offload_backend": "prefech"},
    # Deprecated quantization (ModelConfig._verify_quantization). Allowed, vLLM then builds
    # the method from the checkpoint's quantization config, which the bundled unquantized
    # model lacks (the app's model-quantization rule), so no allowed sample here.
    "quantization fbgemm_fp8": {"quantization": "fbgemm_fp8"},
    # An option beside the nested config field it overrides (the catalog's "exclusive").
    "attention_backend beside attention_config.backend": {
        "attention_backend": "CPU_ATTN",
        "attention_config": {"backend": "CPU_ATTN"},
    },
    "attention_backend beside attention_config.backend auto": {
        "attention_backend": "CPU_ATTN",
        "attention_config": {"backend": "auto"},
    },
    "attention_config.backend alone": {"attention_config": {"backend": "CPU_ATTN"}},
    "flashinfer autotune twice": {
        "enable_flashinfer_autotune": True,
        "kernel_config": {"enable_flashinfer_autotune": False},
    },
    "max_cudagraph_capture_size twice": {
        "max_cudagraph_capture_size": 64,
        "compilation_config": {"max_cudagraph_capture_size": 64},
    },
    "max_cudagraph_capture_size, the nested one null": {
        "max_cudagraph_capture_size": 64,
        "compilation_config": {"max_cudagraph_capture_size": None},
    },
    "spec_tokens beside speculative_config's": {
        "spec_tokens": 2,
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
    },
    "spec_tokens with speculative_config's method": {
        "spec_tokens": 2,
        "speculative_config": {"method": "ngram"},
    },
    # An option that needs another's value (rules.REQUIREMENTS).
    "detailed traces without an endpoint": {"collect_detailed_traces": ["model"]},
    "detailed traces with an endpoint": {
        "collect_detailed_traces": ["model"],
        "otlp_traces_endpoint": "http://127.0.0.1:4317",
    },
    "numa nodes without numa_bind": {"numa_bind_nodes": [0]},
    "numa nodes with numa_bind": {"numa_bind_nodes": [0], "numa_bind": True},
    "dcp_comm_backend a2a": {"dcp_comm_backend": "a2a"},
    "dcp_comm_backend ag_rs": {"dcp_comm_backend": "ag_rs"},
    "mamba_block_size, prefix caching off": {
        "mamba_block_size": 512,
        "enable_prefix_caching": False,
    },
    "mamba_block_size, prefix caching on": {
        "mamba_block_size": 512,
        "enable_prefix_caching": True,
    },
    "mamba_block_size the context, prefix caching off": {
        "mamba_block_size": 32768,
        "enable_prefix_caching": False,
    },
    "stochastic rounding, ssm cache auto": {"enable_mamba_cache_stochastic_rounding": True},
    "stochastic rounding, ssm cache float16": {
        "enable_mamba_cache_stochastic_rounding": True,
        "mamba_ssm_cache_dtype": "float16",
    },
    "no whitespace, backend auto": {"structured_outputs_config": {"disable_any_whitespace": True}},
    "no whitespace, backend xgrammar": {
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}
    },
    "no additional properties, backend xgrammar": {
        "structured_outputs_config": {"backend": "xgrammar", "disable_additional_properties": True}
    },
    "no additional properties, backend guidance": {
        "structured_outputs_config": {"backend": "guidance", "disable_additional_properties": True}
    },
    "torch profiler without a directory": {"profiler_config": {"profiler": "torch"}},
    "torch profiler with a directory": {
        "profiler_config": {
            "profiler": "torch",
            "torch_profiler_dir": "/tmp/pd-llm-profile",
            "capture_torch_profiler": True,
        }
    },
    "profiler directory for the cuda profiler": {
        "profiler_config": {"profiler": "cuda", "torch_profiler_dir": "/tmp/pd-llm-profile"}
    },
    "capture_torch_profiler without a profiler": {
        "profiler_config": {"capture_torch_profiler": True}
    },
    "async scheduling, ngram": {
        "async_scheduling": True,
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
    },
    "async scheduling, spec_method ngram": {
        "async_scheduling": True,
        "spec_method": "ngram",
        "spec_tokens": 2,
    },
    "async scheduling, ngram_gpu": {
        "async_scheduling": True,
        "speculative_config": {"method": "ngram_gpu", "num_speculative_tokens": 2},
    },
    "async scheduling, padded drafter batch off": {
        "async_scheduling": True,
        "speculative_config": {
            "method": "ngram_gpu",
            "num_speculative_tokens": 2,
            "disable_padded_drafter_batch": True,
        },
    },
    "padded drafter batch off, async left to vLLM": {
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "disable_padded_drafter_batch": True,
        }
    },
    # A nested config option's keys and Field bounds (the catalog's config_class).
    "compilation_config cudagraph_mode": {"compilation_config": {"cudagraph_mode": "PIECEWISE"}},
    "compilation_config, a misspelt key": {"compilation_config": {"cudagraph_mod": "PIECEWISE"}},
    "attention_config, a misspelt key": {"attention_config": {"backnd": "CPU_ATTN"}},
    "profiler active_iterations 1": {"profiler_config": {"active_iterations": 1}},
    "profiler active_iterations 0": {"profiler_config": {"active_iterations": 0}},
    "ngram, 1 speculative token": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 1}
    },
    "ngram, 0 speculative tokens": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 0}
    },
    # A nested config option's values by its fields' annotations (the catalog's field_values),
    # as pydantic's lax mode and the fields' before-validators take them.
    "structured outputs backend nope": {"structured_outputs_config": {"backend": "nope"}},
    "attention_config backend NOPE": {"attention_config": {"backend": "NOPE"}},
    "attention_config backend in lower case": {"attention_config": {"backend": "cpu_attn"}},
    "cudagraph_mode BOGUS": {"compilation_config": {"cudagraph_mode": "BOGUS"}},
    "cudagraph_mode in lower case": {"compilation_config": {"cudagraph_mode": "none"}},
    "compilation mode bogus": {"compilation_config": {"mode": "bogus"}},
    "compilation mode by name": {"compilation_config": {"mode": "none"}},
    "compilation mode by number": {"compilation_config": {"mode": 0}},
    "cudagraph capture sizes as text": {"compilation_config": {"cudagraph_capture_sizes": "abc"}},
    "speculative_config, a misspelt key": {
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_maxx": 3,
        }
    },
    "speculative_config, a dashed key": {
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt-lookup-max": 3,
        }
    },
    "speculative method bogus": {
        "speculative_config": {"method": "bogus", "num_speculative_tokens": 2}
    },
    "speculative tokens as a word": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": "two"}
    },
    "speculative tokens in exponent form": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": "1e3"}
    },
    "speculative tokens false": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": False}
    },
    "capture sizes null": {"compilation_config": {"cudagraph_capture_sizes": None}},
    "capture size null (a wrap-validator skips it)": {
        "compilation_config": {"max_cudagraph_capture_size": None}
    },
    "ir_op_priority as comma-separated text": {"ir_op_priority": {"rms_norm": "vllm_c,native"}},
    "compilation mode 3.0, cudagraph_mode true": {
        "compilation_config": {"mode": 0.0, "cudagraph_mode": True}
    },
    "async scheduling, dashed padded drafter batch off": {
        "async_scheduling": True,
        "speculative_config": {
            "method": "ngram_gpu",
            "num_speculative_tokens": 2,
            "disable-padded-drafter-batch": True,
        },
    },
    "speculative tokens as digits": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": "2"}
    },
    "LoRA, fewer CPU LoRAs than max_loras": {
        "enable_lora": True,
        "max_loras": 4,
        "max_cpu_loras": 2,
    },
    "LoRA, as many CPU LoRAs as max_loras": {
        "enable_lora": True,
        "max_loras": 4,
        "max_cpu_loras": 4,
    },
}


def _app_refuses(options: dict[str, Any]) -> list[str]:
    """The engine-option codes the app's rules give for the options on both sides."""
    context = context_for("default", **{"serving.engine_options": json.dumps(options)})
    try:
        load_settings(context, {})
    except ConfigError as error:
        return sorted({p.code for p in error.problems if p.code.startswith("engine-option")})
    return []


def test_the_apps_rules_refuse_what_vllms_config_classes_refuse(
    synthesized_sides: dict[str, dict[str, Any]], model_dir: Path
) -> None:
    decode = synthesized_sides["decode"]
    cases = {
        name: {**decode, "engine_kwargs": {**decode["engine_kwargs"], **options}}
        for name, options in SAMPLES.items()
    }
    built = _build(model_dir, cases)
    disagreements = {}
    for name, options in SAMPLES.items():
        vllm = built[name]
        vllm_refuses = "refused" in vllm or vllm["connector"] != "NixlConnector"
        app = _app_refuses(options)
        if vllm_refuses != bool(app):
            disagreements[name] = {"app": app, "vllm": vllm}
    assert not disagreements, json.dumps(disagreements, indent=1)
    assert "refused" not in built["defaults"], built["defaults"]


# Runs in the child: the keyword names each config class of argv[1] takes (its dataclass
# fields with init, InitVars included, ClassVars not).
CONFIG_FIELDS = """
import dataclasses, importlib, json, sys
found = {}
for key, (module, name) in json.loads(sys.argv[1]).items():
    cls = getattr(importlib.import_module(module), name)
    found[key] = sorted(
        f.name for f in cls.__dataclass_fields__.values()
        if f.init and f._field_type is not dataclasses._FIELD_CLASSVAR
    )
print(json.dumps(found))
"""


def test_the_nested_config_fields_are_what_vllms_classes_take() -> None:
    """The catalog's fields of each nested config option (generated from the class and its
    bases) are the keywords vLLM's class takes: the app refuses no key vLLM takes, and takes
    none it refuses."""
    values = engine_options.vllm_args()["values"]
    classes = {}
    for key, rule in values.items():
        if "fields" in rule:
            path, name = rule["config_class"].split(" ")
            classes[key] = [path.removesuffix(".py").replace("/", "."), name]
    taken = probe(CONFIG_FIELDS, classes)
    assert {"compilation_config", "attention_config", "profiler_config"} <= set(taken)
    assert taken == {key: values[key]["fields"] for key in classes}


def test_the_batch_defaults_by_gpu_are_vllms() -> None:
    """The hardware rule's default max_num_batched_tokens per GPU is what vLLM's own
    EngineArgs.get_batch_defaults gives, told the GPU's memory and name."""
    gib = 1 << 30
    gpus = {name: [i.gpu_memory_gib * gib, f"NVIDIA {i.gpu_model}"] for name, i in CATALOG.items()}
    found = probe(BATCH_DEFAULTS, gpus)
    expected = {name: rules.gpu_batched_tokens(instance) for name, instance in CATALOG.items()}
    assert found == expected


# Runs in the child: argv[1] is [[separator, name], ...]; vLLM's own loaders try each name, and
# build_logitsprocs is handed a speculative config with a custom processor. Prints
# {"loaded": {name: "loaded" | error}, "speculative": error | null}.
IMPORT_BY_NAME = """
import json, sys, types
import torch
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns, build_logitsprocs

loaded = {}
for separator, name in json.loads(sys.argv[1]):
    try:
        if separator == ".":
            resolve_obj_by_qualname(name)
        else:
            _load_logitsprocs_by_fqcns([name])
        loaded[name] = "loaded"
    except Exception as error:
        loaded[name] = f"{type(error).__name__}: {error}"[:300]
try:
    build_logitsprocs(
        types.SimpleNamespace(speculative_config=object()), torch.device("cpu"), False, False,
        ["vllm.v1.sample.logits_processor.builtin:MinPLogitsProcessor"],
    )
    speculative = None
except Exception as error:
    speculative = f"{type(error).__name__}: {error}"
print(json.dumps({"loaded": loaded, "speculative": speculative}))
"""

# (separator, name): names the import rule refuses and real classes of vLLM 0.26 it takes.
IMPORT_NAMES = [
    (".", "MyWorker"),  # no dot: resolve_obj_by_qualname's rsplit fails
    (".", "vllm.v1.core.sched.async_scheduler."),
    (".", "vllm..v1.core.sched.async_scheduler.AsyncScheduler"),
    (".", "vllm.v1.core.sched.async_scheduler.Async Scheduler"),
    (".", "vllm.v1.core.sched.async_scheduler.AsyncScheduler"),
    (".", "vllm.v1.worker.gpu_worker.Worker"),
    (":", "vllm.v1.sample.logits_processor.builtin.MinPLogitsProcessor"),  # a dot, not ':'
    (":", "vllm.v1.sample.logits_processor.builtin:MinPLogitsProcessor:x"),
    (":", ":MinPLogitsProcessor"),
    (":", "vllm.v1.sample.logits_processor.builtin:MinPLogitsProcessor"),
]


def test_the_names_the_import_rule_refuses_are_what_vllms_loaders_cannot_import() -> None:
    """Each name the import rule refuses fails vLLM's own loader (resolve_obj_by_qualname, the
    logits processors' loader), each real class it takes loads; and build_logitsprocs refuses
    a custom processor beside speculative decoding, as the relation rule does."""
    found = probe(IMPORT_BY_NAME, IMPORT_NAMES)
    verdicts = {
        name: {"app": rules.import_name_problem(name, separator), "vllm": found["loaded"][name]}
        for separator, name in IMPORT_NAMES
    }
    disagreements = {
        name: verdict
        for name, verdict in verdicts.items()
        if bool(verdict["app"]) != (verdict["vllm"] != "loaded")
    }
    assert not disagreements, json.dumps(disagreements, indent=1)
    assert sum(verdict["vllm"] == "loaded" for verdict in verdicts.values()) == 3
    assert "speculative decoding" in (found["speculative"] or "")
    assert "engine-option-relation" in _app_refuses(
        {"logits_processors": ["m:P"], "spec_tokens": 2}
    )


# Runs in the child: argv[1] is a folder holding an unquantized config.json; prints {method:
# "built" | "<error>"} for every method vLLM knows, built by its own weight loader's step.
QUANT_CONFIG = """
import json, sys, types
from vllm.config.load import LoadConfig
from vllm.config.quantization import resolve_quantization_config
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
from vllm.model_executor.model_loader.weight_utils import get_quant_config

folder = json.loads(sys.argv[1])
found = {}
for method in QUANTIZATION_METHODS:
    model = types.SimpleNamespace(
        model=folder, revision=None, quantization=method, hf_config=types.SimpleNamespace(),
        hf_overrides={}, quantization_config=resolve_quantization_config(method, None),
    )
    try:
        get_quant_config(model, LoadConfig())
        found[method] = "built"
    except Exception as error:
        found[method] = f"{type(error).__name__}: {error}"
print(json.dumps(found))
"""


def _quantization_codes(method: str) -> set[str]:
    """The model-quantization codes the app gives for ``method`` on both sides of the
    quickstart (Qwen3-8B, whose bundled config.json has no quantization config)."""
    options = json.dumps({"quantization": method})
    context = context_for("quickstart", **{"serving.engine_options": options})
    try:
        findings = evaluate(load_settings(context, {}))
    except ConfigError as error:
        findings = error.problems
    return {f.code for f in findings if f.code.startswith("model-quantization")}


def test_the_quantization_rules_are_what_vllms_weight_loader_does_on_an_unquantized_checkpoint(
    tmp_path: Path,
) -> None:
    """vLLM's get_quant_config on a folder holding only an unquantized config.json: each method
    the catalog says vLLM builds without the checkpoint builds and the app takes it; each that
    reads a file fails for want of it and the app warns; each other fails and the app refuses
    it. The catalog lists every method vLLM knows."""
    (tmp_path / "config.json").write_text(bundled_config("Qwen/Qwen3-8B").read_text())
    built = probe(QUANT_CONFIG, str(tmp_path))
    catalog = engine_options.vllm_args()["quantization"]
    assert sorted(built) == sorted(catalog)
    disagreements = {}
    for method, needs in catalog.items():
        codes = _quantization_codes(method) - {"model-quantization-file-prefill"}
        if needs["builds_without_checkpoint"]:
            expected, app = "built", set()
        elif needs["files"]:
            expected = f"ValueError: Cannot find the config file for {method}"
            app = {"model-quantization-file-decode"}
        else:
            expected, app = "TypeError", {"model-quantization-unbuildable"}
        if not built[method].startswith(expected) or codes != app:
            disagreements[method] = {"vllm": built[method], "app": sorted(codes), "catalog": needs}
    assert not disagreements, json.dumps(disagreements, indent=1)
