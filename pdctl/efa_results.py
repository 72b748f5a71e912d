"""Reading what the `pdctl efa-check` Jobs printed, and judging it against the catalog.

Formats read, from libfabric v2.4.0 (the base of EFA installer 1.49's libfabric 2.4.0amzn5.0):
- `fi_info -p efa -f efa -t FI_EP_RDM` (util/info.c print_short_info): per fabric and domain a
  block `provider: efa` / `    fabric: efa` / `    domain: rdmap79s0-rdm` / `    version: 204.0`
  / `    type: FI_EP_RDM` / `    protocol: FI_PROTO_EFA`. Only domains under fabric `efa` count.
- `fi_pingpong` (util/pingpong.c show_perf): a header, then per message size a row printed
  `%-8s%-8s` size and #sent, `=`/`-`/`+` then `%-8s` the acknowledged count (`=N` all, `+N` N
  fewer than sent, `-N` N more), `%-8s` total bytes, `%8.2fs%10.2f%11.2f%11.2f` time, MB/sec,
  usec/xfer and Mxfers/sec. Sizes and totals come from size_str (1024-based k/m/g with one
  decimal below 10: `1.5k`, `1.5m`), counts from cnt_str (1000-based k/m/b, truncated).
  `-S all` sizes come from generate_test_sizes: 0, 1, then 2^i and 1.5 x 2^i up to the largest
  message (PP_MAX_DATA_MSG, 6 MiB, or the fabric's max_msg_size when smaller).
- The `### pdctl-efa-check` marker lines pdctl/efa_jobs.py's scripts echo around them.

A pair counts as measured only on positive, finite, complete evidence from its last attempt on
both sides: exit status 0, every expected size in order, every message acknowledged, every
figure finite and above zero. Rows an earlier, retried attempt left never count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from app_config.efa_check import EfaCheck, device_pairs
from catalog.instances import GpuInstance
from pdctl.checks import Check, failed, passed
from pdctl.efa_jobs import CLIENT_ROLE, FABRIC, MARK, SERVER_ROLE

PP_MAX_DATA_MSG = (1 << 22) + (1 << 21)  # util/pingpong.c: the largest message of `-S all`
HUNG_EXIT_CODES = (124, 137)  # coreutils timeout: TERM at the bound, KILL after -k
_SIZE_BASES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_COUNT_BASES = {"": 1, "k": 1000, "m": 1000**2, "b": 1000**3}
_NUMBER = r"-?(?:\d+\.\d\d|inf|nan)"
_ROW = re.compile(
    r"^(?P<size>\d+(?:\.\d)?[kmg]?)\s+(?P<sent>\d+[kmb]?)\s+(?P<sign>[=+-])(?P<ack>\d+[kmb]?)\s+"
    rf"(?P<total>\d+(?:\.\d)?[kmg]?)\s+(?P<time>{_NUMBER})s\s*(?P<rate>{_NUMBER})\s*"
    rf"(?P<usec>{_NUMBER})\s*(?P<mxfers>{_NUMBER})$"
)
# Device names from rdma-core (rdmapXsY) plus the provider's suffix; anything else in a marker
# line is not ours and is ignored rather than echoed.
_DOMAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def message_sizes(largest: int = PP_MAX_DATA_MSG) -> list[int]:
    """generate_test_sizes with PP_ENABLE_ALL: i = 0 gives 0 and 1, then 2^i and 2^i + 2^(i-1),
    stopping at the first above ``largest``."""
    sizes = []
    for i in range(32):
        power, half_up = (0, 1) if i == 0 else (1 << i, (1 << i) + (1 << (i - 1)))
        if power > largest:
            break
        sizes.append(power)
        if half_up > largest:
            break
        sizes.append(half_up)
    return sizes


def size_str(size: int) -> str:
    """util/pingpong.c size_str: one decimal (truncated) when the integer part is below 10."""
    mag = next((m for m in ("g", "m", "k") if size >= _SIZE_BASES[m]), "")
    base = _SIZE_BASES[mag]
    fraction = (size % base) * 10 // base if size // base < 10 else 0
    return f"{size // base}.{fraction}{mag}" if fraction else f"{size // base}{mag}"


def cnt_str(count: int) -> str:
    """util/pingpong.c cnt_str: 1000-based, truncated."""
    for mag in ("b", "m", "k"):
        if count >= _COUNT_BASES[mag]:
            return f"{count // _COUNT_BASES[mag]}{mag}"
    return str(count)


EXPECTED_SIZES = [size_str(size) for size in message_sizes()]


def size_bytes(text: str) -> int:
    """A printed size back to bytes (exact for every size `-S all` prints except where size_str
    truncated: 1.5k is 1536)."""
    number, mag = re.fullmatch(r"(\d+(?:\.\d)?)([kmg]?)", text).groups()
    return int(float(number) * _SIZE_BASES[mag])


@dataclass(frozen=True)
class PingPongRow:
    size: str  # as printed: 1.5k
    sent: str  # as printed by cnt_str
    ack_sign: str  # = all acknowledged, + fewer, - more
    ack: str
    seconds: float
    mb_per_second: float  # 10^6 bytes per second
    usec_per_transfer: float
    mxfers_per_second: float

    @property
    def size_bytes(self) -> int:
        return size_bytes(self.size)

    @property
    def gbps(self) -> float:
        return self.mb_per_second * 8 / 1000


def parse_row(line: str) -> PingPongRow | None:
    match = _ROW.match(line.strip())
    if not match:
        return None
    return PingPongRow(
        size=match["size"],
        sent=match["sent"],
        ack_sign=match["sign"],
        ack=match["ack"],
        seconds=float(match["time"]),
        mb_per_second=float(match["rate"]),
        usec_per_transfer=float(match["usec"]),
        mxfers_per_second=float(match["mxfers"]),
    )


@dataclass
class Attempt:
    number: int
    domain: str
    rows: list[PingPongRow] = field(default_factory=list)
    exit_code: int | None = None  # None: no end line (the pod stopped inside it)


@dataclass
class SideReport:
    """One pod's view: the devices libfabric and the device plugin gave it, and its pairs."""

    uverbs_devices: int | None = None
    domains: list[str] = field(default_factory=list)  # under the efa fabric
    fi_info_failed: bool = False
    partner_ready: bool = False
    pairs: dict[int, list[Attempt]] = field(default_factory=dict)  # attempts in order
    stopped: bool = False  # the first pairs all failed: the script gave up on the rest
    finished: bool = False

    def last_attempt(self, pair: int) -> Attempt | None:
        attempts = self.pairs.get(pair)
        return attempts[-1] if attempts else None


