"""The floor of the P/D path: a minimal proxy that drives prefill and decode by vLLM's NIXL
protocol, with nothing of Serve between them.

The same protocol as vLLM's own toy proxy for its NIXL integration tests
(tests/v1/kv_connector/nixl_integration/toy_proxy_server.py in vLLM's repository) and
as Ray Serve LLM's decode server: the request goes to prefill with ``max_tokens: 1``, no stream and
``kv_transfer_params.do_remote_decode``; prefill's answer carries ``kv_transfer_params`` naming
the blocks it kept; the request goes on to decode with them, and decode's stream is relayed
chunk by chunk. One process, one event loop (aiohttp), connection pools without a limit.

    python -m tools.gpu_bench.proxy --port 8300 --prefill URL --decode URL
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import aiohttp
from aiohttp import web

REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def prefill_request(body: dict[str, Any]) -> dict[str, Any]:
    """What prefill is asked: one token, no stream, keep the KV for a remote decode."""
    request = copy.deepcopy(body)
    request.update({"max_tokens": 1, "stream": False, "kv_transfer_params": dict(REMOTE_DECODE)})
    request.pop("stream_options", None)
    request.pop("max_completion_tokens", None)
    return request


def decode_request(body: dict[str, Any], kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    return {**body, "kv_transfer_params": kv_transfer_params}


def application(prefill: str, decode: str) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        )

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        session: aiohttp.ClientSession = request.app["session"]
        url = request.path
        async with session.post(f"{prefill}{url}", json=prefill_request(body)) as answer:
            first = await answer.json()
            if answer.status != 200:
                return web.json_response(first, status=answer.status)
        params = first.get("kv_transfer_params") or {}
        async with session.post(f"{decode}{url}", json=decode_request(body, params)) as answer:
            response = web.StreamResponse(
                status=answer.status,
                headers={"Content-Type": answer.headers.get("Content-Type", "text/plain")},
            )
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_post("/v1/completions", relay)
    app.router.add_post("/v1/chat/completions", relay)
    app.router.add_get("/health", health)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--prefill", required=True)
    parser.add_argument("--decode", required=True)
    args = parser.parse_args()
    web.run_app(application(args.prefill, args.decode), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
