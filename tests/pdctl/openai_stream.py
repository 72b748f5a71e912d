"""Server-sent events as vLLM 0.26's OpenAI server writes them for a streamed chat completion
(vllm/entrypoints/openai/serving_chat.py, chat_completion_stream_generator): one `data: <JSON>`
line and a blank line per chunk, the chunk a ChatCompletionStreamResponse dumped with
`model_dump_json(exclude_unset=True)`; the first chunk carries the role, the last one the
finish_reason (with empty content), then `data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

DONE = "data: [DONE]\n\n"


def chunk(
    model: str,
    *,
    content: str | None = None,
    role: str | None = None,
    finish_reason: str | None = None,
    **delta_extra: Any,
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    delta.update(delta_extra)
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
    choice["finish_reason"] = finish_reason
    if finish_reason is not None:
        choice["stop_reason"] = None
    return {
        "id": "chatcmpl-0",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [choice],
    }


def sse_event(body: dict[str, Any] | str) -> str:
    data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return f"data: {data}\n\n"


def whole_stream(model: str, words: tuple[str, ...] = ("Hello", " there", "!")) -> str:
    """A completion that ends as the protocol ends one."""
    events = [sse_event(chunk(model, role="assistant", content=""))]
    events += [sse_event(chunk(model, content=word)) for word in words]
    events.append(sse_event(chunk(model, content="", finish_reason="stop")))
    return "".join(events) + DONE
