"""The rules layer (app_config/rules): each warning rule once, as a table (the configuration that
raises it -> its code and the setting it names), and the acknowledgment rules."""

from __future__ import annotations

import json
import os

import pytest

from app_config import ConfigError
from app_config.errors import Severity
from app_config.rules import evaluate, rules, warning_codes, warnings
from catalog import model_config_file
from tests.configurations import PROJECT_ROOT, settings_for

ACK_REASON = "weighed by the platform team for this trial deployment"
CACHE_WITH_DIGEST = {
    "serving.image_cache.enabled": "true",
    "serving.image_digest": "sha256:" + "a" * 64,
}
MIRROR = "serving.image_mirror.repository"


def _mirror(repository: str, **settings: bool) -> str:
    return json.dumps({"repository": repository, **settings})


# A mirror in another account (and region) than the deployment's, and one that is not ECR.
OTHER_ACCOUNT_MIRROR = _mirror("arn:aws:ecr:us-east-1:210987654321:repository/dlc/ray")
OTHER_REGISTRY_MIRROR = _mirror("registry.example.com:5000/mirror/deep-learning-containers/ray")

# (configuration, overrides, code, the setting the finding names)
WARNINGS = [
    ("default", {}, "on-demand-p-class-prefill", "gpu_nodes.prefill"),
    ("default", {}, "one-node-decode", "gpu_nodes.decode.scaling.min_size"),
    ("default", {}, "no-cluster-admin", "cluster.admin_principal_arns"),
    ("reserved-capacity", {}, "capacity-block-update-prefill", "gpu_nodes.prefill"),
    ("reserved-capacity", {}, "no-upgrade-room-prefill", "gpu_nodes.prefill.scaling.max_size"),
    ("reserved-capacity", {}, "registry-scanning-replaced", "serving.image_cache.scanning"),
    ("deepseek-v3-pd", {}, "one-group-decode", "gpu_nodes.decode.scaling.min_size"),
    (
        "qwen3-235b-a22b-pd",
        {
            "gpu_nodes.decode.capacity": '{"type": "capacity_reservation", "reservation_id": '
            '"cr-0a1b2c3d4e5f60718", "reserved_instances": 4}'
        },
        "dp-group-not-co-located-decode",
        "gpu_nodes.decode.capacity.placement_group",
    ),
    (
        "default",
        {"serving.kv_transfer.backend": "UCX"},
        "ucx-on-efa",
        "serving.kv_transfer.backend",
    ),
    ("default", CACHE_WITH_DIGEST, "pinned-digest-through-cache", "serving.image_digest"),
    (
        "default",
        {
            "serving.image_mirror": _mirror(
                "111122223333.dkr.ecr.us-west-2.amazonaws.com/ecr-public/deep-learning-containers/ray",
                pull_through_cache=True,
            ),
            "serving.image_digest": "sha256:" + "a" * 64,
        },
        "pinned-digest-through-cache",
        "serving.image_digest",
    ),
    (
        "default",
        {"serving.image_mirror": OTHER_ACCOUNT_MIRROR},
        "image-mirror-other-region",
        MIRROR,
    ),
    (
        "default",
        {"account": "111122223333", "serving.image_mirror": OTHER_ACCOUNT_MIRROR},
        "image-mirror-other-account",
        MIRROR,
    ),
    ("default", {"serving.image_mirror": OTHER_REGISTRY_MIRROR}, "image-mirror-not-ecr", MIRROR),
    (
        "default",
        {"serving.image_mirror": _mirror("123456789012.dkr.ecr.us-west-2.amazonaws.com/ray")},
        "documentation-placeholder",
        MIRROR,
    ),
    ("default", {"network.vpc_cidr": "172.17.0.0/16"}, "vpc-cidr-range", "network.vpc_cidr"),
    ("default", {"network.vpc_cidr": "8.8.0.0/16"}, "vpc-cidr-range", "network.vpc_cidr"),
    (
        "default",
        {"network.private_subnet_mask": "23"},
        "subnet-addresses",
        "network.private_subnet_mask",
    ),
    ("default", {"serving.model.id": "qwen/qwen3-32b"}, "model-id-case", "serving.model.id"),
    (
        "existing-cluster",
        {
            "cluster.existing.addons.nvidia_device_plugin": '{"source": "installed", '
            '"version": "0.19.1"}'
        },
        "existing-cluster-nvidia-mofed",
        "cluster.existing.addons.nvidia_device_plugin.version",
    ),
    ("default", {"account": "123456789012"}, "documentation-placeholder", "account"),
    ("public-endpoint", {}, "model-unchecked", "serving.model.id"),
    (
        "default",
        {"serving.scaling.gpu_budget": "16"},
        "scaling-unused",
        "serving.scaling.gpu_budget",
    ),
    (
        "default",
        {
            "serving.scaling.policy": "latency",
            "serving.scaling.ttft": '{"value_ms": 800}',
            "serving.scaling.itl": '{"value_ms": 60}',
        },
        "latency-nothing-to-scale",
        "serving.scaling.policy",
    ),
    (
        "default",
        {
            "serving.decode.max_replicas": "2",
            "serving.scaling.policy": "latency",
            "serving.scaling.ttft": '{"value_ms": 800}',
            "serving.scaling.itl": '{"value_ms": 20}',
        },
        "itl-stream-batching",
        "serving.scaling.itl.value_ms",
    ),
    (
        "default",
        {
            "serving.decode.max_replicas": "2",
            "serving.scaling.policy": "latency",
            "serving.scaling.ttft": '{"value_ms": 800}',
            "serving.scaling.itl": '{"value_ms": 60}',
            "serving.scaling.gpu_budget": "24",
        },
        "gpu-budget-unused",
        "serving.scaling.gpu_budget",
    ),
    # Qwen3-8B (~15 GiB) leaves ~4 GiB of 48 GiB x 0.4: fewer KV tokens than max_model_len
    (
        "quickstart",
        {"serving.prefill.gpu_memory_utilization": "0.4"},
        "model-kv-room",
        "serving.prefill.gpu_memory_utilization",
    ),
    (
        "default",
        {"cluster.system_nodes.scaling": '{"min_size": 1, "desired_size": 1, "max_size": 1}'},
        "node-fit-headroom",
        "cluster.system_nodes.scaling.max_size",
    ),
    (
        "default",
        {"cluster.system_nodes.instance_type": "t3.xlarge"},
        "node-fit-unchecked",
        "cluster.system_nodes.instance_type",
    ),
    (
        "default",
        {"serving.engine_options": '{"trust_remote_code": true}'},
        "engine-option-remote-code",
        "serving.engine_options.trust_remote_code",
    ),
    (
        "default",
        {"serving.engine_options": '{"offload_group_size": 8, "cpu_offload_gb": 4}'},
        "engine-option-offload-ignored",
        "serving.engine_options.cpu_offload_gb",
    ),
    # Qwen3-8B's config.json has no quantization_config: vLLM reads awq's from a file beside it
    (
        "quickstart",
        {"serving.decode.engine_options": '{"quantization": "awq"}'},
        "model-quantization-file-decode",
        "serving.decode.engine_options.quantization",
    ),
    ("quickstart", {}, "documentation-placeholder", "cluster.admin_principal_arns[0]"),
    (
        "capacity-block",
        {},
        "documentation-placeholder",
        "gpu_nodes.prefill.capacity.reservation_id",
    ),
]


