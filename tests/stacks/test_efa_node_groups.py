"""EFA GPU node groups: every rail attached, placement or reservation, labels and taints."""

from __future__ import annotations

import json
import re

import pytest

from app_config.model import Capacity, GpuNodeGroup
from app_config.node_labels import GPU_ROLES, ROLE_LABEL
from catalog.efa_layout import efa_interface_layout
from catalog.instances import CATALOG
from nag.serving_checks import EFA_SECURITY_GROUP_METADATA
from tests.conftest import Synthesized
from tools.efa_coverage import (
    CLUSTER_SECURITY_GROUP,
    EFA_SECURITY_GROUP,
    PLACEMENT_GROUP,
    efa_rails,
    render_efa_node_groups,
)

CAPACITIES = {
    "on_demand": Capacity(),
    "capacity_reservation": Capacity(
        type="capacity_reservation", reservation_id="cr-0123456789abcdef0", reserved_instances=2
    ),
    "capacity_block": Capacity(
        type="capacity_block", reservation_id="cr-0fedcba9876543210", reserved_instances=2
    ),
    "capacity_reservation_in_group": Capacity(
        type="capacity_reservation",
        reservation_id="cr-0123456789abcdef0",
        reserved_instances=2,
        placement_group="llm-serving-decode",
    ),
}


Case = tuple[str, str]  # (instance type, capacity kind)
CASES: list[Case] = [(name, "on_demand") for name in CATALOG] + [
    ("p5.48xlarge", "capacity_reservation"),
    ("p5.48xlarge", "capacity_block"),
    ("p5.48xlarge", "capacity_reservation_in_group"),
]
TAGS = {"team": "ml-platform"}


@pytest.fixture(scope="module")
def rendered() -> dict[Case, tuple[dict, dict]]:
    """Every catalog type on demand, plus p5 on each kind of reservation: one synth."""
    groups = {
        case: GpuNodeGroup(instance_type=case[0], capacity=CAPACITIES[case[1]]) for case in CASES
    }
    return render_efa_node_groups(groups, tags=TAGS)


