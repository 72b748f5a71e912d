"""`pdctl efa-check`: its Jobs and Services (Kubernetes 1.35, strict); both scripts run together
in bash against stand-ins for fi_info and fi_pingpong that follow libfabric v2.4.0's source
(tests/fabtests_model.py: fabric order, message sizes, printing, blocking waits); the parser and
the verdict on what they print; the run's deadline and clean-up."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app_config import Settings
from app_config.efa_check import IMAGE_PULL_SECONDS, START_SECONDS, EfaCheck
from app_config.node_labels import EFA_RESOURCE
from catalog.eks_versions import RELEASES
from catalog.instances import CATALOG
from pdctl import cluster_jobs, efa_jobs, efa_results, efa_run
from pdctl.efa_jobs import MARK
from pdctl.efa_results import EXPECTED_SIZES, evaluate, parse_log
from tests import fabtests_model
from tests.configurations import PROJECT_ROOT, render_deployed, settings_for
from tests.conftest import shared_folder
from tests.fabtests_model import Node
from tests.kubernetes_schemas import validate_strictly

P4D = CATALOG["p4d.24xlarge"]


@pytest.fixture(scope="module")
def settings() -> Settings:
    return settings_for("default")


@pytest.fixture(scope="module")
def plan(settings: Settings) -> efa_jobs.EfaCheckPlan:
    return efa_jobs.plan_for(settings, "pdctl-efa-check-1")


# --- the Jobs and Services ----------------------------------------------------------------------


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_the_jobs_and_services_match_kubernetes_schemas_strictly(plan, minor: str) -> None:
    for role in (efa_jobs.CLIENT_ROLE, efa_jobs.SERVER_ROLE):
        for document in (efa_jobs.job_manifest(plan, role), efa_jobs.service_manifest(plan, role)):
            validate_strictly(document, minor)


def test_each_service_selects_only_its_sides_pod(plan) -> None:
    """The partner's name must resolve to the partner, never to the pod itself."""
    for role in (efa_jobs.CLIENT_ROLE, efa_jobs.SERVER_ROLE):
        selector = efa_jobs.service_manifest(plan, role)["spec"]["selector"]
        for other in (efa_jobs.CLIENT_ROLE, efa_jobs.SERVER_ROLE):
            labels = efa_jobs.job_manifest(plan, other)["spec"]["template"]["metadata"]["labels"]
            selected = all(labels.get(k) == v for k, v in selector.items())
            assert selected == (role == other)
        partner = efa_jobs.partner_address(plan, role)
        assert efa_jobs.service_name(plan, role) not in partner


def test_each_job_lands_where_that_sides_ray_workers_land(settings, plan) -> None:
    """Same node selector and tolerations as the side's worker group, so the check measures the
    nodes the KV crosses; no GPU asked, every EFA device of the node held."""
    workers = {
        group["groupName"]: group["template"]["spec"]
        for group in render_deployed(settings).rayservice["spec"]["rayClusterConfig"][
            "workerGroupSpecs"
        ]
    }
    for role in (efa_jobs.CLIENT_ROLE, efa_jobs.SERVER_ROLE):
        job = efa_jobs.job_manifest(plan, role)
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == workers[role]["nodeSelector"]
        assert pod["tolerations"] == workers[role]["tolerations"]
        (container,) = pod["containers"]
        worker_container = workers[role]["containers"][0]
        assert container["image"] == worker_container["image"]
        limits = container["resources"]["limits"]
        assert limits[EFA_RESOURCE] == worker_container["resources"]["limits"][EFA_RESOURCE]
        assert "nvidia.com/gpu" not in limits
        assert job["spec"]["activeDeadlineSeconds"] >= plan.deadline_seconds


def test_the_default_deadline_covers_one_node_join_a_pull_and_every_pair(settings, plan) -> None:
    """Both Jobs start together, so their scale-ups overlap: one join (the autoscaler's own
    provisioning bound), one image pull, then every pair to its bound."""
    join = settings.cluster.node_autoscaler.max_node_provision_minutes * 60
    pairs = max(g.instance.network_cards for g in settings.gpu_nodes.groups().values())
    check = settings.gpu_nodes.efa_check
    assert plan.pairs == pairs
    assert plan.deadline_seconds == (
        join + IMAGE_PULL_SECONDS + START_SECONDS + pairs * check.pair_seconds
    )
    longer = settings_for(
        "default",
        **{
            "cluster.node_autoscaler.max_node_provision_minutes": "40",
            # alarms may not page during a normal scale-up (they wait at least as long)
            "observability.alarms.node_shortfall_minutes": "40",
            "observability.alarms.capacity_shortfall_minutes": "40",
        },
    )
    assert efa_jobs.plan_for(longer, "x").deadline_seconds == plan.deadline_seconds + 20 * 60


