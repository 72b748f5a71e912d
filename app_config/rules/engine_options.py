"""The vLLM engine options of both sides (``serving.engine_options`` under each
``serving.<side>.engine_options``), judged by the image's vLLM's own rules before deploy.

Ray Serve LLM builds each side's engine config from these options on the side's GPU nodes
(Ray 2.58 engines/vllm/vllm_engine.py ``_get_vllm_engine_config``: ``AsyncEngineArgs(**kwargs)``
then ``create_engine_config``, in a task placed on the side's GPUs), so whatever vLLM refuses
fails the replica minutes into a deploy. The names, types, choices and bounds come from vLLM's
source, generated into catalog/vllm_engine_args.json (tools/vllm_engine_args.py); the relations
below are read from vLLM's validators, each cited by file and function, and `make e2e` holds
them against vLLM's own config classes (tests/e2e/test_engine_option_values.py).

One code per kind of mistake: a name the app refuses (``engine-options``), a value vLLM refuses
(``engine-option-value``), a relation vLLM's scheduler refuses (``engine-option-scheduler``),
an option vLLM refuses beside the same field of a nested config option
(``engine-option-exclusive``, generated from vLLM's source), an option that needs another's
value (``engine-option-relation``), an option that undoes the prefill/decode split
(``engine-option-pd``), one the side's GPUs cannot run (``engine-option-hardware``), one Ray's
loader cannot (``engine-option-loader``), a class or processor vLLM cannot import by the
name given (``engine-option-import``), a weight offload vLLM refuses
(``engine-option-offload``) or ignores (``-offload-ignored``).
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import TypeAdapter, ValidationError

from app_config import engine_options
from app_config.errors import Finding
from app_config.node_labels import GPU_ROLES
from app_config.rules import WARNING, Rule
from catalog.ray_llm_image import RAY

if TYPE_CHECKING:
    from app_config.model import Settings
    from app_config.side import Side
    from catalog.instances import GpuInstance

# The version whose source generated the catalog (the image's: tests/config/test_engine_options).
VLLM = f"vLLM {engine_options.vllm_args()['vllm_version']}"


@dataclass(frozen=True)
class SideOptions:
    """One side's options: both sides' with the side's over them, as given and as coerced."""

    role: str
    given: dict[str, Any]
    options: dict[str, Any]  # the names a side may set, coerced as the renderer writes them
    own: frozenset[str]  # the keys set under serving.<side>.engine_options

    def path(self, key: str) -> str:
        return engine_options.option_path(self.role, key, own=key in self.own)

    def finding(self, key: str, message: str) -> Finding:
        return Finding(self.path(key), message, self.given.get(key))


def side_options(settings: Settings) -> Iterator[SideOptions]:
    for role in GPU_ROLES:
        own = settings.serving.engine(role).engine_options
        given = {**settings.serving.engine_options, **own}
        yield SideOptions(role, given, engine_options.coerced(given), frozenset(own))


def _once(findings: Iterable[Finding]) -> list[Finding]:
    """An option of both sides is judged on each: report it once, at its setting."""
    first: dict[str, Finding] = {}
    for finding in findings:
        first.setdefault(finding.path, finding)
    return list(first.values())


def _per_side(judge: Callable[[SideOptions], Iterable[Finding]]) -> Callable[..., list[Finding]]:
    def check(settings: Settings) -> list[Finding]:
        return _once(finding for side in side_options(settings) for finding in judge(side))

    check.__doc__ = judge.__doc__
    return check


# --- names -------------------------------------------------------------------------------------


def option_names(side: SideOptions) -> Iterator[Finding]:
    """Names vLLM does not know, or that the project sets itself (app_config/engine_options.py)."""
    for key in side.given:
        message = engine_options.name_problem(key)
        if message:
            yield side.finding(key, message)


# --- values ------------------------------------------------------------------------------------

_COMPARE = {"gt": (operator.gt, ">"), "ge": (operator.ge, ">="), "lt": (operator.lt, "<"),
            "le": (operator.le, "<=")}  # fmt: skip


def value_problem(key: str, value: Any) -> str | None:
    """Does ``value`` (coerced) fit what vLLM takes for ``key``: its type, its choices (a
    ``Literal`` or an enum), the bounds of the pydantic config field it becomes?"""
    rule, annotation = engine_options.value_rule(key), engine_options.accepted()[key]
    types, choices = rule["types"], rule.get("choices", [])
    if value is None:
        return None if "none" in types else f"may not be empty ({annotation})"
    if choices and not engine_options.takes_text(key) and isinstance(value, str):
        if value in choices:
            return None
        return f"{value!r} is not one of {', '.join(map(str, choices))}"
    # True == 1 in Python, not to vLLM: a choice matches only a value of its own type.
    chosen = any(choice == value and type(choice) is type(value) for choice in choices)
    if not chosen and not any(_fits(kind, value) for kind in types):
        return f"{value!r} does not fit vLLM's type {annotation}"
    return _bounds_problem(key, value, rule.get("bounds", []))


