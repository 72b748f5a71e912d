"""pdctl against bad local files and a bare machine, by class of mistake: model configs that are
not model configs (not JSON, not an object, NaN, deep nesting, wrong types, sizes out of range,
huge files, folders), paths that must never become downloads, and a machine without AWS
credentials or a kubeconfig. Each ends in one line on stderr with exit code 2, never a
traceback; `--json` turns the line into a JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdctl import kv_plan
from pdctl.cli import app
from tests.configurations import PROJECT_ROOT
from tests.pdctl.hostile_server import Connection, Request, hostile_server
from tests.pdctl.test_pdctl_plan import QWEN3_32B


def _plan(source: str, *extra: str) -> CliRunner:
    return CliRunner().invoke(
        app, ["plan", "--model-config", source, *extra], env={"COLUMNS": "300"}
    )


def _qwen(**changes: object) -> dict:
    return {**QWEN3_32B, **changes}


BAD_VALUES = [
    ("num_hidden_layers", float("nan"), "NaN is not a number"),
    ("num_hidden_layers", float("inf"), "Infinity is not a number"),
    ("num_hidden_layers", "64", "expected a whole number"),
    ("num_hidden_layers", 64.0, "expected a whole number"),
    ("num_hidden_layers", 0, "expected a whole number"),
    ("num_hidden_layers", True, "expected a whole number"),
    ("num_hidden_layers", [64], "expected a whole number"),
    ("num_hidden_layers", {"n": 64}, "expected a whole number"),
    ("hidden_size", -5120, "expected a whole number"),
    ("hidden_size", 10**40, "expected a whole number from 1 to"),
    ("vocab_size", 2**31, "expected a whole number from 1 to"),
    ("num_key_value_heads", 7, "does not divide"),
    ("num_attention_heads", None, "num_attention_heads is missing"),
    ("torch_dtype", "int3", "dtype"),
    ("torch_dtype", {"a": 1}, "dtype"),
    ("text_config", "llama", "text_config is not a JSON object"),
    ("quantization_config", [], "not a JSON object"),
    ("num_experts_per_tok", 9, "exceeds"),
]


@pytest.mark.parametrize(
    ("key", "value", "fragment"), BAD_VALUES, ids=[f"{k}={v!r}"[:40] for k, v, _ in BAD_VALUES]
)
def test_plan_refuses_values_no_model_config_holds(key, value, fragment, tmp_path: Path) -> None:
    config = _qwen(**{key: value})
    if key == "num_experts_per_tok":
        config["num_experts"] = 8
    if value is None:
        config.pop(key)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # json writes NaN and Infinity, as a careless tool would
    result = _plan(str(path))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert fragment in " ".join(result.stderr.split()), result.output
    assert len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'"a string"', "expected a JSON object"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
        (b" " * (kv_plan.CONFIG_BYTES_MAX + 1), "larger than"),
        (b'{"text_config": null, "num_attention_heads": 0}', "num_attention_heads = 0"),
        (b'{"rope_scaling": {"rope_type": "yarn", "factor": "four"}}', "rope_scaling.factor"),
    ],
    ids=[
        "broken",
        "empty",
        "array",
        "string",
        "binary",
        "deep-array",
        "deep-object",
        "huge",
        "zero-heads",
        "text-factor",
    ],
)
def test_plan_refuses_files_that_are_not_model_configs(content, fragment, tmp_path: Path) -> None:
    """The same reader and field check as synth's (catalog/model_config_file.py), named by
    --model-config or by the configuration's serving.model.config_file."""
    path = tmp_path / "config.json"
    path.write_bytes(content)
    for result in (
        _plan(str(path)),
        CliRunner().invoke(app, ["plan", "-c", f"serving.model.config_file={path}"]),
    ):
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert fragment in " ".join(result.stderr.split()), result.output


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any attempt to reach Hugging Face is recorded and refused."""
    attempts: list[str] = []

    def refuse(url, *args, **kwargs):
        attempts.append(str(getattr(url, "full_url", url)))
        raise OSError("network refused in this test")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return attempts


@pytest.mark.parametrize(
    "source",
    [
        "llama/config.json",  # one slash, like owner/name, but a file name
        "./Qwen/Qwen3-32B",
        "../Qwen3-32B",
        "models/Qwen/Qwen3-32B",
        "Qwen\\Qwen3-32B",
        "~/Qwen3-32B",
        "config.json",
    ],
)
def test_a_path_the_user_gave_is_a_file_never_a_download(
    source, no_downloads, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = _plan(source)
    assert result.exit_code == 2, result.output
    assert "no such file" in " ".join(result.stderr.split())
    assert no_downloads == []


def test_an_existing_relative_folder_is_read_not_downloaded(
    no_downloads, tmp_path, monkeypatch
) -> None:
    """`Qwen/Qwen3-32B` names a model id, unless a folder of that name is here: then it is the
    local copy, read from its config.json."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "Qwen" / "Qwen3-32B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN3_32B))
    result = _plan("Qwen/Qwen3-32B", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_bytes_per_token"] == 262_144
    assert no_downloads == []
    (folder / "config.json").unlink()
    result = _plan("Qwen/Qwen3-32B")  # a folder without config.json: still a path
    assert result.exit_code == 2
    assert no_downloads == []


def test_a_model_id_is_downloaded_and_its_failure_is_one_line(
    no_downloads, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = _plan("Qwen/Qwen3-32B")
    assert no_downloads == ["https://huggingface.co/Qwen/Qwen3-32B/resolve/main/config.json"]
    assert result.exit_code == 2
    assert "network refused" in result.stderr


def test_plan_errors_are_json_on_stderr_under_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[]")
    result = _plan(str(path), "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert json.loads(result.stderr)["exit_code"] == 2


# A machine with the project installed and nothing else: no credentials, no kubeconfig.
def _bare_machine(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "KUBECONFIG"}
    env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        KUBECONFIG=str(tmp_path / "none"),
        HOME=str(tmp_path),
        COLUMNS="300",
    )
    return env


def _installed(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pdctl.cli", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


KUBECONFIG_FIX = "aws eks update-kubeconfig --name pd-llm --region us-west-2"


@pytest.mark.parametrize(
    ("args", "fragment", "fix"),
    [
        (["cost", "--prices", "api"], "Unable to locate credentials", "--prices catalog"),
        (["preflight"], "Unable to locate credentials", "aws sso login"),
        (["verify", "--timeout", "1"], "Unable to locate credentials", "aws sso login"),
        (["bench"], "no usable kubeconfig", KUBECONFIG_FIX),
        (["efa-check"], "no usable kubeconfig", KUBECONFIG_FIX),
        (["image", "--no-registry", "--from-cluster"], "no usable kubeconfig", KUBECONFIG_FIX),
        (
            ["verify", "--url", "http://127.0.0.1:9", "--timeout", "1"],
            "connection failed",
            "--url",
        ),
    ],
)
def test_a_bare_machine_gets_one_line_and_what_to_do(args, fragment, fix, tmp_path: Path) -> None:
    started = time.monotonic()
    done = _installed(args, _bare_machine(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert fragment in done.stderr
    assert fix in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert time.monotonic() - started < 30


def test_a_kubeconfig_that_is_not_one_gets_the_same_hint(tmp_path: Path) -> None:
    env = _bare_machine(tmp_path)
    Path(env["KUBECONFIG"]).write_text("clusters: [ {name: x, cluster: 7} ]\n")
    done = _installed(["bench", "--json"], env)
    assert done.returncode == 2
    error = json.loads(done.stderr)
    assert "no usable kubeconfig" in error["error"]
    assert KUBECONFIG_FIX in error["hint"]


def test_cost_estimates_without_an_account_from_list_prices(tmp_path: Path) -> None:
    done = _installed(["cost", "--json"], _bare_machine(tmp_path))
    assert done.returncode == 0, done.stderr
    estimate = json.loads(done.stdout)
    assert "catalog list prices" in estimate["prices"]
    assert "no AWS credentials" in done.stderr
    lines = {line["item"]: line for line in estimate["lines"]}
    assert lines["prefill nodes (p5.48xlarge)"]["unit_price_per_hour"] > 0
    assert estimate["complete"] is True


def test_usage_errors_follow_json_too(tmp_path: Path) -> None:
    done = _installed(["plan", "--json", "--input-tokens", "zero"], _bare_machine(tmp_path))
    assert done.returncode == 2
    assert "--input-tokens" in json.loads(done.stderr)["error"]


def test_version(tmp_path: Path) -> None:
    done = _installed(["--version"], _bare_machine(tmp_path))
    assert done.returncode == 0
    assert done.stdout.startswith("pdctl ")


def test_help_loads_no_sdk_and_no_configuration_model() -> None:
    """`pdctl --help` answers at once: boto3, the Kubernetes client, pydantic and the
    configuration model load inside the commands that use them."""
    probe = (
        "import sys, pdctl.cli; "
        "print(','.join(m for m in ('boto3', 'botocore', 'kubernetes', 'openai', 'pydantic', "
        "'app_config', 'prometheus_client') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


STACK_WITHOUT_OUTPUTS = (
    '<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/">'
    "<DescribeStacksResult><Stacks><member><StackName>pd-llm-serving</StackName>"
    "<StackStatus>CREATE_COMPLETE</StackStatus><CreationTime>2026-12-01T00:00:00Z</CreationTime>"
    "</member></Stacks></DescribeStacksResult></DescribeStacksResponse>"
)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (STACK_WITHOUT_OUTPUTS, "has no output EndpointUrl"),
        ("<DescribeStacksResponse><unclosed", "not its API's answer"),
        ("<html>captive portal</html>", "the answer could not be read"),
    ],
    ids=["no-outputs", "broken-xml", "html"],
)
def test_cloudformation_answers_that_hold_no_endpoint_are_one_line(
    body, fragment, tmp_path
) -> None:
    """`verify` without --url reads the serving stack's EndpointUrl output; an endpoint override
    (AWS_ENDPOINT_URL, as botocore reads it) stands in for CloudFormation."""

    def describe_stacks(conn: Connection, request: Request) -> None:
        conn.respond(body, "text/xml")

    with hostile_server({"/": describe_stacks}) as url:
        env = _bare_machine(tmp_path)
        env.update(
            AWS_ENDPOINT_URL=url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_MAX_ATTEMPTS="1",
        )
        done = _installed(["verify", "--timeout", "1"], env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert fragment in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
