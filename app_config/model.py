"""The typed configuration: the single source of truth for topology.

Field defaults here are the project's defaults; ``cdk.json`` supplies only what has no universal
default (the region; the zones follow it). The configuration reference (docs/configuration.md)
is generated from this module (``make config-docs``), so a description written here is the
documentation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app_config.aws_tags import Tags
from app_config.efa_check import EfaCheck, device_pairs
from app_config.errors import ConfigError
from app_config.kubernetes_names import (
    EKS_TAINTS_PER_NODE_GROUP,
    KUBELET_LABEL_DOMAINS,
    LabelKey,
    LabelValue,
    NodeLabelValue,
    reserved_domain,
)
from app_config.node_labels import (
    ACCELERATOR_LABEL,
    EFA_LABEL,
    GPU_PRESENT_LABEL,
    GPU_ROLES,
    GPU_TAINT_KEY,
    INSTANCE_TYPE_LABEL,
    OWNED_LABEL_KEYS,
    OWNED_TAINT_KEYS,
    ROLE_LABEL,
    ROLE_TAINT_KEY,
    SHARED_GROUP,
)
from app_config.observability import Observability
from app_config.section import (
    CidrBlock,
    LogRetentionDays,
    Section,
    listed_once,
    matching,
    one_of,
    require_consent_for_anywhere,
    require_internet_sources,
    require_listed_once,
    unicode_text,
)
from app_config.serving import Serving
from app_config.side import Side
from catalog.instances import CAPACITY_BLOCK_TYPES, CATALOG, GpuInstance
from catalog.ray_llm_image import VLLM
from catalog.regions import (
    REGIONS,
)

_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
# The qualifier of `cdk bootstrap` without --qualifier: the bootstrap template's Qualifier
# Default and aws-cdk-lib's DefaultStackSynthesizer.DEFAULT_QUALIFIER (tests compare both).
DEFAULT_BOOTSTRAP_QUALIFIER = "hnb659fds"
# IAM identifiers: a path of at most 512 characters ('/' or /.../), then a role or user name of
# 1-64 characters from letters, digits and +=,.@_- (IAM API reference, CreateRole and CreateUser).
_IAM_PRINCIPAL_ARN = re.compile(
    r"^arn:(?P<partition>aws(-us-gov)?):iam::\d{12}:(role|user)(?P<path>/([\w+=,.@-]+/)*)"
    r"[\w+=,.@-]{1,64}$"
)
IAM_PATH_MAX = 512


# Graviton (arm64) families carry a "g" after the generation digit (m7g, c7gn, r8gd, t4g, x2gd,
# im4gn, is4gen) and a1 is the first Graviton (EC2 user guide, "Instance type naming
# conventions"); the system nodes run the x86_64 AL2023 AMI.
_ARM64_FAMILY = re.compile(r"(a1|[a-z]+\d+[a-z]*g[a-z]*)")
# The internal load balancer's own subnets: nothing else lives there, so the pods' network policy
# can admit exactly the load balancer. An NLB needs 8 free addresses per subnet (ELB user guide,
# "Subnets for your Network Load Balancer"); a /27 leaves 27.
ENDPOINT_SUBNET_MASK = 27
# The smallest subnet a VPC takes (VPC user guide, "Subnet CIDR blocks": /16 to /28).
SUBNET_MASK_MAX = 28
# EKS takes at most this many public access CIDRs (EKS API, publicAccessCidrs).
EKS_PUBLIC_ACCESS_CIDRS_MAX = 40


def _instance_type(value: str) -> str:
    if not _INSTANCE_TYPE.fullmatch(value):
        raise ValueError("not an EC2 instance type; expected family.size such as m7i.xlarge")
    return value


_ACCELERATED_FAMILY = re.compile(r"(p|g|inf|trn|dl|vt|f)\d.*")
_TOO_SMALL_SIZES = ("nano", "micro", "small")


def _system_instance(value: str) -> str:
    """The system nodes run the x86_64 standard AL2023 AMI and host CoreDNS, the operators and
    the Ray head (2 vCPUs, 8 GiB)."""
    family, _, size = value.partition(".")
    if _ARM64_FAMILY.fullmatch(family):
        raise ValueError(
            f"{family} is a Graviton (arm64) family; the system nodes run the x86_64 AL2023 "
            "AMI like the Ray head's image: use an x86_64 type such as m7i.xlarge"
        )
    if family.startswith("mac"):
        raise ValueError(f"{family} (Mac) instances cannot join EKS; use e.g. m7i.xlarge")
    if _ACCELERATED_FAMILY.fullmatch(family):
        raise ValueError(
            f"{family} is an accelerated family; the system nodes need no accelerator and the "
            "standard AMI has no drivers for one: use e.g. m7i.xlarge"
        )
    if size in _TOO_SMALL_SIZES:
        raise ValueError(
            f"{size} is too small for CoreDNS, the operators and the Ray head (2 vCPUs, 8 GiB "
            "requested); use at least xlarge, e.g. m7i.xlarge"
        )
    return value


InstanceTypeName = Annotated[str, AfterValidator(_instance_type)]


class Scaling(Section):
    """Sizes of a managed node group. Changing them updates the node group in place."""

    min_size: int = Field(ge=0, le=450, description="Fewest nodes the group scales down to.")
    desired_size: int = Field(
        ge=0,
        le=450,
        description="Nodes when the group is created (for a GPU group also its Ray worker "
        "group's first pod count). Afterwards the Cluster Autoscaler sets the count between "
        "min_size and max_size; any later change of min_size, max_size or this value makes "
        "CloudFormation set the count back to this value, over the autoscaler: set it to the "
        "group's current count when you change the bounds.",
    )
    max_size: int = Field(ge=1, le=450, description="Most nodes the group scales up to.")

    @model_validator(mode="after")
    def _ordered(self) -> Scaling:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"sizes must satisfy min_size <= desired_size <= max_size, got "
                f"{self.min_size} <= {self.desired_size} <= {self.max_size}"
            )
        return self


class SystemNodes(Section):
    """The small CPU node group for CoreDNS, operators, controllers and the Ray head."""

    instance_type: Annotated[InstanceTypeName, AfterValidator(_system_instance)] = Field(
        "m7i.xlarge", description="EC2 instance type of the system nodes (x86_64)."
    )
    scaling: Scaling = Field(
        Scaling(min_size=2, desired_size=2, max_size=4),
        description="Node counts; two nodes keep CoreDNS and the operators available.",
    )
    disk_size_gib: int = Field(
        150,
        ge=20,
        le=16384,
        description="Encrypted gp3 root volume size; the Ray head runs the 20+ GB Ray LLM image "
        "here, twice during a NewCluster upgrade.",
    )


class Taint(Section):
    key: LabelKey = Field(description="Taint key.")
    value: LabelValue = Field("", description="Taint value.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="What the taint does to pods that do not tolerate it."
    )


class Capacity(Section):
    """Where the GPU instances come from. P5-class capacity is usually reserved."""

    type: Literal["on_demand", "capacity_reservation", "capacity_block"] = Field(
        "on_demand",
        description="'on_demand' (with a cluster placement group), 'capacity_reservation' (an "
        "On-Demand Capacity Reservation) or 'capacity_block' (Capacity Blocks for ML).",
    )
    reservation_id: str | None = Field(
        None,
        **matching(
            r"^cr-[0-9a-f]{8,17}$",
            "a Capacity Reservation id: cr- followed by 8 to 17 hexadecimal digits",
        ),
        description="The cr-... id for capacity_reservation and capacity_block.",
    )
    reserved_instances: int | None = Field(
        None,
        ge=1,
        le=450,
        description="How many instances the reservation or Capacity Block holds: the node "
        "group's max_size may not exceed it, so the Cluster Autoscaler never asks for an "
        "instance that is not reserved (a launch targeted at a full reservation fails; it does "
        "not fall back to On-Demand).",
    )

    placement_group: str | None = Field(
        None,
        **matching(
            r"^[\x21-\x7e]{1,255}$",
            "a placement group name: 1 to 255 printable ASCII characters without spaces",
        ),
        description="capacity_reservation only: the cluster placement group the reservation "
        "was created in (EC2 'Capacity Reservations in cluster placement groups'); the nodes "
        "then launch into it, co-located. Without it a reservation's instances are placed "
        "wherever EC2 has them, which a DP group spanning nodes feels in its all-to-all.",
    )

    @model_validator(mode="after")
    def _reservation(self) -> Capacity:
        if self.placement_group is not None and self.type != "capacity_reservation":
            raise ValueError(
                f"placement_group names the cluster placement group an On-Demand Capacity "
                f"Reservation was created in; with type {self.type!r} "
                + (
                    "the stack makes and uses its own cluster placement group"
                    if self.type == "on_demand"
                    else "EC2 places the Capacity Block itself"
                )
                + ": remove placement_group"
            )
        if self.type != "on_demand" and self.reservation_id is None:
            raise ValueError(f"capacity type {self.type!r} needs reservation_id (cr-...)")
        if self.type != "on_demand" and self.reserved_instances is None:
            raise ValueError(
                f"capacity type {self.type!r} needs reserved_instances (the instance count of "
                f"{self.reservation_id}): the node group's max_size is capped at it"
            )
        if self.type == "on_demand" and self.reserved_instances is not None:
            raise ValueError(
                "reserved_instances is set but type is 'on_demand'; remove it, or set type to "
                "'capacity_reservation' or 'capacity_block'"
            )
        if self.type == "on_demand" and self.reservation_id is not None:
            raise ValueError(
                "reservation_id is set but type is 'on_demand'; set type to "
                "'capacity_reservation' or 'capacity_block', or remove reservation_id"
            )
        return self


@dataclass(frozen=True)
class NodePlacement:
    """The labels and taints of one GPU role: set on the node group, selected and tolerated by
    the Ray worker group and the device plugins. Derived here, once."""

    labels: dict[str, str]
    taints: tuple[Taint, ...]

    def tolerations(self) -> list[dict[str, str]]:
        """Pod tolerations of exactly these taints."""
        return [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in self.taints
        ]


class GpuNodeGroup(Section):
    instance_type: Annotated[str, one_of(CATALOG, "a supported EFA GPU instance")] = Field(
        "p5.48xlarge",
        description=f"GPU instance type, one of: {', '.join(CATALOG)}.",
    )
    scaling: Scaling = Field(
        Scaling(min_size=1, desired_size=1, max_size=2), description="Node counts."
    )
    capacity: Capacity = Field(Capacity(), description="Where the instances come from.")
    root_volume_gib: int = Field(
        100,
        ge=50,
        le=16384,
        description="Encrypted gp3 root volume (gp3 baseline speed). It holds the operating "
        "system and the system logs only: nodeadm's RAID0 of the local NVMe disks takes "
        "containerd (the 20+ GB image), kubelet, pod logs and the model cache.",
    )
    labels: dict[LabelKey, NodeLabelValue] = Field({}, description="Extra node labels.")
    taints: list[Taint] = Field([], description="Extra node taints.")

    @field_validator("labels")
    @classmethod
    def _own_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        taken = sorted(OWNED_LABEL_KEYS & labels.keys())
        if taken:
            raise ValueError(f"{taken} are set by this app; choose other label keys")
        for key in labels:
            domain = reserved_domain(key, allowed=KUBELET_LABEL_DOMAINS)
            if domain:
                raise ValueError(
                    f"{key!r} is in the {domain} domain, which belongs to Kubernetes or EKS: the "
                    "kubelet refuses to set such labels (except under node.kubernetes.io/ and "
                    "kubelet.kubernetes.io/); use a prefix of your own such as example.com/"
                )
        return labels

    @field_validator("taints")
    @classmethod
    def _own_taints(cls, taints: list[Taint]) -> list[Taint]:
        taken = sorted(OWNED_TAINT_KEYS & {taint.key for taint in taints})
        if taken:
            raise ValueError(f"{taken} are set by this app; choose other taint keys")
        room = EKS_TAINTS_PER_NODE_GROUP - len(OWNED_TAINT_KEYS)
        if len(taints) > room:
            raise ValueError(
                f"{len(taints)} taints; EKS takes {EKS_TAINTS_PER_NODE_GROUP} per node group and "
                f"this app sets {len(OWNED_TAINT_KEYS)}: at most {room}"
            )
        reserved = next((t.key for t in taints if reserved_domain(t.key)), None)
        if reserved:
            raise ValueError(
                f"{reserved!r} is in the {reserved_domain(reserved)} domain, whose taints belong "
                "to Kubernetes (the node lifecycle controller) or EKS; use a prefix of your own "
                "such as example.com/"
            )
        valueless = [taint.key for taint in taints if not taint.value]
        if valueless:
            raise ValueError(
                f"taint {valueless[0]!r} has no value: the Cluster Autoscaler builds the node "
                "template of an empty GPU group from EKS's DescribeNodegroup and skips taints "
                "without a value (cluster-autoscaler 1.35, cloudprovider/aws/aws_wrapper.go), so "
                "it would place pods that do not tolerate it on this group; give it a value"
            )
        evicting = [taint.key for taint in taints if taint.effect == "NoExecute"]
        if evicting:
            raise ValueError(
                f"taint {evicting[0]!r} has effect NoExecute: EKS puts a node group's new taints "
                "on its running nodes, where a NoExecute taint evicts the Ray workers at once, "
                "before the serving stack's new Ray cluster (whose workers tolerate it) exists, "
                "and KubeRay 1.7 never adds tolerations to running pods: an outage that does not "
                "heal. Use NoSchedule (or PreferNoSchedule)"
            )
        pairs = [(taint.key, taint.effect) for taint in taints]
        repeated = sorted({pair for pair in pairs if pairs.count(pair) > 1})
        if repeated:
            raise ValueError(
                f"{repeated[0][0]} with effect {repeated[0][1]} appears twice; Kubernetes "
                "allows one taint per key and effect"
            )
        return taints

    @model_validator(mode="after")
    def _within_reservation(self) -> GpuNodeGroup:
        if (
            self.capacity.type == "capacity_block"
            and self.instance_type not in CAPACITY_BLOCK_TYPES
        ):
            raise ValueError(
                f"capacity.type capacity_block: Capacity Blocks for ML are not sold for "
                f"{self.instance_type} (EC2 user guide, 'Capacity Blocks for ML'), so the "
                f"reservation cannot hold this group's instances; use one of "
                f"{', '.join(sorted(CAPACITY_BLOCK_TYPES))}, or capacity_reservation"
            )
        reserved = self.capacity.reserved_instances
        if reserved is not None and self.scaling.max_size > reserved:
            raise ValueError(
                f"scaling.max_size {self.scaling.max_size} exceeds capacity.reserved_instances "
                f"{reserved}: the Cluster Autoscaler would ask for instances the reservation "
                f"does not hold, and such launches fail; use max_size <= {reserved}"
            )
        return self

    @property
    def instance(self) -> GpuInstance:
        return CATALOG[self.instance_type]

    def placement(self, role: str) -> NodePlacement:
        labels = {
            ROLE_LABEL: role,
            INSTANCE_TYPE_LABEL: self.instance_type,
            EFA_LABEL: "true",
            GPU_PRESENT_LABEL: "true",
            ACCELERATOR_LABEL: self.instance.accelerator_label_value,
            **self.labels,
        }
        taints = (
            Taint(key=GPU_TAINT_KEY, value="true", effect="NoSchedule"),
            Taint(key=ROLE_TAINT_KEY, value=role, effect="NoSchedule"),
            *self.taints,
        )
        return NodePlacement(labels=labels, taints=taints)


def _same_generation(instance: GpuInstance) -> str:
    same = [i.name for i in CATALOG.values() if i.gpu_architecture == instance.gpu_architecture]
    return f"{instance.gpu_architecture}: {', '.join(same)}"


class SideGpus(Section):
    """How the GPUs of each shared node are split between the sides."""

    prefill: int = Field(ge=1, le=7, description="GPUs of each node that prefill's replicas use.")
    decode: int = Field(ge=1, le=7, description="GPUs of each node that decode's replicas use.")


class SharedNodeGroup(GpuNodeGroup):
    """One node group that runs both sides: every node holds prefill's replicas on some of its
    GPUs and decode's on the others, in one Ray worker pod, and the KV cache moves between the
    two inside that pod (NIXL's UCX backend over CUDA IPC, docs/architecture.md, 'Prefill and
    decode on one node'). No KV crosses EFA, so a small multi-GPU node (g6.12xlarge, 2 + 2)
    is a whole P/D deployment."""

    instance_type: Annotated[str, one_of(CATALOG, "a supported EFA GPU instance")] = Field(
        "g6.12xlarge",
        description=f"GPU instance type, one of: {', '.join(CATALOG)}; at least 2 GPUs.",
    )
    gpus: SideGpus = Field(
        description="Each side's GPUs of every node; the two add up to the node's GPUs."
    )

    @model_validator(mode="after")
    def _split_fills_the_node(self) -> SharedNodeGroup:
        have = self.instance.gpus
        if self.gpus.prefill + self.gpus.decode != have:
            raise ValueError(
                f"gpus.prefill {self.gpus.prefill} + gpus.decode {self.gpus.decode} must add "
                f"up to the {have} GPUs of a {self.instance_type}: a GPU neither side holds "
                f"stays idle, and more than {have} cannot be placed"
                + (
                    f"; for example prefill {have // 2}, decode {have - have // 2}"
                    if have > 1
                    else "; a one-GPU instance cannot hold both sides: use g6.12xlarge or "
                    "another instance with 2 or more GPUs"
                )
            )
        return self


class GpuNodes(Section):
    """The EFA GPU node groups, both in network.gpu_availability_zone: one per side
    (`prefill`, `decode`), or one that runs both sides on every node (`shared`)."""

    prefill: GpuNodeGroup = Field(GpuNodeGroup(), description="Nodes that run prefill.")
    decode: GpuNodeGroup = Field(GpuNodeGroup(), description="Nodes that run decode.")
    shared: SharedNodeGroup | None = Field(
        None,
        description="One node group for both sides instead of `prefill` and `decode` (which "
        "must then be left out): each node runs one Ray worker pod holding prefill's GPUs "
        "(gpus.prefill) and decode's (gpus.decode), and the KV cache moves inside the node "
        "(serving.kv_transfer.backend UCX). The cheapest real first run: "
        "examples/trial-one-node.yaml. Not given: one node group per side.",
    )
    efa_check: EfaCheck = Field(
        EfaCheck(), description="Pass marks of `pdctl efa-check` between the two groups."
    )

    @model_validator(mode="after")
    def _one_layout(self) -> GpuNodes:
        # Compared with the defaults, not model_fields_set: the loader fills a partly given
        # section from its default (loader.with_section_defaults), which sets both.
        given = sorted(role for role in GPU_ROLES if getattr(self, role) != GpuNodeGroup())
        if self.shared is not None and given:
            raise ValueError(
                f"shared runs both sides on one node group, and {', '.join(given)} would be a "
                "second one; remove gpu_nodes." + " and gpu_nodes.".join(given) + ", or shared"
            )
        return self

    @property
    def layout(self) -> str:
        """'shared' (both sides on every node of one group) or 'separate' (a group per side)."""
        return SHARED_GROUP if self.shared is not None else "separate"

    @model_validator(mode="after")
    def _efa_peers(self) -> GpuNodes:
        if self.shared is not None:
            return self  # one instance type on both sides; no EFA between them
        prefill, decode = self.prefill.instance, self.decode.instance
        if prefill.efa_peer_group != decode.efa_peer_group:
            raise ValueError(
                f"prefill {prefill.name} and decode {decode.name} cannot exchange EFA traffic "
                "(p4d and p4de talk EFA only to their own type); use the same type on both "
                "sides, or p5-class types on both"
            )
        if prefill.vllm_attention_backend != decode.vllm_attention_backend:
            raise ValueError(
                f"prefill {prefill.name} ({prefill.gpu_model}) and decode {decode.name} "
                f"({decode.gpu_model}) would never exchange KV: {VLLM} runs "
                f"{prefill.vllm_attention_backend} on one and {decode.vllm_attention_backend} on "
                "the other, and NIXL's handshake refuses a backend mismatch; use one GPU "
                "generation on both sides (Hopper: p5, p5e, p5en; Blackwell: p6-b200)"
            )
        if prefill.gpu_architecture != decode.gpu_architecture:
            raise ValueError(
                f"prefill {prefill.name} ({prefill.gpu_architecture}) and decode {decode.name} "
                f"({decode.gpu_architecture}) are different GPU generations: {VLLM} picks "
                "the attention backend per generation (an fp8 KV cache runs FLASH_ATTN on "
                "Hopper, FLASHINFER on Ada), and NIXL's handshake refuses a backend mismatch; "
                f"use one generation on both sides ({_same_generation(prefill)})"
            )
        check = self.efa_check
        pairs = device_pairs(prefill.network_cards, decode.network_cards)
        if check.timeout_seconds is not None and check.timeout_seconds < check.test_seconds(pairs):
            raise ValueError(
                f"gpu_nodes.efa_check.timeout_seconds {check.timeout_seconds} cannot cover the "
                f"check's {pairs} device pairs at pair_seconds {check.pair_seconds} (it needs "
                f"at least {check.test_seconds(pairs)} once both pods run); raise it, lower "
                "pair_seconds, or leave it unset to derive it from the node join time"
            )
        return self

    @model_validator(mode="after")
    def _shared_reservations(self) -> GpuNodes:
        """Two groups naming one reservation draw on the same instances: one instance type,
        one kind of capacity, one count, and room for both groups at their largest."""
        if self.shared is not None:
            return self
        first, second = (group.capacity for group in self.groups().values())
        if first.reservation_id is None or first.reservation_id != second.reservation_id:
            return self
        reservation = first.reservation_id
        if self.prefill.instance_type != self.decode.instance_type:
            raise ValueError(
                f"prefill and decode both use {reservation} but with different instance types "
                f"({self.prefill.instance_type}, {self.decode.instance_type}); a reservation "
                "holds one instance type: use the same type, or a reservation per group"
            )
        if (first.type, first.reserved_instances) != (second.type, second.reserved_instances):
            raise ValueError(
                f"prefill and decode both use {reservation} but describe it differently "
                f"(type {first.type} / {second.type}, reserved_instances "
                f"{first.reserved_instances} / {second.reserved_instances}); give both the same"
            )
        together = self.prefill.scaling.max_size + self.decode.scaling.max_size
        if first.reserved_instances is not None and together > first.reserved_instances:
            raise ValueError(
                f"prefill and decode share {reservation} ({first.reserved_instances} instances) "
                f"but can grow to {together} together (max_size {self.prefill.scaling.max_size} "
                f"+ {self.decode.scaling.max_size}); launches beyond the reservation fail: lower "
                "the max_size values so that they add up to at most "
                f"{first.reserved_instances}"
            )
        return self

    def groups(self) -> dict[str, GpuNodeGroup]:
        """The node groups that exist, by name: each side's (by role, in GPU_ROLES order), or
        the one shared group. A side's own group is ``Settings.side(role).nodes``."""
        if self.shared is not None:
            return {SHARED_GROUP: self.shared}
        return {role: getattr(self, role) for role in GPU_ROLES}

    def placements(self) -> list[NodePlacement]:
        """The labels and taints of both groups, for what must select or tolerate GPU nodes."""
        return [group.placement(role) for role, group in self.groups().items()]


class ExistingSubnet(Section):
    """A subnet of an existing VPC, with what synth cannot look up without an account: its zone
    and its route table. `pdctl preflight` checks both against AWS."""

    subnet_id: str = Field(description="The subnet's id (subnet-0123456789abcdef0).")
    availability_zone: str = Field(
        description="Its zone, as an AZ name (us-west-2a) or an AZ ID (usw2-az1), the kind "
        "network.availability_zones uses."
    )
    route_table_id: str = Field(
        description="The route table associated with it (rtb-...; the VPC's main route table "
        "when none is associated explicitly). aws-cdk-lib warns on an imported subnet without "
        "one; preflight reads its routes (no internet gateway; a NAT or the endpoints)."
    )


class LoadBalancerSubnet(ExistingSubnet):
    """A subnet of the model endpoint's load balancer in an existing VPC. Its CIDR is a setting
    because the pods' network policy admits exactly these ranges on the Serve port."""

    cidr_block: CidrBlock = Field(description="Its IPv4 CIDR (preflight compares it with AWS's).")

    @field_validator("cidr_block")
    @classmethod
    def _room_for_the_load_balancer(cls, cidr: IPv4Network) -> IPv4Network:
        # A subnet is a /16 to a /28 (VPC user guide, "Subnet CIDR blocks"), of which AWS keeps
        # 5 addresses; the NLB needs 8 free (ELB user guide, "Subnets for your Network Load
        # Balancer"): a longer prefix is no subnet the load balancer could be placed in.
        if cidr.prefixlen > SUBNET_MASK_MAX:
            raise ValueError(
                f"a /{cidr.prefixlen} is smaller than any VPC subnet (a /16 to a /"
                f"{SUBNET_MASK_MAX}, 5 addresses of it AWS's) and leaves no 8 free addresses "
                "for the Network Load Balancer: give the subnet's own CIDR"
            )
        return cidr


class ExistingVpc(Section):
    """A VPC the app does not own, used instead of the one the network stack would create. The
    app adds only its security groups and (unless interface_endpoints_exist) the interface
    endpoints; it changes nothing else there and `cdk destroy` deletes nothing it did not
    create. Imported from these attributes, not looked up, so that synth needs no AWS account
    (docs/operating.md, 'Deploying into an existing VPC')."""

    vpc_id: str = Field(description="The VPC's id (vpc-0123456789abcdef0).")
    cidr_blocks: Annotated[list[CidrBlock], listed_once("CIDR block")] = Field(
        min_length=1,
        max_length=5,
        description="The VPC's IPv4 CIDR blocks that hold the subnets given (its primary "
        "block, and each secondary block a subnet here is in): security groups and network "
        "policies admit them where they admit 'the VPC'. At most 5 (the VPC quota's default).",
    )
    private_subnets: list[ExistingSubnet] = Field(
        min_length=2,
        max_length=6,
        description="One private subnet per zone (no route to an internet gateway): the EKS "
        "control plane's interfaces, the system nodes, the interface endpoints, the scraper "
        "and the GCS store. Their zones are network.availability_zones (derived from them "
        "when not given).",
    )
    gpu_subnet: ExistingSubnet | None = Field(
        None,
        description="The subnet of the GPU nodes, in network.gpu_availability_zone (derived "
        "from it when not given). Not given: the private subnet of that zone. A subnet of its "
        "own keeps the GPU nodes' and pods' addresses apart from the rest.",
    )
    load_balancer_subnets: list[LoadBalancerSubnet] = Field(
        min_length=2,
        max_length=6,
        description="The model endpoint's load balancer subnets, one per zone of "
        "network.availability_zones: private ones for an internal endpoint, public ones for "
        "serving.endpoint.scheme internet-facing. Nothing else should live there: the pods "
        "admit these ranges on the Serve port. An NLB needs 8 free addresses in each.",
    )
    interface_endpoints_exist: bool = Field(
        False,
        description="The VPC already has the interface endpoints the nodes need "
        "(catalog/vpc_endpoints.py), with private DNS: the app then creates none. false: the "
        "app creates them in private_subnets (preflight fails if one of them exists already, "
        "whose private DNS name would clash).",
    )

    def subnets(self) -> dict[str, ExistingSubnet]:
        """Every subnet given, by the setting that names it."""
        given: dict[str, ExistingSubnet] = {
            f"private_subnets[{index}]": subnet for index, subnet in enumerate(self.private_subnets)
        }
        if self.gpu_subnet is not None:
            given["gpu_subnet"] = self.gpu_subnet
        for index, subnet in enumerate(self.load_balancer_subnets):
            given[f"load_balancer_subnets[{index}]"] = subnet
        return given

    def gpu_node_subnet(self, zone: str) -> ExistingSubnet:
        """The GPU nodes' subnet: gpu_subnet, else the private subnet of the GPU zone."""
        if self.gpu_subnet is not None:
            return self.gpu_subnet
        return next(s for s in self.private_subnets if s.availability_zone == zone)


# The Network settings that shape a VPC the app creates; with network.existing_vpc they mean
# nothing, so giving one is refused (rule existing-vpc-created-only).
CREATED_VPC_SETTINGS = (
    "vpc_cidr",
    "nat_gateways",
    "private_subnet_mask",
    "public_subnet_mask",
    "flow_log_retention_days",
)


class Network(Section):
    vpc_cidr: CidrBlock = Field(
        IPv4Network("10.0.0.0/16"), description="IPv4 CIDR of the VPC (/16 to /24)."
    )
    availability_zones: list[str] = Field(
        min_length=2,
        max_length=6,
        description="Zones of the VPC, AZ names (us-west-2a) or AZ IDs (usw2-az1), all of one "
        "kind. "
        "The EKS control plane needs two; GPU nodes use only gpu_availability_zone. Not given: "
        "the region's first two AZ IDs (catalog/regions.py), so a change of region needs no "
        "change here.",
        json_schema_extra={"default_text": "the region's first two AZ IDs"},
    )
    gpu_availability_zone: str = Field(
        description="The zone where prefill and decode nodes run (EFA cannot cross zones). One of "
        "availability_zones; must be where your P-instance capacity is. Not given: the first "
        "of availability_zones, unless a GPU group uses a reservation or Capacity Block (then "
        "required: the reservation's zone).",
        json_schema_extra={"default_text": "the first of availability_zones"},
    )
    nat_gateways: int = Field(
        1,
        ge=1,
        le=6,
        description="NAT gateways (one per zone at most); one is enough for pulls "
        "that VPC endpoints do not cover (Helm charts, Hugging Face).",
    )
    private_subnet_mask: int = Field(
        19,
        ge=16,
        le=SUBNET_MASK_MAX,
        description="Prefix length of each private subnet (nodes and pods).",
    )
    public_subnet_mask: int = Field(
        24,
        ge=16,
        le=SUBNET_MASK_MAX,
        description="Prefix length of each public subnet (NAT, public load balancer).",
    )
    flow_log_retention_days: LogRetentionDays = Field(
        365, description="Retention of the VPC flow log group, in days."
    )
    existing_vpc: ExistingVpc | None = Field(
        None,
        description="A VPC the app does not own, used instead of creating one (its subnets, "
        "zones and route tables; docs/operating.md, 'Deploying into an existing VPC'). Not "
        "given: the network stack creates the VPC from the settings above.",
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr_size(cls, value: IPv4Network) -> IPv4Network:
        if not 16 <= value.prefixlen <= 24:
            raise ValueError("VPC CIDR prefix must be /16 to /24 for subnets of this layout")
        if value.is_loopback or value.is_multicast or value.is_link_local or value.is_reserved:
            raise ValueError(
                "loopback, multicast, link-local and reserved ranges cannot be a VPC; use a "
                "private range such as 10.0.0.0/16 (RFC 1918)"
            )
        if value.overlaps(IPv4Network("0.0.0.0/8")):
            raise ValueError("0.0.0.0/8 is 'this network', not usable; use e.g. 10.0.0.0/16")
        return value

    def cidr_blocks(self) -> list[str]:
        """The VPC's ranges, where a security group or network policy admits 'the VPC'."""
        if self.existing_vpc is not None:
            return [str(block) for block in self.existing_vpc.cidr_blocks]
        return [str(self.vpc_cidr)]

    def required_addresses(self) -> int:
        """Addresses the subnets take: a public, a private and a load balancer subnet per
        zone."""
        per_zone = (
            2 ** (32 - self.private_subnet_mask)
            + 2 ** (32 - self.public_subnet_mask)
            + 2 ** (32 - ENDPOINT_SUBNET_MASK)
        )
        return per_zone * len(self.availability_zones)


class NodeAutoscaler(Section):
    """The Cluster Autoscaler: adds a GPU node when a Ray worker pod cannot be placed, removes
    one that has held no Ray pod for a while."""

    scale_down_unneeded_minutes: int = Field(
        10,
        ge=1,
        le=1440,
        description="How long a node must be unneeded (no Ray worker on it) before it is "
        "removed. Ray's own idle timeout comes first (serving.ray_autoscaler).",
    )
    max_node_provision_minutes: int = Field(
        20,
        ge=5,
        le=120,
        description="How long a requested node may take to register before the autoscaler "
        "gives up on it and tries another group: a p5 node boots, loads its GPU and EFA drivers "
        "and joins in about 10 minutes; a failed launch (no capacity) backs off at once.",
    )


class AddonChoice(Section):
    """Who runs one of the add-ons the app needs on an existing cluster: the app ('install',
    from catalog/helm_charts.py, as on a cluster it creates) or the cluster's owner
    ('installed'). An installed one is the owner's: the app neither changes nor deletes it."""

    source: Literal["install", "installed"] = Field(
        "install",
        description="install: the app installs it, pinned and configured as on its own "
        "cluster. installed: the cluster runs it already, and version says which.",
    )
    version: str | None = Field(
        None,
        **matching(r"^v?\d+\.\d+(\.\d+)?$", "a version such as 1.7.0 or v0.5.20"),
        description="With installed: the version that runs (its image tag, as `helm list "
        "-A` shows under APP VERSION). The rule existing-cluster-addons refuses one older than "
        "the app needs; `pdctl preflight` cannot read Helm releases and prints it as "
        "unverified.",
    )
    namespace: str | None = Field(
        None,
        **matching(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", "a Kubernetes namespace name"),
        max_length=63,
        description="With installed: the namespace it runs in, where the app's network "
        "policies admit it from (KubeRay's operator reaches the Ray head's dashboard and "
        "Serve ports). Not given: the namespace the app would install it in "
        "(catalog/helm_charts.py).",
    )


class ExistingClusterAddons(Section):
    """What the app needs on the cluster besides the core add-ons (VPC CNI, CoreDNS,
    kube-proxy, which an existing cluster has and `pdctl preflight` checks)."""

    efa_device_plugin: AddonChoice = Field(
        AddonChoice(),
        description="The EFA device plugin (vpc.amazonaws.com/efa). installed: its DaemonSet "
        "must tolerate the GPU groups' taints, and its chart list their instance types (the "
        "rule existing-cluster-addons refuses an image older than the first that does).",
    )
    nvidia_device_plugin: AddonChoice = Field(
        AddonChoice(),
        description="The NVIDIA device plugin (nvidia.com/gpu). installed: its DaemonSet must "
        "tolerate the GPU groups' taints; releases 0.19.0 to 0.19.2 must run with "
        "mofedEnabled=false (they otherwise give GPU containers the EFA devices; rule "
        "existing-cluster-nvidia-mofed warns).",
    )
    kuberay: AddonChoice = Field(
        AddonChoice(),
        description="The KubeRay operator (RayService CRD). installed: it must watch "
        "serving.namespace.",
    )
    load_balancer_controller: AddonChoice = Field(
        AddonChoice(),
        description="The AWS Load Balancer Controller (TargetGroupBinding). installed: its "
        "role must be allowed to register targets in the app's target group.",
    )
    cluster_autoscaler: AddonChoice = Field(
        AddonChoice(),
        description="The Cluster Autoscaler. install: the app's resizes only the node groups "
        "it created (tagged pd-llm-serving/deployment), never the owner's. installed: it must "
        "discover node groups by their k8s.io/cluster-autoscaler tags (EKS puts them on the "
        "app's groups too) and be of the cluster's Kubernetes minor; use it when the owner "
        "already runs one, or both would resize the app's groups.",
    )

    def installed(self) -> dict[str, AddonChoice]:
        """The add-ons the cluster's owner runs, by setting name."""
        return {
            name: getattr(self, name)
            for name in type(self).model_fields
            if getattr(self, name).source == "installed"
        }

    def installs(self, name: str) -> bool:
        return getattr(self, name).source == "install"

    def namespace(self, name: str, installed_in: str) -> str:
        """Where the add-on runs: the owner's namespace when given, else the app's own."""
        choice = getattr(self, name)
        return (
            choice.namespace if choice.source == "installed" and choice.namespace else installed_in
        )


class ExistingKubectlProvider(Section):
    """A kubectl provider the cluster's owner runs (aws-cdk-lib's ``aws_eks_v2.KubectlProvider``,
    deployed by another CDK app), for a team that gives no new role cluster access: the app then
    creates no handler and no access entry, and applies its manifests and Helm charts through
    this one. Not the older ``aws_eks`` module's: its handler reads a RoleArn from every
    resource, which ``aws_eks_v2`` resources do not send, and fails on each."""

    service_token: str = Field(
        description="The provider's service token (aws_eks_v2's KubectlProvider): the ARN of "
        "its custom resource framework's onEvent function "
        "(arn:aws:lambda:<region>:<account>:function:<name>), in this region."
    )
    role_arn: str = Field(
        description="The IAM role its kubectl handler runs as, which must hold an access entry "
        "with AmazonEKSClusterAdminPolicy on the cluster (`pdctl preflight` checks)."
    )


class ExistingCluster(Section):
    """An EKS cluster the app does not own (its name is cluster.name, its version
    cluster.kubernetes_version), in network.existing_vpc. The app adds its node groups (a
    system group for its controllers and the Ray head, the GPU groups), the serving and
    observability stacks, and an access entry for its own kubectl handler; it creates no
    control plane and changes none of the cluster's settings (docs/architecture.md, 'An
    existing cluster')."""

    endpoint: str = Field(
        description="The API server's URL (`aws eks describe-cluster --query "
        "cluster.endpoint`), for the API tunnel's outputs."
    )
    cluster_security_group_id: str = Field(
        description="The cluster security group EKS created for it (`aws eks describe-cluster "
        "--query cluster.resourcesVpcConfig.clusterSecurityGroupId`): the nodes, the kubectl "
        "handler and the load balancer's rule to the pods use it."
    )
    oidc_provider_arn: str = Field(
        description="The cluster's IAM OIDC provider for IRSA "
        "(arn:aws:iam::<account>:oidc-provider/oidc.eks.<region>.amazonaws.com/id/<id>); "
        "preflight checks it is registered for the cluster's issuer."
    )
    addons: ExistingClusterAddons = Field(
        ExistingClusterAddons(),
        description="For each add-on the app needs: install it, or the cluster has it.",
    )
    kubectl_provider: ExistingKubectlProvider | None = Field(
        None,
        description="A kubectl provider the owner runs, used instead of the app's own. Not "
        "given: the app creates its handler (a Lambda function in the private subnets, in "
        "the cluster security group) and an access entry with AmazonEKSClusterAdminPolicy "
        "for it.",
    )


# The Cluster settings that shape a control plane the app creates; with cluster.existing they
# mean nothing, so giving one is refused (rule existing-cluster-created-only).
CREATED_CLUSTER_SETTINGS = (
    "endpoint_access",
    "public_access_cidrs",
    "allow_public_access_from_anywhere",
    "support_type",
    "control_plane_log_retention_days",
)


class Cluster(Section):
    name: str | None = Field(
        None,
        **matching(
            r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$",
            (
                "1-100 characters: letters, digits, '-' and '_', starting with a letter or "
                "digit (EKS cluster names)"
            ),
        ),
        description="EKS cluster name; defaults to the prefix. With cluster.existing: that "
        "cluster's name, required.",
    )
    kubernetes_version: Literal["1.36", "1.35"] = Field(
        "1.36",
        description="EKS Kubernetes minor version of the control plane and every node group; the "
        "kubectl layer, kube-proxy and the Cluster Autoscaler follow it (catalog/eks_versions.py). "
        "Raising it upgrades in place, one minor at a time; EKS cannot go back. With "
        "cluster.existing: the minor that cluster runs (`pdctl preflight` compares).",
    )
    endpoint_access: Literal["private", "public_and_private"] = Field(
        "private",
        description="Kubernetes API endpoint. 'public_and_private' also needs public_access_cidrs.",
    )
    public_access_cidrs: Annotated[list[CidrBlock], listed_once("CIDR")] = Field(
        [], description="CIDRs allowed to reach a public endpoint."
    )
    allow_public_access_from_anywhere: bool = Field(
        False, description="Explicit consent to 0.0.0.0/0 in public_access_cidrs."
    )
    admin_principal_arns: list[str] = Field(
        [],
        description="IAM roles/users given cluster-admin through EKS access entries; on a "
        "cluster the app creates, nobody else can use kubectl.",
    )
    operator_principal_arns: list[str] = Field(
        [],
        description="IAM roles/users that operate the service: exactly what the runbooks use "
        "(Kubernetes RBAC of manifests/operator-rbac.yaml, bound to their access entries' "
        "group); no Secrets, exec, port-forward or pod creation.",
    )
    system_nodes: SystemNodes = Field(SystemNodes(), description="The system node group.")
    node_autoscaler: NodeAutoscaler = Field(
        NodeAutoscaler(), description="The Cluster Autoscaler's timing."
    )
    support_type: Literal["STANDARD", "EXTENDED"] = Field(
        "STANDARD",
        description="What EKS does when the Kubernetes version leaves standard support: "
        "STANDARD upgrades the control plane automatically; EXTENDED keeps the version and "
        "bills extended support per cluster hour (EKS user guide, 'Cluster upgrade policy').",
    )
    control_plane_log_retention_days: LogRetentionDays = Field(
        90,
        description="Retention of the control plane's log group /aws/eks/<cluster>/cluster, "
        "which the stack creates (KMS-encrypted) before EKS would create it without either.",
    )
    existing: ExistingCluster | None = Field(
        None,
        description="An EKS cluster the app does not own, used instead of creating one (needs "
        "network.existing_vpc, its VPC; docs/architecture.md, 'An existing cluster'). Not "
        "given: the cluster stack creates the control plane from the settings above.",
    )

    @field_validator("admin_principal_arns", "operator_principal_arns")
    @classmethod
    def _principals(cls, values: list[str]) -> list[str]:
        for arn in values:
            match = _IAM_PRINCIPAL_ARN.fullmatch(arn)
            if not match or len(match["path"]) > IAM_PATH_MAX:
                raise ValueError(
                    f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::123456789012:role/Name; "
                    "a name of 1-64 letters, digits and +=,.@_-, a path of at most 512)"
                )
        require_listed_once(values, "principal", why=" (EKS allows one access entry each)")
        return values

    @model_validator(mode="after")
    def _one_entry_per_principal(self) -> Cluster:
        both = set(self.admin_principal_arns) & set(self.operator_principal_arns)
        if both:
            raise ValueError(
                f"{sorted(both)} in both admin_principal_arns and operator_principal_arns; EKS "
                "allows one access entry per principal: keep each in one list"
            )
        return self

    @model_validator(mode="after")
    def _endpoint(self) -> Cluster:
        if self.endpoint_access == "public_and_private" and not self.public_access_cidrs:
            raise ValueError(
                "endpoint_access 'public_and_private' needs public_access_cidrs (for example your "
                "office's egress CIDR); use 'private' to keep the API inside the VPC"
            )
        if self.endpoint_access == "private" and self.public_access_cidrs:
            raise ValueError(
                "public_access_cidrs is set but endpoint_access is 'private'; set endpoint_access "
                "to 'public_and_private' or remove the CIDRs"
            )
        require_consent_for_anywhere(
            self.public_access_cidrs,
            self.allow_public_access_from_anywhere,
            "allow_public_access_from_anywhere",
            "the Kubernetes API",
        )
        require_internet_sources(
            self.public_access_cidrs, "the public API endpoint", EKS_PUBLIC_ACCESS_CIDRS_MAX
        )
        return self


class WarningAcknowledgment(Section):
    """One synth warning the team accepts, and why."""

    code: str = Field(
        **matching(r"^[a-z0-9][a-z0-9-]{0,63}$", "a warning code: lower-case letters, digits, '-'"),
        description="The warning's code, without the pd-llm: prefix (e.g. one-node-prefill).",
    )
    reason: str = Field(
        min_length=20,
        max_length=1000,
        description="Why the warning is accepted here, for whoever reviews the configuration.",
    )


class Settings(Section):
    """The whole configuration (`settings` in cdk.json)."""

    prefix: str = Field(
        "pd-llm",
        **matching(
            r"^[a-z][a-z0-9-]{1,18}[a-z0-9]$",
            (
                "3-20 characters: lower-case letters, digits and '-', starting with a "
                "letter and not ending with '-'"
            ),
        ),
        description="Prefix of stack names and cluster name (3-20 characters, a-z 0-9 -).",
    )
    account: str | None = Field(
        None,
        **matching(r"^\d{12}$", "a 12-digit AWS account id"),
        description="Target AWS account. Unset: CDK_DEFAULT_ACCOUNT, else account-agnostic "
        "templates (synth needs no credentials).",
    )
    bootstrap_qualifier: str | None = Field(
        None,
        # The CDK bootstrap template's Qualifier parameter (aws-cdk CLI,
        # lib/api/bootstrap/bootstrap-template.yaml): AllowedPattern [A-Za-z0-9_-]{1,10}, so
        # that cdk-<qualifier>-image-publishing-role-<account>-<region> fits IAM's 64. The same
        # template names its bucket cdk-<qualifier>-assets-<account>-<region> and its ECR
        # repository cdk-<qualifier>-container-assets-..., and S3 bucket names take no
        # uppercase letter and no '_', ECR repository names no uppercase and no two
        # separators in a row: of the template's pattern only lowercase words of letters and
        # digits joined by single '-' bootstrap.
        max_length=10,
        **matching(
            r"^[a-z0-9]+(-[a-z0-9]+)*$",
            "1-10 lowercase letters and digits, words joined by single '-': the CDK bootstrap "
            "template's Qualifier, in the bootstrap's S3 bucket and ECR repository names "
            "(cdk-<qualifier>-assets-<account>-<region>)",
        ),
        description="The qualifier of a CDK bootstrap made for this app alone (cdk bootstrap "
        "--qualifier <it>). Unset: the account's shared default bootstrap, whose execution "
        "role every CDK app of the account deploys with, and which the kubectl provider guard "
        "must then exempt (docs/security.md, 'The deploy path').",
    )
    region: Annotated[str, one_of(REGIONS, "an AWS Region with EKS")] = Field(
        description="Target AWS Region."
    )
    tags: Tags = Field(
        {},
        **unicode_text(),
        description="Tags applied to every resource (at most 45: AWS takes 50 per resource and "
        "the app, the CDK and EKS add up to 5).",
    )
    retain_data_on_destroy: bool = Field(
        True,
        description="Keep KMS keys and log groups on `cdk destroy`. Set false for throw-away "
        "environments.",
    )
    network: Network
    cluster: Cluster = Field(Cluster(), description="EKS cluster settings.")
    gpu_nodes: GpuNodes = Field(GpuNodes(), description="EFA GPU node groups.")
    serving: Serving = Field(Serving(), description="The prefill/decode Ray service.")
    observability: Observability = Field(
        Observability(), description="Metrics, dashboard, alarms and log retention."
    )
    acknowledged_warnings: list[WarningAcknowledgment] = Field(
        [],
        max_length=64,
        description="Synth warnings weighed and accepted, each by its code (`cdk synth` prints "
        "it as `pd-llm:<code>`) with the reason: synth then prints the reason instead of the "
        "warning, and `cdk synth --strict` passes (docs/configuration.md, 'Warnings').",
    )

    @field_validator("bootstrap_qualifier")
    @classmethod
    def _dedicated_qualifier(cls, value: str | None) -> str | None:
        if value == DEFAULT_BOOTSTRAP_QUALIFIER:
            raise ValueError(
                f"{value!r} is the default qualifier, the account's shared bootstrap; leave "
                "bootstrap_qualifier unset for it, or name one of this app's own (cdk "
                "bootstrap --qualifier <name>)"
            )
        return value

    @model_validator(mode="after")
    def _cross_section_problems(self, info: ValidationInfo) -> Settings:
        """The rules across sections (app_config/rules). Raises ConfigError directly (see its
        docstring). The loader validates one top-level setting at a time with FIELDS_ONLY,
        then runs the rules whose settings are valid."""
        if (info.context or {}).get(FIELDS_ONLY):
            return self
        from app_config.rules import errors, evaluate

        problems = errors(evaluate(self))
        if problems:
            raise ConfigError(problems)
        return self

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or self.prefix

    def stack_name(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def sides_without_upgrade_room(self) -> list[str]:
        """GPU roles whose max_size cannot hold a NewCluster upgrade's second Ray cluster: it
        starts desired_size worker pods beside the serving cluster's (at least min_size), one
        node each. Their new cluster waits for nodes that never come and the upgrade stalls,
        the old cluster serving on."""
        if self.serving.upgrade_strategy != "NewCluster":
            return []
        return [
            role
            for role, group in self.gpu_nodes.groups().items()
            if group.scaling.max_size < group.scaling.min_size + group.scaling.desired_size
        ]

    def side(self, role: str) -> Side:
        """One side, its nodes and its engine joined (app_config/side.py)."""
        shared = self.gpu_nodes.shared
        if shared is not None:
            return Side(
                role,  # type: ignore[arg-type]
                shared,
                self.serving.engine(role),
                group=SHARED_GROUP,
                share=getattr(shared.gpus, role),
                options=self.serving.engine_options_for(role),
            )
        return Side(
            role,  # type: ignore[arg-type]
            self.gpu_nodes.groups()[role],
            self.serving.engine(role),
            options=self.serving.engine_options_for(role),
        )

    def sides(self) -> tuple[Side, ...]:
        """Both sides, prefill first."""
        return tuple(self.side(role) for role in GPU_ROLES)

    def replica_gpus(self, role: str) -> tuple[int, int]:
        """(tensor parallel, pipeline parallel) of one engine rank of the side."""
        side = self.side(role)
        return side.tensor_parallel, side.pipeline_parallel

    def dp_group_gpus(self, role: str) -> int:
        return self.side(role).replica_gpus

    def nodes_per_replica(self, role: str) -> int:
        return self.side(role).nodes_per_replica


# Validation context flag: validate settings without the checks across sections.
FIELDS_ONLY = "fields_only"
