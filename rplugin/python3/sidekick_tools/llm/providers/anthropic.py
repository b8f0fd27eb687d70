"""Anthropic Messages API: ``POST {base_url}/v1/messages`` with ``stream: true``.

Request: native ``tools`` (with our JSON schemas), ``tool_use`` / ``tool_result``
blocks paired by id, thinking blocks sent back with their signatures (unsigned
thinking, from another provider, is left out), and prompt-caching breakpoints
(``cache_control: {"type": "ephemeral"}``) on the last tool, the system text and
the last block of the last user turn, so each request reuses the previous one's
prefix.

Stream: ``message_start``, ``content_block_start`` / ``_delta`` / ``_stop``
(``text_delta``, ``input_json_delta``, ``thinking_delta``, ``signature_delta``;
``redacted_thinking`` arrives whole in its start), ``message_delta`` (stop reason,
usage), ``message_stop``, ``ping``, ``error``. Unknown events and block types are
skipped, as Anthropic's versioning policy asks of clients.
"""

from __future__ import annotations

from typing import Any

from ...chat import blocks
from ...chat.reply_entries import tool_json
from .. import wire
from ..errors import ProviderError
from ..sse import SSEEvent
from . import HttpRequest, RequestParts

API_VERSION = "2023-06-01"
_EPHEMERAL = {"type": "ephemeral"}
_STOPS = {
    "end_turn": blocks.STOP_END,
    "stop_sequence": blocks.STOP_END,
    "tool_use": blocks.STOP_TOOL_USE,
    "max_tokens": blocks.STOP_MAX_TOKENS,
    "refusal": blocks.STOP_REFUSAL,
}


def _block(block: Any) -> dict[str, Any] | None:
    if isinstance(block, blocks.Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, blocks.ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.call_id,
            "content": block.content,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    if isinstance(block, blocks.ToolUse):
        return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": block.input}
    if isinstance(block, blocks.Thinking):
        if not block.signature:
            return None
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    if isinstance(block, blocks.RedactedThinking):
        return {"type": "redacted_thinking", "data": block.data}
    raise TypeError(f"not a content block: {block!r}")


_BREAKPOINT = b',"cache_control":' + wire.json_bytes(_EPHEMERAL) + b"}"
_ROLES = {blocks.ASSISTANT: "assistant", blocks.USER: "user"}


def _message(role: str, content: list[bytes]) -> bytes:
    head = b'{"role":"' + role.encode() + b'","content":'
    return b"".join([head, *wire.json_array(content), b"}"])


def _encoded(turn: blocks.Turn) -> tuple[str, bytes, list[bytes]]:
    """The turn as (role, its message's JSON, its content blocks' JSON), made once
    per turn; no content: the turn drops out (thinking without a signature)."""
    done = turn.memo.get("anthropic")
    if done is None:
        role = _ROLES[turn.role]
        content = [wire.json_bytes(b) for b in map(_block, turn.blocks) if b is not None]
        done = turn.memo["anthropic"] = (role, _message(role, content), content)
    return done


def messages_json(conversation: blocks.Conversation) -> list[bytes]:
    """The pieces of the ``messages`` array: turns whose blocks all drop out are
    left out, and the turns around them merged, so roles still alternate. The last
    block of the last user message carries the prompt-caching breakpoint."""
    messages: list[list[Any]] = []  # [role, its JSON (None: to make), content]
    for turn in conversation.turns:
        role, whole, content = _encoded(turn)
        if not content:
            continue
        if messages and messages[-1][0] == role:  # a turn dropped out between them
            messages[-1][1:] = [None, messages[-1][2] + content]
        else:
            messages.append([role, whole, content])
    for message in reversed(messages):
        if message[0] == "user":
            # the last block with one more key at its end: {**block, "cache_control": ...}
            *head, last = message[2]
            message[1:] = [None, [*head, last[:-1] + _BREAKPOINT]]
            break
    return wire.json_array([whole or _message(role, content) for role, whole, content in messages])


class AnthropicProvider:
    name = "anthropic"

    def build(self, parts: RequestParts) -> HttpRequest:
        conversation, options, tools = parts.conversation, parts.options, parts.tools
        provider = parts.provider
        body: dict[str, Any] = {"model": options.model, "max_tokens": options.max_tokens}
        if conversation.system:
            body["system"] = [
                {"type": "text", "text": conversation.system, "cache_control": _EPHEMERAL}
            ]
        if tools:
            specs = [
                {"name": t.name, "description": t.description, "input_schema": t.schema}
                for t in tools
            ]
            specs[-1]["cache_control"] = _EPHEMERAL
            body["tools"] = specs
        body["messages"] = wire.RawJSON(messages_json(conversation))
        if options.thinking == "adaptive":
            body["thinking"] = {"type": "adaptive"}
        elif options.thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": int(options.thinking)}
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body["stream"] = True
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": API_VERSION,
            **provider.headers,
        }
        return HttpRequest(f"{provider.base_url}/v1/messages", headers, wire.encode_json(body))

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-api-key": api_key} if api_key else {}

    def decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()

    def error_of(self, status: int, body: bytes) -> tuple[str, str]:
        value = wire.json_error_body(body)
        error = value.get("error") if value else None
        if isinstance(error, dict):
            return str(error.get("type") or ""), str(error.get("message") or "")
        return "", ""


