"""Provider modules: request bodies from the neutral conversation, and stream
events decoded into neutral deltas (shapes as in the providers' recorded streams)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sidekick_tools.llm.providers
from sidekick_tools.chat.blocks import (
    BlockEnd,
    Conversation,
    RedactedThinking,
    RedactedThinkingDelta,
    SignatureDelta,
    Stop,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolResultBlock,
    ToolSpec,
    ToolUse,
    Turn,
    Usage,
    UsageDelta,
)
from sidekick_tools.chat.reply import ReplyBuilder
from sidekick_tools.llm.errors import ConfigError, ProviderError, StreamError
from sidekick_tools.llm.providers import RequestParts, get_kind
from sidekick_tools.llm.providers.anthropic import PROVIDER as ANTHROPIC
from sidekick_tools.llm.providers.openai import PROVIDER as OPENAI
from sidekick_tools.llm.settings import ChatConfig, RequestOptions
from sidekick_tools.llm.sse import SSEDecoder, SSEEvent

TOOLS = [
    ToolSpec("read_files", "Read files.", {"type": "object", "properties": {}}),
    ToolSpec("list_directory", "List a directory.", {"type": "object", "properties": {}}),
]
CONFIG = ChatConfig.from_dict(
    {
        "providers": {
            "anthropic": {"kind": "anthropic"},
            "openai": {"kind": "openai"},
            "local": {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1/"},
        }
    }
)

CONVERSATION = Conversation(
    "Be brief.",
    [
        Turn("user", [Text("List files")]),
        Turn(
            "assistant",
            [
                Thinking("I should list.", "sig=="),
                Thinking("no signature: another provider's"),
                RedactedThinking("opaque"),
                Text("Listing."),
                ToolUse("toolu_1", "list_directory", {"path": "."}),
                ToolUse("toolu_2", "read_files", {"paths": ["a"]}),
            ],
        ),
        Turn(
            "user",
            [
                ToolResultBlock("toolu_1", "status=completed\na\nb"),
                ToolResultBlock("toolu_2", "status=denied\nno", True, "denied"),
                Text("Thanks"),
            ],
        ),
    ],
)


def body(provider, conversation=CONVERSATION, options=None, tools=TOOLS, name="anthropic"):
    options = options or RequestOptions(model="m-1", max_tokens=100)
    request = provider.build(RequestParts(conversation, options, tools, CONFIG.providers[name]))
    return request, json.loads(request.body)


def test_every_module_of_the_providers_folder_is_a_kind():
    """The health check lists the folder's modules as the kinds there are."""
    folder = Path(sidekick_tools.llm.providers.__file__).parent
    names = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert {"anthropic", "openai"} <= set(names)
    assert [get_kind(name).name for name in names] == names


def test_anthropic_request():
    request, data = body(ANTHROPIC, options=RequestOptions("m-1", 100, 0.5, 2048))
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert "x-api-key" not in request.headers
    assert list(data) == [
        "model",
        "max_tokens",
        "system",
        "tools",
        "messages",
        "thinking",
        "temperature",
        "stream",
    ]
    ephemeral = {"type": "ephemeral"}
    assert data["system"] == [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}]
    assert data["tools"][0] == {
        "name": "read_files",
        "description": "Read files.",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert data["tools"][-1]["cache_control"] == ephemeral
    assert data["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert data["temperature"] == 0.5 and data["stream"] is True
    user, assistant, results = data["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "List files"}]}
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "I should list.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "toolu_1", "name": "list_directory", "input": {"path": "."}},
        {"type": "tool_use", "id": "toolu_2", "name": "read_files", "input": {"paths": ["a"]}},
    ]
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "status=completed\na\nb"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "status=denied\nno",
            "is_error": True,
        },
        {"type": "text", "text": "Thanks", "cache_control": ephemeral},
    ]
    # only the last user turn carries a breakpoint
    assert "cache_control" not in user["content"][0]


