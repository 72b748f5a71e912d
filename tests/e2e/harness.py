"""The deployed Serve application on a local Ray cluster: what `cdk synth` wrote into cdk.out,
started by the real Ray Serve LLM (``build_pd_openai_app``) with the stand-in engine.

The cluster is shaped like the KubeRay one the RayService describes: a head with the head group's
CPUs (none), one Ray node per worker pod with the GPUs of its container limit and the custom
resources of its group. The Serve config is submitted the way KubeRay does it
(``PUT /api/serve/applications/`` on the dashboard). Everything listens on 127.0.0.1, every wait
is bounded, and ``LocalRay.stop()`` (also run at exit and on SIGTERM) shuts Ray down.

The Ray environment must be set before ``import ray``: ``LocalRay`` refuses to start otherwise.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar

import yaml
from scraper import KUBERAY_HEAD_GROUP, Pod, fetch_text, kuberay_pod_labels

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent.parent
# The project venv's Python, which runs pdctl and renders variants (tools.write_manifests).
PROJECT_PYTHON = Path(os.environ.get("PD_E2E_PROJECT_PYTHON", PROJECT_ROOT / ".venv/bin/python"))

# ================================================================================================
# Every change the local run makes to what is deployed, and nothing else. Everything below this
# block reads the synthesized templates and uses them unchanged.
#
# 1. Engine: Ray Serve LLM's own engine hook selects the stand-in in every replica.
ENGINE_CLS = "standin_engine.StandinEngine"
# 2. Addresses: the Serve proxies listen on 127.0.0.1 and a free port (the pod: 0.0.0.0:8000);
#    the dashboard, GCS and metrics ports are free ports on 127.0.0.1 (the pod: 8265, 6379,
#    8080). Each Ray node stands for a pod with a made-up pod IP; the scraper's request to that
#    IP and the `metrics` container port goes to the node's metrics port (pod_fetch).
LOOPBACK = "127.0.0.1"
POD_NETWORK = "10.244.0."
# 3. Resources: GPUs are logical (Ray counts them; no device exists); accelerator_type:<X>,
#    which Ray detects on a real GPU node, is declared when the side's LLMConfig names one (the
#    synthesized config does not: serve_config.py says why); each worker node gets 16 CPUs (the
#    pod has the instance's), enough for the placement group bundles and the ingress.
WORKER_NODE_CPUS = 16
OBJECT_STORE_BYTES = 200 * 2**20  # the pod: 30% of its memory; nothing large crosses it here
# 4. Process environment of the whole local cluster (the driver's, inherited by every raylet
#    and worker), each entry with its reason.
METRICS_REPORT_INTERVAL_MS = 2000  # Ray's default 10000: tests poll the metrics port less
# 5. Engine cost: the stand-in's prefill takes this long per prompt token, so that a long-prompt
#    load is prefill's and not decode's, as on GPUs. The figure is arbitrary (a 3,000-token
#    prompt holds prefill 0.6 s; the tests' short prompts, a few milliseconds).
PREFILL_S_PER_PROMPT_TOKEN = 0.0002
# 6. The app's Python (serve_extensions): the RayService's ConfigMap volume, emulated. Its files
#    are written under <run dir>/pod-root where the Ray container mounts them, and the
#    container's PYTHONPATH, mapped there, goes on every local Ray process's path and the
#    driver's: the local cluster imports the package from what was synthesized, not from the
#    checkout.
POD_ROOT = "pod-root"


def local_environment(run_dir: Path, ray_tmpdir: Path, pod_python_path: str = "") -> dict[str, str]:
    """Set before ``import ray``: Ray reads some of it at import, the raylets at start."""
    paths = (str(HERE), pod_python_path, os.environ.get("PYTHONPATH"))
    return {
        "RAYLLM_VLLM_ENGINE_CLS": ENGINE_CLS,
        # sitecustomize.py (this folder): Serve replicas' gRPC servers bind 127.0.0.1, not [::].
        "PD_LOOPBACK_ONLY": "1",
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        # The stand-in's request record and its switch that makes NIXL transfers fail.
        "STANDIN_RECORDS": str(run_dir / "records.jsonl"),
        "STANDIN_NIXL_FAIL_FILE": str(run_dir / "nixl-fail.flag"),
        "STANDIN_PREFILL_S_PER_PROMPT_TOKEN": str(PREFILL_S_PER_PROMPT_TOKEN),
        # Ray resolves 127.0.0.1 to the host's IP unless told this is a single-host cluster;
        # the dashboard's Serve API then hangs.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        # A private temp dir: no other ray.init() on the machine attaches to this cluster.
        "RAY_TMPDIR": str(ray_tmpdir),
        # Else Ray prestarts one worker per logical CPU of every node.
        "RAY_prestart_worker_first_driver": "0",
        "RAY_metrics_report_interval_ms": str(METRICS_REPORT_INTERVAL_MS),
        "RAY_USAGE_STATS_ENABLED": "0",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # Nothing is fetched from the Hub: fail fast rather than wait on the network.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(run_dir / "hf-home"),
    }


def mount_config_maps(synthesized: Synthesized, root: Path) -> str:
    """Write each ConfigMap volume of the Ray container into ``root`` as the kubelet would mount
    it (its ``items``, at the mount path) and return the container's PYTHONPATH under ``root``.
    The head's and the workers' mounts are the same volume (rayservice.py): the head's stands
    for all."""
    pod = synthesized.group_spec(KUBERAY_HEAD_GROUP)["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    for volume in pod.get("volumes", []):
        source = volume.get("configMap")
        if not source or volume["name"] not in mounts:
            continue
        if source["name"] not in synthesized.config_maps:
            raise LookupError(
                f"the Ray pods mount ConfigMap {source['name']}, which is not among the "
                f"synthesized manifests ({sorted(synthesized.config_maps)})"
            )
        data = synthesized.config_maps[source["name"]]["data"]
        target = root / mounts[volume["name"]].lstrip("/")
        for item in source.get("items") or [{"key": key, "path": key} for key in data]:
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
    env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    return os.pathsep.join(
        str(root / entry.lstrip("/")) for entry in env.get("PYTHONPATH", "").split(":") if entry
    )


def localize(serve_config: Mapping[str, Any], http_port: int) -> dict[str, Any]:
    """The Serve config with the proxies' address changed, nothing else."""
    config = copy.deepcopy(dict(serve_config))
    config["http_options"] = {**config.get("http_options", {}), "host": LOOPBACK, "port": http_port}
    return config


