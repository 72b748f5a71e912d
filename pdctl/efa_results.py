"""Reading what the `pdctl efa-check` Jobs printed, and judging it against the catalog.

Formats read (libfabric 2.x, the EFA installer's build):
- `fi_info -p efa -t FI_EP_RDM`: one block per provider/fabric/domain, the domain on a line
  `    domain: rdmap79s0-rdm`; EFA 1.4x lists each device under two fabrics (efa, efa-direct).
- `fi_pingpong`: libfabric util/pingpong.c show_perf, a header
  `bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec` and one row per
  message size, sizes and totals with 1024-based k/m/g suffixes.
The samples the tests read (tests/data/fabtests/) are written in these formats; their sources are
named in that folder's README.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from app_config.efa_check import EfaCheck
from catalog.instances import GpuInstance
from pdctl.checks import Check, failed, passed
from pdctl.efa_jobs import MARK

_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_ROW = re.compile(
    r"^(?P<bytes>\d+[kmg]?)\s+(?P<sent>\d+\S*)\s+=?(?P<ack>\d+\S*)\s+(?P<total>[\d.]+[kmg]?)\s+"
    r"(?P<time>[\d.]+)s\s+(?P<mb_per_s>[\d.]+)\s+(?P<usec>[\d.]+)\s+(?P<mxfers>[\d.]+)\s*$"
)


def size_bytes(text: str) -> int:
    number, suffix = re.fullmatch(r"(\d+)([kmg]?)", text).groups()
    return int(number) * _SUFFIX[suffix]


@dataclass(frozen=True)
class PingPongRow:
    size_bytes: int
    mb_per_second: float  # 10^6 bytes per second
    usec_per_transfer: float

    @property
    def gbps(self) -> float:
        return self.mb_per_second * 8 / 1000


@dataclass
class DeviceResult:
    domain: str
    rows: list[PingPongRow] = field(default_factory=list)
    failed: bool = False

    @property
    def latency_us(self) -> float | None:
        return min(self.rows, key=lambda r: r.size_bytes).usec_per_transfer if self.rows else None

    @property
    def bandwidth_gbps(self) -> float | None:
        return max(self.rows, key=lambda r: r.size_bytes).gbps if self.rows else None


@dataclass
class SideReport:
    """One pod's view: the devices libfabric and the device plugin gave it, and its ping-pongs."""

    uverbs_devices: int | None = None
    domains: list[str] = field(default_factory=list)
    devices: dict[str, DeviceResult] = field(default_factory=dict)
    finished: bool = False


def parse_log(log: str) -> SideReport:
    report = SideReport()
    section, current = "", None
    domains: set[str] = set()
    for line in log.splitlines():
        if line.startswith(MARK):
            words = line[len(MARK) :].split()
            section = words[0] if words else ""
            if section == "uverbs" and len(words) > 1 and words[1].isdigit():
                report.uverbs_devices = int(words[1])
            elif section == "pingpong" and len(words) > 1:
                current = report.devices.setdefault(words[1], DeviceResult(words[1]))
            elif section == "pingpong-failed" and len(words) > 1:
                report.devices.setdefault(words[1], DeviceResult(words[1])).failed = True
            elif section == "done":
                report.finished = True
            continue
        if section == "fi_info":
            key, _, value = line.strip().partition(":")
            if key == "domain" and value.strip():
                domains.add(value.strip())
        elif section == "pingpong" and current is not None:
            match = _ROW.match(line.strip())
            if match:
                current.rows.append(
                    PingPongRow(
                        size_bytes=size_bytes(match["bytes"]),
                        mb_per_second=float(match["mb_per_s"]),
                        usec_per_transfer=float(match["usec"]),
                    )
                )
    report.domains = sorted(domains)
    return report


@dataclass(frozen=True)
class Expectation:
    """What the catalog says one node of the side has."""

    instance_type: str
    network_cards: int
    efa_bandwidth_gbps: int

    @property
    def per_device_gbps(self) -> float:
        return self.efa_bandwidth_gbps / self.network_cards


def device_checks(role: str, side: SideReport, expected: Expectation) -> list[Check]:
    """The node's EFA devices as libfabric lists them and as the device plugin mounted them,
    against the instance's network cards (one EFA device each)."""
    name = f"{role} node: EFA devices"
    seen, mounted, cards = len(side.domains), side.uverbs_devices, expected.network_cards
    detail = f"libfabric lists {seen}, the pod has {mounted} uverbs devices; {expected.instance_type} has {cards} network cards"  # noqa: E501
    if seen == cards and mounted == cards:
        return [passed(name, detail)]
    return [
        failed(
            name,
            detail,
            "a device is missing or down on this node: check the launch template's interfaces "
            "(every network card, EFA), the EFA device plugin's pod on the node, and "
            "`dmesg | grep efa` (Session Manager); replace the node if a card is down",
        )
    ]


