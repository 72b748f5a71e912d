"""`make gpu-bench` without a GPU: the proxy's protocol, the model folder, the sweep's shape, the
record's ratios and targets, and the docs' tables and plots regenerated from the recorded runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.cpu_use import serve_part
from tools.gpu_bench import points, proxy, real_size
from tools.gpu_bench.results import (
    BenchRun,
    added_ms,
    cpu_table,
    ingress_ceiling,
    markdown_report,
    ratio,
    svg,
    targets,
)
from tools.gpu_bench.run_facts import point_figures
from tools.gpu_bench.workload import CONCURRENCY, DATASETS, PROMPTS, bench_args

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "docs" / "gpu-bench").glob("*.json"))
ISSUE_SWEEP = (1, 8, 32, 128, 256)


def test_the_sweep_covers_the_issues_concurrencies_with_a_few_rounds_each() -> None:
    assert set(ISSUE_SWEEP) <= set(CONCURRENCY)
    for concurrency in CONCURRENCY:
        assert PROMPTS[concurrency] >= max(16, concurrency), concurrency


@pytest.mark.parametrize("dataset", sorted(DATASETS))
@pytest.mark.parametrize("concurrency", CONCURRENCY)
def test_each_point_is_one_fixed_length_run_of_vllm_bench_serve(dataset, concurrency) -> None:
    args = bench_args("http://h:1", "m", "/tok", DATASETS[dataset], concurrency, "/r", "f.json")

    def value(flag: str) -> str:
        return args[args.index(flag) + 1]

    assert value("--max-concurrency") == str(concurrency)
    assert value("--num-prompts") == str(PROMPTS[concurrency])
    assert value("--dataset-name") == DATASETS[dataset].flags[1]
    assert "--ignore-eos" in args
    assert "--save-result" in args
    assert value("--endpoint") == "/v1/completions"


def test_prefill_is_asked_for_one_token_kept_for_a_remote_decode() -> None:
    body = {"prompt": "p", "max_tokens": 128, "stream": True, "stream_options": {"x": 1}}
    sent = proxy.prefill_request(body)
    assert (sent["max_tokens"], sent["stream"]) == (1, False)
    assert "stream_options" not in sent
    assert sent["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 128  # the client's request is not changed for decode


def test_decode_gets_the_clients_request_and_prefills_transfer_params() -> None:
    body = {"prompt": "p", "max_tokens": 128, "stream": True}
    params = {"remote_block_ids": [[1, 2]], "remote_engine_id": "e"}
    assert proxy.decode_request(body, params) == {**body, "kv_transfer_params": params}


def _tokenizer(folder: Path, vocab: int, added: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "model": {"vocab": {f"t{i}": i for i in range(vocab)}},
        "added_tokens": [{"id": vocab + i, "content": f"<s{i}>"} for i in range(added)],
    }
    (folder / "tokenizer.json").write_text(json.dumps(data))
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


@pytest.mark.parametrize(
    ("config_vocab", "tokens", "changed"),
    [(151936, 151669, True), (151669, 151669, False), (1000, 1200, False)],
)
def test_the_vocabulary_is_cut_to_what_the_tokenizer_decodes(
    tmp_path, config_vocab, tokens, changed
) -> None:
    tokenizer = _tokenizer(tmp_path / "tok", tokens - 26, 26)
    config = json.loads((ROOT / "catalog/model_configs/Qwen3-8B.json").read_text())
    config["vocab_size"] = config_vocab
    notes = real_size.build(config, tokenizer, tmp_path / "model")
    written = json.loads((tmp_path / "model" / "config.json").read_text())
    assert written["vocab_size"] == (tokens if changed else config_vocab)
    assert bool(notes) is changed
    assert (tmp_path / "model" / "tokenizer.json").exists()
    assert {k: v for k, v in written.items() if k != "vocab_size"} == {
        k: v for k, v in config.items() if k != "vocab_size"
    }


@pytest.mark.parametrize(("layers", "kept"), [(2, 2), (36, 36), (None, 36), (40, 36)])
def test_a_fast_engine_keeps_only_the_first_layers_and_says_so(tmp_path, layers, kept) -> None:
    tokenizer = _tokenizer(tmp_path / "tok", 151643, 26)
    config = json.loads((ROOT / "catalog/model_configs/Qwen3-8B.json").read_text())
    notes = real_size.build(config, tokenizer, tmp_path / "model", layers)
    written = json.loads((tmp_path / "model" / "config.json").read_text())
    assert written["num_hidden_layers"] == kept
    assert any("num_hidden_layers" in note for note in notes) is (kept < 36)
    assert written["hidden_size"] == config["hidden_size"]


def _run(direct: dict, deployed: dict) -> BenchRun:
    return BenchRun(
        date="d",
        gpu="g",
        model="m",
        architecture="a",
        versions={},
        variants={"direct": "", "deployed": ""},
        workload={"datasets": {"random": "r"}},
        points={"direct": {"random": direct}, "deployed": {"random": deployed}},
    )


def _point(tokens_per_s: float, ttft_ms: float) -> dict:
    return {"output_throughput": tokens_per_s, "median_ttft_ms": ttft_ms}


@pytest.mark.parametrize(
    ("direct", "deployed", "verdicts"),
    [
        # deployed at 95 % of direct's saturation, +4 ms at 8, +14 ms at 128: every target held
        (
            {"8": _point(1000, 50), "128": _point(4000, 700)},
            {"8": _point(990, 54), "128": _point(3800, 714)},
            (True, True, True),
        ),
        # 85 % at saturation, +6 ms at 8, +16 ms at 128: every target missed
        (
            {"8": _point(1000, 50), "128": _point(4000, 700)},
            {"8": _point(990, 56), "128": _point(3400, 716)},
            (False, False, False),
        ),
        # faster first tokens than direct's at 8 and 128: the queues, not judged as held
        (
            {"8": _point(1000, 250), "128": _point(4000, 4000)},
            {"8": _point(990, 179), "128": _point(3800, 3645)},
            (True, None, None),
        ),
    ],
)
def test_the_targets_read_deployed_against_direct(direct, deployed, verdicts) -> None:
    found = targets(_run(direct, deployed))
    assert tuple(ok for _, ok in found.values()) == verdicts


def test_a_missing_point_gives_no_ratio_rather_than_a_wrong_one() -> None:
    run = _run({"8": _point(1000, 50)}, {})
    assert ratio(run, "deployed", "random", "8", "output_throughput") is None
    assert added_ms(run, "deployed", "random", "8", "median_ttft_ms") is None
    assert all(ok is False for _, ok in targets(run).values())


def test_a_point_reads_the_serve_processes_cpu_saved_beside_its_result(tmp_path: Path) -> None:
    """points.py saves the CPU seconds beside the result `vllm bench serve` writes (named by
    the point's own --result-dir and --result-filename); the figures divide them by the
    benchmark's duration and by its output tokens."""
    argv = bench_args("http://x", "m", "t", DATASETS["random"], 8, str(tmp_path), "p.json")
    result = points.result_path(argv)
    assert result == tmp_path / "p.json"
    result.write_text(json.dumps({"duration": 4.0, "total_output_tokens": 2000, "completed": 16}))
    points.cpu_file(result).write_text(
        json.dumps({"wall_s": 6.0, "cpu_s": {"ingress": 2.0, "decode": 3.0}})
    )
    figures = point_figures(result)
    assert figures["cpu_cores"] == {"ingress": 0.5, "decode": 0.75}
    assert figures["cpu_us_per_token"] == {"ingress": 1000.0, "decode": 1500.0}


def test_a_point_without_a_cpu_reading_has_no_cpu_figures(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps({"duration": 4.0}))
    assert "cpu_cores" not in point_figures(tmp_path / "p.json")


def _with_cpu(tokens_per_s: float, ingress_us_per_token: float) -> dict:
    return {
        **_point(tokens_per_s, 50),
        "cpu_cores": {"ingress": tokens_per_s * ingress_us_per_token / 1e6},
        "cpu_us_per_token": {"ingress": ingress_us_per_token},
    }


def test_the_ingress_ceiling_is_one_core_at_the_highest_points_cpu_per_token() -> None:
    run = _run({}, {"8": _with_cpu(1000, 400.0), "128": _with_cpu(3000, 250.0)})
    assert ingress_ceiling(run, "deployed", "random") == ("128", 4000.0)
    assert ingress_ceiling(run, "direct", "random") is None
    table = "\n".join(cpu_table(run, "random"))
    assert "| deployed | 128 | 3,000 | 0.75 / 250 |" in table
    assert "relays about 4,000 output tokens/s" in table


def test_a_run_without_cpu_readings_prints_no_cpu_table() -> None:
    assert cpu_table(_run({"8": _point(1, 1)}, {"8": _point(1, 1)}), "random") == []


@pytest.mark.parametrize(
    ("deployment", "part"),
    [
        ("OpenAiIngress", "ingress"),
        ("Prefill:qwen", "prefill"),
        ("Decode:qwen", "decode"),
        ("LLMServer:qwen", "server"),
        ("SomethingElse", None),
    ],
)
def test_serve_deployments_are_named_by_their_part(deployment: str, part: str | None) -> None:
    assert serve_part(deployment) == part


def test_the_plot_has_one_curve_per_measured_variant_and_a_point_per_concurrency() -> None:
    run = _run({"1": _point(100, 30), "8": _point(800, 40)}, {"1": _point(90, 35)})
    drawn = svg(run, "random")
    assert drawn.count("<polyline") == 2
    assert drawn.count("<circle") == 3


@pytest.mark.skipif(not RESULTS, reason="no recorded run")
def test_the_docs_tables_and_plots_are_generated_from_the_recorded_runs() -> None:
    page = (ROOT / "docs" / "verification.md").read_text()
    runs = [BenchRun.read(path) for path in RESULTS]
    assert markdown_report(runs) in page
    for run, path in zip(runs, RESULTS, strict=True):
        for dataset in run.workload["datasets"]:
            plot = path.with_name(f"{path.stem}-{dataset}.svg")
            assert plot.read_text() == svg(run, dataset), plot.name
            assert f"gpu-bench/{plot.name}" in page
