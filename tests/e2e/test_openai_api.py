"""The deployed application through the real HTTP path: Serve's proxy, the OpenAI ingress, the
P/D decode server calling prefill. The hand-off is asserted from the engines' record: a request
whose hand-off failed still answers 200."""

from __future__ import annotations

import importlib.metadata
import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import openai
import psutil
import pytest
from harness import LOOPBACK, LocalRay, http

# What Ray's PDDecodeServer sends to prefill (ray/llm/_internal/serve/serving_patterns/
# prefill_decode/pd_server.py): keep the KV for a remote decode, nothing known yet.
PREFILL_KV_REQUEST = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def hand_off(pd: LocalRay, marker: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The prefill and the decode record of the one request whose prompt carries ``marker``."""
    records = [r for r in pd.records() if r["event"] == "request" and marker in r.get("prompt", "")]
    prefill = [r for r in records if r["phase"] == "prefill"]
    decode = [r for r in records if r["phase"] == "decode"]
    assert len(prefill) == 1, records
    assert len(decode) == 1, records
    return prefill[0], decode[0]


def check_hand_off(pd: LocalRay, marker: str, kind: str, client_text: str) -> None:
    prefill, decode = hand_off(pd, marker)
    assert prefill["kind"] == decode["kind"] == kind
    assert prefill["deployment"].startswith("Prefill:")
    assert decode["deployment"].startswith("Decode:")
    assert prefill["node_id"] == pd.node("prefill").node_id
    assert decode["node_id"] == pd.node("decode").node_id
    # Prefill first, asked for one token, not streamed, told to keep the KV for decode.
    assert prefill["time_start"] <= decode["time_start"]
    assert prefill["max_tokens"] == 1
    assert prefill["stream"] is False
    if kind == "chat":
        assert prefill["max_completion_tokens"] == 1
    assert prefill["kv_transfer_params"] == PREFILL_KV_REQUEST
    # Decode got exactly what prefill returned; the client saw decode's tokens.
    handed = prefill["kv_transfer_params_out"]
    assert handed["do_remote_prefill"] is True
    assert handed["remote_engine_id"]
    assert handed["remote_request_id"] == prefill["request_id"]
    assert decode["kv_transfer_params"] == handed
    assert decode["kv_transfer_params_out"] is None
    assert client_text == decode["output_text"]
    assert decode["n_out"] > prefill["n_out"] == 1


def test_the_installed_ray_is_the_deployed_images(pd: LocalRay) -> None:
    assert importlib.metadata.version("ray") == pd.synthesized.cluster_config["rayVersion"]


def test_nothing_listens_beyond_loopback(pd: LocalRay) -> None:
    ours = pd.cluster_pids()
    wide = [
        (c.laddr.ip, c.laddr.port, c.pid)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
        and c.pid in ours
        and not (c.laddr.ip.removeprefix("::ffff:").startswith("127.") or c.laddr.ip == "::1")
    ]
    assert not wide


def test_placement_groups_fill_each_sides_node(pd: LocalRay) -> None:
    """TP x PP bundles of bundle_per_worker (plus Ray Serve LLM's accelerator_type share, if the
    config names one); the
    replica actor's CPU merged into the first bundle; STRICT_PACK onto the side's one node."""
    from ray.util import placement_group_table

    args = pd.config["applications"][0]["args"]
    groups = [pg for pg in placement_group_table().values() if pg["state"] == "CREATED"]
    assert len(groups) == 2
    for role in ("prefill", "decode"):
        llm = args[f"{role}_config"]
        engine = llm["engine_kwargs"]
        (group,) = [pg for pg in groups if role in pg["bundles"][0]]
        bundles = list(group["bundles"].values())
        wanted = {
            k: float(v) for k, v in llm["placement_group_config"]["bundle_per_worker"].items()
        }
        if llm.get("accelerator_type"):  # Ray Serve LLM's share of the named accelerator
            wanted[f"accelerator_type:{llm['accelerator_type']}"] = 0.001
        assert group["strategy"] == llm["placement_group_config"]["strategy"]
        assert len(bundles) == engine["tensor_parallel_size"] * engine["pipeline_parallel_size"]
        assert bundles[0] == {**wanted, "CPU": wanted["CPU"] + 1}
        assert all(bundle == wanted for bundle in bundles[1:])
        assert set(group["bundles_to_node_id"].values()) == {pd.node(role).node_id}


def test_models_lists_exactly_the_configured_model(client: openai.OpenAI, model: str) -> None:
    assert [m.id for m in client.models.list().data] == [model]
    assert client.models.retrieve(model).id == model


def test_healthz_and_routes(pd: LocalRay) -> None:
    """What the load balancer's health check calls (proxy health, not application readiness)."""
    assert http("GET", f"{pd.base_url}/-/healthz") == (200, "success")
    status, body = http("GET", f"{pd.base_url}/-/routes")
    assert status == 200
    assert json.loads(body) == {
        app["route_prefix"]: app["name"] for app in pd.config["applications"]
    }


def test_decode_starts_without_a_prewarm_hand_off(pd: LocalRay) -> None:
    """The synthesized decode config leaves Ray's `_prewarm_prefill_decode` off (it would hold
    decode's start until a prefill replica answers: serve-pd-app.yaml, test_lifecycle.py): no
    pre-warm request reaches either engine; the first client request makes the hand-off."""
    requests = [r for r in pd.records() if r["event"] == "request"]
    assert not [r for r in requests if str(r.get("request_id", "")).startswith("prewarm-")]
    starts = [r for r in pd.records() if r["event"] == "start"]
    # Each engine advertises its NIXL side channel on its node's own address.
    assert {start["side_channel"][0] for start in starts} == {LOOPBACK}


def test_chat_non_streaming(pd: LocalRay, client: openai.OpenAI, model: str) -> None:
    marker = uuid.uuid4().hex
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"hello {marker}"}], max_tokens=7
    )
    assert response.object == "chat.completion"
    assert response.model == model
    assert response.usage.completion_tokens == 7
    assert response.choices[0].finish_reason == "length"
    check_hand_off(pd, marker, "chat", response.choices[0].message.content)