def head_node_args(ray_start_params: Mapping[str, str], dashboard_port: int) -> dict[str, Any]:
    """ray.cluster_utils.Cluster arguments for the head pod (CPUs from its rayStartParams)."""
    return {
        "node_ip_address": LOOPBACK,
        "object_store_memory": OBJECT_STORE_BYTES,
        "metrics_export_port": free_port(),
        "num_cpus": int(ray_start_params.get("num-cpus", WORKER_NODE_CPUS)),
        "num_gpus": 0,
        "include_dashboard": True,
        "dashboard_host": LOOPBACK,
        "dashboard_port": dashboard_port,
    }


def worker_node_args(shape: NodeShape) -> dict[str, Any]:
    """ray.cluster_utils.Cluster arguments for a worker pod."""
    return {
        "node_ip_address": LOOPBACK,
        "object_store_memory": OBJECT_STORE_BYTES,
        "metrics_export_port": free_port(),
        "num_cpus": shape.cpus,
        "num_gpus": shape.gpus,
        "resources": {
            **shape.resources,
            **({f"accelerator_type:{shape.accelerator}": 1.0} if shape.accelerator else {}),
        },
    }


# ================================================================================================


# Ports the tier gives Ray's listeners (proxies, dashboards, metrics exporters) come from below
# the kernel's ephemeral range, which every outgoing connection draws from, and above Ray's own
# worker ports (min_worker_port/max_worker_port, 10002-19999 in Ray 2.58). A port the kernel
# handed out free was bound by Ray tens of seconds later, by which time another socket could
# hold it: Ray's proxy failed with "Address already in use" (2026-12-07).
LISTENER_PORTS_FROM = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_port_cursor: list[int] = []  # this process's next candidate, from a random start


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port no socket holds now, outside the range the kernel picks for other sockets; each
    call of a process a new one (in turn from a random start, so that two processes of the
    tier rarely try the same ones)."""
    low, high = LISTENER_PORTS_FROM, _ephemeral_low()
    if high - low < 1024:  # a kernel range that leaves no room below it: the kernel's pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            return sock.getsockname()[1]
    if not _port_cursor:
        _port_cursor.append(random.SystemRandom().randrange(low, high))
    for _ in range(high - low):
        port = _port_cursor[0]
        _port_cursor[0] = low + (port + 1 - low) % (high - low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {low}-{high - 1} on {LOOPBACK}")


T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float, interval: float = 1.0, what: str = "condition"
) -> T:
    """The predicate's first truthy value; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (OSError, ValueError, KeyError, RuntimeError) as problem:
            last_error, value = problem, None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"no {what} after {timeout:.0f} s; last error: {last_error!r}")


