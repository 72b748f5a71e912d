"""`pdctl efa-check`: its Jobs (Kubernetes 1.35, strict), its scripts run in bash against stand-in
fabric tools, the parser on logs in fi_info's and fi_pingpong's documented formats
(tests/data/fabtests/README.md), the verdict table, and the run's bounds and clean-up."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from app_config import Settings
from app_config.efa_check import EfaCheck
from app_config.node_labels import EFA_RESOURCE
from catalog.eks_versions import RELEASES
from catalog.instances import CATALOG
from pdctl import efa_jobs, efa_results, efa_run
from pdctl.efa_jobs import MARK
from pdctl.efa_results import Expectation, evaluate, parse_log
from serving_manifests.names import EFA_CHECK_FIRST_PORT, efa_check_ports
from tests.configurations import PROJECT_ROOT, render_deployed, settings_for

SAMPLES = PROJECT_ROOT / "tests" / "data" / "fabtests"
P4D = CATALOG["p4d.24xlarge"]


def sample(role: str) -> str:
    name = "p4d-prefill-client.log" if role == "prefill" else "p4d-decode-server.log"
    return (SAMPLES / name).read_text()


def p4d_expectations() -> dict[str, Expectation]:
    return {role: efa_results.expectation(P4D) for role in ("prefill", "decode")}


@pytest.fixture(scope="module")
def settings() -> Settings:
    return settings_for("default")


# --- the Jobs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan(settings: Settings) -> efa_jobs.EfaCheckPlan:
    return efa_jobs.plan_for(settings, "pdctl-efa-check-1")


def _jobs(plan: efa_jobs.EfaCheckPlan) -> dict[str, dict]:
    return {
        "decode": efa_jobs.job_manifest(plan, "decode", efa_jobs.server_script(plan)),
        "prefill": efa_jobs.job_manifest(plan, "prefill", efa_jobs.client_script(plan, "10.0.1.2")),
    }


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_the_jobs_match_kubernetes_schemas_strictly(plan, minor: str) -> None:
    for job in _jobs(plan).values():
        kubernetes_validate.validate(job, f"{minor}.0", strict=True)


def test_each_job_lands_where_that_sides_ray_workers_land(settings, plan) -> None:
    """Same node selector and tolerations as the side's worker group, so the check measures the
    nodes the KV crosses; no GPU asked, every EFA device of the node held."""
    workers = {
        group["groupName"]: group["template"]["spec"]
        for group in render_deployed(settings).rayservice["spec"]["rayClusterConfig"][
            "workerGroupSpecs"
        ]
    }
    for role, job in _jobs(plan).items():
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == workers[role]["nodeSelector"]
        assert pod["tolerations"] == workers[role]["tolerations"]
        (container,) = pod["containers"]
        worker_container = workers[role]["containers"][0]
        assert container["image"] == worker_container["image"]
        limits = container["resources"]["limits"]
        assert limits[EFA_RESOURCE] == worker_container["resources"]["limits"][EFA_RESOURCE]
        assert "nvidia.com/gpu" not in limits
        assert job["spec"]["activeDeadlineSeconds"] == settings.gpu_nodes.efa_check.timeout_seconds


def test_a_named_node_pins_its_side_and_leaves_the_other_free(settings) -> None:
    plan = efa_jobs.plan_for(settings, "x", {"prefill": "ip-10-0-1-1.ec2.internal", "decode": None})
    assert plan.node_selectors["prefill"]["kubernetes.io/hostname"] == "ip-10-0-1-1.ec2.internal"
    assert "kubernetes.io/hostname" not in plan.node_selectors["decode"]


# --- the scripts, run in bash against stand-ins for fi_info and fi_pingpong -----------------


def _stand_in_tools(
    tmp_path: Path, role: str, refuse_first_connects: int = 0, dead_port: int = 0
) -> Path:
    """fi_info prints the sample's fi_info block; fi_pingpong prints the sample's rows for the
    -d device, after refusing the first connections (a server not yet listening), and always
    on ``dead_port`` (a server device that never listens)."""
    log = sample(role)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fi_info = log.split(f"{MARK} fi_info\n")[1].split(MARK)[0]
    (tmp_path / "fi_info.txt").write_text(fi_info)
    for domain, body in re.findall(rf"{MARK} pingpong (\S+)\n(.*?)(?={MARK})", log, re.S):
        (tmp_path / f"{domain}.txt").write_text(body)
    (tmp_path / "refusals").write_text(str(refuse_first_connects))
    tools = {
        "fi_info": f'cat "{tmp_path}/fi_info.txt"',
        "fi_pingpong": f"""
