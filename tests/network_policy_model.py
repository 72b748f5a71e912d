"""Kubernetes NetworkPolicies evaluated the way the Amazon VPC CNI enforces them.

The rules that differ from the Kubernetes reading, from aws/amazon-network-policy-controller-k8s
v1.1.7 (``pkg/resolvers/endpoints.go``) and aws/aws-network-policy-agent v1.4.1
(``pkg/ebpf/c/tc.v4egress.bpf.c``):

- The egress hook sits on the pod's veth, before kube-proxy's DNAT: traffic to a Service is
  judged by its ClusterIP and *Service* port. The controller adds a Service's ClusterIP to an
  egress rule only when the rule's podSelector, evaluated against the Service's ``spec.selector``
  as if those were pod labels, matches (``getMatchingServiceClusterIPs``). Allowing the backing
  pods' IPs does not help (issues #207, #224; documented limitation, PR #252).
- Policy ports are target ports; the ClusterIP entry gets the Service port whose targetPort equals
  the policy port (``LookupServiceListenPort``).
- Ingress sees pod IPs after DNAT; only pod IPs and ipBlocks count. Headless Services have no
  ClusterIP: clients reach the pods' IPs directly.
- A pod selected by no policy of a direction is not isolated in it.
- At most 24 port entries per peer address and direction (aws-network-policy-agent v1.4.1
  ``pkg/utils/utils.go`` ComputeTrieValue: TRIE_VALUE_LENGTH 288 bytes = 24 entries of
  protocol/start port/end port, the rest dropped with "No.of unique port/protocol combinations
  supported for a single endpoint exceeded the supported maximum of 24"; the eBPF programs loop
  over MAX_PORT_PROTOCOL 24, ``pkg/ebpf/c/tc.v4ingress.bpf.c``). The entries of every rule that
  reaches the address are merged first (``pkg/fwruleprocessor/fw_rule_processor.go``
  ComputeMapEntriesFromEndpointRules: same CIDR appended, broader CIDRs inherited,
  mergeDuplicateL4Info drops exact duplicates); a rule without ports is one catch-all entry and
  a ``port``/``endPort`` range is one entry.
- A pod's own node is always admitted, both ways, whatever the policies say: the agent writes an
  allow-all entry for the node's primary IP into every map before the rules
  (``ComputeMapEntriesFromEndpointRules``: "Traffic from the local node should always be
  allowed"; the same function fills the ingress and the egress maps, ``pkg/ebpf/bpf_client.go``
  updateEbpfMap), and drops any rule that names the node IP (``shouldSkipRule``). PRs #65 and
  #636. So kubelet probes pass, and so does anything else that connects from the node: the SSM
  agent's port forwards, a host-network process. Another node's address is judged like any
  address of the VPC.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    ip: str
    node_ip: str | None = None  # the primary IP of the node it runs on; None: not modelled


@dataclass(frozen=True)
class Service:
    name: str
    namespace: str
    selector: dict[str, str] | None
    ports: list[dict[str, Any]]  # {port, targetPort, protocol}
    cluster_ip: str | None  # None: headless


@dataclass(frozen=True)
class Flow:
    """One connection: from a pod (or an address outside the cluster) to a pod, directly or
    through a Service."""

    source: Pod | str
    destination: Pod
    port: int  # the destination pod's port
    protocol: str = "TCP"
    via: Service | None = None


@dataclass
class Cluster:
    policies: list[dict[str, Any]]
    namespaces: dict[str, dict[str, str]]  # name -> labels
    pods: list[Pod] = field(default_factory=list)

    def allows(self, flow: Flow) -> bool:
        return self._egress_allows(flow) and self._ingress_allows(flow)

    def _selecting(self, pod: Pod, direction: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.policies
            if p["metadata"]["namespace"] == pod.namespace
            and direction in p["spec"].get("policyTypes", ["Ingress"])
            and selector_matches(p["spec"]["podSelector"], pod.labels)
        ]

    def _egress_allows(self, flow: Flow) -> bool:
        if isinstance(flow.source, str):
            return True  # outside the cluster: not ours to restrict
        if flow.source.node_ip is not None and flow.destination.ip == flow.source.node_ip:
            return True  # to its own node: always allowed
        policies = self._selecting(flow.source, "Egress")
        if not policies:
            return True
        service = flow.via if flow.via and flow.via.cluster_ip else None
        if not service:
            entries = self.agent_entries(policies, "egress", flow.destination)
            return entries_admit(entries[:L4_ENTRIES_PER_PEER], flow.port, flow.protocol)
        for policy in policies:
            for rule in policy["spec"].get("egress", []):
                if self._rule_admits_service(rule, policy, service, flow):
                    return True
        return False

    def _ingress_allows(self, flow: Flow) -> bool:
        if on_own_node(flow):
            return True
        policies = self._selecting(flow.destination, "Ingress")
        if not policies:
            return True
        entries = self.agent_entries(policies, "ingress", flow.source)
        return entries_admit(entries[:L4_ENTRIES_PER_PEER], flow.port, flow.protocol)

    def agent_entries(
        self, policies: list[dict[str, Any]], direction: str, peer: Pod | str
    ) -> list[tuple[str, int | None, int | None]]:
        """The port entries the agent writes for one peer address: (protocol, port, endPort),
        protocol "ANY" for a rule without ports, duplicates merged, in rule order. Only the
        first L4_ENTRIES_PER_PEER are enforced."""
        key = "from" if direction == "ingress" else "to"
        entries: list[tuple[str, int | None, int | None]] = []
        for policy in policies:
            for rule in policy["spec"].get(direction, []):
                peers = rule.get(key)
                if peers is not None and not any(self._peer_is(p, policy, peer) for p in peers):
                    continue
                for entry in rule.get("ports") or [{"protocol": "ANY"}]:
                    item = (entry.get("protocol", "TCP"), entry.get("port"), entry.get("endPort"))
                    if item not in entries:
                        entries.append(item)
        return entries

    def _rule_admits_service(self, rule: dict, policy: dict, service: Service, flow: Flow) -> bool:
        service_port = next((p for p in service.ports if p["targetPort"] == flow.port), None)
        if service_port is None:
            return False
        peers = rule.get("to")
        ports = rule.get("ports")
        if peers is None:
            return ports_admit(ports, service_port["port"], flow.protocol)
        for peer in peers:
            if "ipBlock" in peer:
                if in_block(service.cluster_ip, peer["ipBlock"]) and ports_admit(
                    ports, service_port["port"], flow.protocol
                ):
                    return True
                continue
            if service.namespace not in self._peer_namespaces(peer, policy):
                continue
            # The VPC CNI's rule: the peer's podSelector against the Service's selector map.
            if not selector_matches(peer.get("podSelector") or {}, service.selector or {}):
                continue
            # Policy ports are target ports: this one maps to the Service port.
            if ports_admit(ports, flow.port, flow.protocol):
                return True
        return False

    def _peer_namespaces(self, peer: dict, policy: dict) -> set[str]:
        if "namespaceSelector" not in peer:
            return {policy["metadata"]["namespace"]}
        return {
            name
            for name, labels in self.namespaces.items()
            if selector_matches(peer["namespaceSelector"], labels)
        }

    def _peer_is(self, peer: dict, policy: dict, endpoint: Pod | str) -> bool:
        if "ipBlock" in peer:
            address = endpoint if isinstance(endpoint, str) else endpoint.ip
            return in_block(address, peer["ipBlock"])
        if isinstance(endpoint, str):
            return False
        return endpoint.namespace in self._peer_namespaces(peer, policy) and selector_matches(
            peer.get("podSelector") or {}, endpoint.labels
        )


def on_own_node(flow: Flow) -> bool:
    """The flow comes from the destination pod's own node (its primary IP)."""
    node_ip = flow.destination.node_ip
    return node_ip is not None and isinstance(flow.source, str) and flow.source == node_ip


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions; {} matches everything)."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


L4_ENTRIES_PER_PEER = 24


def entries_admit(entries: list[tuple[str, int | None, int | None]], port: int, protocol: str):
    """The eBPF match: protocol ANY, or the protocol with no port, the port, or start-end."""
    for entry_protocol, start, end in entries:
        if entry_protocol == "ANY":
            return True
        if entry_protocol != protocol:
            continue
        if start is None or port == start or (end is not None and start <= port <= end):
            return True
    return False


def ports_admit(ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        if "port" not in entry:
            return True
        end = entry.get("endPort", entry["port"])
        if entry["port"] <= port <= end:
            return True
    return False


def in_block(address: str | None, block: dict[str, Any]) -> bool:
    if address is None:
        return False
    ip = ipaddress.ip_address(address)
    if ip not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(ip in ipaddress.ip_network(cidr) for cidr in block.get("except", []))
