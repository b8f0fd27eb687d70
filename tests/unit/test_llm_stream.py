"""The HTTP stream against the fake provider: replies, errors, retries, timeouts,
cancellation closing the connection, and the key never leaking."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest
from sidekick_tools.chat.blocks import Text, TextDelta, Thinking, ToolUse
from sidekick_tools.chat.reply import ReplyBuilder
from sidekick_tools.llm.errors import MissingDependency, ProviderError, StreamError
from sidekick_tools.llm.request import build_request
from sidekick_tools.llm.settings import Timeouts
from sidekick_tools.llm.stream import ChatClient, RetryNotice, retry_after, stream_reply
from sidekick_tools.tools import REGISTRY

from tests.conftest import until
from tests.fake_provider import (
    FakeProvider,
    http_error,
    raw,
    reply,
    stream_error,
    thinking,
    tool_call,
)

KEY = "sk-ant-api03-SECRETSECRETSECRETSECRET"
PROTOCOLS = ["anthropic", "openai"]


def config(fake: FakeProvider) -> dict:
    return {
        "providers": {
            "anthropic": {"kind": "anthropic", "base_url": fake.anthropic_url},
            "openai": {"kind": "openai", "base_url": fake.openai_url},
        }
    }


def request_for(fake: FakeProvider, protocol: str, lines: list[str] | None = None):
    lines = ["---", f"model: {protocol}/fake-model", "---", *(lines or ["USER: hi"])]
    return build_request(lines, config(fake), REGISTRY.values())


async def collect(request, key=KEY, on_retry=None, **options):
    builder = ReplyBuilder()
    deltas = []
    error = None
    try:
        async for delta in stream_reply(request, key, on_retry, **options):
            deltas.append(delta)
            builder.feed(delta)
    except (ProviderError, StreamError) as exc:
        error = exc
    builder.finish(stopped=error is not None)
    return builder, deltas, error


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reply_streams_and_the_request_is_what_was_built(protocol):
    script = [reply("Hello, world. ü✓", tool_call("read_files", {"paths": ["a.txt"]}))]
    async with FakeProvider(script, api_key=KEY) as fake:
        request = request_for(fake, protocol)
        builder, _, error = await collect(request)
    assert error is None
    assert builder.blocks() == [
        Text("Hello, world. ü✓"),
        ToolUse(builder.tool_calls[0].call_id, "read_files", {"paths": ["a.txt"]}),
    ]
    assert builder.stop is not None and builder.stop.reason == "tool_use"
    assert builder.usage.input_tokens == 25
    (sent,) = fake.requests
    assert sent.body == request.http.body
    assert sent.headers["content-type"] == "application/json"
    if protocol == "anthropic":
        assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"]
    else:
        assert sent.headers["authorization"] == f"Bearer {KEY}"


async def test_thinking_streams_with_its_signature():
    async with FakeProvider([reply(thinking("Let me think."), "Done.")]) as fake:
        builder, _, error = await collect(request_for(fake, "anthropic"))
    assert error is None
    (first, text) = builder.blocks()
    assert isinstance(first, Thinking) and first.text == "Let me think." and first.signature
    assert text == Text("Done.")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_slow_stream_cut_into_single_bytes(protocol):
    body = "Slow and steady: ünïcödé ✓ " * 3
    script = [reply(body, chunk=2, wire_chunk=1, tokens_per_second=2000)]
    async with FakeProvider(script) as fake:
        builder, deltas, error = await collect(request_for(fake, protocol))
    assert error is None
    assert builder.blocks() == [Text(body)]
    assert sum(isinstance(d, TextDelta) for d in deltas) == (len(body) + 1) // 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_http_errors_carry_the_providers_message(protocol):
    script = [http_error(400, "max_tokens: too large"), http_error(500)]
    async with FakeProvider(script) as fake:
        request = request_for(fake, protocol)
        _, _, bad = await collect(request)
        _, _, crash = await collect(request)
    assert isinstance(bad, ProviderError) and bad.status == 400
    assert "HTTP 400: max_tokens: too large (invalid_request_error)" in bad.message
    assert isinstance(crash, ProviderError) and crash.status == 500 and not crash.retryable


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_the_key_never_appears_in_an_error(protocol):
    async with FakeProvider([http_error(401, echo_key=True)]) as fake:
        _, _, error = await collect(request_for(fake, protocol))
        wrong = FakeProvider(api_key="other-key-0123456789")
        async with wrong:
            _, _, refused = await collect(request_for(wrong, protocol))
    assert fake.requests[0].status == 401
    assert isinstance(error, ProviderError) and error.status == 401
    for text in (str(error), repr(error), error.message, str(refused)):
        assert KEY not in text
        assert KEY[10:] not in text
    assert "***" in error.message
    assert refused.status == 401


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_rate_limit_is_retried_after_the_wait_asked_for(protocol):
    notices: list[RetryNotice] = []
    script = [http_error(429, retry_after=0), http_error(529, retry_after=0), reply("ok")]
    async with FakeProvider(script) as fake:
        builder, _, error = await collect(request_for(fake, protocol), on_retry=notices.append)
    assert error is None and builder.blocks() == [Text("ok")]
    assert [(n.attempt, n.max_attempts, n.delay) for n in notices] == [(1, 4, 0.0), (2, 4, 0.0)]
    assert "429" in notices[0].reason
    assert len(fake.requests) == 3
    assert fake.requests[0].body == fake.requests[2].body


async def test_retries_give_up_after_max_attempts_and_long_waits_are_not_retried():
    notices: list[RetryNotice] = []
    script = [http_error(529), http_error(529), http_error(429, retry_after=3600)]
    async with FakeProvider(script) as fake:
        request = request_for(fake, "anthropic")
        _, _, error = await collect(
            request, on_retry=notices.append, max_attempts=2, backoff=lambda attempt: 0.0
        )
        assert isinstance(error, ProviderError) and error.status == 529
        assert "overloaded_error" in error.message and len(notices) == 1
        _, _, waited = await collect(request, on_retry=notices.append)
    assert isinstance(waited, ProviderError) and waited.retry_after == 3600
    # said why it was not tried again
    assert waited.message.endswith(
        "it asked to wait 3600s, longer than the 60s the plugin waits: send again later"
    )
    assert "asked to wait" not in error.message  # given up after its tries: not said
    assert len(notices) == 1 and len(fake.requests) == 3


async def test_an_overloaded_event_before_any_content_is_retried_after_content_it_is_not():
    script = [
        reply(stream_error("overloaded_error", "Overloaded")),
        reply("partial answer", stream_error("overloaded_error", "Overloaded")),
    ]
    async with FakeProvider(script) as fake:
        builder, _, error = await collect(request_for(fake, "anthropic"), backoff=lambda a: 0.0)
    assert len(fake.requests) == 2
    assert isinstance(error, ProviderError) and error.error_type == "overloaded_error"
    assert builder.blocks() == [Text("partial answer")]  # nothing received is lost


async def test_openai_error_object_mid_stream():
    script = [reply("so far", stream_error("server_error", "The model crashed"))]
    async with FakeProvider(script) as fake:
        builder, _, error = await collect(request_for(fake, "openai"))
    assert isinstance(error, ProviderError) and "The model crashed" in error.message
    assert builder.blocks() == [Text("so far")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_dropped_connection_keeps_what_arrived(protocol):
    script = [reply("The first words and more", chunk=5, drop_after=4)]
    async with FakeProvider(script) as fake:
        builder, _, error = await collect(request_for(fake, protocol))
    assert isinstance(error, StreamError) and error.kind == "dropped"
    assert "closed before the reply was complete" in error.message or "broke" in error.message
    (text,) = builder.blocks()
    assert text.text and "The first words and more".startswith(text.text)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_half_streamed_call_is_dropped_when_the_connection_breaks(protocol):
    script = [reply("Reading.", tool_call("read_files", {"paths": ["abc"]}), chunk=3, drop_after=8)]
    async with FakeProvider(script) as fake:
        builder, _, error = await collect(request_for(fake, protocol))
    assert isinstance(error, StreamError)
    assert builder.tool_calls == []
    assert builder.blocks()[-1].text.endswith(
        "[tool call read_files dropped: the reply stopped before its input was complete]"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancelling_closes_the_connection_at_once(protocol):
    received: list = []
    async with FakeProvider([reply("Words that never end", chunk=4, hang_after=4)]) as fake:
        request = request_for(fake, protocol)

        async def consume():
            async for delta in stream_reply(request, KEY):
                received.append(delta)

        task = asyncio.create_task(consume())
        await until(lambda: any(isinstance(d, TextDelta) for d in received))
        assert not fake.requests[0].disconnected
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: fake.requests[0].disconnected, timeout=5)


async def test_a_silent_server_times_out_and_is_left():
    async with FakeProvider([reply("Hi", hang_after=3)]) as fake:
        _, _, error = await collect(
            request_for(fake, "anthropic"), timeouts=Timeouts(connect=5, read=0.3)
        )
        assert isinstance(error, StreamError) and error.kind == "timeout"
        assert "sent nothing for 0.3 s" in error.message
        await until(lambda: fake.requests[0].disconnected, timeout=5)


KEEP_ALIVE = {
    "anthropic": b'event: ping\ndata: {"type": "ping"}\n\n',
    "openai": b": keep-alive\n\n",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_keep_alives_without_content_time_out(protocol):
    """A server that only keeps the connection alive is not answering: after the
    read timeout with no content the reply ends, what came before kept."""
    pings = [raw(KEEP_ALIVE[protocol], paced=True)] * 400
    async with FakeProvider([reply("Hi", *pings, chunk=0, tokens_per_second=20)]) as fake:
        builder, _, error = await collect(
            request_for(fake, protocol), timeouts=Timeouts(connect=5, read=0.5)
        )
        assert isinstance(error, StreamError) and error.kind == "timeout"
        assert "only keep-alive events for 0.5 s" in error.message
        assert builder.blocks() == [Text("Hi")]
        await until(lambda: fake.requests[0].disconnected, timeout=5)


EMPTY_EVENTS = {
    "anthropic": [
        b'event: message_delta\ndata: {"type": "message_delta", "delta": {}, '
        b'"usage": {"output_tokens": 1}}\n\n',
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": ""}}\n\n',
    ],
    "openai": [
        b'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}\n\n',
    ],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_events_that_carry_no_content_time_out_like_keep_alives(protocol):
    """Usage counts again and again, or empty text deltas, are no answer
    either: a server sending only those is timed out like one that pings."""
    events = [raw(e, paced=True) for e in EMPTY_EVENTS[protocol]] * 200
    async with FakeProvider([reply("Hi", *events, chunk=0, tokens_per_second=20)]) as fake:
        builder, _, error = await collect(
            request_for(fake, protocol), timeouts=Timeouts(connect=5, read=0.5)
        )
        assert isinstance(error, StreamError) and error.kind == "timeout"
        assert builder.blocks() == [Text("Hi")]
        await until(lambda: fake.requests[0].disconnected, timeout=5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reply_past_its_size_bound_is_stopped(protocol, monkeypatch):
    from sidekick_tools.llm import stream

    monkeypatch.setattr(stream, "MAX_REPLY_BYTES", 64 << 10)
    async with FakeProvider([reply("x" * (256 << 10), chunk=1024)]) as fake:
        builder, _, error = await collect(request_for(fake, protocol))
    assert isinstance(error, StreamError) and "sent more than 0.0625 MiB" in error.message
    (text,) = builder.blocks()
    assert 0 < len(text.text) <= 64 << 10  # what came before the bound is kept


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_malformed_event_is_a_clear_error(protocol):
    garbage = (
        b"event: content_block_delta\ndata: {oops\n\n"
        if protocol == "anthropic"
        else b"data: {oops\n\n"
    )
    async with FakeProvider([reply("fine so far", raw(garbage))]) as fake:
        builder, _, error = await collect(request_for(fake, protocol))
    assert isinstance(error, StreamError) and error.kind == "malformed"
    assert "not JSON" in error.message
    assert builder.blocks() == [Text("fine so far")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reply_that_is_no_event_stream_is_quoted(protocol):
    not_sse = b'{"error": "model not loaded", "key": "' + KEY.encode() + b'"}'
    async with FakeProvider([reply(raw_body=not_sse), reply(raw_body=b"")]) as fake:
        _, _, error = await collect(request_for(fake, protocol))
        _, _, empty = await collect(request_for(fake, protocol))
    assert isinstance(error, StreamError) and error.kind == "malformed"
    assert "answered without an event stream" in error.message
    assert "model not loaded" in error.message and KEY not in error.message
    assert isinstance(empty, StreamError) and empty.kind == "dropped"


async def test_connection_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fake = FakeProvider(port=port)  # never started
    _, _, error = await collect(request_for(fake, "openai"))
    assert isinstance(error, StreamError) and error.kind == "connect"
    assert f"127.0.0.1:{port}" in error.message


async def test_one_client_serves_several_requests():
    client = ChatClient()
    try:
        async with FakeProvider([reply("one"), reply("two")]) as fake:
            request = request_for(fake, "anthropic")
            texts = []
            for _ in range(2):
                builder = ReplyBuilder()
                async for delta in client.stream(request, None):
                    builder.feed(delta)
                builder.finish()
                texts.append(builder.blocks())
    finally:
        await client.aclose()
    assert texts == [[Text("one")], [Text("two")]]
    assert "x-api-key" not in fake.requests[0].headers


def test_missing_httpx2_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx2", None)
    from sidekick_tools.llm.stream import httpx

    with pytest.raises(MissingDependency, match=":SidekickInstall"):
        httpx()


def test_retry_after_forms():
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({}) is None
    assert retry_after({"retry-after": "soon"}) is None
    assert 0 <= retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) < 1


async def _drip_server(mode: str):
    """A loopback server that drips, one byte each 0.05 s: an HTTP 500's body
    ("errbody"), or the response's headers ("headers")."""

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(x.split(b":")[1])
                for x in head.split(b"\r\n")
                if x.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        try:
            if mode == "errbody":
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 65536\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\n")
            while True:
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(b" " if mode == "errbody" else b"X")
        except (ConnectionError, asyncio.CancelledError):
            pass

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("mode", ["errbody", "headers"])
async def test_a_dripped_answer_times_out(mode):
    """A byte each 0.05 s never let a read wait for the read timeout, so an
    error's body, or the headers, dripped for ever: the reply stayed
    "still streaming" for days. Each comes within the read timeout, whole."""
    server = await _drip_server(mode)
    port = server.sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    lines = ["---", "model: anthropic/fake-model", "---", "USER: hi"]
    cfg = {"providers": {"anthropic": {"kind": "anthropic", "base_url": base}}}
    request = build_request(lines, cfg, REGISTRY.values())
    try:
        result = collect(request, timeouts=Timeouts(connect=5, read=0.5), max_attempts=1)
        _, _, error = await asyncio.wait_for(result, timeout=20)
    finally:
        server.close()
    if mode == "errbody":
        assert isinstance(error, ProviderError) and error.status == 500, error
    else:
        assert isinstance(error, StreamError) and error.kind == "timeout", error
        assert "headers within 5.5 s" in error.message  # connect + read


async def test_a_providers_error_message_is_said_cut_to_a_length():
    """An error event whose message was 11 MB went whole into the chat's note
    and a notification."""
    from sidekick_tools.llm.stream import ERROR_CHARS

    script = [reply("so far", stream_error("server_error", "x" * 1_000_000))]
    async with FakeProvider(script) as fake:
        _, _, error = await collect(request_for(fake, "openai"))
    assert isinstance(error, ProviderError)
    assert len(error.message) < ERROR_CHARS + 200
    assert error.message.endswith("characters more)")


async def test_an_http_errors_message_is_masked_before_it_is_cut():
    """Cut to its length first, a token standing across the cut lost the length
    its form needs (ghp_ and 20 characters), and its start was shown."""
    from sidekick_tools.llm.stream import ERROR_CHARS

    token = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"
    message = "x" * (ERROR_CHARS - 20) + " " + token + " " + "y" * 500  # across the cut
    async with FakeProvider([http_error(400, message)]) as fake:
        _, _, error = await collect(request_for(fake, "anthropic"), max_attempts=1)
    assert isinstance(error, ProviderError)
    assert "Q7w8E9r0" not in error.message and "ghp_Q" not in error.message  # no piece