while [ $# -gt 0 ]; do
  case "$1" in
  -d) domain=$2; shift 2;;
  -B|-P) port=$2; echo "$1 $2" >> "{tmp_path}/args"; shift 2;;
  -p|-e|-I|-S) echo "$1 $2" >> "{tmp_path}/args"; shift 2;;
  *) echo "server $1" >> "{tmp_path}/args"; shift;; esac
done
[ "$port" = "{dead_port}" ] && {{ echo refused >&2; exit 1; }}
left=$(cat "{tmp_path}/refusals")
if [ "$left" -gt 0 ]; then echo $((left - 1)) > "{tmp_path}/refusals"; echo refused >&2; exit 1; fi
cat "{tmp_path}/$domain.txt"
""",
    }
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _run(script: str, bin_dir: Path) -> str:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-c", script.replace("sleep 1", "sleep 0")],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout


def test_the_server_script_tests_every_device_and_its_log_parses(plan, tmp_path) -> None:
    log = _run(efa_jobs.server_script(plan), _stand_in_tools(tmp_path, "decode"))
    side = parse_log(log)
    assert side.finished
    assert side.domains == parse_log(sample("decode")).domains
    assert set(side.devices) == set(side.domains)
    assert all(len(device.rows) == 7 for device in side.devices.values())
    args = (tmp_path / "args").read_text()
    for option in ("-p efa", "-e rdm"):
        assert option in args
    # Device i on port FIRST + i: a pair can only meet its own partner.
    listened = [int(line.split()[1]) for line in args.splitlines() if line.startswith("-B ")]
    assert listened == efa_check_ports(len(side.domains))


def test_the_client_retries_until_the_server_listens(plan, tmp_path) -> None:
    log = _run(efa_jobs.client_script(plan, "10.0.1.2"), _stand_in_tools(tmp_path, "prefill", 3))
    side = parse_log(log)
    assert side.finished
    assert not any(d.failed for d in side.devices.values())
    assert all(device.rows for device in side.devices.values())
    assert "server 10.0.1.2" in (tmp_path / "args").read_text()


def test_one_dead_device_fails_alone_and_the_next_pairs_keep_their_partners(plan, tmp_path) -> None:
    script = efa_jobs.client_script(plan, "10.0.1.2")
    log = _run(script, _stand_in_tools(tmp_path, "prefill", dead_port=EFA_CHECK_FIRST_PORT + 1))
    side = parse_log(log)
    results = [side.devices[domain] for domain in side.domains]
    assert [bool(r.rows) for r in results] == [True, False, True, True]
    assert results[1].failed
    on_a_node = log.replace(f"{MARK} uverbs 0", f"{MARK} uverbs 4")  # no /dev/infiniband here
    logs = {"prefill": on_a_node, "decode": sample("decode")}
    checks, _ = evaluate(logs, p4d_expectations(), EfaCheck())
    assert _failing(checks) == ["prefill-decode ping-pong over EFA: every device pair"]


def test_a_client_that_never_connects_gives_up_and_says_so(plan, tmp_path) -> None:
    script = efa_jobs.client_script(plan, "10.0.1.2")
    log = _run(script, _stand_in_tools(tmp_path, "prefill", refuse_first_connects=10_000))
    side = parse_log(log)
    assert side.finished
    assert all(d.failed and not d.rows for d in side.devices.values())


# --- the parser -------------------------------------------------------------------------------


def test_the_parser_reads_devices_sizes_and_rates_from_the_samples() -> None:
    side = parse_log(sample("prefill"))
    assert side.uverbs_devices == 4
    assert len(side.domains) == 4  # listed under efa and efa-direct: counted once
    first = side.devices[side.domains[0]]
    assert [row.size_bytes for row in first.rows][:3] == [64, 256, 1024]
    assert first.rows[-1].size_bytes == 8 * 2**20
    assert first.latency_us == first.rows[0].usec_per_transfer
    assert first.bandwidth_gbps == pytest.approx(first.rows[-1].mb_per_second * 8 / 1000)


@pytest.mark.parametrize(
    ("text", "expected"), [("64", 64), ("4k", 4096), ("1m", 1 << 20), ("2g", 2 << 30)]
)
def test_sizes_use_libfabrics_1024_based_suffixes(text: str, expected: int) -> None:
    assert efa_results.size_bytes(text) == expected


# --- the verdict --------------------------------------------------------------------------------


def _scaled(log: str, domain: str, rate: float = 1.0, latency: float = 1.0) -> str:
    """The log with one device's MB/sec multiplied by ``rate`` and usec/xfer by ``latency``."""
    head, _, rest = log.partition(f"{MARK} pingpong {domain}\n")
    body, mark, tail = rest.partition(MARK)
    rows = []
    for line in body.splitlines():
        parts = line.split()
        if parts and parts[0][0].isdigit():
            parts[5] = f"{float(parts[5]) * rate:.2f}"
            parts[6] = f"{float(parts[6]) * latency:.2f}"
        rows.append("  ".join(parts))
    return f"{head}{MARK} pingpong {domain}\n" + "\n".join(rows) + "\n" + mark + tail