def test_chat_streaming(pd: LocalRay, client: openai.OpenAI, model: str) -> None:
    marker = uuid.uuid4().hex
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"stream {marker}"}],
            max_tokens=9,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].usage.completion_tokens == 9
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert hand_off(pd, marker)[1]["stream"] is True
    check_hand_off(pd, marker, "chat", text)


def test_completion_non_streaming(pd: LocalRay, client: openai.OpenAI, model: str) -> None:
    marker = uuid.uuid4().hex
    response = client.completions.create(model=model, prompt=f"complete {marker}", max_tokens=6)
    assert response.object == "text_completion"
    check_hand_off(pd, marker, "completions", response.choices[0].text)


def test_completion_streaming(pd: LocalRay, client: openai.OpenAI, model: str) -> None:
    marker = uuid.uuid4().hex
    chunks = list(
        client.completions.create(
            model=model, prompt=f"complete stream {marker}", max_tokens=5, stream=True
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    check_hand_off(pd, marker, "completions", "".join(c.choices[0].text for c in chunks))


def test_raw_stream_is_server_sent_events_ending_in_done(pd: LocalRay, model: str) -> None:
    body = {
        "model": model,
        "stream": True,
        "max_tokens": 3,
        "messages": [{"role": "user", "content": "raw"}],
    }
    request = urllib.request.Request(
        f"{pd.base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in response.read().decode().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith("data: ") for event in events)


def test_unknown_model_is_a_404(pd: LocalRay, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no/such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    status, body = http(
        "POST",
        f"{pd.base_url}/v1/completions",
        {"model": "no/such-model", "prompt": "x", "max_tokens": 2},
    )
    assert status == 404
    # Ray 2.58's ingress raises fastapi.HTTPException here, answered by FastAPI's own handler
    # before Ray's OpenAI-shaped error middleware: {"detail": ...}, not {"error": {...}}.
    assert "no/such-model" in json.loads(body)["detail"]


def test_a_request_decode_refuses_is_an_openai_400(
    pd: LocalRay, client: openai.OpenAI, model: str
) -> None:
    """Too long for max_model_len: prefill (clamped to one token) runs, decode refuses."""
    marker = uuid.uuid4().hex
    too_many = pd.config["applications"][0]["args"]["decode_config"]["engine_kwargs"][
        "max_model_len"
    ]
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=model, prompt=f"long {marker}", max_tokens=too_many)
    records = [r for r in pd.records() if marker in r.get("prompt", "")]
    assert [(r["phase"], "error" in r) for r in records] == [
        ("prefill", False),
        ("decode", True),
    ]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"max_tokens": 2}),  # no messages
        ("/v1/completions", {"prompt": "x", "max_tokens": -1}),  # refused by decode
        ("/v1/chat/completions", b"{not json"),
    ],
    ids=["messages-missing", "negative-max-tokens", "not-json"],
)
def test_bad_requests_are_openai_400s(
    pd: LocalRay, model: str, path: str, body: dict[str, Any] | bytes
) -> None:
    data = body if isinstance(body, bytes) else json.dumps({"model": model, **body}).encode()
    request = urllib.request.Request(
        f"{pd.base_url}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    error = json.loads(refused.value.read().decode())["error"]
    assert {"message", "type", "code"} <= set(error)