def http(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


# ---------------------------------------------------------------------------- what cdk.out holds
def cfn_text(value: Any) -> str:
    """A CloudFormation string value as text; tokens (Ref, GetAtt, imports) become <token>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(cfn_text(part) for part in parts)
    if isinstance(value, dict) and "Fn::Base64" in value:
        return cfn_text(value["Fn::Base64"])
    return "<token>"


@dataclass(frozen=True)
class NodeShape:
    """What a worker pod advertises to Ray."""

    group: str
    gpus: int
    resources: dict[str, float]
    accelerator: str | None  # the side's LLMConfig accelerator_type, when it names one
    cpus: int = WORKER_NODE_CPUS  # a node standing for several pods has their bundles' CPUs


@dataclass(frozen=True)
class Synthesized:
    """The serving pieces of the synthesized templates."""

    rayservice: dict[str, Any]
    scrape_config: dict[str, Any]  # the managed scraper's Prometheus configuration
    queries: str  # the dashboard body and the alert rules, as text
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name

    @classmethod
    def read(cls, cdk_out: Path) -> Synthesized:
        rayservices, scrapers, queries, config_maps = [], [], [], {}
        for template in sorted(cdk_out.glob("*.template.json")):
            for resource in json.loads(template.read_text())["Resources"].values():
                properties = resource.get("Properties", {})
                if "Manifest" in properties:
                    documents = json.loads(cfn_text(properties["Manifest"]))
                    rayservices += [d for d in documents if d.get("kind") == "RayService"]
                    config_maps.update(
                        (d["metadata"]["name"], d)
                        for d in documents
                        if d.get("kind") == "ConfigMap"
                    )
                if resource["Type"] == "AWS::APS::Scraper":
                    blob = properties["ScrapeConfiguration"]["ConfigurationBlob"]
                    scrapers.append(yaml.safe_load(cfn_text(blob)))
                if resource["Type"] == "AWS::CloudWatch::Dashboard":
                    queries.append(cfn_text(properties["DashboardBody"]))
                if resource["Type"] == "AWS::APS::RuleGroupsNamespace":
                    queries.append(cfn_text(properties["Data"]))
        if len(rayservices) != 1 or len(scrapers) != 1:
            raise LookupError(
                f"{cdk_out}: expected one RayService and one scraper, found "
                f"{len(rayservices)} and {len(scrapers)} (run `make synth`)"
            )
        return cls(rayservices[0], scrapers[0], "\n".join(queries), config_maps)

    @property
    def serve_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.rayservice["spec"]["serveConfigV2"])

    @property
    def cluster_config(self) -> dict[str, Any]:
        return self.rayservice["spec"]["rayClusterConfig"]

    def group_spec(self, group: str) -> dict[str, Any]:
        """The head group's spec for KubeRay's "headgroup", else the named worker group's."""
        if group == KUBERAY_HEAD_GROUP:
            return self.cluster_config["headGroupSpec"]
        specs = self.cluster_config["workerGroupSpecs"]
        return next(spec for spec in specs if spec["groupName"] == group)

    def ray_container(self, group: str) -> dict[str, Any]:
        return self.group_spec(group)["template"]["spec"]["containers"][0]

    def pod_labels(self, group: str) -> dict[str, str]:
        return dict(self.group_spec(group)["template"]["metadata"].get("labels", {}))

    def worker_pods(self) -> list[NodeShape]:
        """One shape per worker pod (a group's replicas), each with its group's resources."""
        args = self.serve_config["applications"][0]["args"]
        pods = []
        for group in self.cluster_config["workerGroupSpecs"]:
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            shape = NodeShape(
                group=group["groupName"],
                gpus=int(limits["nvidia.com/gpu"]),
                resources={k: float(v) for k, v in (group.get("resources") or {}).items()},
                accelerator=args[f"{group['groupName']}_config"].get("accelerator_type"),
            )
            pods += [shape] * int(group["replicas"])
        return pods


# ------------------------------------------------------------------------------- the local Ray
class DeployError(RuntimeError):
    """An application Serve reported as DEPLOY_FAILED or UNHEALTHY, with Serve's message."""

    def __init__(self, app: str, status: str, message: str) -> None:
        super().__init__(f"{app}: {status}: {message}")
        self.app, self.status, self.message = app, status, message


@dataclass
class RayNode:
    role: str  # "head" or the worker group
    node_id: str
    metrics_port: int
    pod_name: str
    pod_ip: str


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_LIVE: set[_Stoppable] = set()  # local clusters and background scenarios, stopped at exit


def _stop_all_and_reraise(signum: int, frame: FrameType | None) -> None:
    for cluster in list(_LIVE):
        cluster.stop()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _stop_at_exit(live: _Stoppable) -> None:
    """``live.stop()`` at exit and on SIGTERM (`timeout` ending the run)."""
    _LIVE.add(live)
    atexit.register(live.stop)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _stop_all_and_reraise)