def _int(word: str) -> int | None:
    return int(word) if re.fullmatch(r"-?\d{1,9}", word) else None


def parse_log(log: str) -> SideReport:
    report = SideReport()
    section, current = "", None
    fabric, domains = "", set()
    for line in log.splitlines():
        if line.startswith(MARK):
            words = line[len(MARK) :].split()
            section = words[0] if words else ""
            current = _marker(report, section, words[1:], current)
            continue
        if section == "fi_info":
            key, _, value = line.strip().partition(":")
            value = value.strip()
            if key == "fabric":
                fabric = value
            elif key == "domain" and fabric == FABRIC and _DOMAIN.match(value):
                domains.add(value)
        elif section == "attempt" and current is not None:
            row = parse_row(line)
            if row:
                current.rows.append(row)
    report.domains = sorted(domains)
    return report


def _marker(report: SideReport, kind: str, words: list[str], current: Attempt | None):
    """Applies one marker line; returns the attempt rows now belong to."""
    if kind == "uverbs" and words and _int(words[0]) is not None:
        report.uverbs_devices = _int(words[0])
    elif kind == "fi_info-failed":
        report.fi_info_failed = True
    elif kind == "partner-ready":
        report.partner_ready = True
    elif kind == "attempt" and len(words) == 3 and _DOMAIN.match(words[1]):
        pair, number = _int(words[0]), _int(words[2])
        if pair is not None and number is not None:
            attempt = Attempt(number, words[1])
            report.pairs.setdefault(pair, []).append(attempt)
            return attempt
    elif kind == "end" and len(words) == 3 and current is not None:
        if _int(words[0]) is not None and words[1] == current.domain:
            current.exit_code = _int(words[2])
    elif kind == "stopped":
        report.stopped = True
    elif kind == "done":
        report.finished = True
    return None