def _without_device(log: str, domain: str) -> str:
    kept = [line for line in log.splitlines() if domain not in line]
    return "\n".join(kept).replace(f"{MARK} uverbs 4", f"{MARK} uverbs 3") + "\n"


def _failing(checks) -> list[str]:
    return [check.name for check in checks if not check.ok]


DOMAIN = parse_log(sample("prefill")).domains[1]


@pytest.mark.parametrize(
    ("case", "change", "failing"),
    [
        ("healthy", lambda log: log, []),
        ("a slow device", lambda log: _scaled(log, DOMAIN, rate=0.2), ["bandwidth"]),
        ("a laggy device", lambda log: _scaled(log, DOMAIN, latency=10), ["latency"]),
        (
            "a missing device",
            lambda log: _without_device(log, DOMAIN),
            ["prefill node: EFA devices", "every device pair"],
        ),
        (
            "a pair that never connected",
            lambda log: log.replace(
                f"{MARK} pingpong {DOMAIN}\n", f"{MARK} pingpong-failed {DOMAIN}\n"
            ),
            ["every device pair"],
        ),
        (
            "a pod stopped by its deadline",
            lambda log: log.replace(f"{MARK} done\n", ""),
            ["both pods ran to the end"],
        ),
    ],
)
def test_verdict(case: str, change, failing: list[str]) -> None:
    logs = {"prefill": change(sample("prefill")), "decode": sample("decode")}
    checks, _ = evaluate(logs, p4d_expectations(), EfaCheck())
    names = _failing(checks)
    assert len(names) == len(failing), (case, names)
    for expected, name in zip(failing, names, strict=True):
        assert expected in name, (case, names)


def test_the_bandwidth_mark_follows_the_configured_share() -> None:
    """The same measurement passes or fails only by the configured share of the line rate."""
    logs = {"prefill": sample("prefill"), "decode": sample("decode")}
    side = parse_log(sample("prefill"))
    slowest = min(d.bandwidth_gbps for d in side.devices.values())
    per_device = P4D.efa_bandwidth_gbps / P4D.network_cards
    just_above = EfaCheck(min_bandwidth_share=min(1.0, slowest / per_device + 0.01))
    just_below = EfaCheck(min_bandwidth_share=slowest / per_device - 0.01)
    assert any(
        "bandwidth" in n for n in _failing(evaluate(logs, p4d_expectations(), just_above)[0])
    )
    assert not _failing(evaluate(logs, p4d_expectations(), just_below)[0])


def test_a_mixed_p5_pair_is_held_to_the_smaller_node_and_the_slower_device() -> None:
    p5, p5en = (efa_results.expectation(CATALOG[n]) for n in ("p5.48xlarge", "p5en.48xlarge"))
    pairs = efa_results.path_expectation(p5, p5en)
    assert pairs.network_cards == min(p5.network_cards, p5en.network_cards)
    assert pairs.per_device_gbps == min(p5.per_device_gbps, p5en.per_device_gbps)


# --- the run: bounded, cleaned up --------------------------------------------------------------


