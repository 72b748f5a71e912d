"""Stand-ins for libfabric's `fi_info` and `fi_pingpong` on an EFA node, following the source of
libfabric v2.4.0 (EFA installer 1.49 ships 2.4.0amzn5.0, built from it), so that the
`pdctl efa-check` scripts and parser meet the tools' real rules rather than our reading of them.
No output captured on EFA hardware exists here; every line these print follows these sources:

- Which fabrics and in what order: prov/efa/src/efa_prov.c efa_util_prov_initialize puts every
  device's `efa-direct` info first, then its `efa` RDM info, then its `efa` DGRAM info; each
  domain is `<device>-rdm` (efa_prov_info.c efa_prov_info_set_domain_attr and
  efa_domain_name_suffix; efa-direct is duplicated from the RDM info, so it has the same name).
  A hint's fabric name keeps only the matching fabric (efa_user_info.c efa_getinfo, the
  strcasecmp on EFA_FABRIC_NAME / EFA_DIRECT_FABRIC_NAME); a domain name only that domain.
- Largest message: efa-direct's max_msg_size is the device's max_msg_sz when FI_RMA is not asked
  for (efa_user_info.c efa_user_info_alter_direct; fi_pingpong asks for FI_MSG only);
  efa RDM's is UINT64_MAX (efa_prov_info.c efa_prov_info_alloc_for_rdm). max_msg_sz is a device
  attribute not in the source: NODE's default, 8 KiB, stands for "about one MTU".
- fi_info: util/info.c print_short_info (the block per info) and run ("fi_getinfo: %d (%s)" on
  stderr and exit 61 when nothing matches).
- fi_pingpong: util/pingpong.c main's getopt string and pp_parse_opts (-d -p -f -e -I -S -B -P),
  the first matching info as pp_init_fabric takes it, tx_size = min(PP_MAX_DATA_MSG,
  max_msg_size) (pp_alloc_msgs), generate_test_sizes, size_str, cnt_str and show_perf (header
  once, one row per size, on both sides); the control socket on -B (server, default 47592) or
  -P (client); "failed to connect" and exit status errno when nothing listens
  (pp_ctrl_init_client, main's `return -ret`); completions waited for without a bound
  (pp_get_cq_comp with timeout_sec -1): a path that carries nothing hangs forever.

Run as `python -m tests.fabtests_model fi_info|fi_pingpong ARGS`, with FABTESTS_NODE naming a
JSON file of the node (see `Node`).
"""

# ruff: noqa: UP031 (printf formats kept as the C source writes them)
from __future__ import annotations

import getopt
import json
import os
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field

PP_MAX_DATA_MSG = (1 << 22) + (1 << 21)
DEFAULT_CTRL_PORT = 47592
UINT64_MAX = 2**64 - 1
ENODATA = 61
PROVIDER_VERSION = "204.0"  # OFI_VERSION_DEF_PROV for 2.4.0: FI_VERSION(2 * 100 + 4, 0 * 10)


@dataclass
class Node:
    """One EFA node as the stand-ins see it."""

    devices: list[str]  # rdma-core names, e.g. rdmap16s27
    address: str = "127.0.0.1"  # where a server listens (loopback, one per test)
    max_msg_sz: int = 8192
    latency_us: float = 15.0
    gbps: dict[str, float] = field(default_factory=dict)  # per domain; default below
    default_gbps: float = 80.0
    hang: bool = False  # the EFA path carries nothing: every data phase waits forever
    hang_domains: list[str] = field(default_factory=list)  # only these devices hang

    def save(self, path: str) -> None:
        with open(path, "w") as handle:
            json.dump(asdict(self), handle)


@dataclass(frozen=True)
class Info:
    fabric: str
    domain: str
    ep_type: str
    max_msg_size: int


def infos(node: Node) -> list[Info]:
    """In efa_util_prov_initialize's order."""
    domains = [f"{device}-rdm" for device in node.devices]
    return (
        [Info("efa-direct", d, "FI_EP_RDM", node.max_msg_sz) for d in domains]
        + [Info("efa", d, "FI_EP_RDM", UINT64_MAX) for d in domains]
        + [Info("efa", f"{device}-dgrm", "FI_EP_DGRAM", node.max_msg_sz) for device in node.devices]
    )


def matching(node: Node, provider: str | None, fabric: str | None, domain: str | None,
             ep_type: str) -> list[Info]:  # fmt: skip
    if provider not in (None, "efa"):
        return []
    return [
        info
        for info in infos(node)
        if info.ep_type == ep_type
        and (fabric is None or info.fabric.lower() == fabric.lower())
        and (domain is None or info.domain == domain)
    ]


def fi_info(node: Node, argv: list[str]) -> int:
    options, _ = getopt.getopt(argv, "s:n:P:c:m:t:a:p:d:f:eg:i:lhv")
    given = dict(options)
    found = matching(node, given.get("-p"), given.get("-f"), given.get("-d"),
                     given.get("-t", "FI_EP_RDM"))  # fmt: skip
    if not found:
        print(f"fi_getinfo: -{ENODATA} (No data available)", file=sys.stderr)
        return ENODATA
    for info in found:
        print(f"provider: efa\n    fabric: {info.fabric}\n    domain: {info.domain}")
        print(f"    version: {PROVIDER_VERSION}\n    type: {info.ep_type}")
        print("    protocol: FI_PROTO_EFA")
    return 0


# --- util/pingpong.c's printing ---------------------------------------------------------------