@pytest.mark.parametrize(("configuration", "overrides", "code", "path"), WARNINGS)
def test_each_warning_rule_names_its_setting(
    configuration: str, overrides: dict[str, str], code: str, path: str
) -> None:
    found = warnings(evaluate(settings_for(configuration, **overrides)))
    assert (path, code) in [(finding.path, finding.code) for finding in found]


def test_every_warning_rule_has_a_row() -> None:
    tested = {code for _, _, code, _ in WARNINGS}
    families = {code.rsplit("-", 1)[0] for code in tested} | tested
    missing = [r.code for r in rules() if r.severity is Severity.WARNING and r.code not in families]
    assert missing == ["unused-acknowledgment"]  # its own tests below


def test_a_real_account_and_real_ids_are_no_placeholders() -> None:
    settings = settings_for(
        "reserved-capacity",
        account="210987654321",
        **{
            "cluster.admin_principal_arns": '["arn:aws:iam::210987654321:role/Admin"]',
            "serving.endpoint.client_security_group_ids": '["sg-0a1b2c3d4e5f60718"]',
            "gpu_nodes.decode.capacity.reservation_id": "cr-0d4c3b2a1f0e98765",
        },
    )
    assert "documentation-placeholder" not in [f.code for f in warnings(evaluate(settings))]


def _acknowledging(*codes: str, reason: str = ACK_REASON) -> dict[str, str]:
    return {
        "acknowledged_warnings": json.dumps([{"code": code, "reason": reason} for code in codes])
    }


def test_an_acknowledged_warning_is_still_found_and_its_acknowledgment_is_used() -> None:
    settings = settings_for("default", **_acknowledging("one-node-prefill"))
    codes = [finding.code for finding in warnings(evaluate(settings))]
    assert "one-node-prefill" in codes
    assert "unused-acknowledgment" not in codes


