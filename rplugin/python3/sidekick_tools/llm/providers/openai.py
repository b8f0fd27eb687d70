"""OpenAI Chat Completions: ``POST {base_url}/chat/completions`` with ``stream: true``.

Serves every server that speaks it: OpenAI, Ollama (``/v1``), llama.cpp, vLLM,
LM Studio, OpenRouter, DeepSeek, Groq, Mistral... ``Authorization: Bearer`` is
sent only when a key is configured (local servers need none).

Request: ``tools`` as ``{"type": "function", "function": {...}}``; an assistant
turn's calls as ``tool_calls`` (arguments: the input as JSON text); each result as
a ``role: tool`` message with its ``tool_call_id`` right after, then the user's
text. Thinking is not sent back (these APIs take no reasoning in requests).

Stream: ``chat.completion.chunk`` objects; ``delta.content``, reasoning text
(``reasoning_content`` or ``reasoning``, from servers that stream it),
``tool_calls`` deltas by ``index`` (parallel calls, arguments split anywhere),
``finish_reason``, then (``stream_options.include_usage``) a chunk with empty
``choices`` and the ``usage``, then ``data: [DONE]``. An ``error`` object in the
stream is the provider's error.
"""

from __future__ import annotations

from typing import Any

from ...chat import blocks
from ...chat.render import new_call_id
from ...chat.reply_entries import tool_json
from .. import wire
from ..errors import ProviderError
from ..settings import DEFAULT_BASE_URLS
from ..sse import SSEEvent
from . import HttpRequest, RequestParts

_STOPS = {
    "stop": blocks.STOP_END,
    "tool_calls": blocks.STOP_TOOL_USE,
    "function_call": blocks.STOP_TOOL_USE,
    "length": blocks.STOP_MAX_TOKENS,
    "content_filter": blocks.STOP_REFUSAL,
}


def _turn_messages(turn: blocks.Turn) -> list[dict[str, Any]]:
    texts = [b.text for b in turn.blocks if isinstance(b, blocks.Text)]
    if turn.role == blocks.ASSISTANT:
        calls = [
            {
                "id": b.call_id,
                "type": "function",
                "function": {"name": b.name, "arguments": tool_json(b.input)},
            }
            for b in turn.blocks
            if isinstance(b, blocks.ToolUse)
        ]
        if not texts and not calls:
            return []  # thinking only
        message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        return [message]
    messages = [
        {"role": "tool", "tool_call_id": b.call_id, "content": b.content}
        for b in turn.blocks
        if isinstance(b, blocks.ToolResultBlock)
    ]
    if texts:
        messages.append({"role": "user", "content": "\n\n".join(texts)})
    return messages


def _encoded(turn: blocks.Turn) -> list[bytes]:
    """The turn's messages as JSON, made once per turn."""
    done = turn.memo.get("openai")
    if done is None:
        done = turn.memo["openai"] = [wire.json_bytes(m) for m in _turn_messages(turn)]
    return done


def messages_json(conversation: blocks.Conversation) -> list[bytes]:
    """The pieces of the ``messages`` array: the system text, then each turn's messages."""
    messages: list[bytes] = []
    if conversation.system:
        messages.append(wire.json_bytes({"role": "system", "content": conversation.system}))
    for turn in conversation.turns:
        messages += _encoded(turn)
    return wire.json_array(messages)


class OpenAIProvider:
    name = "openai"

    def build(self, parts: RequestParts) -> HttpRequest:
        conversation, options, tools = parts.conversation, parts.options, parts.tools
        provider = parts.provider
        limit_field = provider.max_tokens_param or (
            "max_completion_tokens"
            if provider.base_url == DEFAULT_BASE_URLS["openai"]
            else "max_tokens"
        )
        body: dict[str, Any] = {
            "model": options.model,
            "messages": wire.RawJSON(messages_json(conversation)),
            limit_field: options.max_tokens,
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema,
                    },
                }
                for t in tools
            ]
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            **provider.headers,
        }
        return HttpRequest(f"{provider.base_url}/chat/completions", headers, wire.encode_json(body))

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def decoder(self) -> OpenAIDecoder:
        return OpenAIDecoder()

    def error_of(self, status: int, body: bytes) -> tuple[str, str]:
        value = wire.json_error_body(body)
        if not value:
            return "", ""
        error = value.get("error", value)
        if isinstance(error, str):  # some servers: {"error": "message"}
            return "", error
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code") or ""
            return str(kind), str(error.get("message") or "")
        return "", ""


class _Call:
    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.pending_args: list[str] = []
        self.started = False


class OpenAIDecoder:
    def __init__(self) -> None:
        self.done = False
        self._calls: dict[int, _Call] = {}
        self._finished = False

    def decode(self, event: SSEEvent) -> list[blocks.Delta]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return self._end_calls() if not self._finished else []
        data = wire.parse_event_json(event)
        if not isinstance(data, dict):
            return []
        error = data.get("error")
        if error:
            error = error if isinstance(error, dict) else {"message": str(error)}
            error_type = str(error.get("type") or error.get("code") or "error")
            message = str(error.get("message") or "the provider reported an error")
            raise ProviderError(f"{message} ({error_type})", error_type=error_type)
        out: list[blocks.Delta] = []
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                out.append(blocks.ThinkingDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(blocks.TextDelta(content))
            for position, call in enumerate(delta.get("tool_calls") or ()):
                if isinstance(call, dict):
                    out.extend(self._call_delta(call, position))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                out.extend(self._end_calls())
                out.append(blocks.Stop(_STOPS.get(reason, blocks.STOP_OTHER), reason))
                self._finished = True
        usage = data.get("usage")
        if isinstance(usage, dict):
            out.append(blocks.UsageDelta(_usage(usage)))
        return out

    @property
    def complete(self) -> bool:
        return self.done or self._finished

    def _call_delta(self, raw: dict[str, Any], position: int) -> list[blocks.Delta]:
        index = raw.get("index")
        index = index if isinstance(index, int) else position
        call = self._calls.setdefault(index, _Call())
        function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
        if isinstance(raw.get("id"), str) and raw["id"] and not call.call_id:
            call.call_id = raw["id"]
        name = function.get("name")
        if isinstance(name, str) and name and not call.started:
            call.name += name
        args = function.get("arguments")
        if isinstance(args, dict):  # a few servers send the object itself
            args = tool_json(args)
        out: list[blocks.Delta] = []
        if not call.started and call.name:
            call.started = True
            call.call_id = call.call_id or new_call_id(set())
            out.append(blocks.ToolCallStart(index, call.call_id, call.name))
            out.extend(blocks.ToolCallArgs(index, piece) for piece in call.pending_args)
            call.pending_args = []
        if isinstance(args, str) and args:
            if call.started:
                out.append(blocks.ToolCallArgs(index, args))
            else:
                call.pending_args.append(args)
        return out

    def _end_calls(self) -> list[blocks.Delta]:
        out: list[blocks.Delta] = [blocks.BlockEnd()]
        for index in sorted(self._calls):
            call = self._calls.pop(index)
            if call.started:
                out.append(blocks.ToolCallEnd(index))
        return out


def _usage(raw: dict[str, Any]) -> blocks.Usage:
    def count(value: Any) -> int | None:
        return value if isinstance(value, int) else None

    prompt = count(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else None
    fresh = prompt - cached if prompt is not None and cached else prompt
    return blocks.Usage(
        input_tokens=fresh,
        output_tokens=count(raw.get("completion_tokens")),
        cache_read_tokens=cached,
    )


PROVIDER = OpenAIProvider()