def _disconnect_driver() -> None:
    """Disconnect this driver from its local Ray for good, before a node it was connected to
    is removed. Ray wraps its public calls to ray.init() a driver that is not connected
    (Ray 2.58 ray/_private/auto_init_hook.py, unless RAY_ENABLE_AUTO_CONNECT=0 at import);
    a Serve handle the driver made (a scenario's get_deployment_handle) keeps pushing its
    metrics from a thread of its own through ray.wait (serve/_private/router.py), so between
    ray.shutdown() and the head's removal, slow on a loaded machine, such a push reconnected
    the driver to the head, and Cluster.remove_node refused to remove the node the driver is
    connected to (ray/cluster_utils.py), failing the scenario after its work was done."""
    import ray
    from ray._private import auto_init_hook

    auto_init_hook.enable_auto_connect = False
    if ray.is_initialized():
        ray.shutdown()


@dataclass(eq=False)
class LocalRay:
    synthesized: Synthesized
    run_dir: Path
    extra_nodes: list[NodeShape] = field(default_factory=list)  # beside the RayService's pods
    # Worker groups whose pods are not there at start (their nodes wait for capacity):
    # add_worker() brings one later.
    absent_groups: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 120.0
    timings: dict[str, float] = field(default_factory=dict)
    nodes: list[RayNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        if "ray" in sys.modules:
            raise RuntimeError("ray was imported before the local Ray environment was set")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.records_path = self.run_dir / "records.jsonl"
        self.fail_flag = self.run_dir / "nixl-fail.flag"
        self.records_path.unlink(missing_ok=True)
        self.fail_flag.unlink(missing_ok=True)
        (self.run_dir / "hf-home").mkdir(exist_ok=True)
        # Short: Ray's Unix socket paths live under it (108-byte limit).
        self.ray_tmpdir = Path(tempfile.mkdtemp(prefix="pdE2E", dir="/tmp"))
        pod_root = self.run_dir / POD_ROOT
        shutil.rmtree(pod_root, ignore_errors=True)
        python_path = mount_config_maps(self.synthesized, pod_root)
        # The driver too (it validates Serve LLM configs in process: autoscaler_view.py).
        sys.path[:0] = [entry for entry in python_path.split(os.pathsep) if entry]
        self.env = {
            **local_environment(self.run_dir, self.ray_tmpdir, python_path),
            **self.extra_env,
        }
        os.environ.update(self.env)
        self.http_port = free_port()
        self.dashboard_port = free_port()
        self.config = localize(self.synthesized.serve_config, self.http_port)
        self._cluster: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def dashboard(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def start(self, attempts: int = 2) -> None:
        """Start the nodes; on a busy machine a raylet can miss Ray's fixed 30 s registration
        window, so a failed start is cleaned up and tried once more."""
        start = time.monotonic()
        _stop_at_exit(self)
        for attempt in range(1, attempts + 1):
            before = self.cluster_pids()
            try:
                self._start_nodes()
                break
            except Exception as failed:
                self._abandon(before)
                if attempt == attempts:
                    raise
                print(f"local Ray start failed ({failed}); retrying", file=sys.stderr)
        self.session_dir = Path(self._cluster.head_node.get_session_dir_path())
        wait_for(
            lambda: http("GET", f"{self.dashboard}/api/version")[0] == 200,
            self.start_timeout_s,
            0.5,
            "answer from the dashboard",
        )
        self.timings["ray_start_s"] = time.monotonic() - start

    def _start_nodes(self) -> None:
        from ray.cluster_utils import Cluster

        self.nodes = []
        self._cluster = Cluster()
        head_group = self.synthesized.cluster_config["headGroupSpec"]
        head = head_node_args(head_group["rayStartParams"], self.dashboard_port)
        self._cluster.add_node(**head)
        self.ray_cluster_name = f"{self.synthesized.rayservice['metadata']['name']}-local"
        self.nodes.append(
            RayNode(
                "head",
                self._cluster.head_node.node_id,
                head["metrics_export_port"],
                f"{self.ray_cluster_name}-head-0",
                f"{POD_NETWORK}1",
            )
        )
        pods = [p for p in self.synthesized.worker_pods() if p.group not in self.absent_groups]
        for shape in pods + self.extra_nodes:
            self._add_node(shape)
        self._cluster.connect()

    def _add_node(self, shape: NodeShape) -> None:
        index = len(self.nodes) + 1
        args = worker_node_args(shape)
        node = self._cluster.add_node(**args)
        self.nodes.append(
            RayNode(
                shape.group,
                node.node_id,
                args["metrics_export_port"],
                f"{self.ray_cluster_name}-{shape.group}-worker-{index}",
                f"{POD_NETWORK}{index}",
            )
        )

    def add_worker(self, group: str) -> None:
        """One more pod of ``group``, as when its node group finally gets capacity."""
        (shape, *_) = [p for p in self.synthesized.worker_pods() if p.group == group]
        self._add_node(shape)

    def kill_head(self) -> None:
        """The head pod's processes (GCS, dashboard, Serve controller, head raylet) die at once,
        as when KubeRay deletes a Ray cluster; the workers' processes are left alone. The
        driver disconnects first: Ray refuses to remove the node it is attached to."""
        _disconnect_driver()
        self._cluster.remove_node(self._cluster.head_node, allow_graceful=False)

    def _abandon(self, before: set[int]) -> None:
        """After a failed start: shut down the nodes that registered, then end the processes
        this attempt started that Ray does not track (by their pid, nothing else)."""
        import psutil

        with contextlib.suppress(Exception):
            self._cluster.shutdown()
        self._cluster = None
        leftover = []
        for pid in self.cluster_pids() - before:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                process.terminate()
                leftover.append(process)
        psutil.wait_procs(leftover, timeout=15)
        for process in leftover:
            with contextlib.suppress(psutil.Error):
                process.kill()
        shutil.rmtree(self.ray_tmpdir, ignore_errors=True)
        self.ray_tmpdir.mkdir()

    def node(self, role: str) -> RayNode:
        (found,) = [node for node in self.nodes if node.role == role]
        return found

    def metrics_url(self, role: str) -> str:
        return f"http://{LOOPBACK}:{self.node(role).metrics_port}/metrics"

    def metrics_text(self, role: str) -> str:
        status, text = http("GET", self.metrics_url(role))
        if status != 200:
            raise RuntimeError(f"{self.metrics_url(role)} answered {status}")
        return text

    # ---- the scraper's view
    def pods(self) -> list[Pod]:
        """The RayService's pods as the API server would list them: the template's labels and
        Ray container, plus the labels KubeRay adds."""
        pods = []
        groups = {g["groupName"] for g in self.synthesized.cluster_config["workerGroupSpecs"]}
        for node in self.nodes:
            if node.role not in groups | {"head"}:
                continue  # a node of the local run's own (the orchestration bench's)
            group = KUBERAY_HEAD_GROUP if node.role == "head" else node.role
            labels = {
                **self.synthesized.pod_labels(group),
                **kuberay_pod_labels(self.ray_cluster_name, group),
            }
            pods.append(
                Pod(
                    name=node.pod_name,
                    namespace=self.synthesized.rayservice["metadata"]["namespace"],
                    node_name=f"node-{node.role}",
                    ip=node.pod_ip,
                    labels=labels,
                    container=self.synthesized.ray_container(group),
                )
            )
        return pods

    def pod_fetch(self, url: str) -> str:
        """GET a pod's `metrics` container port: the pod's Ray node's metrics port."""
        address = urllib.parse.urlsplit(url)
        (node,) = [node for node in self.nodes if node.pod_ip == address.hostname]
        group = KUBERAY_HEAD_GROUP if node.role == "head" else node.role
        ports = self.synthesized.ray_container(group).get("ports", [])
        if address.port not in [p["containerPort"] for p in ports if p.get("name") == "metrics"]:
            raise ConnectionRefusedError(f"{url}: only the metrics port is emulated")
        return fetch_text(f"http://{LOOPBACK}:{node.metrics_port}{address.path}")

    # ---- Serve
    def put(self, config: Mapping[str, Any]) -> None:
        status, body = http("PUT", f"{self.dashboard}/api/serve/applications/", config, 60)
        if status != 200:
            raise RuntimeError(f"PUT /api/serve/applications/ answered {status}: {body[:2000]}")

    def applications(self) -> dict[str, Any]:
        status, body = http("GET", f"{self.dashboard}/api/serve/applications/", timeout=30)
        if status != 200:
            raise RuntimeError(f"GET /api/serve/applications/ answered {status}")
        return json.loads(body).get("applications", {})

    def wait_status(
        self,
        app: str,
        wanted: str,
        timeout: float,
        failures: tuple[str, ...] = ("DEPLOY_FAILED", "UNHEALTHY"),
    ) -> dict[str, Any]:
        """Poll Serve until ``app`` has the wanted status; a status in ``failures`` raises at
        once (a replica being replaced makes an application UNHEALTHY for a while)."""

        def reached() -> dict[str, Any] | None:
            found = self.applications().get(app)
            if not found:
                return None
            if found["status"] != wanted and found["status"] in failures:
                raise DeployError(app, found["status"], found.get("message", ""))
            return found if found["status"] == wanted else None

        deadline = time.monotonic() + timeout
        while True:
            found = reached()
            if found:
                return found
            if time.monotonic() > deadline:
                status = json.dumps(self.applications().get(app))[:4000]
                raise TimeoutError(f"{app} not {wanted} after {timeout:.0f} s: {status}")
            time.sleep(1.0)

    def deploy(self, config: Mapping[str, Any], timeout: float = 420.0) -> None:
        """PUT the config, as KubeRay does, and wait until each of its applications is RUNNING."""
        start = time.monotonic()
        self.put(config)
        for app in config["applications"]:
            self.wait_status(app["name"], "RUNNING", timeout)
        self.timings.setdefault("deploy_s", time.monotonic() - start)

    @property
    def app_name(self) -> str:
        return self.config["applications"][0]["name"]

    def records(self) -> list[dict[str, Any]]:
        if not self.records_path.exists():
            return []
        lines = self.records_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line]

    @contextlib.contextmanager
    def transfers_failing(self) -> Iterator[None]:
        self.fail_flag.touch()
        try:
            yield
        finally:
            self.fail_flag.unlink(missing_ok=True)

    def cluster_pids(self) -> set[int]:
        import psutil

        me = psutil.Process()
        return {child.pid for child in me.children(recursive=True)} | {me.pid}

    def stop(self) -> None:
        """Safe to call twice. Keeps the session's logs, then shuts this cluster's nodes down.
        Never `ray stop --force` or AutoscalingCluster.shutdown(): they stop every Ray on the
        machine."""
        if self not in _LIVE:
            return
        _LIVE.discard(self)
        start = time.monotonic()
        session = getattr(self, "session_dir", None)
        if session and (session / "logs").exists():
            with contextlib.suppress(OSError, shutil.Error):
                destination = self.run_dir / "ray-logs"
                shutil.rmtree(destination, ignore_errors=True)
                shutil.copytree(
                    session / "logs",
                    destination,
                    ignore_dangling_symlinks=True,
                    ignore=shutil.ignore_patterns("*.sock"),
                )
        try:
            _disconnect_driver()
        finally:
            if self._cluster is not None:
                self._cluster.shutdown()
                self._cluster = None
            shutil.rmtree(self.ray_tmpdir, ignore_errors=True)
        self.timings["ray_stop_s"] = time.monotonic() - start


# ------------------------------------------------------------- a configuration of its own
RAYSERVICE = "rayservice.json"  # the rendered RayService, in render_rayservice's folder
CONFIG_MAPS = "config-maps.json"  # beside the rendered RayService: the ConfigMaps its pods mount


def render_rayservice(
    project_python: Path, out: Path, config: Path | None = None, overrides: dict | None = None
) -> Path:
    """The RayService the project renders for a configuration, saved as JSON (for a scenario
    that runs another configuration than the synthesized one: ``rendered`` reads it back)."""
    command = [str(project_python), "-m", "tools.write_manifests", "--out", str(out)]
    if config:
        command += ["--config", str(config)]
    for key, value in (overrides or {}).items():
        command += ["-c", f"{key}={value}"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (manifest,) = out.glob("*-rayservice-*.yaml")
    path = out / RAYSERVICE
    path.write_text(json.dumps(yaml.safe_load(manifest.read_text())))
    # The ConfigMaps its pods mount (the app's serve_extensions), beside it for the harness.
    maps = [yaml.safe_load(m.read_text()) for m in out.glob("*-configmap-*.yaml")]
    (out / CONFIG_MAPS).write_text(json.dumps({m["metadata"]["name"]: m for m in maps}))
    return path


def rendering(folder: Path, **variants: dict[str, Any]) -> Callable[[], None]:
    """A Scenario's ``prepare``: ``folder`` emptied, then each variant's RayService rendered by
    the project's code into ``folder/<name>`` (keyword arguments of render_rayservice: config,
    overrides), read from ``folder/<name>/rayservice.json``."""

    def render() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        for name, options in variants.items():
            render_rayservice(PROJECT_PYTHON, folder / name, **options)

    return render


def rendered(rayservice: Path) -> Synthesized:
    """What render_rayservice wrote, as the harness reads a synthesized app (no scraper, no
    dashboard: those are the CDK stacks')."""
    maps = rayservice.with_name(CONFIG_MAPS)
    return Synthesized(
        rayservice=json.loads(rayservice.read_text()),
        scrape_config={},
        queries="",
        config_maps=json.loads(maps.read_text()) if maps.exists() else {},
    )


def _script_command(script: str, *args: str) -> list[str]:
    return [sys.executable, str(HERE / script), *args]


def _script_env() -> dict[str, str]:
    """The session's environment for a scenario script, which starts a Ray of its own: never
    an address of another."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS")}
    return {**kept, "PYTHONPATH": str(HERE)}


def run_script(script: str, *args: str, timeout: float) -> None:
    """A scenario script of this folder in its own interpreter (each starts and stops its own
    local Ray), failing the test with its stderr's first traceback and its end: Ray's shutdown
    after a failure can fill the end with its own errors."""
    done = subprocess.run(
        _script_command(script, *args),
        cwd=HERE,
        env=_script_env(),
        timeout=timeout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, failure_text(done.stderr)


def failure_text(stderr: str, each: int = 3000) -> str:
    """The first traceback of ``stderr`` (where the failure began) and its last characters."""
    first = stderr.find("Traceback (most recent call last)")
    if first < 0 or first >= len(stderr) - 2 * each:
        return stderr[-2 * each :]
    return f"{stderr[first : first + each]}\n[...]\n{stderr[-each:]}"


@dataclass(frozen=True)
class Scenario:
    """A scenario script of this folder and its arguments, for Background; ``prepare`` runs in
    the background thread just before it (rendering its configuration: a failure there fails
    the scenario, not the session's collection)."""

    script: str
    args: tuple[str, ...] = ()
    prepare: Callable[[], None] | None = None


@dataclass(eq=False)
class Background:
    """Scenario scripts run one after another in a thread, from when the session collected
    their tests, while the session's other tests run: a scenario that mostly waits (a stream
    at half a second per token, a node that arrives after 45 s, a deployment starting on a
    cluster of its own) then costs the tier little wall time of its own. One at a time, so
    that at most one such cluster runs beside the session's. ``result(name)`` waits for a
    scenario, fails the test as run_script does and returns what the scenario wrote; ``stop()``
    ends what is still running (SIGTERM: LocalRay shuts its Ray down)."""

    log_dir: Path
    timeout: float
    scenarios: dict[str, Scenario] = field(default_factory=dict)  # by name, in running order

    def __post_init__(self) -> None:
        import threading

        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._done: dict[str, threading.Event] = {}
        self._errors: dict[str, str | None] = {}
        self._running: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run_all, daemon=True)

    def add(self, name: str, scenario: Scenario) -> None:
        import threading

        self.scenarios[name] = scenario
        self._done[name] = threading.Event()

    def start(self) -> None:
        _stop_at_exit(self)
        self._thread.start()

    def _run_all(self) -> None:
        for name, scenario in self.scenarios.items():
            self._errors[name] = self._run_one(name, scenario)
            self._done[name].set()

    def _run_one(self, name: str, scenario: Scenario) -> str | None:
        if self._stopped:
            return "stopped before it started"
        if scenario.prepare is not None:
            try:
                scenario.prepare()
            except Exception as failed:  # the scenario's failure, reported by result()
                return f"{name}: preparing it failed: {failed!r}"
        stderr = self.log_dir / f"{name}.stderr"
        with stderr.open("wb") as errors:
            self._running = subprocess.Popen(
                _script_command(scenario.script, *scenario.args),
                cwd=HERE,
                env=_script_env(),
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            try:
                code = self._running.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._running.terminate()
                try:
                    self._running.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self._running.kill()
                    self._running.wait()
                code = None
        tail = stderr.read_text(errors="replace")[-6000:]
        if code is None:
            return f"{name}: still running after {self.timeout:.0f} s\n{tail}"
        return None if code == 0 else f"{name}: exit {code}\n{tail}"

    def result(self, name: str) -> dict[str, Any]:
        """Wait for ``name`` (bounded: every scenario before it and it have their timeout) and
        read the JSON it wrote to ``<log dir>/<name>.json``."""
        bound = self.timeout * (list(self.scenarios).index(name) + 1) + 120
        assert self._done[name].wait(bound), f"{name}: not done after {bound:.0f} s"
        error = self._errors[name]
        assert error is None, error
        return json.loads((self.log_dir / f"{name}.json").read_text())

    def stop(self) -> None:
        _LIVE.discard(self)
        self._stopped = True
        running = self._running
        if running is not None and running.poll() is None:
            running.terminate()
            try:
                running.wait(timeout=60)
            except subprocess.TimeoutExpired:
                running.kill()