def test_an_acknowledgment_of_a_warning_not_raised_is_a_warning() -> None:
    settings = settings_for("default", **_acknowledging("ucx-on-efa"))
    (stale,) = [f for f in warnings(evaluate(settings)) if f.code == "unused-acknowledgment"]
    assert stale.path == "acknowledged_warnings[0]"
    assert "ucx-on-efa" in stale.message


@pytest.mark.parametrize(
    ("acknowledgment", "path", "fragment"),
    [
        (_acknowledging("one-node-prefil"), "acknowledged_warnings[0].code", "one-node-prefill"),
        (
            _acknowledging("documentation-placeholder"),
            "acknowledged_warnings[0].code",
            "cannot be acknowledged",
        ),
        (_acknowledging("one-node-prefill", reason="ok"), "acknowledged_warnings.0.reason", "20"),
        (_acknowledging("Pd-LLM:one-node"), "acknowledged_warnings.0.code", "warning code"),
        (
            _acknowledging("one-node-prefill", "one-node-decode", "one-node-prefill"),
            "acknowledged_warnings[2].code",
            "acknowledges one-node-prefill again (acknowledged_warnings[0] does already)",
        ),
    ],
)
def test_a_bad_acknowledgment_is_an_error_naming_it(
    acknowledgment: dict[str, str], path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **acknowledgment)
    messages = [
        str(p)
        for p in raised.value.problems
        if p.path.replace("[0]", ".0") == path.replace("[0]", ".0")
    ]
    assert any(fragment in message for message in messages), raised.value.problems


def test_warning_codes_are_unique_and_stable_words() -> None:
    codes = [code for rule in rules() for code in rule.codes]
    assert len(codes) == len(set(codes))
    assert all(code.replace("-", "").isalnum() and code.islower() for code in codes)
    assert set(warning_codes()) <= set(codes)


def _model_config(tmp_path, **fields) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "test", **fields}))
    return str(path)


@pytest.mark.parametrize(
    ("fields", "max_model_len", "refused"),
    [
        ({"max_position_embeddings": 40960}, 40960, False),
        ({"max_position_embeddings": 40960}, 40961, True),
        # yarn scales its original length (vLLM 0.26 _get_and_verify_max_len)
        (
            {
                "max_position_embeddings": 163840,
                "rope_scaling": {
                    "type": "yarn",
                    "factor": 40,
                    "original_max_position_embeddings": 4096,
                },
            },
            163840,
            False,
        ),
        # llama3 rope is not scaled again
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {"rope_type": "llama3", "factor": 8},
            },
            131073,
            True,
        ),
        # the smallest length key decides
        ({"max_position_embeddings": 65536, "seq_length": 8192}, 16384, True),
    ],
)
def test_the_context_length_is_judged_by_the_models_config(
    tmp_path, fields: dict, max_model_len: int, refused: bool
) -> None:
    overrides = {
        "serving.model.config_file": _model_config(tmp_path, **fields),
        "serving.max_model_len": str(max_model_len),
    }
    if not refused:
        settings_for("default", **overrides)
        return
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **overrides)
    (problem,) = [p for p in raised.value.problems if p.path == "serving.max_model_len"]
    assert problem.code == "model-context-length"


QWEN_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


# (hf_overrides on both sides, max_model_len, the code refused with or None): the bundled
# Qwen3-32B config.json (max_position_embeddings 40960) as the engines read it with them.
HF_OVERRIDES = [
    ({"rope_scaling": QWEN_YARN}, 131072, None),  # Qwen's documented YaRN: 32768 x 4
    ({"rope_scaling": QWEN_YARN}, 131073, "model-context-length"),
    ({"rope_parameters": QWEN_YARN}, 131072, None),  # transformers 5's name of the same
    ({"max_position_embeddings": 4096}, 32768, "model-context-length"),
    ({"max_position_embeddings": 65536}, 65536, None),
    ({"rope_scaling": {"rope_type": "yarn", "factor": "four"}}, 32768, "model-hf-overrides"),
    ({"num_attention_heads": 0}, 32768, "model-hf-overrides"),
    ({}, 40961, "model-context-length"),
    # vLLM reads a rope_parameters mapping as given: no rope_type, or yarn without its
    # original length, stops the engine (KeyError in _get_and_verify_max_len).
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, 32768, "model-hf-overrides"),
    ({"rope_parameters": {"factor": 4.0}}, 32768, "model-hf-overrides"),
    # A null factor is 1, and yarn's original length is the length all the same.
    ({"rope_scaling": {**QWEN_YARN, "factor": None}}, 32768, None),
    ({"rope_scaling": {**QWEN_YARN, "factor": None}}, 32769, "model-context-length"),
]


