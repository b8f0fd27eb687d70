"""The Anthropic Messages API as the fake speaks it: events, errors, request checks.

Event shapes follow the API reference and the official SDK's recorded streams:
``message_start``, then per content block ``content_block_start`` /
``content_block_delta``... / ``content_block_stop`` (a ``ping`` after the first
start), ``message_delta`` with the stop reason and usage, ``message_stop``.
Tool input streams as ``input_json_delta`` fragments (the first one empty), thinking
as ``thinking_delta`` then one ``signature_delta``.

The request checks are the ones the real API makes that matter to a chat client;
where the API's exact wording is known it is used, otherwise the message says
what is wrong in the same style.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .script import (
    RawPiece,
    RedactedThinkingPiece,
    Reply,
    StreamErrorPiece,
    TextPiece,
    ThinkingPiece,
    ToolCallPiece,
    fake_signature,
    split_text,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")


def anthropic_error(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def events(reply: Reply, model: str, message_id: str, tool_id: Any) -> list[tuple[str, Any, bool]]:
    """(event name, data, counts as a token for pacing) for the whole reply.
    ``tool_id(n)`` names the n-th call when the script gives no id; a RawPiece
    is the event ("", its bytes)."""
    usage = {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
        "cache_read_input_tokens": reply.cache_read_tokens,
        "output_tokens": 1,
    }
    out: list[tuple[str, Any, bool]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                },
            },
            False,
        )
    ]
    has_calls = False
    deltas = 0
    for index, piece in enumerate(reply.pieces):
        if isinstance(piece, StreamErrorPiece):
            out.append(
                (
                    "error",
                    anthropic_error(piece.error_type, piece.message),
                    False,
                )
            )
            return out
        if isinstance(piece, RawPiece):
            out.append(("", piece.data, piece.paced))
            continue
        start: dict[str, Any]
        body: list[dict[str, Any]] = []
        if isinstance(piece, TextPiece):
            start = {"type": "text", "text": ""}
            body = [{"type": "text_delta", "text": c} for c in split_text(piece.text, reply.chunk)]
        elif isinstance(piece, ThinkingPiece):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            body = [
                {"type": "thinking_delta", "thinking": c}
                for c in split_text(piece.text, reply.chunk)
            ]
            signature = piece.signature
            if signature is None:
                signature = fake_signature(piece.text)
            body.append({"type": "signature_delta", "signature": signature})
        elif isinstance(piece, RedactedThinkingPiece):
            start = {"type": "redacted_thinking", "data": piece.data}
        elif isinstance(piece, ToolCallPiece):
            has_calls = True
            start = {
                "type": "tool_use",
                "id": piece.id or tool_id(index),
                "name": piece.name,
                "input": {},
            }
            raw = json.dumps(piece.input)
            body = [{"type": "input_json_delta", "partial_json": ""}]
            body += [
                {"type": "input_json_delta", "partial_json": c}
                for c in split_text(raw, reply.chunk)
            ]
        else:  # pragma: no cover - script types are closed
            raise TypeError(piece)
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
                False,
            )
        )
        if index == 0:
            out.append(("ping", {"type": "ping"}, False))
        for delta in body:
            deltas += 1
            out.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    True,
                )
            )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}, False))
    stop = reply.stop_reason or ("tool_use" if has_calls else "end_turn")
    output = reply.output_tokens if reply.output_tokens is not None else max(1, deltas)
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
            False,
        )
    )
    out.append(("message_stop", {"type": "message_stop"}, False))
    return out


def sse(name: str, data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _cache_controls(body: dict[str, Any]) -> int:
    count = sum(1 for t in body.get("tools") or () if isinstance(t, dict) and "cache_control" in t)
    system = body.get("system")
    if isinstance(system, list):
        count += sum(1 for b in system if isinstance(b, dict) and "cache_control" in b)
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict) and "cache_control" in b)
    return count


def check_request(body: Any, issued: dict[str, str]) -> str | None:
    """What the real API would refuse in this request (400), or None.
    ``issued`` maps the signatures the fake gave out to their thinking text."""
    if not isinstance(body, dict):
        return "Request body must be a JSON object"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        return "max_tokens: Input should be a valid integer greater than 0"
    for i, tool in enumerate(body.get("tools") or ()):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            return f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.custom.input_schema.type: Input should be 'object'"
    if _cache_controls(body) > 4:
        return (
            f"A maximum of 4 blocks with cache_control may be provided. "
            f"Found {_cache_controls(body)}."
        )
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous_uses: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            return f"messages.{i}.content: Input should be a valid list"
        problem = _check_blocks(i, message["role"], blocks, previous_uses, issued)
        if problem:
            return problem
        if message["role"] == "assistant":
            previous_uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if previous_uses and i == len(messages) - 1:
                break
        else:
            previous_uses = []
    return None


def _check_blocks(
    i: int, role: str, blocks: list, previous_uses: list[str], issued: dict[str, str]
) -> str | None:
    results: list[str] = []
    seen_other = False
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str) or not block["text"]:
                return "messages: text content blocks must be non-empty"
            if not block["text"].strip():
                return "messages: text content blocks must contain non-whitespace text"
            seen_other = True
        elif kind == "tool_result":
            if role != "user":
                return f"messages.{i}.content.{j}: tool_result is only allowed in user messages"
            if seen_other:
                return (
                    f"messages.{i}: `tool_result` blocks must come first in the user message, "
                    f"before any other content"
                )
            use_id = block.get("tool_use_id")
            if use_id not in previous_uses:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {use_id}. Each `tool_result` block must have a corresponding "
                    f"`tool_use` block in the previous message."
                )
            results.append(use_id)
        elif kind == "tool_use":
            if role != "assistant":
                return f"messages.{i}.content.{j}: tool_use is only allowed in assistant messages"
            if not isinstance(block.get("input"), dict):
                return f"messages.{i}.content.{j}.tool_use.input: Input should be a dictionary"
        elif kind == "thinking":
            signature = block.get("signature")
            text = block.get("thinking")
            if issued.get(signature) != text and signature != fake_signature(str(text)):
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        elif kind == "redacted_thinking":
            if not block.get("data"):
                return f"messages.{i}.content.{j}.redacted_thinking.data: Field required"
        else:
            return f"messages.{i}.content.{j}: Input tag '{kind}' does not match any expected tag"
    if previous_uses:
        missing = [u for u in previous_uses if u not in results]
        if missing:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                f"`tool_result` block in the next message."
            )
    return None