def test_a_deadline_too_short_for_the_pairs_is_refused_with_the_reason() -> None:
    with pytest.raises(Exception, match=r"timeout_seconds 300 cannot cover the check's 32"):
        settings_for("default", **{"gpu_nodes.efa_check.timeout_seconds": "300"})


def _schedulable(pod: dict, node_labels: dict[str, str], unschedulable: bool) -> bool:
    """The scheduler's NodeUnschedulable filter (a cordoned node admits only pods tolerating
    node.kubernetes.io/unschedulable:NoSchedule) and the node selector."""
    tolerated = any(
        t.get("effect") in (None, "", "NoSchedule")
        and ((t.get("key") == "node.kubernetes.io/unschedulable" and t.get("operator") == "Exists")
             or (not t.get("key") and t.get("operator") == "Exists"))
        for t in pod.get("tolerations", [])
    )  # fmt: skip
    if unschedulable and not tolerated:
        return False
    return all(node_labels.get(k) == v for k, v in pod["nodeSelector"].items())


def test_a_named_node_is_checked_even_cordoned_and_the_other_side_stays_off_cordoned_nodes(
    settings,
) -> None:
    """The runbook cordons a suspect node so no Ray worker takes it, then names it."""
    name = "ip-10-0-1-1.ec2.internal"
    plan = efa_jobs.plan_for(settings, "x", {"prefill": name, "decode": None})
    assert plan.node_selectors["prefill"]["kubernetes.io/hostname"] == name
    assert "kubernetes.io/hostname" not in plan.node_selectors["decode"]
    for role, node in (("prefill", name), ("decode", "ip-10-0-1-2.ec2.internal")):
        pod = efa_jobs.job_manifest(plan, role)["spec"]["template"]["spec"]
        labels = {**plan.node_selectors[role], "kubernetes.io/hostname": node}
        assert _schedulable(pod, labels, unschedulable=False)
        assert _schedulable(pod, labels, unschedulable=True) == (role == "prefill")


def test_a_mixed_p5_p5en_plan_pairs_every_device_of_both_nodes() -> None:
    mixed = settings_for(
        "default",
        **{
            "gpu_nodes.prefill.instance_type": "p5.48xlarge",
            "gpu_nodes.decode.instance_type": "p5en.48xlarge",
        },
    )
    plan = efa_jobs.plan_for(mixed, "x")
    assert plan.efa_devices == {"prefill": 32, "decode": 16}
    assert plan.pairs == 32  # p5en's 16 devices each meet two of p5's 32


# --- the scripts, both sides at once, against the libfabric stand-ins -------------------------


def _small_plan(plan: efa_jobs.EfaCheckPlan, prefill: int, decode: int, pair_seconds: int = 20):
    return dataclasses.replace(
        plan,
        efa_devices={"prefill": prefill, "decode": decode},
        pair_seconds=pair_seconds,
        first_pair_extra_seconds=1,
    )


def _devices(count: int, side: str) -> list[str]:
    return [f"rdmap{16 * (i + 1)}s{27 if side == 'prefill' else 28}" for i in range(count)]


def _tools(directory: Path, node: Node, sees_partner_after: int = 0) -> dict[str, str]:
    """PATH with fi_info and fi_pingpong from tests/fabtests_model.py, getent answering the
    partner's name with the server's loopback address (after ``sees_partner_after`` seconds:
    a cached "no such name"), and the node's uverbs devices."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    node_file = directory / "node.json"
    node.save(str(node_file))
    python = sys.executable
    tools = {
        name: f'exec "{python}" -m tests.fabtests_model {name} "$@"'
        for name in ("fi_info", "fi_pingpong")
    }
    start = int(time.time())
    tools["getent"] = (
        f"[ $(( $(date +%s) - {start} )) -ge {sees_partner_after} ] || exit 2\n"
        f'[ "$1" = hosts ] && echo "{node.address}   $2"'
    )
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    uverbs = directory / "infiniband"
    uverbs.mkdir()
    for index in range(len(node.devices)):
        (uverbs / f"uverbs{index}").touch()
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(PROJECT_ROOT),
        "FABTESTS_NODE": str(node_file),
        "UVERBS": str(uverbs),
    }


def _script(plan, role: str) -> str:
    text = efa_jobs.script(plan, role)
    return text.replace(efa_jobs.DEVICE_DIRECTORY, "$UVERBS").replace("sleep 1\n", "sleep 0.2\n")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Both sides of one run of the scripts: each side's devices, the plan's pair bound, and
    what the test changes (the script, when the client sees the server)."""

    prefill: Node
    decode: Node
    devices: tuple[int, int]  # the plan's EFA devices per node: prefill, decode
    pair_seconds: int = 20
    first_pair_extra_seconds: int = 1
    edit: Callable[[str], str] = lambda script: script
    client_sees_server_after: int = 0

    def plan(self, plan: efa_jobs.EfaCheckPlan) -> efa_jobs.EfaCheckPlan:
        return dataclasses.replace(
            _small_plan(plan, *self.devices, pair_seconds=self.pair_seconds),
            first_pair_extra_seconds=self.first_pair_extra_seconds,
        )


