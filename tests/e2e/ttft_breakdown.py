"""Where the time to first token goes, hop by hop, from timestamps on the real path.

Three sources, joined by the request id the client sends (``X-Request-Id``: Ray Serve 2.58's
proxy takes it as the request's id, ray/serve/_private/proxy.py ``SERVE_HTTP_REQUEST_ID_HEADER``,
and every handle call made for the request carries it on, so the ingress, decode and prefill
all log it):

- the client: when it sent the request and when the first content chunk arrived
  (``time.time()``, the clock every process on the host shares);
- Serve's access log, one line per request per component when its part of the request ended
  (ray/serve/_private/proxy.py ``proxy_request`` and replica.py
  ``_record_errors_and_metrics``: ``<level> <date> <time,ms> <component> <id> <request id> --
  <method> <route> <status> <latency>ms``). Its start is the line's time less its latency: when
  the proxy began to route the request, when the ingress replica, the decode replica and the
  prefill replica each began to handle it. The line's time has millisecond resolution
  (truncated), so a start is within about 1 ms;
- the stand-in engine's records (standin_engine.py): when each engine began the request
  (``time_start``) and when its first output left it (``time_first_output``).

Sorted in time, these cut the TTFT into consecutive segments that add up to it exactly:

P/D: client -> proxy (HTTP, the proxy's own parsing) | proxy -> ingress (the proxy's routing and
the Serve hop) | ingress -> decode (the ingress's request handling and its hop to decode) |
decode -> prefill (decode's call to prefill: shaping the prefill request and the hop) |
prefill server (prefill's LLMServer up to its engine) | prefill step | prefill -> decode engine
(prefill's response back to decode and decode's LLMServer up to its engine) | first decode step
(the KV pull and the first token) | back to client (the stream batching interval, decode -> the
ingress -> the proxy -> the client).

Aggregated: the same without decode's call to prefill: client -> proxy | proxy -> ingress |
ingress -> server | server -> engine | engine step | back to client.
"""

from __future__ import annotations

import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from tools.cpu_use import serve_part

# ray/serve/_private/logging_utils.py ServeFormatter + access_log_msg (no client address unless
# RAY_SERVE_LOG_CLIENT_ADDRESS=1, which the harness does not set).
ACCESS_LINE = re.compile(
    r"^\w+ (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<component>\S+) \S+ "
    r"(?P<request_id>\S+) -- (?:POST|GET|CALL) \S+ \S+ (?P<latency_ms>[\d.]+)ms$"
)

PD_SEGMENTS = (
    ("client -> proxy", "sent", "proxy"),
    ("proxy -> ingress", "proxy", "ingress"),
    ("ingress -> decode", "ingress", "decode"),
    ("decode -> prefill", "decode", "prefill"),
    ("prefill server", "prefill", "prefill_engine"),
    ("prefill step", "prefill_engine", "prefill_output"),
    ("prefill -> decode engine", "prefill_output", "decode_engine"),
    ("first decode step", "decode_engine", "decode_output"),
    ("back to client", "decode_output", "first_token"),
)
AGGREGATED_SEGMENTS = (
    ("client -> proxy", "sent", "proxy"),
    ("proxy -> ingress", "proxy", "ingress"),
    ("ingress -> server", "ingress", "server"),
    ("server -> engine", "server", "local_engine"),
    ("engine step", "local_engine", "local_output"),
    ("back to client", "local_output", "first_token"),
)
# The rows of the table: a P/D segment and the aggregated one it is set against (None: P/D
# only). decode's server plays the aggregated server's part for the decode step.
ROWS = (
    ("client -> proxy", "client -> proxy"),
    ("proxy -> ingress", "proxy -> ingress"),
    ("ingress -> decode", "ingress -> server"),
    ("decode -> prefill", None),
    ("prefill server", None),
    ("prefill step", None),
    ("prefill -> decode engine", "server -> engine"),
    ("first decode step", "engine step"),
    ("back to client", "back to client"),
)


def role(component: str) -> str | None:
    """The part a Serve access-log component plays: ``proxy``, or the replica's deployment
    (``<app>_OpenAiIngress``, ``<app>_Prefill:<model>``, ``<app>_Decode:<model>``, Ray's
    aggregated ``<app>_LLMServer:<model>``)."""
    if component == "proxy":
        return "proxy"
    return serve_part(component.split("_", 1)[-1])


