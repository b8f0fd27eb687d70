"""A fake model provider on loopback, speaking the Anthropic Messages and OpenAI Chat
Completions streaming protocols: for tests, ``make demo`` and the bench.

    from tests.fake_provider import FakeProvider, reply, text, tool_call, thinking

    script = [reply("Hello!"), reply(tool_call("read_files", {"paths": ["a"]}))]
    async with FakeProvider(script) as fake:
        ...  # point a client at fake.anthropic_url or fake.openai_url
        fake.requests[0].json  # what was sent

From a shell: ``python -m tests.fake_provider --port 0 --script FILE`` (repo root on
``sys.path``) prints its base URL and serves until interrupted.
"""

from .script import (
    HttpError,
    Reply,
    ScriptItem,
    fake_signature,
    http_error,
    load_script,
    raw,
    redacted_thinking,
    reply,
    script_from_json,
    stream_error,
    text,
    thinking,
    tool_call,
)
from .server import FakeProvider, RecordedRequest, ThreadedFakeProvider

__all__ = [
    "FakeProvider",
    "HttpError",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "ThreadedFakeProvider",
    "fake_signature",
    "http_error",
    "load_script",
    "raw",
    "redacted_thinking",
    "reply",
    "script_from_json",
    "stream_error",
    "text",
    "thinking",
    "tool_call",
]