class FakeJobs:
    def __init__(self, states: dict[str, list[efa_run.PodState]], fail_create: str = "") -> None:
        self.states, self.fail_create = states, fail_create
        self.created: list[str] = []
        self.deleted: list[str] = []

    def create_job(self, manifest) -> None:
        name = manifest["metadata"]["name"]
        if self.fail_create and name.endswith(self.fail_create):
            raise RuntimeError("admission webhook said no")
        self.created.append(name)

    def pod_state(self, namespace, job) -> efa_run.PodState:
        role = job.rsplit("-", 1)[1]
        queue = self.states[role]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def logs(self, namespace, job) -> str:
        return sample(job.rsplit("-", 1)[1])

    fail_delete = False

    def delete_job(self, namespace, job) -> None:
        self.deleted.append(job)
        if self.fail_delete:
            raise RuntimeError("the API server is gone")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


RUNNING = efa_run.PodState("Running", "10.0.1.2", "node-d")
DONE = efa_run.PodState("Succeeded", "10.0.1.2", "node-d")


def test_a_run_hands_the_server_address_to_the_client_and_deletes_both(plan) -> None:
    jobs = FakeJobs(
        {
            "decode": [efa_run.PodState("Pending"), RUNNING, DONE],
            "prefill": [
                efa_run.PodState("Running", "10.0.1.3", "node-p"),
                efa_run.PodState("Succeeded", "10.0.1.3", "node-p"),
            ],
        }
    )
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert output.nodes == {"decode": "node-d", "prefill": "node-p"}
    assert len(jobs.created) == 2
    assert sorted(jobs.deleted) == sorted(jobs.created)
    checks, _ = evaluate(output.logs, p4d_expectations(), EfaCheck())
    assert not _failing(checks)


def test_a_side_without_a_free_node_stops_at_the_deadline_and_cleans_up(plan) -> None:
    unschedulable = efa_run.PodState(
        "Pending", waiting="Unschedulable: 0/6 nodes are available: 2 Insufficient "
        "vpc.amazonaws.com/efa"
    )  # fmt: skip
    jobs = FakeJobs({"decode": [unschedulable], "prefill": [unschedulable]})
    clock = Clock()
    with pytest.raises(efa_run.EfaCheckError, match=r"Insufficient vpc\.amazonaws\.com/efa"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert clock.now <= plan.deadline_seconds + efa_run.POLL_SECONDS
    assert jobs.deleted == jobs.created == [efa_jobs.job_name(plan, "decode")]


def test_a_failure_after_the_server_started_still_deletes_the_server(plan) -> None:
    jobs = FakeJobs({"decode": [RUNNING], "prefill": [RUNNING]}, fail_create="prefill")
    clock = Clock()
    with pytest.raises(RuntimeError):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert jobs.deleted == [efa_jobs.job_name(plan, "decode")]


def test_a_server_that_fails_before_starting_says_why(plan) -> None:
    crashed = efa_run.PodState("Failed", waiting="ErrImagePull: not found")
    jobs = FakeJobs({"decode": [crashed], "prefill": [crashed]})
    clock = Clock()
    with pytest.raises(efa_run.EfaCheckError, match="ErrImagePull"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert jobs.deleted == jobs.created


def test_a_server_that_finds_no_device_ends_the_run_with_its_log(plan) -> None:
    """fi_info lists nothing, the script ends at once: no client, no wait for the deadline."""
    jobs = FakeJobs({"decode": [efa_run.PodState("Succeeded", "10.0.1.2", "node-d")]})
    jobs.logs = lambda namespace, job: f"{MARK} uverbs 0\n{MARK} fi_info\n{MARK} done\n"
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert clock.now < efa_run.POLL_SECONDS
    assert jobs.created == [efa_jobs.job_name(plan, "decode")]
    checks, _ = evaluate(output.logs, p4d_expectations(), EfaCheck())
    assert "decode node: EFA devices" in _failing(checks)


def test_a_failed_deletion_keeps_the_measurements_and_says_what_was_left(plan) -> None:
    done = efa_run.PodState("Succeeded", "10.0.1.3", "node-p")
    jobs = FakeJobs({"decode": [RUNNING, DONE], "prefill": [done]})
    jobs.fail_delete = True
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert len(output.cleanup_errors) == 2  # both tried
    assert not _failing(evaluate(output.logs, p4d_expectations(), EfaCheck())[0])


def test_a_run_that_fails_reports_its_own_error_even_if_cleanup_fails(plan) -> None:
    jobs = FakeJobs({"decode": [RUNNING], "prefill": [RUNNING]}, fail_create="prefill")
    jobs.fail_delete = True
    clock = Clock()
    with pytest.raises(RuntimeError, match="admission webhook"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert jobs.deleted == [efa_jobs.job_name(plan, "decode")]