def _usage(raw: Any, output: bool = True) -> blocks.Usage:
    raw = raw if isinstance(raw, dict) else {}

    def count(key: str) -> int | None:
        value = raw.get(key)
        return value if isinstance(value, int) else None

    return blocks.Usage(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens") if output else None,
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
    )


class AnthropicDecoder:
    def __init__(self) -> None:
        self.done = False
        self._kinds: dict[int, str] = {}  # content block index -> its type

    def decode(self, event: SSEEvent) -> list[blocks.Delta]:
        name = event.event
        if name == "ping":
            return []
        data = wire.parse_event_json(event)
        if not isinstance(data, dict):
            return []
        kind = data.get("type") or name
        if kind == "error" or name == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            error_type = str(error.get("type") or "error")
            message = str(error.get("message") or "the provider reported an error")
            raise ProviderError(f"{message} ({error_type})", error_type=error_type)
        if kind == "message_start":
            message = data.get("message") if isinstance(data.get("message"), dict) else {}
            # its output count is a placeholder (1): the count comes with message_delta,
            # and a reply stopped before then has no count to show
            return [blocks.UsageDelta(_usage(message.get("usage"), output=False))]
        if kind == "content_block_start":
            return self._start(data)
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_stop":
            index = data.get("index")
            block_kind = self._kinds.pop(index, None) if isinstance(index, int) else None
            if block_kind == "tool_use":
                return [blocks.ToolCallEnd(index)]
            if block_kind in ("text", "thinking"):
                return [blocks.BlockEnd()]
            return []
        if kind == "message_delta":
            out: list[blocks.Delta] = [blocks.UsageDelta(_usage(data.get("usage")))]
            delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
            raw = delta.get("stop_reason")
            if isinstance(raw, str):
                out.append(blocks.Stop(_STOPS.get(raw, blocks.STOP_OTHER), raw))
            return out
        if kind == "message_stop":
            self.done = True
        return []

    @property
    def complete(self) -> bool:
        return self.done

    def _start(self, data: dict[str, Any]) -> list[blocks.Delta]:
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            return []
        kind = block.get("type")
        self._kinds[index] = str(kind)
        if kind == "text":
            text = block.get("text")
            return [blocks.TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "thinking":
            text = block.get("thinking")
            return [blocks.ThinkingDelta(text)] if isinstance(text, str) and text else []
        if kind == "redacted_thinking":
            return [blocks.RedactedThinkingDelta(str(block.get("data") or ""))]
        if kind == "tool_use":
            out: list[blocks.Delta] = [
                blocks.ToolCallStart(
                    index, str(block.get("id") or ""), str(block.get("name") or "")
                )
            ]
            given = block.get("input")
            if isinstance(given, dict) and given:  # input sent whole, not as deltas
                out.append(blocks.ToolCallArgs(index, tool_json(given)))
            return out
        return []

    def _delta(self, data: dict[str, Any]) -> list[blocks.Delta]:
        index = data.get("index")
        delta = data.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            return [blocks.TextDelta(str(delta.get("text") or ""))]
        if kind == "thinking_delta":
            return [blocks.ThinkingDelta(str(delta.get("thinking") or ""))]
        if kind == "signature_delta":
            return [blocks.SignatureDelta(str(delta.get("signature") or ""))]
        if kind == "input_json_delta" and isinstance(index, int):
            fragment = delta.get("partial_json")
            return (
                [blocks.ToolCallArgs(index, fragment)]
                if isinstance(fragment, str) and fragment
                else []
            )
        return []


PROVIDER = AnthropicProvider()