def nested_problem(key: str, options: Mapping[str, Any]) -> str | None:
    """A nested config option's mapping against the vLLM config class it becomes (generated
    into the catalog: ``config_class``): a key that is not one of its fields (the class
    forbids extra fields), a value its field's annotation does not take (``field_values``:
    pydantic's lax reading, which takes "3" for an int), and a value outside a field's
    ``Field`` bounds."""
    rule = engine_options.value_rule(key)
    fields = rule.get("fields")
    for field, value in engine_options.nested(options, key).items():
        if rule.get("dashes_in_keys"):  # vLLM reads '-' in these keys as '_' first
            field = field.replace("-", "_")
        if fields is not None and field not in fields:
            close = difflib.get_close_matches(field, fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return (
                f"{field!r} is not a field of {rule['config_class']}, which {VLLM} builds from "
                f"it and which refuses any other{hint}"
            )
        taken = rule.get("field_values", {}).get(field)
        if taken and not _field_takes(taken, value):
            return (
                f"{field} = {value!r}: {rule['config_class']} takes "
                f"{_what_it_takes(taken)} there ({taken['source']}), and {VLLM} refuses the "
                "engine config otherwise"
            )
        bound = rule.get("field_bounds", {}).get(field)
        number = int(value) if isinstance(value, bool) else value  # pydantic reads false as 0
        problem = _bounds_problem(f"{key}.{field}", number, [bound] if bound else [])
        if problem:
            return problem
    return None


# What pydantic 2's lax mode, which vLLM's config dataclasses validate in, takes for each kind:
# pydantic itself decides ("3" for an int, "yes" for a bool, never a number for text).
_LAX = {
    kind: TypeAdapter(python_type)
    for kind, python_type in (
        ("int", int), ("float", float), ("bool", bool), ("str", str), ("list", list),
        ("dict", dict),
    )
}  # fmt: skip


def _validates(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def _lax_fits(kind: str, value: Any) -> bool:
    if kind == "none":
        return value is None
    adapter = _LAX.get(kind)
    return adapter is None or _validates(adapter, value)  # a choice: judged by its choices


def _field_takes(rule: Mapping[str, Any], value: Any) -> bool:
    """Whether a nested field takes ``value``: a member of its choices (text by name in any
    case where its before-validator looks names up, else as pydantic's lax Literal compares:
    3.0 for 3), or a value of one of its other kinds."""
    choices = rule.get("choices", [])
    by_name = rule.get("case_insensitive", False)
    if isinstance(value, str) and by_name:
        if value.upper() in {c.upper() for c in choices if isinstance(c, str)}:
            return True
    else:
        literal = tuple(c for c in choices if not (by_name and isinstance(c, str)))
        if literal and _validates(TypeAdapter(Literal[literal]), value):
            return True
    return any(_lax_fits(kind, value) for kind in rule["types"] if kind != "choice")


def _what_it_takes(rule: Mapping[str, Any]) -> str:
    words = {"none": "null", "list": "a list", "dict": "a mapping", "str": "text", "int": "an int"}
    kinds = [words.get(kind, f"a {kind}") for kind in rule["types"] if kind != "choice"]
    choices = rule.get("choices", [])
    if choices:
        listed = [repr(c) if isinstance(c, str) else str(c) for c in choices[:12]]
        shown = ", ".join(listed) + (", ..." if len(choices) > 12 else "")
        case = " (any case)" if rule.get("case_insensitive") else ""
        kinds.insert(0, f"one of {shown}{case}")
    return " or ".join(kinds)


def _bounds_problem(key: str, value: Any, bounds: list[dict[str, Any]]) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    for bound in bounds:
        limits = [(name, limit) for name, limit in bound.items() if name in _COMPARE]
        if not all(_COMPARE[name][0](value, limit) for name, limit in limits):
            wanted = " and ".join(f"{key} {_COMPARE[name][1]} {limit}" for name, limit in limits)
            return f"{value} is out of range: {VLLM} requires {wanted} ({bound['source']})"
    return None


def _fits(kind: str, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    # A nested vLLM config (compilation_config, ...): vLLM validates the mapping or JSON text
    # itself (Ray's _normalize_vllm_engine_kwargs, the config's pydantic model), which `make
    # e2e` runs; a class or callable vLLM builds itself is not judged here.
    if kind == "config":
        return isinstance(value, dict | str)
    return kind in ("object", "class")


# vLLM 0.26 seeds every worker with set_random_seed (vllm/utils/torch_utils.py), which calls
# numpy's np.random.seed: it takes 0 to 2**32 - 1 only ("Seed must be between 0 and 2**32 - 1"),
# so another seed passes the engine config and fails each worker as it starts.
NUMPY_SEED_MAX = 2**32 - 1


def option_values(side: SideOptions) -> Iterator[Finding]:
    """Each option's value against vLLM's type, choices and bounds; parser names against the
    parsers vLLM registers (vllm/tool_parsers, vllm/reasoning) unless a plugin adds one."""
    data = engine_options.vllm_args()
    for key, value in side.options.items():
        message = value_problem(key, value) or nested_problem(key, side.options)
        if message:
            yield side.finding(key, message)
    seed = side.options.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= NUMPY_SEED_MAX:
        yield side.finding("seed", (
            f"{seed} is outside 0 to {NUMPY_SEED_MAX}: {VLLM} seeds each worker with numpy's "
            "np.random.seed (vllm/utils/torch_utils.py set_random_seed), which refuses it as "
            "the worker starts"
        ))  # fmt: skip
    quantization = side.options.get("quantization")
    allowed = side.options.get("allow_deprecated_quantization") is True
    if quantization in data["deprecated_quantization"] and not allowed:
        yield side.finding("quantization", (
            f"{quantization!r} is deprecated in {VLLM}, which refuses it unless "
            "allow_deprecated_quantization is true (ModelConfig._verify_quantization, "
            "vllm/config/model.py)"
        ))  # fmt: skip
    for key, registry in engine_options.REGISTRIES.items():
        name = side.options.get(key)
        plugin = side.options.get(engine_options.PLUGINS[key])
        if isinstance(name, str) and name and not plugin and name not in data[registry]:
            yield side.finding(key, (
                f"{name!r} is not a parser {VLLM} registers; valid: {', '.join(data[registry])}"
            ))  # fmt: skip


# --- the scheduler -----------------------------------------------------------------------------


def _ints(options: Mapping[str, Any], *keys: str) -> list[int | None]:
    values = [options.get(key) for key in keys]
    return [v if isinstance(v, int) and not isinstance(v, bool) else None for v in values]


def scheduler_relations(side: SideOptions, max_model_len: int) -> Iterator[Finding]:
    """vLLM 0.26 vllm/config/scheduler.py ``SchedulerConfig.verify_max_model_len``, which fails
    the engine at start, and engine/arg_utils.py ``EngineArgs._check_feature_supported``, which
    refuses concurrent partial prefill (any max_num_partial_prefills or
    max_long_partial_prefills but vLLM's default 1). Chunked prefill is on unless set off
    (``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args``: on for every
    generative model)."""
    options = side.options
    batched, seqs = _ints(options, "max_num_batched_tokens", "max_num_seqs")
    chunked_off = options.get("enable_chunked_prefill") is False
    if batched is not None and seqs is not None and batched < seqs:
        yield side.finding("max_num_batched_tokens", (
            f"{batched} is below max_num_seqs {seqs}; {VLLM} requires max_num_batched_tokens "
            ">= max_num_seqs"
        ))  # fmt: skip
    if batched is not None and chunked_off and batched < max_model_len:
        yield side.finding("max_num_batched_tokens", (
            f"{batched} is below serving.max_model_len {max_model_len} with chunked prefill "
            f"off; {VLLM} refuses that (no prompt longer than one batch could run): raise it "
            "or turn chunked prefill on"
        ))  # fmt: skip
    for key in ("max_num_partial_prefills", "max_long_partial_prefills"):
        (count,) = _ints(options, key)
        if count is not None and count != 1:
            yield side.finding(key, (
                f"{VLLM} does not support concurrent partial prefill (EngineArgs."
                "_check_feature_supported raises for any value but its default 1); leave it "
                "unset"
            ))  # fmt: skip


# --- relations between options ----------------------------------------------------------------


def exclusive(side: SideOptions) -> Iterator[Finding]:
    """An option beside the same field of the nested config option it would override: vLLM
    0.26 refuses the two together. The pairs are generated from vLLM's source into the
    catalog's ``exclusive`` (tools/vllm_engine_args.py ``exclusive_options``): "set" where
    vLLM refuses both not None (a field value its before-validator turns into None, such as
    attention_config's backend ``auto``, is unset), "given" where it refuses the key in the
    mapping at all."""
    for pair in engine_options.vllm_args()["exclusive"]:
        option, config, field = pair["option"], pair["config"], pair["field"]
        mapping = engine_options.nested(side.options, config)
        if side.options.get(option) is None or field not in mapping:
            continue
        value = mapping[field]
        unset = value is None or (isinstance(value, str) and value.lower() in pair["unset"])
        if pair["nested"] == "set" and unset:
            continue
        yield side.finding(option, (
            f"set beside {config}.{field}, which it overrides; {VLLM} refuses the two together "
            f"({pair['source']}): set one of them"
        ))  # fmt: skip


@dataclass(frozen=True)
class Requirement:
    """One relation vLLM 0.26 checks when it builds the engine config: ``option`` (a dotted
    path reaches into a nested config option), where ``applies`` to its value, needs
    ``needs`` (its value, or vLLM's ``default`` where not given) to pass ``holds``."""

    option: str
    applies: Callable[[Any, Mapping[str, Any]], bool]  # (its value, the side's options)
    needs: str
    default: Any
    holds: Callable[[Any, Any], bool]  # (the needed value, the option's value)
    wanted: str
    source: str


_OBSERVABILITY = "vllm/config/observability.py ObservabilityConfig._validate_tracing_config"
_PARALLEL = "vllm/config/parallel.py ParallelConfig._validate_parallel_config"
_STRUCTURED = (
    "vllm/config/structured_outputs.py StructuredOutputsConfig._validate_structured_output_config"
)
_PROFILER = "vllm/config/profiler.py ProfilerConfig._validate_profiler_config"
_ASYNC = "vllm/config/vllm.py VllmConfig.__post_init__"
# Speculative methods vLLM 0.26 refuses with async_scheduling true, given explicitly: ngram
# (SpeculativeConfig.__post_init__ keeps it, and "[ngram]" becomes it) and suffix. Not
# medusa or mlp_speculator, which SpeculativeConfig may replace from the draft model's name.
NOT_ASYNC_METHODS = ("ngram", "[ngram]", "suffix")
# Speculative decoding is on when any of these is given (EngineArgs.create_speculative_config
# folds the spec_* options into speculative_config).
SPECULATIVE = ("speculative_config", "spec_method", "spec_model", "spec_tokens")
_LOGITSPROCS = "vllm/v1/sample/logits_processor/__init__.py build_logitsprocs"
REQUIREMENTS = (
    Requirement("collect_detailed_traces", lambda v, _: bool(v), "otlp_traces_endpoint", None,
                lambda n, _: bool(n), "an otlp_traces_endpoint to send the traces to",
                _OBSERVABILITY),
    Requirement("numa_bind_nodes", lambda v, _: True, "numa_bind", False,
                lambda n, _: n is True, "numa_bind true", _PARALLEL),
    Requirement("numa_bind_cpus", lambda v, _: True, "numa_bind", False,
                lambda n, _: n is True, "numa_bind true", _PARALLEL),
    # decode_context_parallel_size is the app's (engine_options.OWNED): 1 on every side.
    Requirement("dcp_comm_backend", lambda v, _: v == "a2a", "decode_context_parallel_size", 1,
                lambda n, _: isinstance(n, int) and n > 1,
                "decode_context_parallel_size > 1, and this app runs decode context parallel "
                "1 on every side", _PARALLEL),
    # Unset, enable_prefix_caching takes the model's default (EngineArgs.
    # _set_default_chunked_prefill_and_prefix_caching_args): only an explicit false is judged.
    Requirement("mamba_block_size", lambda v, options: v != options["max_model_len"],
                "enable_prefix_caching", None, lambda n, _: n is not False,
                "enable_prefix_caching for a mamba_block_size",
                "vllm/config/vllm.py VllmConfig.validate_mamba_block_size"),
    Requirement("enable_mamba_cache_stochastic_rounding", lambda v, _: v is True,
                "mamba_ssm_cache_dtype", "auto", lambda n, _: n == "float16",
                "mamba_ssm_cache_dtype float16 for stochastic rounding",
                "vllm/config/vllm.py VllmConfig.__post_init__"),
    Requirement("structured_outputs_config.disable_any_whitespace", lambda v, _: bool(v),
                "structured_outputs_config.backend", "auto",
                lambda n, _: n in ("xgrammar", "guidance"), "backend xgrammar or guidance",
                _STRUCTURED),
    Requirement("structured_outputs_config.disable_additional_properties",
                lambda v, _: bool(v), "structured_outputs_config.backend", "auto",
                lambda n, _: n == "guidance", "backend guidance", _STRUCTURED),
    Requirement("profiler_config.torch_profiler_dir", lambda v, _: bool(v),
                "profiler_config.profiler", None, lambda n, _: n == "torch",
                "profiler torch", _PROFILER),
    Requirement("profiler_config.capture_torch_profiler", lambda v, _: v is True,
                "profiler_config.profiler", None, lambda n, _: n == "torch",
                "profiler torch", _PROFILER),
    Requirement("profiler_config.profiler", lambda v, _: v == "torch",
                "profiler_config.torch_profiler_dir", "", lambda n, _: bool(n),
                "a torch_profiler_dir to write to", _PROFILER),
    # Async scheduling takes the EAGLE/MTP family, ngram_gpu, draft_model and dspark; an
    # explicit method SpeculativeConfig keeps and vLLM refuses with it: NOT_ASYNC_METHODS.
    Requirement("async_scheduling", lambda v, _: v is True, "speculative_config.method", None,
                lambda n, _: n not in NOT_ASYNC_METHODS, "a speculative method it supports "
                "(an EAGLE/MTP one, ngram_gpu, draft_model or dspark)", _ASYNC),
    Requirement("async_scheduling", lambda v, _: v is True, "spec_method", None,
                lambda n, _: n not in NOT_ASYNC_METHODS, "a speculative method it supports "
                "(an EAGLE/MTP one, ngram_gpu, draft_model or dspark)", _ASYNC),
    Requirement("speculative_config.disable_padded_drafter_batch", lambda v, _: v is True,
                "async_scheduling", None, lambda n, _: n is not True,
                "async scheduling not forced on", _ASYNC),
    # create_engine_config passes max_cpu_loras on only above 0, and builds LoRAConfig only
    # with enable_lora.
    Requirement("max_cpu_loras",
                lambda v, options: options.get("enable_lora") is True
                and isinstance(v, int) and v > 0,
                "max_loras", 1, lambda n, v: not isinstance(n, int) or v >= n,
                "max_cpu_loras >= max_loras",
                "vllm/config/lora.py LoRAConfig._validate_lora_config"),
    *(Requirement("logits_processors", lambda v, _: bool(v), flag, None, lambda n, _: n is None,
                  "speculative decoding off, which runs no custom logits processor",
                  _LOGITSPROCS) for flag in SPECULATIVE),
)  # fmt: skip


def relations(side: SideOptions, max_model_len: int) -> Iterator[Finding]:
    """Each of REQUIREMENTS on the side's options, with the max_model_len the app renders."""
    options = {**side.options, "max_model_len": max_model_len}
    for row in REQUIREMENTS:
        value = engine_options.lookup(options, row.option)
        if value is None or not row.applies(value, options):
            continue
        needed = engine_options.lookup(options, row.needs, row.default)
        if not row.holds(needed, value):
            yield side.finding(row.option.partition(".")[0], (
                f"{row.option} {value!r} needs {row.wanted}, and {row.needs} is "
                f"{needed!r}; {VLLM} refuses it ({row.source})"
            ))  # fmt: skip


# --- options vLLM imports by name ---------------------------------------------------------------


@dataclass(frozen=True)
class ImportedOption:
    """An option whose text vLLM 0.26 imports when a worker starts, minutes into a deploy:
    ``module.attr`` split at its last dot (vllm/utils/import_utils.py
    ``resolve_obj_by_qualname``), or ``module:attr.attr`` split at its one colon (the
    logits processors' loader). ``own`` is the value that leaves vLLM's own choice."""

    option: str
    separator: str
    own: Any
    source: str


_INIT_WORKER = "vllm/v1/worker/worker_base.py WorkerWrapperBase.init_worker"
IMPORTED = (
    ImportedOption("worker_cls", ".", "auto", _INIT_WORKER),
    ImportedOption("worker_extension_cls", ".", "", _INIT_WORKER),
    ImportedOption("scheduler_cls", ".", None,
                   "vllm/config/scheduler.py SchedulerConfig.get_scheduler_cls"),
    ImportedOption("logits_processors", ":", None,
                   "vllm/v1/sample/logits_processor/__init__.py _load_logitsprocs_by_fqcns"),
)  # fmt: skip


def import_name_problem(name: Any, separator: str) -> str | None:
    """Why vLLM's loader can never import ``name``: its split fails, or a part names no module
    or no attribute. None where it can try; whether the module is in the image is known only
    there, so a well-formed name of a missing module still fails at start."""
    if not isinstance(name, str):
        return None  # the value rule names a value of the wrong type
    module, found, attr = name.rpartition(".") if separator == "." else name.partition(":")
    example = "package.module.ClassName" if separator == "." else "package.module:ClassName"
    if not found or not module or not attr:
        return f"{name!r} is not an import path; vLLM expects {example!r}"
    if separator == ":" and ":" in attr:
        return f"{name!r} has more than one ':'; vLLM expects {example!r}"
    modules_named = all(part and not any(c.isspace() for c in part) for part in module.split("."))
    if not modules_named or not all(part.isidentifier() for part in attr.split(".")):
        return f"{name!r} is not a Python import path; vLLM expects {example!r}"
    return None


def imported_names(side: SideOptions) -> Iterator[Finding]:
    """Each option of IMPORTED: a name vLLM's loader cannot split or import fails the worker
    at start (``ValueError: not enough values to unpack`` for a name without its separator)."""
    for row in IMPORTED:
        value = side.options.get(row.option)
        if value is None or value == row.own:
            continue
        for name in value if isinstance(value, list) else [value]:
            problem = import_name_problem(name, row.separator)
            if problem:
                own = f" (or {row.own!r} for vLLM's own)" if row.own else ""
                yield side.finding(row.option, (
                    f"{problem}{own}; {VLLM} imports it when the worker starts ({row.source}), "
                    "from the image: the module must be in it"
                ))  # fmt: skip
                break


# --- the prefill/decode split ------------------------------------------------------------------

_OFFLOAD = (
    f"in {VLLM} kv_offloading_size turns on KV offloading, and VllmConfig."
    "_post_init_kv_transfer_config (vllm/config/vllm.py) then replaces the side's NixlConnector "
    "with the offloading connector (OffloadingConnector, or LMCacheMPConnector for lmcache) "
    "and its kv_role with kv_both: prefill would no longer hand its KV to decode over NIXL, "
    "and decode would recompute every prompt. Use serving.prefill.kv_offload_gib_per_gpu "
    "(GiB per GPU), which keeps NIXL and adds the CPU tier beside it (vLLM's MultiConnector)"
)
# Options that undo the KV connector path every side of this app runs (serving.kv_transfer).
# The offloading ones are every CacheConfig field VllmConfig._post_init_kv_transfer_config reads
# (engine_options.CONNECTOR_REPLACING; `make e2e` reads the method's source for the list).
BREAKS_KV_TRANSFER: dict[str, Callable[[Any], bool]] = {
    # Unset (None) leaves the connector alone; the backend alone does nothing, and is refused so
    # that a later size cannot silently take effect with it.
    "kv_offloading_size": lambda value: value is not None,
    "kv_offloading_backend": lambda value: True,
    "enable_return_routed_experts": lambda value: value is True,
}
_BREAKS_MESSAGE = {
    **dict.fromkeys(engine_options.CONNECTOR_REPLACING, _OFFLOAD),
    "enable_return_routed_experts": (
        f"{VLLM} refuses it with any KV connector (VllmConfig.__post_init__, "
        "vllm/config/vllm.py: 'incompatible with KV connectors (PD disaggregation, KV cache "
        "offload)'), and both sides run the NIXL connector; leave it unset"
    ),
}


def disaggregation(settings: Settings) -> list[Finding]:
    """Options that undo the P/D split on a side, and options the two sides must agree on
    (engine_options.SAME_ON_BOTH_SIDES: NIXL's handshake, prefill's rendering of the request)."""
    sides = {side.role: side for side in side_options(settings)}
    found = [
        side.finding(key, _BREAKS_MESSAGE[key])
        for side in sides.values()
        for key, breaks in BREAKS_KV_TRANSFER.items()
        if key in side.options and breaks(side.options[key])
    ]
    prefill, decode = sides["prefill"].options, sides["decode"]
    for key, reason in engine_options.SAME_ON_BOTH_SIDES.items():
        if key in prefill or key in decode.options:
            left = prefill.get(key, "<vLLM default>")
            right = decode.options.get(key, "<vLLM default>")
            if left != right:
                found.append(Finding(f"serving.decode.engine_options.{key}", (
                    f"prefill has {left!r}, decode {right!r}; the two sides must agree "
                    f"({reason}): set it in serving.engine_options to give both the same value"
                ), decode.given.get(key)))  # fmt: skip
    return _once(found)


# --- the side's hardware -----------------------------------------------------------------------

# vLLM 0.26 engine/arg_utils.py EngineArgs.get_batch_defaults, for Ray Serve LLM's usage context
# (UsageContext.OPENAI_API_SERVER, Ray 2.58 vllm_engine.py), computed where the side's GPU is
# visible: GPUs of at least 70 GiB other than A100 get the larger default.
LARGE_GPU_GIB = 70
DEFAULT_BATCHED_TOKENS = {"large": 8192, "other": 2048}
# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP, when ParallelConfig.
# use_batched_dp_moe (expert parallel over DP with these all2all backends).
BATCHED_DP_TOKENS = 256
BATCHED_DP_BACKENDS = ("deepep_low_latency", "nixl_ep")
FLASH_ATTN_FP8 = ("fp8", "fp8_e4m3")


def gpu_batched_tokens(gpu: GpuInstance) -> int:
    """vLLM's default max_num_batched_tokens on this GPU, before the options adjust it."""
    large = gpu.gpu_memory_gib >= LARGE_GPU_GIB and "a100" not in gpu.gpu_model.lower()
    return DEFAULT_BATCHED_TOKENS["large" if large else "other"]


def default_batched_tokens(side: Side, options: Mapping[str, Any], max_model_len: int) -> int:
    """What vLLM sets max_num_batched_tokens to when it is unset (EngineArgs.
    _set_default_max_num_seqs_and_batched_tokens_args)."""
    engine = side.engine
    if (
        engine.expert_parallel
        and side.data_parallel > 1
        and engine.all2all_backend in BATCHED_DP_BACKENDS
    ):
        tokens = BATCHED_DP_TOKENS
    else:
        tokens = gpu_batched_tokens(side.instance)
    if options.get("performance_mode") == "throughput":
        tokens *= 2
    if options.get("enable_chunked_prefill") is False:
        tokens = max(max_model_len, tokens)
    return tokens


def hardware(settings: Settings) -> list[Finding]:
    """Options the side's GPUs decide: vLLM's default batch size (by GPU memory) against an
    explicit max_num_seqs, and the FLASH_ATTN backend's fp8 KV cache (Hopper only)."""
    found = []
    for side in side_options(settings):
        view, options = settings.side(side.role), side.options
        gpu = view.instance
        (seqs,) = _ints(options, "max_num_seqs")
        if seqs is not None and "max_num_batched_tokens" not in options:
            tokens = default_batched_tokens(view, options, settings.serving.max_model_len)
            if seqs > tokens:
                found.append(side.finding("max_num_seqs", (
                    f"{seqs} exceeds the {tokens} tokens {VLLM} batches by default on a "
                    f"{gpu.name} ({gpu.gpu_model}, {gpu.gpu_memory_gib} GiB; EngineArgs."
                    "get_batch_defaults), and SchedulerConfig refuses max_num_batched_tokens "
                    f"below max_num_seqs: set max_num_batched_tokens >= {seqs}, or "
                    f"max_num_seqs <= {tokens}"
                )))  # fmt: skip
        key, backend = _attention_backend(options)
        cache = options.get("kv_cache_dtype")
        if backend == "FLASH_ATTN" and cache in FLASH_ATTN_FP8 and gpu.gpu_architecture != "Hopper":
            found.append(side.finding(key, (
                f"FLASH_ATTN takes an {cache} KV cache only on Hopper (vllm/v1/attention/backends/"
                f"flash_attn.py supports_kv_cache_dtype: FlashAttention 3, capability 9.0), and "
                f"gpu_nodes.{side.role} is {gpu.name} ({gpu.gpu_architecture}); {VLLM} refuses "
                "an explicit backend that cannot run (platforms/cuda.py get_attn_backend_cls): "
                f"leave {key} unset for vLLM to pick, or use kv_cache_dtype auto"
            )))  # fmt: skip
    return _once(found)


def _attention_backend(options: Mapping[str, Any]) -> tuple[str, str | None]:
    """The attention backend a side asks for and the option it is in: ``attention_backend``,
    or the ``backend`` of ``attention_config`` that it is vLLM 0.26's shorthand for
    (vllm/engine/arg_utils.py; the two together are refused by ``exclusive``). vLLM looks the
    name up in any case (config/attention.py validate_backend_before)."""
    for key, value in (
        ("attention_backend", options.get("attention_backend")),
        ("attention_config", engine_options.nested(options, "attention_config").get("backend")),
    ):
        if isinstance(value, str):
            return key, value.upper()
    return "attention_backend", None


# --- the loader --------------------------------------------------------------------------------


def loader(settings: Settings) -> list[Finding]:
    """With Ray 2.58 (the image's) a streaming load format hands vLLM the model id instead of
    the S3 path, and the engine fails to start (ray-project/ray#64978): weights from S3 come
    through Ray's mirror into the node-local cache instead."""
    if not settings.serving.model.s3_uri:
        return []
    found = []
    for side in side_options(settings):
        load_format = side.options.get("load_format")
        if isinstance(load_format, str) and load_format.startswith("runai_streamer"):
            found.append(side.finding("load_format", (
                f"{load_format!r} with serving.model.s3_uri fails at engine start under {RAY} "
                "(ray-project/ray#64978: vLLM gets the model id, not the S3 path); leave "
                "load_format unset"
            )))  # fmt: skip
    return _once(found)


# --- weight offload ----------------------------------------------------------------------------


def weight_offload(side: SideOptions) -> Iterator[Finding]:
    """vLLM 0.26 vllm/config/offload.py ``OffloadConfig.validate_offload_config``, run when the
    engine config is built: once layer-group offload is on (``offload_backend`` prefetch, or
    any ``offload_group_size`` above 0, whatever the backend) a group offloads at most its own
    layers, and at least one layer is prefetched ahead."""
    options = side.options
    group = engine_options.numeric_option(options, "offload_group_size")
    if options.get("offload_backend") != "prefetch" and group <= 0:
        return
    rule = f"{VLLM} requires offload_num_in_group <= offload_group_size (OffloadConfig."
    (in_group, step) = _ints({"offload_num_in_group": 1, "offload_prefetch_step": 1, **options},
                             "offload_num_in_group", "offload_prefetch_step")  # fmt: skip
    if in_group is not None and in_group > group and "offload_num_in_group" in options:
        yield side.finding("offload_num_in_group", (
            f"{in_group} is above offload_group_size {group:g}: each group of "
            f"offload_group_size layers offloads offload_num_in_group of them; {rule}"
            "validate_offload_config, vllm/config/offload.py)"
        ))  # fmt: skip
    elif in_group is not None and in_group > group:
        yield side.finding("offload_backend", (
            "'prefetch' offloads layers by groups and needs offload_group_size above 0 (the "
            f"layers per group; offload_num_in_group, default 1, of each are offloaded); {rule}"
            "validate_offload_config, vllm/config/offload.py)"
        ))  # fmt: skip
    if step is not None and step < 1:
        yield side.finding("offload_prefetch_step", (
            f"{step} prefetches no layer ahead; {VLLM} requires offload_prefetch_step >= 1 "
            "when layer-group offload is on (OffloadConfig.validate_offload_config)"
        ))  # fmt: skip


def ignored_offload(settings: Settings) -> list[Finding]:
    """The weight offload settings of the backend vLLM does not build: it warns and ignores
    them (vLLM 0.26 config/offload.py ``validate_offload_config``; model_executor/offloader/
    base.py ``create_offloader`` picks one). A UVA size the prefetch offloader ignores would
    still be added to the worker pod's memory if the app did not follow the same choice, so it
    is not (app_config/side.py ``weight_offload_gib_per_gpu``)."""
    found = []
    for side in side_options(settings):
        options = side.options
        chosen = engine_options.weight_offloader(options)
        if chosen == "prefetch" and engine_options.numeric_option(options, "cpu_offload_gb") > 0:
            found.append(side.finding("cpu_offload_gb", (
                f"{VLLM} ignores it: the options select layer-group offload (offload_backend "
                f"{options.get('offload_backend') or 'auto'!r} with offload_group_size "
                f"{engine_options.numeric_option(options, 'offload_group_size'):g}), and UVA "
                "offload's size is then unused and not added to the worker pod's memory. Remove "
                "it, or choose UVA with offload_backend: uva"
            )))  # fmt: skip
        if chosen == "uva" and engine_options.numeric_option(options, "offload_group_size") > 0:
            found.append(side.finding("offload_group_size", (
                f"{VLLM} ignores it: offload_backend is 'uva', so no layer group is offloaded. "
                "Remove it, or set offload_backend: prefetch"
            )))  # fmt: skip
    return _once(found)


# --- code from outside the image ---------------------------------------------------------------


def remote_code(settings: Settings) -> list[Finding]:
    """``trust_remote_code`` makes the engines import the Python files of the model repository:
    vLLM 0.26 passes it to transformers' ``AutoConfig.from_pretrained`` (and the tokenizer's),
    which imports the modules the repository's config names in ``auto_map``
    (vllm/transformers_utils/config.py ``get_config``). So code nobody reviewed for this
    deployment runs in every worker pod, with the GPU nodes' network reach and the pod's
    service account. A warning, not an error: a reviewed model needs it, and an
    acknowledgment with the reason records who reviewed it."""
    found = []
    model = settings.serving.model.id
    for side in side_options(settings):
        if side.options.get("trust_remote_code") is not True:
            continue
        pinned = side.options.get("code_revision") or side.options.get("revision")
        pin_advice = (
            f"the code is taken at revision {pinned!r}"
            if pinned
            else "no revision pins it (code_revision), so the repository's newest code is "
            "what a new pod runs"
        )
        found.append(side.finding("trust_remote_code", (
            f"the engines import and run the Python files of the model repository {model!r} "
            f"on every {side.role} node, with the worker pod's service account; {pin_advice}. "
            "Review that code, then acknowledge this warning with the reason, or leave "
            "trust_remote_code unset"
        )))  # fmt: skip
    return _once(found)


def _with_context(
    judge: Callable[[SideOptions, int], Iterable[Finding]],
) -> Callable[[Settings], list[Finding]]:
    """A per-side rule that also reads the max_model_len the app renders (serving)."""

    def check(settings: Settings) -> list[Finding]:
        max_model_len = settings.serving.max_model_len
        return _once(
            finding for side in side_options(settings) for finding in judge(side, max_model_len)
        )

    check.__doc__ = judge.__doc__
    return check


SERVING = frozenset({"serving"})
RULES = (
    Rule("engine-options", SERVING, _per_side(option_names)),
    Rule("engine-option-value", SERVING, _per_side(option_values)),
    Rule("engine-option-scheduler", SERVING, _with_context(scheduler_relations)),
    Rule("engine-option-exclusive", SERVING, _per_side(exclusive)),
    Rule("engine-option-relation", SERVING, _with_context(relations)),
    Rule("engine-option-import", SERVING, _per_side(imported_names)),
    Rule("engine-option-pd", SERVING, disaggregation),
    Rule("engine-option-hardware", frozenset({"serving", "gpu_nodes"}), hardware),
    Rule("engine-option-loader", SERVING, loader),
    Rule("engine-option-offload", SERVING, _per_side(weight_offload)),
    Rule("engine-option-remote-code", SERVING, remote_code, WARNING, stack="serving"),
    Rule("engine-option-offload-ignored", SERVING, ignored_offload, WARNING, stack="serving"),
)
