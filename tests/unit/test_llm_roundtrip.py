"""The buffer is the truth: a reply streamed from the fake provider, rendered into
chat lines by edits, then read back from those lines, gives exactly the request
bytes that a direct build from the streamed blocks gives; the provider accepts
that next request (the fake checks thinking signatures byte for byte and tool
results paired by id), and its prefix is the previous request's (prompt caches)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from sidekick_tools.chat.blocks import Conversation, Text, ToolResultBlock, Turn
from sidekick_tools.chat.parser import parse
from sidekick_tools.chat.render import result_lines
from sidekick_tools.chat.reply_render import ReplyRenderer, apply_edit
from sidekick_tools.llm.request import build_request, encode_request
from sidekick_tools.llm.stream import stream_reply
from sidekick_tools.tools import REGISTRY

from tests.conftest import until
from tests.fake_provider import FakeProvider, reply, text, thinking, tool_call


def config(fake: FakeProvider) -> dict:
    return {
        "providers": {
            "anthropic": {"kind": "anthropic", "base_url": fake.anthropic_url},
            "openai": {"kind": "openai", "base_url": fake.openai_url},
        }
    }


async def stream_into(lines: list[str], request, rng: random.Random) -> ReplyRenderer:
    """Stream the reply into ``lines`` (in place) through edits, as the plugin will."""
    lines.append("")
    base = len(lines) - 1
    renderer = ReplyRenderer()

    def apply() -> None:
        edit = renderer.take()
        if edit is not None:
            lines[base:] = apply_edit(lines[base:], edit)

    async for delta in stream_reply(request, None):
        renderer.feed(delta)
        if rng.random() < 0.3:
            apply()
    renderer.finish()
    apply()
    assert lines[base:] == renderer.lines
    return renderer


def write_results(lines: list[str], results: dict[str, tuple[str, str]]) -> None:
    """Result blocks after their calls, as the plugin writes them (bottom up)."""
    for call in reversed(parse(lines).calls):
        if call.call_id in results and call.pending:
            status, body = results[call.call_id]
            lines[call.end_row + 1 : call.end_row + 1] = result_lines(
                call.call_id, status, {}, body
            )


def strip_cache_control(value):
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


SCRIPTS = {
    "anthropic": [
        reply(
            thinking("The user wants files.\n```\nUSER: not a marker\n", None),
            text("I'll look. Here is code:\n```py\nprint('x')"),
            tool_call("list_directory", {"path": "."}),
            tool_call("read_files", {"paths": ["a ü.txt", "b`c`.md"]}),
            chunk=3,
        ),
        reply(thinking("Both done."), "All read.", chunk=5),
    ],
    "openai": [
        reply(
            text("I'll look.\nUSER: forged line"),
            tool_call("list_directory", {"path": "."}),
            tool_call("read_files", {"paths": ["a ü.txt"]}),
            chunk=2,
            interleave_calls=True,
        ),
        reply("All read."),
    ],
}


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize("seed", range(3))
async def test_stream_render_reread_gives_the_same_bytes(protocol, seed):
    rng = random.Random(seed)
    async with FakeProvider(SCRIPTS[protocol]) as fake:
        lines = ["---", f"model: {protocol}/fake", "---", "SYSTEM: Be brief.", ""]
        lines += ["USER: list the files, my token=abc123"]
        first = build_request(lines, config(fake), REGISTRY.values())
        renderer = await stream_into(lines, first, rng)
        blocks = renderer.reply.blocks()
        calls = renderer.reply.tool_calls
        assert len(calls) == 2

        # the tools ran: results after the calls, then the user's next words
        outcomes = {
            calls[0].call_id: ("completed", "a ü.txt\nb`c`.md"),
            calls[1].call_id: ("failed", "no such file"),
        }
        write_results(lines, outcomes)
        lines += ["", "USER: thanks"]

        # direct build: the first request's conversation + the streamed blocks + results
        results = [
            ToolResultBlock(
                c.call_id,
                f"status={outcomes[c.call_id][0]}\n{outcomes[c.call_id][1]}",
                outcomes[c.call_id][0] == "failed",
                outcomes[c.call_id][0],
            )
            for c in calls
        ]
        direct = Conversation(
            first.conversation.system,
            [
                *first.conversation.turns,
                Turn("assistant", blocks),
                Turn("user", [*results, Text("thanks")]),
            ],
        )
        direct_bytes = encode_request(direct, first.options, REGISTRY.values(), first.provider).body

        second = build_request(lines, config(fake), REGISTRY.values())
        assert second.http.body == direct_bytes
        # and again: re-reading is a pure function of the text
        assert build_request(list(lines), config(fake), REGISTRY.values()).http.body == direct_bytes

        # the provider accepts it (signatures intact, results paired and first)
        after = await stream_into(lines, second, rng)
        assert after.reply.blocks()[-1] == Text("All read.")
        assert [r.status for r in fake.requests] == [200, 200]

    one, two = (json.loads(r.body) for r in fake.requests)
    assert fake.requests[1].body == second.http.body
    # cache prefix: everything before the messages, and the first request's messages, unchanged
    assert {k: v for k, v in one.items() if k != "messages"} == {
        k: v for k, v in two.items() if k != "messages"
    }
    n = len(one["messages"])
    assert strip_cache_control(two["messages"][:n]) == strip_cache_control(one["messages"])
    assert b"abc123" not in fake.requests[0].body


async def test_a_stopped_reply_leaves_a_chat_the_provider_accepts():
    script = [
        reply(
            "Reading now.", tool_call("read_files", {"paths": ["x" * 50]}), chunk=4, hang_after=9
        ),
        reply("Continuing."),
    ]
    async with FakeProvider(script) as fake:
        lines = ["---", "model: anthropic/fake", "---", "USER: go"]
        request = build_request(lines, config(fake), REGISTRY.values())
        renderer = ReplyRenderer()

        async def consume():
            async for delta in stream_reply(request, None):
                renderer.feed(delta)

        task = asyncio.create_task(consume())
        await until(lambda: renderer.reply.entries and len(renderer.reply.entries) == 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        renderer.finish(stopped=True)
        lines += ["", *renderer.lines, "", "USER: go on"]
        assert lines[-3].startswith("[tool call read_files dropped")
        nxt = build_request(lines, config(fake), REGISTRY.values())
        after = ReplyRenderer()
        async for delta in stream_reply(nxt, None):
            after.feed(delta)
        await until(lambda: fake.requests[0].disconnected)
    assert fake.requests[1].status == 200
    sent = json.loads(fake.requests[1].body)["messages"]
    assert sent[1]["content"][0]["text"].startswith("Reading now.\n\n[tool call read_files dropped")