def path_expectation(prefill: Expectation, decode: Expectation) -> Expectation:
    """Device i pairs with device i: as many pairs as the smaller node has devices, each held to
    the slower device's line rate (p5 with p5en is allowed: both are p5-class)."""
    slower = min((prefill, decode), key=lambda e: e.per_device_gbps)
    pairs = min(prefill.network_cards, decode.network_cards)
    return Expectation(
        instance_type=f"{prefill.instance_type}/{decode.instance_type}",
        network_cards=pairs,
        efa_bandwidth_gbps=round(slower.per_device_gbps * pairs),
    )


def path_checks(client: SideReport, expected: Expectation, marks: EfaCheck) -> list[Check]:
    """Every device pair's ping-pong (``expected`` from path_expectation): latency at the
    smallest message, bandwidth at the largest, against the configured share of the device's
    line rate."""
    floor = marks.min_bandwidth_share * expected.per_device_gbps
    devices = sorted(client.devices)
    missing = [d for d in devices if not _result(d, client).rows]
    slow = [
        d for d in devices if d not in missing and (_result(d, client).bandwidth_gbps or 0) < floor
    ]
    late = [
        d
        for d in devices
        if d not in missing and (_result(d, client).latency_us or 0) > marks.max_latency_us
    ]
    measured = [_result(d, client) for d in devices if d not in missing]
    summary = f"{len(measured)} of {expected.network_cards} device pairs measured" + (
        f"; bandwidth {min(r.bandwidth_gbps for r in measured):.1f}-"
        f"{max(r.bandwidth_gbps for r in measured):.1f} Gbps, latency "
        f"{min(r.latency_us for r in measured):.1f}-{max(r.latency_us for r in measured):.1f} us"
        if measured
        else ""
    )
    checks = []
    if missing or len(devices) < expected.network_cards:
        checks.append(
            failed(
                "prefill-decode ping-pong over EFA: every device pair",
                f"{summary}; no result for {missing or 'devices libfabric did not list'}",
                "a pair that never connected: the device is down on one node, or the two "
                "nodes cannot reach each other over EFA (the EFA security group must admit all "
                "traffic from itself; both nodes in one placement group or reservation)",
            )
        )
    else:
        checks.append(passed("prefill-decode ping-pong over EFA: every device pair", summary))
    bandwidth_name = (
        f"bandwidth >= {floor:.0f} Gbps per device ({marks.min_bandwidth_share:.0%} of "
        f"{expected.per_device_gbps:.0f})"
    )
    checks.append(
        failed(bandwidth_name, f"below on {slow}", _SLOW_FIX)
        if slow
        else passed(bandwidth_name, summary)
    )
    latency_name = f"latency <= {marks.max_latency_us:g} us per device"
    checks.append(
        failed(latency_name, f"above on {late}", _SLOW_FIX)
        if late
        else passed(latency_name, summary)
    )
    return checks


_SLOW_FIX = (
    "compare with a baseline from healthy nodes (pdctl efa-check --json); a device far below its "
    "peers points at that node: replace it (docs/observability.md, 'EFA runbook')"
)


def _result(domain: str, client: SideReport) -> DeviceResult:
    """The client's rows: it starts and times the round trips (the server's view of a pair is
    the same exchange, so it adds nothing to judge)."""
    return client.devices.get(domain) or DeviceResult(domain)


def as_dict(side: SideReport) -> dict[str, Any]:
    return {
        "uverbs_devices": side.uverbs_devices,
        "domains": side.domains,
        "finished": side.finished,
        "devices": {
            name: {
                "latency_us": result.latency_us,
                "bandwidth_gbps": result.bandwidth_gbps,
                "failed": result.failed,
                "rows": [asdict(row) for row in result.rows],
            }
            for name, result in side.devices.items()
        },
    }


def expectation(instance: GpuInstance) -> Expectation:
    return Expectation(instance.name, instance.network_cards, instance.efa_bandwidth_gbps)


def evaluate(
    logs: dict[str, str], expected: dict[str, Expectation], marks: EfaCheck
) -> tuple[list[Check], dict[str, SideReport]]:
    """``logs`` and ``expected`` by role; the client ran on prefill, the server on decode."""
    sides = {role: parse_log(log) for role, log in logs.items()}
    checks = [
        check
        for role in ("prefill", "decode")
        for check in device_checks(role, sides[role], expected[role])
    ]
    pairs = path_expectation(expected["prefill"], expected["decode"])
    checks += path_checks(sides["prefill"], pairs, marks)
    unfinished = [role for role, side in sides.items() if not side.finished]
    if unfinished:
        checks.append(
            failed(
                "both pods ran to the end",
                f"{unfinished} stopped early (deadline, or the image lacks fi_info/fi_pingpong)",
                "read the pods' logs in `pdctl efa-check --json` (key 'logs')",
            )
        )
    return checks, sides
