"""The fake provider itself: it refuses what the real APIs refuse, records requests,
reads scripts, and runs as a program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tests.fake_provider import (
    FakeProvider,
    ThreadedFakeProvider,
    fake_signature,
    load_script,
    reply,
    script_from_json,
    thinking,
    tool_call,
)
from tests.fake_provider.script import HttpError, Reply, TextPiece, ToolCallPiece

ROOT = Path(__file__).resolve().parents[2]


def anthropic_body(messages, **extra):
    return {"model": "m", "max_tokens": 10, "stream": True, "messages": messages, **extra}


def tool_use(i="t1"):
    return {"type": "tool_use", "id": i, "name": "read_files", "input": {}}


def tool_result(i="t1"):
    return {"type": "tool_result", "tool_use_id": i, "content": "ok"}


def user(*content):
    return {"role": "user", "content": list(content)}


def assistant(*content):
    return {"role": "assistant", "content": list(content)}


TEXT = {"type": "text", "text": "hi"}

ANTHROPIC_REFUSALS = [
    ([user(TEXT), assistant(tool_use()), user(TEXT)], "`tool_use` ids were found without"),
    ([user(TEXT), assistant(tool_use()), user(TEXT, tool_result())], "must come first"),
    ([user(TEXT), assistant(tool_use()), user(tool_result("t2"))], "unexpected `tool_use_id`"),
    ([user(TEXT), assistant(tool_use("a"), tool_use("b")), user(tool_result("a"))], "b."),
    ([user({"type": "text", "text": ""})], "must be non-empty"),
    ([user({"type": "text", "text": "  "})], "non-whitespace"),
    (
        [
            user(TEXT),
            assistant({"type": "thinking", "thinking": "x", "signature": "forged"}),
            user(TEXT),
        ],
        "Invalid `signature`",
    ),
    ([], "at least one message"),
]


@pytest.mark.parametrize("messages,error", ANTHROPIC_REFUSALS)
async def test_anthropic_refusals(messages, error):
    async with FakeProvider([reply("never")]) as fake, httpx2.AsyncClient() as client:
        response = await client.post(f"{fake.base_url}/v1/messages", json=anthropic_body(messages))
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert error in body["error"]["message"]
    assert body["request_id"].startswith("req_")


async def test_anthropic_accepts_a_valid_loop_and_consecutive_user_messages():
    sig = fake_signature("mine")
    messages = [
        user(TEXT),
        user(TEXT),
        assistant({"type": "thinking", "thinking": "mine", "signature": sig}, tool_use()),
        user(tool_result(), TEXT),
    ]
    async with FakeProvider([reply("ok")]) as fake, httpx2.AsyncClient() as client:
        response = await client.post(f"{fake.base_url}/v1/messages", json=anthropic_body(messages))
    assert response.status_code == 200
    assert "event: message_stop" in response.text


async def test_cache_control_limit_and_tool_names():
    many = [dict(TEXT, cache_control={"type": "ephemeral"}) for _ in range(5)]
    bad_tool = [{"name": "bad name", "input_schema": {"type": "object"}}]
    async with FakeProvider() as fake, httpx2.AsyncClient() as client:
        r1 = await client.post(f"{fake.base_url}/v1/messages", json=anthropic_body([user(*many)]))
        r2 = await client.post(
            f"{fake.base_url}/v1/messages", json=anthropic_body([user(TEXT)], tools=bad_tool)
        )
    assert "A maximum of 4 blocks with cache_control" in r1.json()["error"]["message"]
    assert "tools.0.custom.name" in r2.json()["error"]["message"]


def openai_call(i="call_1"):
    return {"id": i, "type": "function", "function": {"name": "read_files", "arguments": "{}"}}


OPENAI_REFUSALS = [
    (
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [openai_call()]},
            {"role": "user", "content": "and?"},
        ],
        "did not have response messages: call_1",
    ),
    (
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "r"}],
        "must be a response to a preceeding message with 'tool_calls'",
    ),
    (
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [openai_call("a"), openai_call("b")],
            },
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ],
        "did not have response messages: b",
    ),
]


@pytest.mark.parametrize("messages,error", OPENAI_REFUSALS)
async def test_openai_refusals(messages, error):
    body = {"model": "m", "stream": True, "messages": messages}
    async with FakeProvider([reply("never")]) as fake, httpx2.AsyncClient() as client:
        response = await client.post(f"{fake.openai_url}/chat/completions", json=body)
    assert response.status_code == 400
    assert error in response.json()["error"]["message"]
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_openai_stream_shape_usage_only_when_asked():
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with FakeProvider([reply("a"), reply("b")]) as fake, httpx2.AsyncClient() as client:
        plain = await client.post(f"{fake.openai_url}/chat/completions", json=body)
        body["stream_options"] = {"include_usage": True}
        counted = await client.post(f"{fake.openai_url}/chat/completions", json=body)
    assert plain.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in counted.text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    usage = json.loads(events[-2])
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(json.loads(e)["usage"] is None for e in events[:-2])
    assert '"usage"' not in plain.text


async def test_recording_auth_exhaustion_and_unknown_routes():
    async with FakeProvider([reply("one")], api_key="k-1") as fake, httpx2.AsyncClient() as client:
        body = anthropic_body([user(TEXT)])
        refused = await client.post(f"{fake.base_url}/v1/messages", json=body)
        ok = await client.post(
            f"{fake.base_url}/v1/messages", json=body, headers={"x-api-key": "k-1"}
        )
        empty = await client.post(
            f"{fake.base_url}/v1/messages", json=body, headers={"x-api-key": "k-1"}
        )
        missing = await client.get(f"{fake.base_url}/v1/models")
    assert [r.status_code for r in (refused, ok, empty, missing)] == [401, 200, 500, 404]
    assert refused.json()["error"]["type"] == "authentication_error"
    assert "no scripted reply left" in empty.json()["error"]["message"]
    assert [r.status for r in fake.requests] == [401, 200, 500, 404]
    assert fake.requests[1].json == body and fake.requests[1].headers["x-api-key"] == "k-1"


async def test_repeat_replays_the_script():
    async with FakeProvider([reply("again")], repeat=True) as fake, httpx2.AsyncClient() as client:
        for _ in range(3):
            r = await client.post(f"{fake.base_url}/v1/messages", json=anthropic_body([user(TEXT)]))
            assert r.status_code == 200 and "again" in r.text


async def test_a_callable_item_answers_from_what_was_sent():
    def echo(body):
        said = body["messages"][-1]["content"][0]["text"]
        return reply(f"you said {said}", chunk=0) if said != "fail" else HttpError(503)

    async with FakeProvider([echo, echo]) as fake, httpx2.AsyncClient() as client:
        url = f"{fake.base_url}/v1/messages"
        ok = await client.post(url, json=anthropic_body([user(TEXT)]))
        refused = await client.post(
            url, json=anthropic_body([user({"type": "text", "text": "fail"})])
        )
    assert ok.status_code == 200 and "you said hi" in ok.text
    assert refused.status_code == 503


async def test_stamps_are_the_monotonic_clock_when_each_event_is_written():
    import time

    pieces = reply("a <T> b <T> c <T>", chunk=6, stamp="<T>", tokens_per_second=500)
    before = time.monotonic_ns() // 1000
    async with FakeProvider([pieces]) as fake, httpx2.AsyncClient() as client:
        r = await client.post(f"{fake.base_url}/v1/messages", json=anthropic_body([user(TEXT)]))
    after = time.monotonic_ns() // 1000
    text = "".join(
        json.loads(line[6:])["delta"]["text"]
        for line in r.text.split("\n")
        if line.startswith("data: ") and '"text_delta"' in line
    )
    assert "<T>" not in text
    stamps = [int(w) for w in text.split() if w.isdigit()]
    assert len(stamps) == 3
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= after
    request = fake.requests[0]
    assert before / 1e6 <= request.first_line_at <= request.received_at <= after / 1e6


def test_script_from_json(tmp_path):
    items = [
        "Hello",
        {
            "pieces": [{"thinking": "hm"}, "text", {"tool_call": {"name": "x", "input": {"a": 1}}}],
            "chunk": 2,
        },
        {"error": {"status": 429, "retry_after": 1, "type": "rate_limit_error"}},
    ]
    path = tmp_path / "script.json"
    path.write_text(json.dumps(items))
    script = load_script(path)
    assert script == script_from_json(items)
    assert script[0] == Reply([TextPiece("Hello")])
    assert script[1].chunk == 2 and script[1].pieces[2] == ToolCallPiece("x", {"a": 1})
    assert script[2] == HttpError(429, "rate_limit_error", retry_after=1)
    with pytest.raises(ValueError):
        script_from_json([{"pieces": [{"unknown": 1}]}])


def test_threaded_fake_for_synchronous_callers():
    with (
        ThreadedFakeProvider(
            [reply(thinking("t"), tool_call("read_files", {"paths": ["a"]}))]
        ) as fake,
        httpx2.Client() as client,
    ):
        r = client.post(f"{fake.base_url}/v1/messages", json=anthropic_body([user(TEXT)]))
    assert r.status_code == 200
    assert '"type":"signature_delta"' in r.text and '"partial_json":"{\\"paths\\""' in r.text


def test_runs_as_a_program_and_prints_its_url(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["Hello"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fake_provider",
            "--port",
            "0",
            "--script",
            str(script),
            "--until-stdin-closes",
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        r = httpx2.post(f"{url}/v1/chat/completions", json=body)
        assert r.status_code == 200 and "Hello" in r.text
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