@pytest.mark.parametrize(("overrides", "max_model_len", "code"), HF_OVERRIDES)
def test_the_model_rules_read_the_config_as_the_engines_do_with_hf_overrides(
    overrides: dict, max_model_len: int, code: str | None
) -> None:
    settings = {
        "serving.model.id": "Qwen/Qwen3-32B",
        "serving.max_model_len": str(max_model_len),
        "serving.engine_options": json.dumps({"hf_overrides": overrides} if overrides else {}),
    }
    if code is None:
        settings_for("default", **settings)
        return
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **settings)
    (problem,) = [p for p in raised.value.problems if p.code == code]
    if code == "model-context-length" and overrides:
        assert "engine_options.hf_overrides" in problem.message, problem.message
    if code == "model-hf-overrides":
        assert problem.path.endswith("engine_options.hf_overrides"), problem.path


def test_overrides_on_a_config_transformers_nests_when_built_are_not_judged(tmp_path) -> None:
    """Qwen2.5-VL's config.json is flat beside its vision_config; transformers 5 builds the
    language model's config from the top level, where a flat override no longer reaches it:
    the rules say they did not check instead of reading the top level."""
    path = tmp_path / "config.json"
    config = {"model_type": "qwen2_5_vl", "max_position_embeddings": 128000,
              "vision_config": {"model_type": "qwen2_5_vl", "depth": 32}}  # fmt: skip
    path.write_text(json.dumps(config))
    settings = settings_for(
        "default",
        **{
            "serving.model.config_file": str(path),
            "serving.engine_options": json.dumps({"hf_overrides": {"max_position_embeddings": 4}}),
        },
    )
    found = [(f.code, f.path) for f in evaluate(settings)]
    assert ("model-unchecked", "serving.model.id") in found
    assert not [code for code, _ in found if code == "model-context-length"]


def test_hf_overrides_merge_as_vllm_applies_them() -> None:
    """vLLM 0.26 ModelConfig: a nested config is updated key by key, any other mapping
    replaced, a plain value set; rope_scaling and rope_parameters are one attribute."""
    config = {
        "model_type": "qwen3_vl",
        "rope_scaling": {"rope_type": "default", "mrope_section": [1, 2]},
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "text_config": {"hidden_size": 8, "rope_parameters": {"rope_type": "default"}},
    }
    merged = model_config_file.with_hf_overrides(
        config,
        {
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0},
            "quantization_config": {"quant_method": "fp8"},
            "text_config": {"rope_scaling": {"factor": 4.0}, "num_hidden_layers": 2},
            "max_position_embeddings": 8192,
        },
    )
    assert (
        merged["rope_scaling"] == merged["rope_parameters"] == {"rope_type": "yarn", "factor": 2.0}
    )
    assert merged["quantization_config"] == {"quant_method": "fp8"}
    text = merged["text_config"]
    assert (
        text["rope_parameters"] == text["rope_scaling"] == {"rope_type": "default", "factor": 4.0}
    )
    assert (text["hidden_size"], text["num_hidden_layers"]) == (8, 2)
    assert merged["max_position_embeddings"] == 8192
    assert config["text_config"] == {"hidden_size": 8, "rope_parameters": {"rope_type": "default"}}


# (config.json text, what the error says): files no model has, by the class of mistake; each is
# refused where it is read (catalog/model_config_file.py), never inside a rule.
UNUSABLE_MODEL_CONFIGS = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"max_position_embeddings": NaN}', "not valid JSON (NaN is not a number"),
    ("[" * 100_000, "nested too deeply"),
    ('{"text_config": "qwen3"}', "text_config is not a JSON object"),
    ('{"text_config": [1]}', "text_config is not a JSON object"),
    ('{"num_attention_heads": 0}', "num_attention_heads = 0; expected a whole number"),
    ('{"num_attention_heads": "64"}', "num_attention_heads = 64; expected a whole number"),
    ('{"num_key_value_heads": -8}', "num_key_value_heads = -8; expected a whole number"),
    ('{"hidden_size": true}', "hidden_size = True; expected a whole number"),
    ('{"text_config": {"num_hidden_layers": 0}}', "text_config.num_hidden_layers = 0"),
    ('{"max_position_embeddings": "40960"}', "max_position_embeddings = 40960; expected a"),
    ('{"seq_length": 0}', "seq_length = 0; expected a positive number"),
    ('{"rope_scaling": "yarn"}', "rope_scaling is not a JSON object"),
    (
        '{"max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": '
        '"four"}}',
        "rope_scaling.factor = four; expected a positive number",
    ),
    ('{"rope_parameters": {"factor": -4}}', "rope_parameters.factor = -4; expected a positive"),
    (
        '{"rope_scaling": {"factor": 4, "original_max_position_embeddings": 0}}',
        "rope_scaling.original_max_position_embeddings = 0",
    ),
]