@dataclass(frozen=True)
class PairVerdict:
    """One device pair, from both sides' last attempts."""

    index: int
    domains: dict[str, str | None]  # per role
    problem: str  # "" when measured
    hung: bool = False
    latency_us: float | None = None  # at the smallest message
    bandwidth_gbps: float | None = None  # at the largest

    @property
    def measured(self) -> bool:
        return not self.problem


def _rows_problem(attempt: Attempt | None, iterations: int, role: str) -> tuple[str, bool]:
    """What keeps one side's last attempt from being evidence; "" when it is."""
    if attempt is None:
        return f"{role}: never ran", False
    if attempt.exit_code is None:
        return f"{role}: stopped inside the ping-pong (no exit status)", False
    if attempt.exit_code in HUNG_EXIT_CODES:
        return f"{role}: no completion within the pair's bound (hung)", True
    if attempt.exit_code != 0:
        return f"{role}: fi_pingpong exit {attempt.exit_code}", False
    sizes = [row.size for row in attempt.rows]
    if sizes != EXPECTED_SIZES:
        last = sizes[-1] if sizes else "none"
        return (
            f"{role}: {len(sizes)} of {len(EXPECTED_SIZES)} message sizes (last {last}, "
            f"expected up to {EXPECTED_SIZES[-1]}; the {FABRIC} fabric carries them all)",
            False,
        )
    for row in attempt.rows:
        if row.ack_sign != "=" or row.sent != cnt_str(iterations):
            return (
                f"{role}: at {row.size} {row.sent} sent, {row.ack_sign}{row.ack} acknowledged "
                f"(expected ={cnt_str(iterations)})",
                False,
            )
        figures = (row.seconds, row.mb_per_second, row.usec_per_transfer, row.mxfers_per_second)
        if not all(math.isfinite(x) and x >= 0 for x in figures) or row.usec_per_transfer <= 0:
            return f"{role}: at {row.size} a figure is not finite and positive", False
    if attempt.rows[-1].mb_per_second <= 0:
        return f"{role}: no bandwidth at {attempt.rows[-1].size}", False
    return "", False


def pair_verdict(index: int, sides: dict[str, SideReport], iterations: int) -> PairVerdict:
    attempts = {role: side.last_attempt(index) for role, side in sides.items()}
    domains = {role: attempt.domain if attempt else None for role, attempt in attempts.items()}
    problems = [
        _rows_problem(attempts[role], iterations, role) for role in (CLIENT_ROLE, SERVER_ROLE)
    ]
    described = [text for text, _ in problems if text]
    if described:
        return PairVerdict(index, domains, "; ".join(described), any(h for _, h in problems))
    rows = attempts[CLIENT_ROLE].rows  # the client starts and times the round trips
    return PairVerdict(
        index, domains, "", latency_us=rows[0].usec_per_transfer, bandwidth_gbps=rows[-1].gbps
    )


@dataclass(frozen=True)
class Expectation:
    """What the catalog says one node of the side has."""

    instance_type: str
    network_cards: int
    efa_bandwidth_gbps: int

    @property
    def per_device_gbps(self) -> float:
        return self.efa_bandwidth_gbps / self.network_cards


def expectation(instance: GpuInstance) -> Expectation:
    return Expectation(instance.name, instance.network_cards, instance.efa_bandwidth_gbps)


def device_checks(role: str, side: SideReport, expected: Expectation) -> list[Check]:
    """The node's EFA devices as libfabric lists them and as the device plugin mounted them,
    against the instance's network cards (one EFA device each)."""
    name = f"{role} node: EFA devices"
    seen, mounted, cards = len(side.domains), side.uverbs_devices, expected.network_cards
    detail = (
        f"libfabric lists {seen} under fabric {FABRIC}, the pod has {mounted} uverbs devices; "
        f"{expected.instance_type} has {cards} network cards"
    )
    if seen == cards and mounted == cards:
        return [passed(name, detail)]
    every = seen == 0
    return [
        failed(
            name,
            detail + ("; every device is missing" if every else ""),
            "a device is missing or down on this node: check the launch template's interfaces "
            "(every network card, EFA), the EFA device plugin's pod on the node, and "
            "`dmesg | grep efa` (Session Manager); replace the node if a card is down",
        )
    ]


