"""OpenAI Chat Completions as the fake speaks it: chunks, errors, request checks.

Chunk shapes follow the API reference and the official SDK's recorded streams:
``chat.completion.chunk`` objects whose first delta carries the role, content
deltas, ``tool_calls`` deltas by ``index`` (the first with ``id``, ``type`` and the
name, then argument fragments), a chunk with the ``finish_reason``, then, when the
request asked for ``stream_options.include_usage``, a chunk with empty ``choices``
and the usage (every other chunk then has ``"usage": null``), then ``[DONE]``.
Thinking pieces stream as ``reasoning_content`` (as DeepSeek, vLLM and llama.cpp
do); redacted thinking has no OpenAI form and is skipped.
"""

from __future__ import annotations

import json
from typing import Any

from .script import (
    RawPiece,
    RedactedThinkingPiece,
    Reply,
    StreamErrorPiece,
    TextPiece,
    ThinkingPiece,
    ToolCallPiece,
    split_text,
)

ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
    529: ("server_error", "overloaded"),
}


def error_body(error_type: str, message: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def chunks(
    reply: Reply, model: str, completion_id: str, created: int, include_usage: bool, tool_id: Any
) -> list[tuple[Any, bool]]:
    """(chunk object, "[DONE]" or raw bytes, counts as a token for pacing) for the reply."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    out: list[tuple[Any, bool]] = [
        (chunk({"role": "assistant", "content": "", "refusal": None}), False)
    ]
    calls: list[list[dict[str, Any]]] = []
    deltas = 0
    for index, piece in enumerate(reply.pieces):
        if isinstance(piece, StreamErrorPiece):
            body = error_body(piece.error_type, piece.message, None)
            out.append((body, False))
            return out
        if isinstance(piece, RawPiece):
            out.append((piece.data, piece.paced))
        elif isinstance(piece, TextPiece):
            for c in split_text(piece.text, reply.chunk):
                out.append((chunk({"content": c}), True))
                deltas += 1
        elif isinstance(piece, ThinkingPiece):
            for c in split_text(piece.text, reply.chunk):
                out.append((chunk({"reasoning_content": c}), True))
                deltas += 1
        elif isinstance(piece, RedactedThinkingPiece):
            continue
        elif isinstance(piece, ToolCallPiece):
            k = len(calls)
            first = {
                "index": k,
                "id": piece.id or tool_id(index),
                "type": "function",
                "function": {"name": piece.name, "arguments": ""},
            }
            parts = [{"tool_calls": [first]}]
            parts += [
                {"tool_calls": [{"index": k, "function": {"arguments": c}}]}
                for c in split_text(json.dumps(piece.input), reply.chunk)
            ]
            calls.append(parts)
    if calls:
        if reply.interleave_calls:
            longest = max(len(p) for p in calls)
            order = [p[i] for i in range(longest) for p in calls if i < len(p)]
        else:
            order = [part for parts in calls for part in parts]
        for delta in order:
            out.append((chunk(delta), True))
            deltas += 1
    finish = reply.stop_reason or ("tool_calls" if calls else "stop")
    out.append((chunk({}, finish), False))
    if include_usage:
        completion = reply.output_tokens if reply.output_tokens is not None else max(1, deltas)
        prompt = reply.input_tokens + reply.cache_read_tokens
        usage_chunk = chunk({})
        usage_chunk["choices"] = []
        usage_chunk["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        out.append((usage_chunk, False))
    out.append(("[DONE]", False))
    return out


def sse(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    data = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def check_request(body: Any) -> str | None:
    """What the real API would refuse in this request (400), or None."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    for key in ("model", "messages"):
        if key not in body:
            return f"Missing required parameter: '{key}'."
    for i, tool in enumerate(body.get("tools") or ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            return f"Invalid value for 'tools[{i}].type': expected 'function'."
        if not isinstance(function.get("name"), str):
            return f"Missing required parameter: 'tools[{i}].function.name'."
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "Invalid 'messages': empty array. Expected an array with minimum length 1."
    waiting: list[str] = []  # tool_call ids still owed a tool message
    answerable: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            supported = "'system', 'assistant', 'user', 'tool'"
            return f"Invalid value: '{role}'. Supported values are: {supported}."
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in answerable:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            if call_id in waiting:
                waiting.remove(call_id)
            continue
        if waiting:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(waiting)}"
            )
        answerable = set()
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                if not isinstance(function.get("arguments"), str):
                    return f"Invalid type for 'messages[{i}].tool_calls[0].function.arguments'."
                waiting.append(call.get("id"))
            answerable = set(waiting)
            if message.get("content") is None and not waiting:
                return f"Invalid value for 'messages[{i}].content': expected a string, got null."
    if waiting:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(waiting)}"
        )
    return None