def test_anthropic_adaptive_thinking_and_no_system_no_tools():
    conversation = Conversation(None, [Turn("user", [Text("hi")])])
    _, data = body(ANTHROPIC, conversation, RequestOptions("m", 10, None, "adaptive"), tools=[])
    assert "system" not in data and "tools" not in data and "temperature" not in data
    assert data["thinking"] == {"type": "adaptive"}


def test_anthropic_drops_a_turn_of_unsigned_thinking_and_merges_around_it():
    conversation = Conversation(
        None,
        [
            Turn("user", [Text("a")]),
            Turn("assistant", [Thinking("from another model")]),
            Turn("user", [Text("b")]),
        ],
    )
    _, data = body(ANTHROPIC, conversation)
    assert data["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]


def test_openai_request():
    request, data = body(OPENAI, options=RequestOptions("gpt-x", 100, 0.2, 1024), name="openai")
    assert request.url == "https://api.openai.com/v1/chat/completions"
    assert "authorization" not in request.headers
    assert data["max_completion_tokens"] == 100 and "max_tokens" not in data
    assert data["stream"] is True and data["stream_options"] == {"include_usage": True}
    assert data["temperature"] == 0.2 and "thinking" not in data
    assert data["tools"][1] == {
        "type": "function",
        "function": {
            "name": "list_directory",
            "description": "List a directory.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    assert data["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "List files"},
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "list_directory", "arguments": '{"path": "."}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "read_files", "arguments": '{"paths": ["a"]}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "status=completed\na\nb"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "status=denied\nno"},
        {"role": "user", "content": "Thanks"},
    ]


def test_openai_local_server_uses_max_tokens_and_content_null_with_calls_only():
    conversation = Conversation(
        None,
        [
            Turn("user", [Text("go")]),
            Turn("assistant", [Thinking("reasoning"), ToolUse("c", "read_files", {})]),
            Turn("user", [ToolResultBlock("c", "status=completed")]),
        ],
    )
    request, data = body(OPENAI, conversation, name="local")
    assert request.url == "http://127.0.0.1:8080/v1/chat/completions"
    assert data["max_tokens"] == 100
    assert data["messages"][1]["content"] is None
    assert data["messages"][2] == {
        "role": "tool",
        "tool_call_id": "c",
        "content": "status=completed",
    }


def test_requests_are_deterministic_bytes():
    for provider, name in ((ANTHROPIC, "anthropic"), (OPENAI, "openai")):
        first, _ = body(provider, name=name)
        second, _ = body(provider, name=name)
        assert first.body == second.body
        assert b"\n" not in first.body  # compact
        assert (
            "ü".encode()
            in body(provider, Conversation(None, [Turn("user", [Text("ü")])]), name=name)[0].body
        )


def test_auth_headers():
    assert ANTHROPIC.auth_headers("k") == {"x-api-key": "k"}
    assert OPENAI.auth_headers("k") == {"authorization": "Bearer k"}
    assert ANTHROPIC.auth_headers(None) == {} == OPENAI.auth_headers("")


def test_error_bodies():
    anthropic_body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert ANTHROPIC.error_of(529, anthropic_body) == ("overloaded_error", "Overloaded")
    assert ANTHROPIC.error_of(502, b"<html>bad gateway</html>") == ("", "")
    openai_body = (
        b'{"error":{"message":"Rate limit","type":"requests","code":"rate_limit_exceeded"}}'
    )
    assert OPENAI.error_of(429, openai_body) == ("requests", "Rate limit")
    assert OPENAI.error_of(500, b'{"error":"model crashed"}') == ("", "model crashed")
    assert OPENAI.error_of(404, b'{"error":{"code":"model_not_found","message":"no"}}') == (
        "model_not_found",
        "no",
    )


def test_unknown_kind_is_a_config_error():
    assert get_kind("anthropic") is ANTHROPIC
    for kind in ("gemini", "../x", "Anthropic", ""):
        with pytest.raises(ConfigError, match="Unknown provider kind"):
            get_kind(kind)


# --- decoding ------------------------------------------------------------------


