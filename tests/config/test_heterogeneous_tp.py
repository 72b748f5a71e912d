"""Different tensor parallelism on prefill and decode, against vLLM 0.26's NixlConnector rules
(vllm v0.26.0 distributed/kv_transfer/kv_connector/utils.py TpKVTopology.tp_ratio and
v1/nixl/base_worker.py _validate_remote_agent_handshake):

- the larger TP must be a multiple of the smaller (tp_ratio asserts it at the handshake);
- a TP ratio other than 1 splits KV heads, which needs the HND cache layout: NixlConnector
  asks for HND itself for non-MLA models (v1/nixl/connector.py get_required_kvcache_layout);
- prefill TP above decode TP is refused when prefill replicates KV heads (prefill TP greater than
  the model's KV heads): a property of the model that synth cannot read (README says so).
"""

from __future__ import annotations

import pytest

from app_config import ConfigError
from catalog.instances import CATALOG
from tests.configurations import PROJECT_ROOT, settings_for


def vllm_tp_ratio(local_tp: int, remote_tp: int) -> int:
    """TpKVTopology.tp_ratio, vLLM 0.26: positive when local >= remote, negative otherwise;
    AssertionError when neither divides the other."""
    if local_tp >= remote_tp:
        assert local_tp % remote_tp == 0
        return local_tp // remote_tp
    assert remote_tp % local_tp == 0
    return -(remote_tp // local_tp)


LAYOUT_ONLY_MODEL = PROJECT_ROOT / "tests/data/model_configs/moe-layout-only.json"


def accepted_tp(instance_type: str, tp: int) -> bool:
    overrides = {
        "gpu_nodes.prefill.instance_type": instance_type,
        "gpu_nodes.decode.instance_type": instance_type,
        "serving.prefill.tensor_parallel_size": str(tp),
        # A config without sizes: TP is judged by the node, not by the model's weights.
        "serving.model.config_file": str(LAYOUT_ONLY_MODEL),
    }
    try:
        settings_for("default", **overrides)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_pair_of_accepted_tp_sizes_passes_the_nixl_handshake(instance_type) -> None:
    """The configuration accepts only TP sizes that divide a node's GPUs; any two of those must
    pass vLLM's ratio rule both ways (decode pulls, so decode is the local side)."""
    gpus = CATALOG[instance_type].gpus
    accepted = [tp for tp in range(1, gpus + 1) if accepted_tp(instance_type, tp)]
    assert accepted, instance_type
    for prefill_tp in accepted:
        for decode_tp in accepted:
            vllm_tp_ratio(decode_tp, prefill_tp)  # raises when the handshake would


def test_the_rule_model_refuses_what_vllm_refuses() -> None:
    with pytest.raises(AssertionError):
        vllm_tp_ratio(4, 6)
    assert vllm_tp_ratio(4, 8) == -2
    assert vllm_tp_ratio(8, 2) == 4


def test_different_tp_per_side_synthesizes() -> None:
    settings = settings_for("reserved-capacity")
    assert settings.replica_gpus("prefill")[0] != settings.replica_gpus("decode")[0]