# The client sees the server this late; the first pair's window is 3 s plus the extra. The margins
# (6 s each way) absorb a side starting late on a busy machine: all runs start at once.
LATE_PARTNER_SECONDS = 9
LATE_PARTNER_EXTRA = (0, 14)


def _scenarios() -> dict[str, Scenario]:
    """Every run of the scripts the tests below judge, by name. They wait out real time bounds
    (a hung pair ends at its bound), so they all start at once when the first test asks for
    one, each on its own loopback address, and each test judges its run's logs."""
    hung_device = _devices(3, "decode")
    slow_device = _devices(3, "prefill")
    return {
        # First: the runs whose verdict turns on when each side starts.
        **{
            f"partner-late-{extra}": Scenario(
                Node(_devices(2, "prefill")),
                Node(_devices(2, "decode")),
                (2, 2),
                pair_seconds=3,
                first_pair_extra_seconds=extra,
                client_sees_server_after=LATE_PARTNER_SECONDS,
            )
            for extra in LATE_PARTNER_EXTRA
        },
        "healthy": Scenario(Node(_devices(3, "prefill")), Node(_devices(3, "decode")), (3, 3)),
        "efa-direct": Scenario(
            Node(_devices(2, "prefill")),
            Node(_devices(2, "decode")),
            (2, 2),
            edit=lambda script: script.replace(" -f efa", ""),
        ),
        "mixed": Scenario(Node(_devices(4, "prefill")), Node(_devices(2, "decode")), (4, 2)),
        "hung-path": Scenario(
            Node(_devices(4, "prefill"), hang=True),
            Node(_devices(4, "decode"), hang=True),
            (4, 4),
            pair_seconds=3,
        ),
        "hung-device-0": Scenario(
            Node(_devices(3, "prefill")),
            Node(hung_device, hang_domains=[f"{hung_device[0]}-rdm"]),
            (3, 3),
            pair_seconds=12,  # the healthy pairs after it must finish within it, on a busy machine
        ),
        "no-devices": Scenario(Node(_devices(2, "prefill")), Node([]), (2, 2), pair_seconds=3),
        "slow-device": Scenario(
            Node(slow_device, gbps={f"{slow_device[1]}-rdm": 10.0}),
            Node(_devices(3, "decode")),
            (3, 3),
        ),
    }