@pytest.mark.parametrize(("content", "says"), UNUSABLE_MODEL_CONFIGS)
def test_an_unusable_model_config_is_an_error_naming_the_setting(tmp_path, content, says) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **{"serving.model.config_file": str(path)})
    (problem,) = raised.value.problems
    assert problem.path == "serving.model.config_file"
    assert says in problem.message, problem.message


BUNDLED_MODEL_CONFIGS = sorted((PROJECT_ROOT / "catalog" / "model_configs").glob("*.json"))


@pytest.mark.parametrize("path", BUNDLED_MODEL_CONFIGS, ids=lambda path: path.stem)
def test_every_bundled_model_config_passes_the_same_reading(path) -> None:
    assert model_config_file.read_file(path)


def test_a_model_config_that_is_not_a_regular_file_is_not_read(tmp_path) -> None:
    """A FIFO (or /dev/zero) named by mistake would be read for ever: refused unopened."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    for path, says in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file")):
        with pytest.raises(ConfigError) as raised:
            settings_for("default", **{"serving.model.config_file": str(path)})
        (problem,) = raised.value.problems
        assert problem.path == "serving.model.config_file"
        assert says in problem.message, problem.message


def test_a_null_text_config_is_the_top_level_as_transformers_reads_it(tmp_path) -> None:
    fields = {"text_config": None, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **{"serving.model.config_file": str(path)})
    assert [p.code for p in raised.value.problems] == ["model-context-length"]


# (configuration, overrides, code, the setting the finding names): the model's error rules that
# read its weights and quantization, by the sizing `pdctl plan` uses
# (catalog/model_architecture.py gpu_memory); its KV-room warning is a row of WARNINGS.
MODEL_MEMORY = [
    # Qwen3-32B in bfloat16 is ~61 GiB; one L40S offers 48 GiB x 0.9
    (
        "quickstart",
        {"serving.model.id": "Qwen/Qwen3-32B"},
        "model-weights-per-gpu",
        "serving.prefill.tensor_parallel_size",
    ),
    # DeepSeek-V3's checkpoint is fp8 (its quantization_config); vLLM refuses gptq over it
    (
        "deepseek-v3-pd",
        {"serving.decode.engine_options": '{"quantization": "gptq"}'},
        "model-quantization",
        "serving.decode.engine_options.quantization",
    ),
    # Qwen3-8B is unquantized; vLLM builds these methods only from a checkpoint's settings
    (
        "quickstart",
        {"serving.prefill.engine_options": '{"quantization": "compressed-tensors"}'},
        "model-quantization-unbuildable",
        "serving.prefill.engine_options.quantization",
    ),
    (
        "quickstart",
        {"serving.decode.engine_options": '{"quantization": "online"}'},
        "model-quantization-unbuildable",
        "serving.decode.engine_options.quantization",
    ),
]


@pytest.mark.parametrize(("configuration", "overrides", "code", "path"), MODEL_MEMORY)
def test_the_models_weights_and_quantization_are_judged_by_its_config(
    configuration: str, overrides: dict[str, str], code: str, path: str
) -> None:
    try:
        found = evaluate(settings_for(configuration, **overrides))
    except ConfigError as error:
        found = error.problems
    assert (path, code) in [(finding.path, finding.code) for finding in found]


@pytest.mark.parametrize(
    "options",
    [
        {"quantization": "fp8"},  # quantizes as the weights load
        {"quantization": "bitsandbytes"},  # in flight
        {"quantization": "fp8_per_tensor"},  # an online shorthand
        {"quantization": "online", "quantization_config": {"linear": {"weight": "fp8"}}},
    ],
)
def test_an_unquantized_checkpoint_takes_the_methods_vllm_builds_without_it(options) -> None:
    findings = evaluate(
        settings_for("quickstart", **{"serving.decode.engine_options": json.dumps(options)})
    )
    assert [f.code for f in findings if f.code.startswith("model-quantization")] == []


def test_the_checkpoints_own_quantization_or_its_override_is_accepted() -> None:
    for method in ("fp8", "deepseek_v4_fp8"):
        options = {"serving.decode.engine_options": json.dumps({"quantization": method})}
        findings = evaluate(settings_for("deepseek-v3-pd", **options))
        assert [f for f in findings if f.code == "model-quantization"] == []