def generate_test_sizes(tx_size: int) -> list[int]:
    sizes = []
    for i in range(32):
        power_of_two = 0 if i == 0 else 1 << i
        half_up = 1 if i == 0 else power_of_two + power_of_two // 2
        if power_of_two > tx_size:
            break
        sizes.append(power_of_two)
        if half_up > tx_size:
            break
        sizes.append(half_up)
    return sizes


def size_str(size: int) -> str:
    if size >= 1 << 30:
        base, mag = 1 << 30, "g"
    elif size >= 1 << 20:
        base, mag = 1 << 20, "m"
    elif size >= 1 << 10:
        base, mag = 1 << 10, "k"
    else:
        base, mag = 1, ""
    fraction = (size % base) * 10 // base if size // base < 10 else 0
    return f"{size // base}.{fraction}{mag}" if fraction else f"{size // base}{mag}"


def cnt_str(count: int) -> str:
    if count >= 1_000_000_000:
        return f"{count // 1_000_000_000}b"
    if count >= 1_000_000:
        return f"{count // 1_000_000}m"
    if count >= 1000:
        return f"{count // 1000}k"
    return str(count)


HEADER = "%-8s%-8s%-9s%-8s%8s %10s%13s%13s" % (
    "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec",
)  # fmt: skip


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def show_perf_row(tsize: int, sent: int, acked: int, elapsed_us: int, xfers_per_iter: int = 2):
    """One row of show_perf (name NULL), `printf` formats kept; usec_per_xfer is a C float."""
    total = sent * tsize * xfers_per_iter
    if sent == acked:
        ack = "=%-8s" % cnt_str(acked)
    elif sent < acked:
        ack = "-%-8s" % cnt_str(acked - sent)
    else:
        ack = "+%-8s" % cnt_str(sent - acked)
    usec_per_xfer = _float32(elapsed_us / sent / xfers_per_iter)
    rate = total / (1.0 * elapsed_us) if elapsed_us else float("inf")
    per_usec = 1.0 / usec_per_xfer if usec_per_xfer else float("inf")
    return (
        "%-8s" % size_str(tsize)
        + "%-8s" % cnt_str(sent)
        + ack
        + "%-8s" % size_str(total)
        + "%8.2fs%10.2f%11.2f%11.2f" % (elapsed_us / 1e6, rate, usec_per_xfer, per_usec)
    )


def elapsed_us(node: Node, domain: str, size: int, iterations: int) -> int:
    """Both directions of every iteration: latency plus the bytes at the device's rate."""
    gbps = node.gbps.get(domain, node.default_gbps)
    per_transfer = node.latency_us + size * 8 / (gbps * 1000)
    return max(1, round(2 * iterations * per_transfer))


def fi_pingpong(node: Node, argv: list[str]) -> int:
    options, rest = getopt.getopt(argv, "hvd:p:f:e:I:S:s:B:P:cm:6")
    given = dict(options)
    ep_type = {"rdm": "FI_EP_RDM", "msg": "FI_EP_MSG", "dgram": "FI_EP_DGRAM"}[
        given.get("-e", "dgram").lower()
    ]
    found = matching(node, given.get("-p"), given.get("-f"), given.get("-d"), ep_type)
    if not found:
        print(f"fi_getinfo(): util/pingpong.c, ret=-{ENODATA} (No data available)", file=sys.stderr)
        return ENODATA
    info = found[0]  # pp_init_fabric uses the first
    iterations = int(given.get("-I", 10))
    tx_size = min(PP_MAX_DATA_MSG, info.max_msg_size)
    sizes = _sizes(given.get("-S"), tx_size)
    connection = _control_socket(node, given, rest)
    if isinstance(connection, int):
        return connection
    with connection:
        # A ping-pong needs both directions: a device or path that carries nothing on either
        # side leaves both waiting in pp_get_cq_comp (timeout_sec -1).
        stuck = node.hang or info.domain in node.hang_domains
        connection.sendall(b"1\n" if stuck else b"0\n")
        if stuck or connection.makefile().readline().strip() == "1":
            _wait_forever()
        print(HEADER)
        for size in sizes:
            elapsed = elapsed_us(node, info.domain, size, iterations)
            print(show_perf_row(size, iterations, iterations, elapsed), flush=True)
    return 0


def _sizes(option: str | None, tx_size: int) -> list[int]:
    """generate_test_sizes: one size with -S N, all with -S all, else the defaults that fit."""
    if option == "all":
        return generate_test_sizes(tx_size)
    if option is not None:
        return [int(option)] if int(option) <= tx_size else []
    return [size for size in (64, 256, 1024, 4096, 65536, 1048576) if size <= tx_size]


def _control_socket(node: Node, given: dict[str, str], rest: list[str]) -> socket.socket | int:
    if rest:  # the client: connect to the server's -P
        port = int(given.get("-P", DEFAULT_CTRL_PORT))
        try:
            return socket.create_connection((rest[0], port))
        except OSError as error:
            print(f"[error] util/pingpong.c: failed to connect: {error.strerror}", file=sys.stderr)
            return error.errno or 1
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((node.address, int(given.get("-B", DEFAULT_CTRL_PORT))))
    listener.listen(10)
    connection, _ = listener.accept()  # blocks, as accept() does there
    listener.close()
    return connection


def _wait_forever() -> None:
    while True:
        time.sleep(3600)


def main() -> int:
    with open(os.environ["FABTESTS_NODE"]) as handle:
        node = Node(**json.load(handle))
    tool, argv = sys.argv[1], sys.argv[2:]
    return {"fi_info": fi_info, "fi_pingpong": fi_pingpong}[tool](node, argv)


if __name__ == "__main__":
    sys.exit(main())