def start_both(
    folder: Path, plan: efa_jobs.EfaCheckPlan, scenario: Scenario, address: str
) -> list[subprocess.Popen]:
    """Server and client scripts in two bash processes at once, as the two pods would run."""
    processes = []
    for role, node in (("decode", scenario.decode), ("prefill", scenario.prefill)):
        node = dataclasses.replace(node, address=address)
        late = scenario.client_sees_server_after * (role == "prefill")
        env = _tools(folder / role, node, late)
        with (folder / f"{role}.log").open("w") as output:  # files, not pipes: a full pipe
            processes.append(  # would block a side
                subprocess.Popen(
                    ["bash", "-c", scenario.edit(_script(plan, role))],
                    env=env, stdout=output, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
    return processes


def _bound(plan: efa_jobs.EfaCheckPlan) -> float:
    return 30 + plan.pairs * (plan.pair_seconds + 10)


def _reap(processes: list[subprocess.Popen], bound: float, done: Path) -> None:
    """Waits for both sides up to the bound (killing what outlives it), then marks the run
    done: the mark is what every worker waits for."""
    deadline = time.monotonic() + bound
    outcome = "finished"
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            outcome = f"killed after its bound of {bound:.0f} s"
    written = done.with_suffix(".writing")
    written.write_text(outcome)
    written.rename(done)  # whole, or not there yet


class ScriptRuns:
    """The scenarios' runs of one test session, in a folder every xdist worker sees: the first
    worker to ask starts them all (under a lock), any worker reads a run once it is done."""

    def __init__(self, folder: Path, plan: efa_jobs.EfaCheckPlan) -> None:
        self.folder, self.plan = folder, plan
        self.scenarios = _scenarios()
        self.threads: list[threading.Thread] = []

    def start_all(self) -> None:
        with (self.folder / "start.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (self.folder / "started").exists():
                return
            for index, (name, scenario) in enumerate(self.scenarios.items()):
                folder = self.folder / name
                folder.mkdir()
                plan = scenario.plan(self.plan)
                address = f"127.0.{index + 2}.{os.getpid() % 250 + 1}"
                processes = start_both(folder, plan, scenario, address)
                thread = threading.Thread(
                    target=_reap, args=(processes, _bound(plan), folder / "done"), daemon=True
                )
                thread.start()
                self.threads.append(thread)
            (self.folder / "started").touch()

    def logs(self, name: str) -> tuple[efa_jobs.EfaCheckPlan, dict[str, str]]:
        """The run's plan and each side's log, once both sides have ended."""
        plan = self.scenarios[name].plan(self.plan)
        folder = self.folder / name
        deadline = time.monotonic() + _bound(plan) + 60  # the other runs start first
        while not (folder / "done").exists():
            assert time.monotonic() < deadline, f"{name}: the scripts did not end in time"
            time.sleep(0.1)
        outcome = (folder / "done").read_text()
        assert outcome == "finished", f"{name}: {outcome}"
        return plan, {role: (folder / f"{role}.log").read_text() for role in ("prefill", "decode")}


_STARTED: list[ScriptRuns] = []


def start_script_runs(factory: pytest.TempPathFactory) -> ScriptRuns:
    """This process's view of the runs, starting them if no worker has (tests/pdctl/conftest.py
    calls it as soon as a run has collected these tests)."""
    if not _STARTED:
        folder = shared_folder(factory, "efa-check-scripts")
        plan = efa_jobs.plan_for(settings_for("default"), "pdctl-efa-check-1")
        runs = ScriptRuns(folder, plan)
        runs.start_all()
        _STARTED.append(runs)
    return _STARTED[0]


def wait_for_started_runs() -> None:
    """The runs this worker started end before it does (another worker may be waiting on
    them)."""
    for runs in _STARTED:
        for thread in runs.threads:
            thread.join()


@pytest.fixture(scope="session")
def script_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptRuns]:
    yield start_script_runs(tmp_path_factory)
    wait_for_started_runs()


def _expectations(prefill: int, decode: int, gbps_per_device: float = 100.0):
    return {
        role: efa_results.Expectation(f"test-{count}", count, round(gbps_per_device * count))
        for role, count in (("prefill", prefill), ("decode", decode))
    }


def _failing(checks) -> list[str]:
    return [check.name for check in checks if not check.ok]


def test_healthy_nodes_pass_with_every_size_of_the_efa_fabric(script_runs) -> None:
    _, logs = script_runs.logs("healthy")
    checks, sides, verdicts = evaluate(logs, _expectations(3, 3), EfaCheck())
    assert not _failing(checks), checks
    assert len(verdicts) == 3
    assert all(v.measured for v in verdicts)
    client = sides["prefill"]
    rows = client.last_attempt(0).rows
    assert [row.size for row in rows] == EXPECTED_SIZES  # 1.5k, 1.5m and all: 46 rows
    assert rows[-1].size_bytes == 6 << 20
    assert "1.5k" in EXPECTED_SIZES
    assert "1.5m" in EXPECTED_SIZES


def test_without_naming_the_fabric_efa_direct_is_taken_and_the_verdict_says_so(
    script_runs,
) -> None:
    """libfabric lists efa-direct first; fi_pingpong takes the first match, whose largest
    message is the device's max_msg_sz: the sizes stop near 8 KiB (the run without -f efa)."""
    _, logs = script_runs.logs("efa-direct")
    checks, _, verdicts = evaluate(logs, _expectations(2, 2), EfaCheck())
    assert PAIRS in _failing(checks)
    assert "last 8k" in verdicts[0].problem


PAIRS = efa_results.PAIRS_NAME


def test_mixed_generations_pair_every_device_of_the_larger_node(script_runs) -> None:
    """p5 (32 devices) with p5en (16), in small: 4 prefill devices, 2 decode; the decode
    devices each meet two prefill devices, every pair on its own port."""
    _, logs = script_runs.logs("mixed")
    checks, _, verdicts = evaluate(logs, _expectations(4, 2), EfaCheck())
    assert not _failing(checks), checks
    decode_devices = _devices(2, "decode")
    assert [v.domains["decode"] for v in verdicts] == [
        f"{decode_devices[k % 2]}-rdm" for k in range(4)
    ]
    assert len({v.domains["prefill"] for v in verdicts}) == 4


@pytest.mark.parametrize("extra", LATE_PARTNER_EXTRA)
def test_the_first_pair_absorbs_one_side_seeing_the_other_late(script_runs, extra) -> None:
    """CoreDNS may answer "no such name" from its cache for a while after the partner runs:
    the client starts pair 0 late (9 s, pairs of 3 s). The first pair's longer window on both
    sides absorbs it."""
    small, logs = script_runs.logs(f"partner-late-{extra}")
    assert small.first_pair_extra_seconds == extra
    _, _, verdicts = evaluate(logs, _expectations(2, 2), EfaCheck())
    assert verdicts[0].measured == (extra > 0)


def test_a_hung_path_stops_after_the_first_pairs_and_says_path_down(script_runs) -> None:
    """A wrong EFA security group: the control sockets connect, no EFA message completes,
    fi_pingpong waits forever. Each pair ends at its bound; after the first two both sides
    stop; the verdict blames the path, not the devices."""
    _, logs = script_runs.logs("hung-path")
    checks, sides, verdicts = evaluate(logs, _expectations(4, 4), EfaCheck())
    assert len(verdicts) == efa_jobs.STOP_AFTER_FAILED_PAIRS
    assert all(side.stopped for side in sides.values())
    pairs_check = next(c for c in checks if c.name == PAIRS)
    assert pairs_check.detail.startswith("path down")
    assert "security group" in pairs_check.fix
    assert "EFA devices" not in " ".join(_failing(checks))


def test_a_hung_device_0_fails_alone_and_the_next_pairs_are_measured(script_runs) -> None:
    devices = script_runs.scenarios["hung-device-0"].decode.devices
    _, logs = script_runs.logs("hung-device-0")
    checks, _, verdicts = evaluate(logs, _expectations(3, 3), EfaCheck())
    assert [v.measured for v in verdicts] == [False, True, True]
    pairs_check = next(c for c in checks if c.name == PAIRS)
    assert not pairs_check.ok
    assert f"decode:{devices[0]}-rdm" in pairs_check.detail
    assert not pairs_check.detail.startswith("path down")


def test_a_side_without_devices_is_every_device_down_not_path_down(script_runs) -> None:
    _, logs = script_runs.logs("no-devices")
    checks, _, _ = evaluate(logs, _expectations(2, 2), EfaCheck())
    assert "decode node: EFA devices" in _failing(checks)
    pairs_check = next(c for c in checks if c.name == PAIRS)
    assert "every device is down" in pairs_check.detail
    assert "path down" not in pairs_check.detail


def test_a_slow_device_fails_the_bandwidth_mark_and_only_that_pair(script_runs) -> None:
    """Device 1 of prefill runs at 10 Gbps, the others at the stand-in's 100."""
    _, logs = script_runs.logs("slow-device")
    checks, _, _ = evaluate(logs, _expectations(3, 3), EfaCheck())
    (bandwidth,) = [c for c in checks if c.name.startswith("bandwidth")]
    assert _failing(checks) == [bandwidth.name]
    assert "below on pairs [1]" in bandwidth.detail


# --- the parser and the evidence rules, on lines the stand-in's printf rules produce ----------


def _attempt_log(rows: list[str], exit_code: int, pair: int = 0, number: int = 1) -> str:
    domain = "rdmap16s27-rdm"
    return "\n".join(
        [f"{MARK} attempt {pair} {domain} {number}", fabtests_model.HEADER, *rows,
         f"{MARK} end {pair} {domain} {exit_code}"]
    )  # fmt: skip


def _rows(iterations: int = 100, acked: int | None = None, sizes=None) -> list[str]:
    node = Node(["rdmap16s27"])
    return [
        fabtests_model.show_perf_row(
            size, iterations, iterations if acked is None else acked,
            fabtests_model.elapsed_us(node, "rdmap16s27-rdm", size, iterations),
        )
        for size in (sizes or fabtests_model.generate_test_sizes(efa_results.PP_MAX_DATA_MSG))
    ]  # fmt: skip


def test_the_parser_keeps_every_row_the_tool_prints() -> None:
    rows = _rows()
    side = parse_log(_attempt_log(rows, 0))
    parsed = side.last_attempt(0).rows
    assert len(parsed) == len(rows) == 46
    assert [row.size for row in parsed] == EXPECTED_SIZES
    assert {"1.5k", "1.5m", "6m"} <= {row.size for row in parsed}


@pytest.mark.parametrize("size", [0, 1, 1000, 1536, 3072, 1 << 20, 1572864, 6 << 20, 3 << 30])
def test_sizes_and_counts_print_as_pingpong_c_prints_them(size: int) -> None:
    assert efa_results.size_str(size) == fabtests_model.size_str(size)
    assert efa_results.cnt_str(size) == fabtests_model.cnt_str(size)
    assert efa_results.message_sizes() == fabtests_model.generate_test_sizes(6 << 20)


def _verdict(client_log: str, server_log: str | None = None) -> efa_results.PairVerdict:
    sides = {
        "prefill": parse_log(client_log),
        "decode": parse_log(server_log if server_log is not None else _attempt_log(_rows(), 0)),
    }
    return efa_results.pair_verdict(0, sides, 100)


def test_rows_left_by_an_earlier_attempt_never_count() -> None:
    """Attempt 1 printed every row, then failed; attempt 2 could not connect: no result."""
    log = _attempt_log(_rows(), 1, number=1) + "\n" + _attempt_log([], 111, number=2)
    verdict = _verdict(log)
    assert not verdict.measured
    assert "exit 111" in verdict.problem
    healthy = _attempt_log([], 111, number=1) + "\n" + _attempt_log(_rows(), 0, number=2)
    assert _verdict(healthy).measured


@pytest.mark.parametrize(
    ("case", "log", "problem"),
    [
        ("acks missing (+N)", _attempt_log(_rows(acked=97), 0), "+3 acknowledged"),
        ("more acks than sent (-N)", _attempt_log(_rows(acked=101), 0), "-1 acknowledged"),
        ("other iterations", _attempt_log(_rows(iterations=10), 0), "10 sent"),
        ("sizes cut short", _attempt_log(_rows(sizes=[0, 1, 2]), 0), "3 of 46"),
        ("no exit status", _attempt_log(_rows(), 0).rsplit("\n", 1)[0], "no exit status"),
        ("hung", _attempt_log(_rows()[:5], 124), "hung"),
        ("no rows at all", _attempt_log([], 0), "0 of 46"),
    ],
)
def test_a_pair_needs_complete_evidence(case: str, log: str, problem: str) -> None:
    verdict = _verdict(log)
    assert not verdict.measured, case
    assert problem in verdict.problem, (case, verdict.problem)


@pytest.mark.parametrize("figure", ["inf", "nan", "-nan"])
def test_a_row_with_a_figure_that_is_not_finite_is_no_evidence(figure: str) -> None:
    rows = _rows()
    head, _, _ = rows[-1].rpartition(" ")
    rows[-1] = f"{head} {figure}"
    assert not _verdict(_attempt_log(rows, 0)).measured


def test_a_failed_server_side_fails_the_pair_even_if_the_client_printed_rows() -> None:
    assert not _verdict(_attempt_log(_rows(), 0), _attempt_log(_rows()[:3], 124)).measured


def test_no_pair_measured_never_passes_the_rate_marks() -> None:
    checks = efa_results.rate_checks([], 4, 100.0, EfaCheck())
    assert not any(check.ok for check in checks)


def test_marker_lines_with_foreign_text_are_ignored_not_echoed() -> None:
    hostile = f"{MARK} attempt 0 [red]x[/red] 1\n{MARK} uverbs 99999999999999\n"
    side = parse_log(hostile)
    assert side.pairs == {}
    assert side.uverbs_devices is None


def test_the_bandwidth_mark_follows_the_configured_share() -> None:
    """The same measurement passes or fails only by the configured share of the line rate."""
    log = _attempt_log(_rows(), 0)
    verdict = _verdict(log)
    share = verdict.bandwidth_gbps / 100.0
    above = efa_results.rate_checks([verdict], 1, 100.0, EfaCheck(min_bandwidth_share=share + 0.01))
    below = efa_results.rate_checks([verdict], 1, 100.0, EfaCheck(min_bandwidth_share=share - 0.01))
    assert not above[0].ok
    assert below[0].ok


# --- the run: both Jobs at once, bounded, cleaned up --------------------------------------------


class FakeJobs:
    def __init__(self, states: dict[str, list[efa_run.PodState]], fail_create: str = "") -> None:
        self.states, self.fail_create = states, fail_create
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.fail_delete = False
        self.log_text = {"prefill": "p", "decode": "d"}

    def create(self, manifest) -> None:
        name = f"{manifest['kind']} {manifest['metadata']['name']}"
        if self.fail_create and name.endswith(self.fail_create):
            raise RuntimeError("admission webhook said no")
        self.created.append(name)

    def pod_state(self, namespace, job) -> efa_run.PodState:
        queue = self.states[job.rsplit("-", 1)[1]]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def logs(self, namespace, job) -> str:
        return self.log_text[job.rsplit("-", 1)[1]]

    def delete(self, kind, namespace, name) -> None:
        self.deleted.append(f"{kind} {name}")
        if self.fail_delete:
            raise RuntimeError("the API server is gone")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


PENDING = efa_run.PodState("Pending")
RUNNING = efa_run.PodState("Running", "10.0.1.2", "node", ran=True)
DONE = efa_run.PodState("Succeeded", "10.0.1.2", "node", ran=True)


def test_both_jobs_and_services_are_created_before_any_wait(plan) -> None:
    jobs = FakeJobs({"decode": [PENDING, RUNNING, DONE], "prefill": [PENDING, RUNNING, DONE]})
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert len(jobs.created) == 4
    assert {c.split()[0] for c in jobs.created} == {"Job", "Service"}
    assert sorted(jobs.deleted) == sorted(jobs.created)
    assert output.logs == {"prefill": "p", "decode": "d"}
    assert not output.unfinished


def test_a_side_without_a_free_node_stops_at_the_deadline_and_cleans_up(plan) -> None:
    unschedulable = efa_run.PodState(
        "Pending", waiting="Unschedulable: 0/6 nodes are available: 2 Insufficient "
        "vpc.amazonaws.com/efa"
    )  # fmt: skip
    jobs = FakeJobs({"decode": [RUNNING], "prefill": [unschedulable]})
    clock = Clock()
    with pytest.raises(efa_run.EfaCheckError, match=r"Insufficient vpc\.amazonaws\.com/efa"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert clock.now <= plan.deadline_seconds + efa_run.POLL_SECONDS
    assert sorted(jobs.deleted) == sorted(jobs.created)


def test_a_side_still_running_at_the_deadline_is_judged_on_its_log(plan) -> None:
    jobs = FakeJobs({"decode": [RUNNING], "prefill": [DONE]})
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert output.unfinished == ["decode"]
    checks, _, _ = evaluate(
        {"prefill": "", "decode": ""}, _expectations(1, 1), EfaCheck(), output.unfinished
    )
    assert "still running at pdctl's deadline" in next(
        c.detail for c in checks if c.name == "both pods ran to the end"
    )


def test_a_pod_that_fails_before_running_ends_the_run_at_once(plan) -> None:
    crashed = efa_run.PodState("Failed", waiting="ErrImagePull: not found")
    jobs = FakeJobs({"decode": [crashed], "prefill": [PENDING]})
    clock = Clock()
    with pytest.raises(efa_run.EfaCheckError, match="ErrImagePull"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert clock.now < efa_run.POLL_SECONDS
    assert sorted(jobs.deleted) == sorted(jobs.created)


def test_a_failed_deletion_keeps_the_measurements_and_says_what_was_left(plan) -> None:
    jobs = FakeJobs({"decode": [DONE], "prefill": [DONE]})
    jobs.fail_delete = True
    clock = Clock()
    output = efa_run.run(jobs, plan, clock, clock.sleep)
    assert len(output.cleanup_errors) == 4  # every object tried


def test_a_run_that_fails_reports_its_own_error_even_if_cleanup_fails(plan) -> None:
    jobs = FakeJobs({"decode": [RUNNING], "prefill": [RUNNING]}, fail_create="prefill")
    jobs.fail_delete = True
    clock = Clock()
    with pytest.raises(RuntimeError, match="admission webhook"):
        efa_run.run(jobs, plan, clock, clock.sleep)
    assert jobs.deleted == jobs.created  # the Services and the decode Job made so far


# --- the command: what servers and logs say is printed as text ----------------------------------


def _cli(monkeypatch, run) -> tuple[int, str]:
    from typer.testing import CliRunner

    from pdctl import kube
    from pdctl.cli import app

    monkeypatch.setattr(kube, "load_kubeconfig", lambda settings: None)
    monkeypatch.setattr(cluster_jobs, "ClusterJobs", lambda settings: None)
    monkeypatch.setattr(efa_run, "run", run)
    result = CliRunner().invoke(app, ["efa-check"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_an_error_from_the_cluster_is_printed_as_text_not_markup(monkeypatch) -> None:
    def run(api, plan):
        raise efa_run.EfaCheckError("pod failed: its log ends: [bold]Error[/bold] [/] [link=x]")

    code, output = _cli(monkeypatch, run)
    assert code == 2  # the check could not run to a verdict (pdctl's exit codes)
    assert "[bold]Error[/bold] [/] [link=x]" in " ".join(output.split())


def test_node_names_and_cleanup_errors_are_printed_as_text(monkeypatch) -> None:
    def run(api, plan):
        return efa_run.RunOutput(
            {"prefill": "", "decode": ""}, {"prefill": "[red]p[/red]", "decode": "d"}, [],
            ["Job x: RuntimeError: [/bold] gone"],
        )  # fmt: skip

    code, output = _cli(monkeypatch, run)
    assert code == 1  # nothing measured: never a pass
    assert "[red]p[/red]" in output.replace("\n", "")
    assert "[/bold] gone" in " ".join(output.split())


# --- the engine's symptom of a node without EFA leads here --------------------------------------

NIXL_NO_DEVICE = "nixlNotFoundError: NIXL_ERR_NOT_FOUND"


def test_a_replica_dying_with_nixl_not_found_leads_to_efa_check(settings) -> None:
    """vLLM 0.26 on LIBFABRIC does not fall back when NIXL opens no EFA device: the replica
    crash-loops on one side. The shortfall alert, pdctl verify and the runbook name the error
    and the command."""
    from monitoring.alert_rules import render_alert_rules
    from pdctl import verify

    (group,) = render_alert_rules(settings)["groups"]
    shortfall = next(r for r in group["rules"] if r["alert"] == "ServingCapacityShortfall")
    assert NIXL_NO_DEVICE in shortfall["annotations"]["description"]
    assert "pdctl efa-check" in shortfall["annotations"]["description"]
    restarted = verify.TransferEvidence(1, 0, 1, reset=True)
    for evidence in (restarted, verify.TransferEvidence(0, 0, 1)):
        fix = verify.kv_verdict(evidence, "LIBFABRIC").fix
        assert NIXL_NO_DEVICE in fix
        assert "pdctl efa-check --prefill-node NODE" in fix


def test_pairs_outside_the_plan_or_repeating_a_device_are_no_evidence() -> None:
    """Every listed device must appear in a measured pair, and only pairs 0..n-1 count."""
    rows = _rows()
    listing = "\n".join(
        [f"{MARK} uverbs 2", f"{MARK} fi_info"]
        + [f"provider: efa\n    fabric: efa\n    domain: {d}" for d in ("a-rdm", "b-rdm")]
    )

    def side(pairs: list[tuple[int, str]]) -> str:
        body = [listing]
        for index, domain in pairs:
            body += [f"{MARK} attempt {index} {domain} 1", *rows, f"{MARK} end {index} {domain} 0"]
        return "\n".join([*body, f"{MARK} done"])

    expected = _expectations(2, 2)
    same_device = {
        "prefill": side([(0, "a-rdm"), (1, "a-rdm")]),
        "decode": side([(0, "a-rdm"), (1, "b-rdm")]),
    }
    assert PAIRS in _failing(evaluate(same_device, expected, EfaCheck())[0])
    stray_index = {
        "prefill": side([(0, "a-rdm"), (-1, "b-rdm")]),
        "decode": side([(0, "a-rdm"), (-1, "b-rdm")]),
    }
    assert PAIRS in _failing(evaluate(stray_index, expected, EfaCheck())[0])
    honest = {
        "prefill": side([(0, "a-rdm"), (1, "b-rdm")]),
        "decode": side([(0, "a-rdm"), (1, "b-rdm")]),
    }
    assert not _failing(evaluate(honest, expected, EfaCheck())[0])


def test_efa_check_on_shared_nodes_says_there_is_no_efa_path_to_measure(monkeypatch) -> None:
    from typer.testing import CliRunner

    from pdctl import kube
    from pdctl.cli import app

    def never(*args):
        raise AssertionError("no cluster call on shared nodes")

    monkeypatch.setattr(kube, "load_kubeconfig", never)
    monkeypatch.setattr(efa_run, "run", never)
    result = CliRunner().invoke(app, ["efa-check", "--config", "examples/trial-one-node.yaml"])
    assert result.exit_code == 2, result.output
    assert "gpu_nodes.shared runs both sides on every node" in " ".join(result.output.split())
