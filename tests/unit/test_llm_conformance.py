"""The fake provider against the official SDKs as clients: if the fake drifted from
the real wire, the SDKs' own stream parsers would fail or read other content.
The same scripts, read by our decoders, give the same content."""

from __future__ import annotations

import json

import pytest
from sidekick_tools.chat.blocks import Text, Thinking, ToolUse
from sidekick_tools.chat.reply import ReplyBuilder
from sidekick_tools.llm.request import build_request
from sidekick_tools.llm.stream import stream_reply

from tests.fake_provider import FakeProvider, reply, thinking, tool_call


# The SDKs take seconds to import: only the tests that use them do, not every
# pytest worker collecting the suite.
@pytest.fixture
def anthropic():
    import anthropic

    return anthropic


@pytest.fixture
def openai():
    import openai

    return openai


TOOL = {
    "name": "read_files",
    "description": "Read files.",
    "input_schema": {"type": "object", "properties": {"paths": {"type": "array"}}},
}
INPUT = {"paths": ["a.txt", "dir/ü ✓.md"], "note": 'quote " and \\ backslash'}


def script():
    return [
        reply(
            thinking("Reasoning, with ``` and\nnewlines."),
            "Let me read them. ü✓",
            tool_call("read_files", INPUT, id="toolu_first"),
            tool_call("read_files", {"paths": []}, id="toolu_second"),
            chunk=3,
        )
    ]


async def ours(fake: FakeProvider, protocol: str) -> list:
    config = {
        "providers": {
            "anthropic": {"kind": "anthropic", "base_url": fake.anthropic_url},
            "openai": {"kind": "openai", "base_url": fake.openai_url},
        }
    }
    lines = ["---", f"model: {protocol}/m", "---", "USER: read"]
    request = build_request(lines, config, [])
    builder = ReplyBuilder()
    async for delta in stream_reply(request, "k"):
        builder.feed(delta)
    builder.finish()
    return builder.blocks()


async def test_anthropic_sdk_reads_the_fake_stream(anthropic):
    async with FakeProvider(script() * 2) as fake:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.anthropic_url, max_retries=0)
        events = []
        async with client.messages.stream(
            model="claude-fake",
            max_tokens=1024,
            messages=[{"role": "user", "content": "read"}],
            tools=[TOOL],
            thinking={"type": "enabled", "budget_tokens": 1024},
        ) as stream:
            async for event in stream:
                events.append(event.type)
            message = await stream.get_final_message()
        await client.close()
        mine = await ours(fake, "anthropic")
    assert fake.requests[0].status == 200
    assert events[0] == "message_start" and events[-1] == "message_stop"
    thought, said, first, second = message.content
    assert thought.type == "thinking" and thought.thinking == "Reasoning, with ``` and\nnewlines."
    assert thought.signature
    assert said.type == "text" and said.text == "Let me read them. ü✓"
    assert (first.type, first.name, first.input) == ("tool_use", "read_files", INPUT)
    assert second.input == {"paths": []}
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 25 and message.usage.output_tokens > 0
    assert mine == [
        Thinking(thought.thinking, thought.signature),
        Text(said.text),
        ToolUse(first.id, first.name, first.input),
        ToolUse(second.id, second.name, second.input),
    ]


async def test_anthropic_sdk_sends_back_what_the_fake_signed(anthropic):
    async with FakeProvider([reply(thinking("private")), reply("ok")]) as fake:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.anthropic_url, max_retries=0)
        async with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "q"}]
        ) as stream:
            first = await stream.get_final_message()
        history = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {"role": "user", "content": "and?"},
        ]
        async with client.messages.stream(model="m", max_tokens=64, messages=history) as stream:
            second = await stream.get_final_message()
        # a changed byte in the thinking is refused, as the real API refuses it
        history[1]["content"][0]["thinking"] += " "
        with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
            async with client.messages.stream(model="m", max_tokens=64, messages=history) as stream:
                await stream.get_final_message()
        await client.close()
    assert second.content[0].text == "ok"


async def test_anthropic_sdk_reads_the_fake_errors(anthropic):
    from tests.fake_provider import http_error, stream_error

    script = [http_error(529), reply("half", stream_error())]
    async with FakeProvider(script) as fake:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.anthropic_url, max_retries=0)
        with pytest.raises(anthropic.InternalServerError) as overloaded:
            await client.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}]
            )
        with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
            async with client.messages.stream(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "q"}]
            ) as stream:
                await stream.get_final_message()
        await client.close()
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"


async def test_openai_sdk_reads_the_fake_stream(openai):
    tools = [
        {"type": "function", "function": {"name": "read_files", "parameters": TOOL["input_schema"]}}
    ]
    async with FakeProvider(script() * 3) as fake:
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        chunks = []
        stream = await client.chat.completions.create(
            model="gpt-fake",
            messages=[{"role": "user", "content": "read"}],
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            chunks.append(chunk)
        async with client.chat.completions.stream(
            model="gpt-fake", messages=[{"role": "user", "content": "read"}], tools=tools
        ) as helper:
            async for _ in helper:
                pass
            completion = await helper.get_final_completion()
        await client.close()
        mine = await ours(fake, "openai")
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me read them. ü✓"
    message = completion.choices[0].message
    assert message.content == "Let me read them. ü✓"
    first, second = message.tool_calls
    assert first.function.name == "read_files" and json.loads(first.function.arguments) == INPUT
    assert json.loads(second.function.arguments) == {"paths": []}
    assert mine[0].text == "Reasoning, with ``` and\nnewlines."  # reasoning_content
    assert mine[1:] == [
        Text(message.content),
        ToolUse(first.id, "read_files", INPUT),
        ToolUse(second.id, "read_files", {"paths": []}),
    ]


async def test_openai_sdk_reads_the_fake_errors(openai):
    from tests.fake_provider import http_error, stream_error

    script = [
        http_error(429, "slow down", retry_after=0),
        reply("half", stream_error("server_error", "boom")),
    ]
    async with FakeProvider(script) as fake:
        client = openai.AsyncOpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
        with pytest.raises(openai.RateLimitError, match="slow down"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}]
            )
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}], stream=True
        )
        with pytest.raises(openai.APIError, match="boom"):
            async for _ in stream:
                pass
        await client.close()