def anthropic_stream(*events: tuple[str, dict]) -> bytes:
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


def decode_all(provider, raw: bytes, cut: int | None = None) -> tuple[list, bool]:
    decoder = provider.decoder()
    sse = SSEDecoder()
    out = []
    chunks = [raw] if cut is None else [raw[:cut], raw[cut:]]
    for chunk in chunks:
        for event in sse.feed(chunk):
            out.extend(decoder.decode(event))
    return out, decoder.complete


def message_start(**usage):
    base = {"input_tokens": 11, "output_tokens": 1}
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "m",
                "stop_reason": None,
                "usage": {**base, **usage},
            },
        },
    )


def block_start(index, block):
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index, delta):
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def block_stop(index):
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(reason, output=6):
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": {"output_tokens": output},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


TOOL_STREAM = anthropic_stream(
    message_start(cache_read_input_tokens=5, cache_creation_input_tokens=7),
    block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    ("ping", {"type": "ping"}),
    block_delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
    block_delta(0, {"type": "thinking_delta", "thinking": "check."}),
    block_delta(0, {"type": "signature_delta", "signature": "EqQB=="}),
    block_stop(0),
    block_start(1, {"type": "redacted_thinking", "data": "EmwK"}),
    block_stop(1),
    block_start(2, {"type": "text", "text": ""}),
    block_delta(2, {"type": "text_delta", "text": "I'll check é"}),
    block_delta(2, {"type": "citations_delta", "citation": {}}),
    block_stop(2),
    block_start(3, {"type": "tool_use", "id": "toolu_01", "name": "read_files", "input": {}}),
    block_delta(3, {"type": "input_json_delta", "partial_json": ""}),
    block_delta(3, {"type": "input_json_delta", "partial_json": '{"paths": ["a'}),
    block_delta(3, {"type": "input_json_delta", "partial_json": '.txt"]}'}),
    block_stop(3),
    block_start(4, {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}),
    block_stop(4),
    ("some_future_event", {"type": "some_future_event"}),
    *message_end("tool_use", 42),
)


def test_anthropic_decoding():
    deltas, complete = decode_all(ANTHROPIC, TOOL_STREAM)
    assert complete
    assert deltas == [
        UsageDelta(Usage(11, None, 5, 7)),  # message_start's output count is a placeholder
        ThinkingDelta("Let me "),
        ThinkingDelta("check."),
        SignatureDelta("EqQB=="),
        BlockEnd(),
        RedactedThinkingDelta("EmwK"),
        TextDelta("I'll check é"),
        BlockEnd(),
        ToolCallStart(3, "toolu_01", "read_files"),
        ToolCallArgs(3, '{"paths": ["a'),
        ToolCallArgs(3, '.txt"]}'),
        ToolCallEnd(3),
        UsageDelta(Usage(output_tokens=42)),
        Stop("tool_use", "tool_use"),
    ]
    builder = ReplyBuilder()
    for delta in deltas:
        builder.feed(delta)
    builder.finish()
    assert builder.blocks() == [
        Thinking("Let me check.", "EqQB=="),
        RedactedThinking("EmwK"),
        Text("I'll check é"),
        ToolUse("toolu_01", "read_files", {"paths": ["a.txt"]}),
    ]
    assert builder.usage == Usage(11, 42, 5, 7)


def test_anthropic_decoding_is_the_same_whatever_the_cut():
    expected, _ = decode_all(ANTHROPIC, TOOL_STREAM)
    for cut in range(0, len(TOOL_STREAM), 3):
        assert decode_all(ANTHROPIC, TOOL_STREAM, cut)[0] == expected