PAIRS_NAME = "prefill-decode ping-pong over EFA: every device pair"
_PATH_FIX = (
    "the path between the nodes is down, not a device: both nodes list every device and the "
    "pods' control sockets connected, but no EFA message completed. The EFA security group "
    "must allow all inbound and outbound traffic to and from itself (EFA user guide); both "
    "nodes must be in the same Availability Zone and EFA peer group"
)
_DEVICE_FIX = (
    "the devices named fail while others pass: replace the node that holds them "
    "(docs/observability.md, 'EFA runbook'); if they are spread over both nodes, compare with "
    "a baseline from healthy nodes (pdctl efa-check --json)"
)


def pairs_check(verdicts: list[PairVerdict], sides: dict[str, SideReport], pairs: int) -> Check:
    measured = [v for v in verdicts if v.measured]
    unmeasured_devices = [
        f"{role}:{domain}"
        for role in (CLIENT_ROLE, SERVER_ROLE)
        for domain in sides[role].domains
        if domain not in {v.domains[role] for v in measured}
    ]
    if len(measured) == pairs and not unmeasured_devices:
        return passed(PAIRS_NAME, f"{pairs} of {pairs} pairs measured on fabric {FABRIC}")
    if len(measured) == pairs:
        return failed(
            PAIRS_NAME,
            f"{pairs} pairs measured, but listed devices in none of them: {unmeasured_devices}",
            "read both logs (pdctl efa-check --json, 'logs'): the pairs did not cycle through "
            "every device",
        )
    summary = f"{len(measured)} of {pairs} pairs measured"
    empty = [role for role in (CLIENT_ROLE, SERVER_ROLE) if not sides[role].domains]
    if empty:
        return failed(
            PAIRS_NAME,
            f"{summary}; the {' and '.join(empty)} node lists no EFA device: every device is "
            "down there, no pair could run",
            "see the node's 'EFA devices' check",
        )
    unmeasured = [v for v in verdicts if not v.measured]
    not_run = pairs - len(verdicts)
    described = "; ".join(
        f"pair {v.index} ({v.domains[CLIENT_ROLE]} -> {v.domains[SERVER_ROLE]}): {v.problem}"
        for v in unmeasured[:4]
    ) + (f"; {len(unmeasured) - 4} more" if len(unmeasured) > 4 else "")
    tail = f"; {not_run} pairs not run" if not_run else ""
    if not measured and any(v.hung for v in unmeasured):
        return failed(PAIRS_NAME, f"path down: {summary}; {described}{tail}", _PATH_FIX)
    suspects = _common_devices(unmeasured, measured)
    blame = f"; failing in every pair they are in: {suspects}" if suspects else ""
    fix = _DEVICE_FIX if measured else _unreached_fix(sides)
    return failed(PAIRS_NAME, f"{summary}; {described}{tail}{blame}", fix)


def _unreached_fix(sides: dict[str, SideReport]) -> str:
    if not all(side.partner_ready for side in sides.values()):
        return "a pod never saw its partner run: read both logs (pdctl efa-check --json, 'logs')"
    return (
        "no pair got going: read both logs (pdctl efa-check --json, 'logs'); the control "
        "sockets use the ports of the allow-pdctl-efa-check network policy"
    )


def _common_devices(unmeasured: list[PairVerdict], measured: list[PairVerdict]) -> list[str]:
    """Devices (role:domain) in failing pairs and in no measured pair: the likely culprits."""
    good = {f"{role}:{d}" for v in measured for role, d in v.domains.items()}
    bad = {f"{role}:{d}" for v in unmeasured for role, d in v.domains.items() if d}
    return sorted(bad - good)


