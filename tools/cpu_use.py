"""CPU time over one benchmark point: the Serve processes' own, and everybody else's.

Used by the stand-in bench (tests/e2e/bench_orchestration.py) and the GPU bench
(tools/gpu_bench): what the ingress replica spends per streamed token is what tells its ceiling
from decode's, whichever engine is behind it.

The orchestration bench runs on a machine it shares (2 cores, other sessions' test runs), and
its figures are CPU-bound: a point that ran while something else took the cores is a point of
that load, not of the Serve path. So each point reads, before and after:

- the whole machine's busy CPU time (``/proc/stat``, the aggregate ``cpu`` line: user, nice,
  system, irq, softirq and steal jiffies; idle and iowait are not busy), and the CPU time of
  this process and every process under it (the local Ray: raylets, GCS, Serve's controller,
  proxies and replicas are all its descendants). What the machine spent that this tree did
  not is the foreign load of the point, in cores (CPU seconds over the wall seconds);
- the CPU time of named Serve processes (the ingress replicas of an application, its proxy,
  its decode and prefill replicas), found by their Ray actor's pid, so that their cost per
  request can be read: the ingress replica's CPU per stream is what sizes its CPU request.

``os.getloadavg()`` (what ``uptime`` prints) is recorded beside it; a load average counts
this bench's own processes too, and lags by a minute, so the decision to repeat a point is
made on the foreign CPU time, and the load average is only stated.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# /proc/stat's aggregate line: user nice system idle iowait irq softirq steal guest guest_nice.
# guest time is already counted in user (proc(5)).
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has spent since boot."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(fields[index]) for index in BUSY_FIELDS) / CLOCK_TICKS


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of one live process (``/proc/<pid>/stat`` utime and stime);
    None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: the fields after it follow the last ")".
    rest = text.rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLOCK_TICKS


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every live process under it."""
    import psutil

    total = 0.0
    try:
        processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return total
    for process in processes:
        total += process_cpu_s(process.pid) or 0.0
    return total


# Parts of a Serve application, by the deployment name's prefix (Ray Serve LLM 2.58's P/D
# builder names them OpenAiIngress, Prefill:<model>, Decode:<model>; its aggregated builder
# LLMServer:<model>).
DEPLOYMENT_PARTS = (
    ("OpenAiIngress", "ingress"),
    ("Prefill", "prefill"),
    ("Decode", "decode"),
    ("LLMServer", "server"),
)


def serve_part(deployment: str) -> str | None:
    """The part a Serve deployment plays in the application: ingress, prefill, decode or
    (aggregated) server."""
    for prefix, part in DEPLOYMENT_PARTS:
        if deployment.startswith(prefix):
            return part
    return None


def serve_pids(dashboard: str, apps: list[str]) -> dict[str, list[int]]:
    """The pids of each application's Serve processes by part (``<app>:ingress``,
    ``<app>:decode``, ``<app>:prefill``) and of the proxies (``proxy``, shared by all), from
    Ray's actor table: Serve names a replica's actor ``ServeReplica:<app>:<deployment>``."""
    from ray.util.state import list_actors

    pids: dict[str, list[int]] = {"proxy": []}
    for app in apps:
        for part in ("ingress", "decode", "prefill"):
            pids[f"{app}:{part}"] = []
    alive = list_actors(dashboard, filters=[("state", "=", "ALIVE")], limit=10000, detail=True)
    for actor in alive:
        name, pid = actor.class_name, actor.pid
        if name == "ProxyActor":
            pids["proxy"].append(pid)
            continue
        if not name.startswith("ServeReplica:"):
            continue
        _, app, deployment = name.split(":", 2)
        key = f"{app}:{serve_part(deployment)}"
        if key in pids:
            pids[key].append(pid)
    return pids


def cpu_seconds(named: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds of each named group of processes (those that have gone count 0)."""
    return {name: sum(process_cpu_s(pid) or 0.0 for pid in pids) for name, pids in named.items()}


@dataclass
class Sample:
    """One reading: the machine's busy time, the bench's process tree, named processes."""

    wall_s: float
    machine_s: float
    tree_s: float
    named_s: dict[str, float] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @classmethod
    def take(cls, named: dict[str, list[int]]) -> Sample:
        return cls(
            wall_s=time.monotonic(),
            machine_s=machine_busy_s(),
            tree_s=tree_cpu_s(os.getpid()),
            named_s=cpu_seconds(named),
            load_average=os.getloadavg(),
        )


def use_between(before: Sample, after: Sample) -> dict[str, object]:
    """Cores each named process group used between two samples (CPU seconds over wall
    seconds), the foreign load in cores, and the load average before and after."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    foreign = (after.machine_s - before.machine_s) - (after.tree_s - before.tree_s)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": {
            name: round(after.named_s[name] - before.named_s[name], 3) for name in before.named_s
        },
        "foreign_cores": round(max(foreign, 0.0) / wall, 3),
        "load_average_before": before.load_average,
        "load_average_after": after.load_average,
    }