@pytest.mark.parametrize("instance_type", list(CATALOG))
def test_launch_template_attaches_every_efa_rail(rendered: dict, instance_type: str) -> None:
    data, _ = rendered[(instance_type, "on_demand")]
    interfaces = data["NetworkInterfaces"]
    expected = [
        (slot.network_card_index, slot.device_index, slot.interface_type)
        for slot in efa_interface_layout(CATALOG[instance_type])
    ]
    assert [
        (i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces
    ] == expected
    efa_cards = sorted(
        i["NetworkCardIndex"] for i in interfaces if i["InterfaceType"] != "interface"
    )
    assert efa_cards == list(range(CATALOG[instance_type].network_cards))  # each card exactly once


@pytest.mark.parametrize("instance_type", list(CATALOG))
def test_every_interface_carries_both_groups_and_no_subnet(
    rendered: dict, instance_type: str
) -> None:
    data, _ = rendered[(instance_type, "on_demand")]
    for interface in data["NetworkInterfaces"]:
        assert interface["Groups"] == [CLUSTER_SECURITY_GROUP, EFA_SECURITY_GROUP]
        assert "SubnetId" not in interface
    assert "SecurityGroupIds" not in data
    assert "SubnetId" not in json.dumps(data)


@pytest.mark.parametrize("instance_type", list(CATALOG))
def test_gpu_ami_instance_type_and_imdsv2(rendered: dict, instance_type: str) -> None:
    data, nodegroup = rendered[(instance_type, "on_demand")]
    assert nodegroup["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert "InstanceTypes" not in nodegroup  # the type lives in the launch template
    assert data["InstanceType"] == instance_type
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1


@pytest.mark.parametrize("instance_type", list(CATALOG))
def test_root_volume_is_encrypted_gp3_and_nvme_is_raided(
    rendered: dict, instance_type: str
) -> None:
    data, _ = rendered[(instance_type, "on_demand")]
    (root,) = data["BlockDeviceMappings"]
    assert root["Ebs"]["Encrypted"] is True
    assert root["Ebs"]["VolumeType"] == "gp3"
    assert root["Ebs"]["VolumeSize"] >= 100
    assert "strategy: RAID0" in data["UserData"]["Fn::Base64"]
    assert "Content-Type: application/node.eks.aws" in data["UserData"]["Fn::Base64"]


def test_on_demand_uses_the_cluster_placement_group(rendered: dict) -> None:
    data, nodegroup = rendered[("p5.48xlarge", "on_demand")]
    assert data["Placement"] == {"GroupName": PLACEMENT_GROUP}
    assert nodegroup["CapacityType"] == "ON_DEMAND"
    assert "CapacityReservationSpecification" not in data
    assert "InstanceMarketOptions" not in data


def test_capacity_reservation_targets_it_without_placement_group(rendered: dict) -> None:
    data, nodegroup = rendered[("p5.48xlarge", "capacity_reservation")]
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": CAPACITIES["capacity_reservation"].reservation_id}
    assert nodegroup["CapacityType"] == "ON_DEMAND"
    assert "Placement" not in data
    assert "InstanceMarketOptions" not in data


def test_a_reservation_made_in_a_cluster_placement_group_launches_into_it(rendered: dict) -> None:
    data, _ = rendered[("p5.48xlarge", "capacity_reservation_in_group")]
    capacity = CAPACITIES["capacity_reservation_in_group"]
    assert data["Placement"] == {"GroupName": capacity.placement_group}
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": capacity.reservation_id}


@pytest.mark.parametrize("kind", ["on_demand", "capacity_block"])
def test_only_a_reservation_names_its_placement_group(kind: str) -> None:
    extra = (
        {}
        if kind == "on_demand"
        else {"reservation_id": "cr-0123456789abcdef0", "reserved_instances": 2}
    )
    with pytest.raises(ValueError, match="remove placement_group"):
        Capacity(type=kind, placement_group="pg", **extra)


def test_capacity_block_uses_the_capacity_block_market(rendered: dict) -> None:
    data, nodegroup = rendered[("p5.48xlarge", "capacity_block")]
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": CAPACITIES["capacity_block"].reservation_id}
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert nodegroup["CapacityType"] == "CAPACITY_BLOCK"
    assert "Placement" not in data


def _gpu_nodegroups(synthesized: Synthesized) -> dict[str, dict]:
    groups = synthesized.resources("gpu-nodes", "AWS::EKS::Nodegroup").values()
    return {
        g["Properties"]["Labels"][ROLE_LABEL]: g["Properties"]
        for g in groups
        if g["Properties"]["Labels"][ROLE_LABEL] in GPU_ROLES
    }


@pytest.mark.parametrize("configuration", ["default", "reserved-capacity"])
def test_prefill_and_decode_share_the_gpu_zone_subnet(synthesize, configuration: str) -> None:
    synthesized = synthesize(configuration)
    groups = _gpu_nodegroups(synthesized)
    assert groups["prefill"]["Subnets"] == groups["decode"]["Subnets"]
    (subnet_ref,) = groups["prefill"]["Subnets"]
    gpu_zone = synthesized.settings.network.gpu_availability_zone
    exports = {
        output["Export"]["Name"]: output["Value"]["Ref"]
        for output in synthesized.templates["network"]["Outputs"].values()
        if "Export" in output
    }
    subnet = synthesized.templates["network"]["Resources"][exports[subnet_ref["Fn::ImportValue"]]]
    assert gpu_zone in (
        subnet["Properties"].get("AvailabilityZoneId"),
        subnet["Properties"].get("AvailabilityZone"),
    )


@pytest.mark.parametrize("configuration", ["default", "reserved-capacity"])
def test_labels_and_taints_are_the_configured_placement(synthesize, configuration: str) -> None:
    synthesized = synthesize(configuration)
    for role, group in synthesized.settings.gpu_nodes.groups().items():
        placement = group.placement(role)
        node_group = _gpu_nodegroups(synthesized)[role]
        assert node_group["Labels"] == placement.labels
        rendered = {(t["Key"], t["Value"], t["Effect"]) for t in node_group["Taints"]}
        # Kubernetes spells NoSchedule, EKS's API NO_SCHEDULE.
        expected = {
            (t.key, t.value, re.sub(r"(?<!^)([A-Z])", r"_\1", t.effect).upper())
            for t in placement.taints
        }
        assert rendered == expected


def test_gpu_node_groups_replace_one_node_at_a_time_and_self_repair(
    default_app: Synthesized,
) -> None:
    for group in _gpu_nodegroups(default_app).values():
        # On demand: EKS's default update, new node first (see the reserved-capacity test).
        assert group["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "DEFAULT"}
        assert group["ForceUpdateEnabled"] is False  # the disruption budgets hold
        assert group["Version"] == default_app.settings.cluster.kubernetes_version
        # One GPU node repaired at a time, so that a side is never left without nodes.
        assert group["NodeRepairConfig"] == {"Enabled": True, "MaxParallelNodesRepairedCount": 1}
        assert "RemoteAccess" not in group


def test_placement_group_exists_only_for_on_demand_capacity(
    default_app: Synthesized, reserved_app: Synthesized
) -> None:
    (group,) = default_app.resources("gpu-nodes", "AWS::EC2::PlacementGroup").values()
    assert group["Properties"]["Strategy"] == "cluster"
    assert reserved_app.resources("gpu-nodes", "AWS::EC2::PlacementGroup") == {}


def test_efa_security_group_admits_only_itself(default_app: Synthesized) -> None:
    resources = default_app.templates["gpu-nodes"]["Resources"]
    (efa_id,) = [
        lid
        for lid, r in resources.items()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        and EFA_SECURITY_GROUP_METADATA in r.get("Metadata", {})
    ]
    self_ref = {"Fn::GetAtt": [efa_id, "GroupId"]}
    rules = [r["Properties"] for r in resources.values()
             if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
             and r["Properties"]["GroupId"] == self_ref]  # fmt: skip
    assert len(rules) == 2
    for rule in rules:
        peer = rule.get("SourceSecurityGroupId") or rule.get("DestinationSecurityGroupId")
        assert peer == self_ref
        assert rule["IpProtocol"] == "-1"
    assert "0.0.0.0/0" not in json.dumps(resources[efa_id])


def test_configured_tags_reach_what_the_launch_template_launches(rendered: dict) -> None:
    data, _ = rendered[("p5.48xlarge", "on_demand")]
    tagged = {spec["ResourceType"]: spec["Tags"] for spec in data["TagSpecifications"]}
    assert set(tagged) == {"instance", "volume", "network-interface"}
    expected = [{"Key": key, "Value": value} for key, value in TAGS.items()]
    assert all(tags == expected for tags in tagged.values())


@pytest.mark.parametrize("instance_type", list(CATALOG))
def test_every_efa_rail_of_the_instance_is_attached(rendered: dict, instance_type: str) -> None:
    """The figure `make bench` prints, measured on the same rendered templates."""
    data, _ = rendered[(instance_type, "on_demand")]
    assert efa_rails(data) / CATALOG[instance_type].network_cards == 1.0


def instances_an_update_needs(group: dict, zones: int = 1) -> int:
    """Instances the node group runs at once while EKS updates it (EKS user guide, "Understand
    each phase of node updates"): DEFAULT first raises desired by the larger of twice the zones
    and maxUnavailable, MINIMAL terminates before it launches and never exceeds desired."""
    desired = group["ScalingConfig"]["DesiredSize"]
    update = group["UpdateConfig"]
    if update.get("UpdateStrategy", "DEFAULT") == "MINIMAL":
        return desired
    return desired + max(2 * zones, update["MaxUnavailable"])


def test_reserved_node_groups_can_be_updated_within_their_reservation(
    reserved_app: Synthesized,
) -> None:
    """A reservation or Capacity Block sized to the node count has no spare instance: EKS's
    default update would ask for two more and every later update of the group would fail."""
    settings = reserved_app.settings
    for role, group in _gpu_nodegroups(reserved_app).items():
        reserved = settings.gpu_nodes.groups()[role].scaling.desired_size
        assert instances_an_update_needs(group) <= reserved, role
        default = {**group, "UpdateConfig": {"MaxUnavailable": 1}}
        assert instances_an_update_needs(default) > reserved  # why MINIMAL


def test_a_gpu_capacity_failure_rolls_back_neither_the_control_plane_nor_the_vpc(
    default_app: Synthesized,
) -> None:
    """CloudFormation rolls back a failed stack whole: the GPU node groups (the likeliest to
    fail, for want of P-instance capacity) live where nothing else does."""
    gpu_types = {r["Type"] for r in default_app.templates["gpu-nodes"]["Resources"].values()}
    assert "AWS::EKS::Nodegroup" in gpu_types
    assert not gpu_types & {"AWS::EKS::Cluster", "AWS::EC2::VPC", "AWS::EC2::Subnet"}
    for role in ("network", "cluster"):
        groups = default_app.resources(role, "AWS::EKS::Nodegroup").values()
        assert all(g["Properties"]["Labels"][ROLE_LABEL] not in GPU_ROLES for g in groups)
    assert "cluster" in default_app.dependencies("gpu-nodes")
    # Serving goes first on destroy: Ray pods drain while their nodes still exist.
    assert "gpu-nodes" in default_app.dependencies("serving")


def _warnings(synthesized: Synthesized) -> list[str]:
    return [json.dumps(warning) for warning in synthesized.gpu_node_warnings()]


@pytest.mark.parametrize("app_name", ["default_app", "reserved_app"])
def test_a_side_that_may_run_on_one_node_synthesizes_with_a_warning(app_name, request) -> None:
    """With one node a node group update is a P/D outage until the replacement has loaded the
    model: there is no second worker to serve meanwhile (and no disruption budget)."""
    synthesized = request.getfixturevalue(app_name)
    warnings = _warnings(synthesized)
    for role, group in synthesized.settings.gpu_nodes.groups().items():
        warned = any(f"gpu_nodes.{role}.scaling.min_size" in text for text in warnings)
        assert warned == (group.scaling.min_size < 2), role


def test_a_capacity_block_side_synthesizes_with_the_eks_update_rule(reserved_app) -> None:
    """EKS user guide: a Capacity Block node group is upgraded at desired size 0."""
    warnings = _warnings(reserved_app)
    for role, group in reserved_app.settings.gpu_nodes.groups().items():
        warned = any(f"gpu_nodes.{role}: is on a Capacity Block" in text for text in warnings)
        assert warned == (group.capacity.type == "capacity_block"), role
