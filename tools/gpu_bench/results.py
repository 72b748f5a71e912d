"""A gpu-bench run's record: the dated JSON file, the docs' tables and the latency/throughput
plot, all generated from the file so that the page cannot drift from the measurement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.gpu_bench.run_facts import JsonRecord

# Figures by variant, dataset and concurrency (as strings: JSON keys): vllm bench serve's keys.
Points = dict[str, dict[str, dict[str, dict[str, Any]]]]
FLOOR = "direct"
DEPLOYED = "deployed"


@dataclass
class BenchRun(JsonRecord):
    date: str
    gpu: str
    model: str
    architecture: str
    versions: dict[str, str]
    commit: str = ""
    changes: list[str] = field(default_factory=list)  # the deployed config's one-GPU changes
    model_changes: list[str] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)  # name -> what it is
    startup: dict[str, Any] = field(default_factory=dict)
    points: Points = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def ratio(run: BenchRun, variant: str, dataset: str, concurrency: str, figure: str) -> float | None:
    """variant / direct for one figure at one point, None where either is missing."""
    try:
        mine = run.points[variant][dataset][concurrency][figure]
        floor = run.points[FLOOR][dataset][concurrency][figure]
    except KeyError:
        return None
    return mine / floor if mine and floor else None


def added_ms(
    run: BenchRun, variant: str, dataset: str, concurrency: str, figure: str
) -> float | None:
    try:
        return (
            run.points[variant][dataset][concurrency][figure]
            - run.points[FLOOR][dataset][concurrency][figure]
        )
    except (KeyError, TypeError):
        return None


def saturation(run: BenchRun, variant: str, dataset: str) -> float | None:
    """Output tokens/s at saturation: the highest the sweep reached."""
    figures = run.points.get(variant, {}).get(dataset, {})
    rates = [point.get("output_throughput") or 0 for point in figures.values()]
    return max(rates) if rates else None


def _number(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown_report(runs: Iterable[BenchRun]) -> str:
    parts = []
    for run in runs:
        versions = ", ".join(f"{name} {version}" for name, version in run.versions.items())
        lines = [
            f"**{run.date}, {run.gpu}: {run.architecture}, dummy weights**, served as "
            f"`{run.model}` ({versions}; commit {run.commit or 'unrecorded'})",
            "",
        ]
        for dataset, description in run.workload.get("datasets", {}).items():
            lines += [
                f"*{dataset}* ({description}); TTFT, ITL, E2E in ms (p50 / p99), output "
                "tokens/s, requests/s; deployed / direct in the last column",
                "",
                "| variant | streams | TTFT | ITL | E2E | output tok/s | req/s | vs direct |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for variant in run.variants:
                for concurrency, f in run.points.get(variant, {}).get(dataset, {}).items():
                    tput = ratio(run, variant, dataset, concurrency, "output_throughput")
                    extra = added_ms(run, variant, dataset, concurrency, "median_ttft_ms")
                    versus = (
                        f"tok/s x{tput:.2f}, TTFT p50 {extra:+.1f} ms"
                        if variant != FLOOR and tput is not None and extra is not None
                        else ""
                    )
                    failed = f" ({f.get('failed')} failed)" if f.get("failed") else ""
                    pairs = [
                        f"{_number(f.get('median_' + key), digits)} / "
                        f"{_number(f.get('p99_' + key), digits)}"
                        for key, digits in (("ttft_ms", 1), ("itl_ms", 2), ("e2el_ms", 0))
                    ]
                    lines.append(
                        f"| {variant} | {concurrency}{failed} | " + " | ".join(pairs) + " | "
                        f"{_number(f.get('output_throughput'), 0)} | "
                        f"{_number(f.get('request_throughput'), 2)} | {versus} |"
                    )
            lines.append("")
            for variant in run.variants:
                if not variant.startswith(DEPLOYED) or not run.points.get(variant, {}).get(dataset):
                    continue
                label = dataset if variant == DEPLOYED else f"{dataset}, {variant}"
                lines += [f"Targets ({label}): " + "; ".join(
                    f"{name}: {_number(value, 3 if abs(value) < 2 else 1)} "
                    f"({verdict(held)})"
                    if value is not None else f"{name}: not measured"
                    for name, (value, held) in targets(run, dataset, variant).items()
                ), ""]  # fmt: skip
            lines += cpu_table(run, dataset)
        if run.startup:
            lines.append(
                "Start-up: " + ", ".join(f"{key} {value}" for key, value in run.startup.items())
            )
        for note in run.notes:
            lines.append(f"- {note}")
        parts.append("\n".join(lines).rstrip())
    return "\n\n".join(parts)


# Where the Serve processes' CPU is shown: the parts of the application, in order.
CPU_PARTS = ("ingress", "decode", "prefill", "proxy")


def ingress_ceiling(run: BenchRun, variant: str, dataset: str) -> tuple[str, float] | None:
    """One ingress replica's ceiling in output tokens/s: what one full core relays at the CPU
    per token the ingress spent at the sweep's highest measured point (Serve's replica is one
    Python process whose event loop relays every stream). None without a CPU reading."""
    measured = [
        (int(streams), f["cpu_us_per_token"]["ingress"])
        for streams, f in run.points.get(variant, {}).get(dataset, {}).items()
        if f.get("cpu_us_per_token", {}).get("ingress")
    ]
    if not measured:
        return None
    streams, per_token = max(measured)
    return str(streams), 1e6 / per_token


def cpu_table(run: BenchRun, dataset: str) -> list[str]:
    """The Serve processes' CPU at each point of the variants that read it, and the ingress
    ceiling each reading implies."""
    rows, ceilings = [], []
    for variant in run.variants:
        for streams, f in run.points.get(variant, {}).get(dataset, {}).items():
            cores, per_token = f.get("cpu_cores") or {}, f.get("cpu_us_per_token") or {}
            if not cores:
                continue
            cells = [f"{_number(cores.get(part), 2)} / {_number(per_token.get(part), 0)}"
                     for part in CPU_PARTS]  # fmt: skip
            rows.append(
                f"| {variant} | {streams} | {_number(f.get('output_throughput'), 0)} | "
                + " | ".join(cells)
                + " |"
            )
        ceiling = ingress_ceiling(run, variant, dataset)
        if ceiling:
            ceilings.append(
                f"{variant}: one ingress replica at one full core relays about "
                f"{ceiling[1]:,.0f} output tokens/s (its CPU per token at {ceiling[0]} streams)"
            )
    if not rows:
        return []
    return [
        f"*{dataset}*, the Serve processes' CPU (tools/cpu_use.py, read around each point): "
        "cores over the point's duration / CPU microseconds per output token",
        "",
        "| variant | streams | output tok/s | " + " | ".join(CPU_PARTS) + " |",
        "|---|---|---|" + "---|" * len(CPU_PARTS),
        *rows,
        "",
        *(f"- {line}" for line in ceilings),
        "",
    ]


COLOURS = ("#1b6ca8", "#d1495b", "#2e933c", "#edae49", "#6c4f9e", "#3d3d3d", "#00a6a6")
WIDTH, HEIGHT, MARGIN = 640, 400, 60


def svg(run: BenchRun, dataset: str) -> str:
    """TTFT p50 against output tokens/s, one curve per variant, a point per concurrency."""
    curves: dict[str, list[tuple[float, float, str]]] = {}
    for variant in run.variants:
        figures = run.points.get(variant, {}).get(dataset, {})
        curves[variant] = [
            (f["output_throughput"], f["median_ttft_ms"], concurrency)
            for concurrency, f in figures.items()
            if f.get("output_throughput") and f.get("median_ttft_ms")
        ]
    values = [point for curve in curves.values() for point in curve]
    x_max = max((x for x, _, _ in values), default=1) * 1.05
    y_max = max((y for _, y, _ in values), default=1) * 1.05

    def place(x: float, y: float) -> tuple[float, float]:
        return (
            MARGIN + x / x_max * (WIDTH - 2 * MARGIN),
            HEIGHT - MARGIN - y / y_max * (HEIGHT - 2 * MARGIN),
        )

    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="13">'
        f"{run.architecture}, {run.gpu}: {dataset}</text>",
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" '
        f'y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 20}" text-anchor="middle">output tokens/s</text>',
        f'<text x="15" y="{HEIGHT / 2}" text-anchor="middle" '
        f'transform="rotate(-90 15 {HEIGHT / 2})">TTFT p50 (ms)</text>',
    ]
    for tick in range(6):
        x, y = x_max * tick / 5, y_max * tick / 5
        px, _ = place(x, 0)
        _, py = place(0, y)
        body += [
            f'<text x="{px:.0f}" y="{HEIGHT - MARGIN + 15}" text-anchor="middle">{x:,.0f}</text>',
            f'<text x="{MARGIN - 5}" y="{py + 4:.0f}" text-anchor="end">{y:,.0f}</text>',
        ]
    for index, (variant, curve) in enumerate(curves.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = " ".join("{:.1f},{:.1f}".format(*place(x, y)) for x, y, _ in curve)
        if curve:
            body.append(f'<polyline points="{points}" fill="none" stroke="{colour}"/>')
        for x, y, concurrency in curve:
            px, py = place(x, y)
            body.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}">'
                        f"<title>{variant} {concurrency} streams</title></circle>")  # fmt: skip
        body.append(
            f'<text x="{MARGIN + 10}" y="{MARGIN + 14 * index}" fill="{colour}">{variant}</text>'
        )
    body.append("</svg>")
    return "\n".join(body) + "\n"


def write_svg(run: BenchRun, dataset: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg(run, dataset))


def _added_within(added: float | None, bound_ms: float) -> bool | None:
    """Whether the TTFT the deployed path adds is within the bound; None (not judged) where it
    is below direct's: the deployed path runs the same engines behind more hops, so a negative
    difference is how the two paths filled the engines' queues, not what Serve costs."""
    if added is None:
        return False
    return None if added < 0 else added <= bound_ms


def targets(run: BenchRun, dataset: str = "random", variant: str = DEPLOYED) -> Mapping[str, Any]:
    """The issue's targets against this run: a deployed variant's tokens/s at saturation >= 90 %
    of direct's; TTFT p50 added over direct <= 5 ms at 8 streams and <= 15 ms at 128. Each is
    (the figure, held: True, False, or None where the figure cannot judge it)."""
    direct, deployed = saturation(run, FLOOR, dataset), saturation(run, variant, dataset)
    share = deployed / direct if direct and deployed else None
    at8 = added_ms(run, variant, dataset, "8", "median_ttft_ms")
    at128 = added_ms(run, variant, dataset, "128", "median_ttft_ms")
    return {
        "saturation tokens/s deployed / direct >= 0.90": (
            share,
            share is not None and share >= 0.9,
        ),
        "TTFT p50 added at 8 streams <= 5 ms": (at8, _added_within(at8, 5)),
        "TTFT p50 added at 128 streams <= 15 ms": (at128, _added_within(at128, 15)),
    }


def verdict(held: bool | None) -> str:
    if held is None:
        return "not judged: below direct, so the engines' queues, not Serve's cost"
    return "held" if held else "missed"