def rate_checks(
    verdicts: list[PairVerdict], pairs: int, per_device_gbps: float, marks: EfaCheck
) -> list[Check]:
    """Bandwidth at the largest message and latency at the smallest, on every pair: a pass
    needs them all measured."""
    floor = marks.min_bandwidth_share * per_device_gbps
    measured = [v for v in verdicts if v.measured]
    bandwidth_name = (
        f"bandwidth >= {floor:.0f} Gbps per device pair ({marks.min_bandwidth_share:.0%} of "
        f"{per_device_gbps:.0f})"
    )
    latency_name = f"latency <= {marks.max_latency_us:g} us per device pair"
    if len(measured) < pairs:
        missing = f"{pairs - len(measured)} of {pairs} pairs not measured: no evidence"
        return [
            failed(bandwidth_name, missing, "see the every-device-pair check"),
            failed(latency_name, missing, "see the every-device-pair check"),
        ]
    bandwidths = [v.bandwidth_gbps for v in measured]
    latencies = [v.latency_us for v in measured]
    summary = (
        f"{pairs} pairs: {min(bandwidths):.1f}-{max(bandwidths):.1f} Gbps at "
        f"{EXPECTED_SIZES[-1]}, {min(latencies):.1f}-{max(latencies):.1f} us at 0 bytes"
    )
    slow = [v.index for v in measured if v.bandwidth_gbps < floor]
    late = [v.index for v in measured if v.latency_us > marks.max_latency_us]
    return [
        failed(bandwidth_name, f"below on pairs {slow}; {summary}", _SLOW_FIX)
        if slow
        else passed(bandwidth_name, summary),
        failed(latency_name, f"above on pairs {late}; {summary}", _SLOW_FIX)
        if late
        else passed(latency_name, summary),
    ]


_SLOW_FIX = (
    "compare with a baseline from healthy nodes (pdctl efa-check --json); a device far below its "
    "peers points at that node: replace it (docs/observability.md, 'EFA runbook')"
)


def evaluate(
    logs: dict[str, str],
    expected: dict[str, Expectation],
    marks: EfaCheck,
    unfinished: list[str] | None = None,
) -> tuple[list[Check], dict[str, SideReport], list[PairVerdict]]:
    """``logs`` and ``expected`` by role; the client ran on prefill, the server on decode.
    ``unfinished``: roles pdctl's deadline caught still running."""
    sides = {role: parse_log(logs.get(role, "")) for role in (CLIENT_ROLE, SERVER_ROLE)}
    checks = [
        check
        for role in (CLIENT_ROLE, SERVER_ROLE)
        for check in device_checks(role, sides[role], expected[role])
    ]
    pairs = device_pairs(expected[CLIENT_ROLE].network_cards, expected[SERVER_ROLE].network_cards)
    ran = set(sides[CLIENT_ROLE].pairs) | set(sides[SERVER_ROLE].pairs)
    verdicts = [
        pair_verdict(index, sides, marks.iterations) for index in range(pairs) if index in ran
    ]
    checks.append(pairs_check(verdicts, sides, pairs))
    per_device = min(expected[role].per_device_gbps for role in (CLIENT_ROLE, SERVER_ROLE))
    checks += rate_checks(verdicts, pairs, per_device, marks)
    stopped_early = [role for role, side in sides.items() if not side.finished or side.stopped]
    if stopped_early or unfinished:
        reasons = [
            f"{role}: "
            + (
                "still running at pdctl's deadline"
                if role in (unfinished or [])
                else "gave up after the first pairs failed"
                if sides[role].stopped
                else "no end marker (stopped by its deadline, or the image lacks fi_info)"
            )
            for role in sorted(set(stopped_early) | set(unfinished or []))
        ]
        checks.append(
            failed(
                "both pods ran to the end",
                "; ".join(reasons),
                "read the pods' logs in `pdctl efa-check --json` (key 'logs')",
            )
        )
    else:
        checks.append(passed("both pods ran to the end", f"{len(ran)} pairs run"))
    return checks, sides, verdicts


def as_dict(side: SideReport) -> dict[str, Any]:
    return {
        "uverbs_devices": side.uverbs_devices,
        "domains": side.domains,
        "partner_ready": side.partner_ready,
        "stopped": side.stopped,
        "finished": side.finished,
        "pairs": {
            str(index): [
                {
                    "attempt": attempt.number,
                    "domain": attempt.domain,
                    "exit_code": attempt.exit_code,
                    "rows": len(attempt.rows),
                }
                for attempt in attempts
            ]
            for index, attempts in side.pairs.items()
        },
    }


def verdict_dict(verdict: PairVerdict) -> dict[str, Any]:
    return {
        "pair": verdict.index,
        "domains": verdict.domains,
        "measured": verdict.measured,
        "problem": verdict.problem,
        "latency_us": verdict.latency_us,
        "bandwidth_gbps": verdict.bandwidth_gbps,
    }