def serve_starts(log_dir: Path, request_ids: set[str]) -> dict[str, dict[str, float]]:
    """Per request id, when each component began it (the access line's time less its
    latency), from every Serve log under ``log_dir``."""
    starts: dict[str, dict[str, float]] = {}
    for path in sorted(log_dir.glob("*.log")):
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if " -- " not in line:
                    continue
                found = ACCESS_LINE.match(line.rstrip("\n"))
                if not found or found["request_id"] not in request_ids:
                    continue
                part = role(found["component"])
                if part is None:
                    continue
                ended = datetime.strptime(found["date"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                start = ended - float(found["latency_ms"]) / 1000
                # A part seen twice (a retried call) counts from its first start.
                known = starts.setdefault(found["request_id"], {})
                known[part] = min(start, known.get(part, start))
    return starts


def engine_times(
    records: list[dict[str, Any]], request_ids: set[str]
) -> dict[str, dict[str, float]]:
    """Per request id, when each engine began it and when its first output left."""
    times: dict[str, dict[str, float]] = {}
    for found in records:
        request_id = found.get("request_id")
        if request_id not in request_ids:
            continue
        phase = found.get("phase")
        if found["event"] == "request" and "time_start" in found:
            times.setdefault(request_id, {})[f"{phase}_engine"] = found["time_start"]
        elif found["event"] == "output":
            times.setdefault(request_id, {})[f"{phase}_output"] = found["time_first_output"]
    return times


def breakdown(
    client: dict[str, tuple[float, float]],
    starts: dict[str, dict[str, float]],
    engines: dict[str, dict[str, float]],
    segments: tuple[tuple[str, str, str], ...],
) -> dict[str, Any]:
    """p50 and mean of each segment (ms) over the requests for which every timestamp was
    found, and the TTFT p50 of the same requests: the segments add up to each request's TTFT,
    their p50s only roughly to the TTFT's."""
    per_segment: dict[str, list[float]] = {name: [] for name, _, _ in segments}
    ttfts = []
    for request_id, (sent, first_token) in client.items():
        stamps = {"sent": sent, "first_token": first_token}
        stamps |= starts.get(request_id, {}) | engines.get(request_id, {})
        if any(a not in stamps or b not in stamps for _, a, b in segments):
            continue
        for name, a, b in segments:
            per_segment[name].append(stamps[b] - stamps[a])
        ttfts.append(first_token - sent)
    if not ttfts:
        return {"requests": 0}
    return {
        "requests": len(ttfts),
        "ttft_p50_ms": round(statistics.median(ttfts) * 1000, 2),
        "segments": {
            name: {
                "p50_ms": round(statistics.median(values) * 1000, 2),
                "mean_ms": round(statistics.fmean(values) * 1000, 2),
            }
            for name, values in per_segment.items()
        },
    }


def table(parts: dict[str, Any]) -> str:
    """Markdown: one row per P/D segment with the aggregated segment it stands for, p50 (mean)
    in ms, and what P/D adds."""
    pd, aggregated = parts["pd"], parts["aggregated"]

    def cell(found: dict[str, Any], name: str | None) -> tuple[str, float | None]:
        if name is None or found.get("requests", 0) == 0:
            return "", None
        segment = found["segments"][name]
        return f"{segment['p50_ms']:.1f} ({segment['mean_ms']:.1f})", segment["mean_ms"]

    lines = [
        "| segment | P/D p50 (mean) | aggregated p50 (mean) | P/D adds (mean) |",
        "|---|---|---|---|",
    ]
    for pd_name, aggregated_name in ROWS:
        pd_cell, pd_mean = cell(pd, pd_name)
        aggregated_cell, aggregated_mean = cell(aggregated, aggregated_name)
        added = (pd_mean or 0.0) - (aggregated_mean or 0.0)
        label = pd_name if aggregated_name in (None, pd_name) else f"{pd_name} / {aggregated_name}"
        lines.append(f"| {label} | {pd_cell} | {aggregated_cell} | {added:+.1f} |")
    lines.append(
        f"| TTFT p50 | {pd['ttft_p50_ms']:.1f} | {aggregated['ttft_p50_ms']:.1f} "
        f"| {pd['ttft_p50_ms'] - aggregated['ttft_p50_ms']:+.1f} |"
    )
    return "\n".join(lines)