def test_anthropic_error_event_and_malformed_data():
    error = anthropic_stream(
        message_start(),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    with pytest.raises(ProviderError) as caught:
        decode_all(ANTHROPIC, error)
    assert caught.value.error_type == "overloaded_error" and caught.value.retryable
    assert "Overloaded" in caught.value.message
    with pytest.raises(StreamError) as bad:
        ANTHROPIC.decoder().decode(SSEEvent("content_block_delta", "{not json"))
    assert bad.value.kind == "malformed" and "content_block_delta" in bad.value.message


def test_anthropic_stop_reasons():
    for raw, reason in [
        ("end_turn", "end"),
        ("max_tokens", "max_tokens"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
    ]:
        deltas, _ = decode_all(ANTHROPIC, anthropic_stream(*message_end(raw)))
        assert Stop(reason, raw) in deltas


def openai_stream(*chunks) -> bytes:
    out = b""
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        out += f"data: {data}\n\n".encode()
    return out


def chunk(delta=None, finish=None, **extra):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c", "object": "chat.completion.chunk", "choices": choices, **extra}


OPENAI_STREAM = openai_stream(
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "thinking..."}),
    chunk({"content": "Two calls"}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_files", "arguments": ""},
                }
            ]
        }
    ),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "list_directory", "arguments": '{"pa'},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"paths":'}}]}),
    chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'th": "."}'}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' ["x"]}'}}]}),
    chunk({}, "tool_calls"),
    chunk(
        None,
        usage={
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    ),
    "[DONE]",
)


def test_openai_decoding_parallel_calls_and_usage():
    deltas, complete = decode_all(OPENAI, OPENAI_STREAM)
    assert complete
    assert deltas == [
        ThinkingDelta("thinking..."),
        TextDelta("Two calls"),
        ToolCallStart(0, "call_a", "read_files"),
        ToolCallStart(1, "call_b", "list_directory"),
        ToolCallArgs(1, '{"pa'),
        ToolCallArgs(0, '{"paths":'),
        ToolCallArgs(1, 'th": "."}'),
        ToolCallArgs(0, ' ["x"]}'),
        BlockEnd(),
        ToolCallEnd(0),
        ToolCallEnd(1),
        Stop("tool_use", "tool_calls"),
        UsageDelta(Usage(input_tokens=36, output_tokens=20, cache_read_tokens=64)),
    ]
    builder = ReplyBuilder()
    for delta in deltas:
        builder.feed(delta)
    builder.finish()
    assert builder.tool_calls == [
        ToolUse("call_a", "read_files", {"paths": ["x"]}),
        ToolUse("call_b", "list_directory", {"path": "."}),
    ]
    for cut in range(0, len(OPENAI_STREAM), 5):
        assert decode_all(OPENAI, OPENAI_STREAM, cut)[0] == deltas


def test_openai_servers_that_omit_ids_split_names_or_send_objects():
    raw = openai_stream(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "read_files"}}]}),
        chunk({"tool_calls": [{"function": {"name": "x", "arguments": {"b": 1}}}]}),
        chunk({}, "stop"),
    )
    deltas, complete = decode_all(OPENAI, raw)
    assert complete  # a finish_reason ends the reply even without [DONE]
    start = deltas[0]
    assert isinstance(start, ToolCallStart) and start.name == "read_files"
    assert start.call_id.startswith("call_")
    assert deltas[1] == ToolCallArgs(0, '{"a"')
    assert ToolCallArgs(0, '{"b": 1}') in deltas


def test_openai_error_in_the_stream_and_malformed_chunk():
    raw = openai_stream(
        chunk({"content": "par"}), {"error": {"message": "boom", "type": "server_error"}}
    )
    with pytest.raises(ProviderError, match="boom"):
        decode_all(OPENAI, raw)
    with pytest.raises(StreamError):
        OPENAI.decoder().decode(SSEEvent("message", "{"))
    deltas, complete = decode_all(OPENAI, openai_stream(chunk({"content": "cut"})))
    assert deltas == [TextDelta("cut")] and not complete


@pytest.mark.parametrize(
    "raw,reason",
    [("stop", "end"), ("length", "max_tokens"), ("content_filter", "refusal"), ("x", "other")],
)
def test_openai_stop_reasons(raw, reason):
    deltas, _ = decode_all(OPENAI, openai_stream(chunk({}, raw), "[DONE]"))
    assert Stop(reason, raw) in deltas
