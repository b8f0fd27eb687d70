"""build_request: chat lines + config + tools -> provider, options and body bytes."""

from __future__ import annotations

import json

import pytest
from sidekick_tools.buffers import BufferMirror
from sidekick_tools.chat.render import result_lines
from sidekick_tools.llm.errors import ChatNotReady, ConfigError
from sidekick_tools.llm.request import build_request
from sidekick_tools.llm.settings import ChatConfig, parse_thinking
from sidekick_tools.tools import REGISTRY

CONFIG = {
    "model": "anthropic/claude-test",
    "system": "Default system prompt.",
    "max_tokens": 2000,
    "providers": {
        "anthropic": {"kind": "anthropic", "api_key": "env:ANTHROPIC_API_KEY"},
        "openai": {"kind": "openai"},
        "ollama": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
        "router": {"kind": "openai", "base_url": "https://openrouter.ai/api/v1"},
    },
}


def build(lines, config=CONFIG):
    return build_request(lines, config, REGISTRY.values())


def test_default_model_system_and_tools():
    request = build(["USER: hello"])
    assert request.model_spec == "anthropic/claude-test"
    assert request.provider.name == "anthropic"
    assert request.options.model == "claude-test" and request.options.max_tokens == 2000
    body = json.loads(request.http.body)
    assert body["system"][0]["text"] == "Default system prompt."
    assert [t["name"] for t in body["tools"]] == list(REGISTRY)
    assert body["tools"][0]["input_schema"] == REGISTRY["run_terminal_command"].schema


def test_front_matter_overrides_and_chat_system_replaces_the_default():
    lines = [
        "---",
        "model: router/anthropic/claude-3.5",
        "max_tokens: 512",
        "temperature: 0.3",
        "---",
        "SYSTEM: Chat's own system.",
        "USER: hi",
    ]
    request = build(lines)
    assert request.provider.name == "router" and request.options.model == "anthropic/claude-3.5"
    body = json.loads(request.http.body)
    assert body["max_tokens"] == 512 and body["temperature"] == 0.3
    assert body["messages"][0] == {"role": "system", "content": "Chat's own system."}
    assert request.http.url == "https://openrouter.ai/api/v1/chat/completions"


def test_thinking_from_front_matter():
    body = json.loads(build(["---", "thinking: 4096", "---", "USER: hi"]).http.body)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert "thinking" not in json.loads(build(["---", "thinking: off", "---", "USER: x"]).http.body)
    assert parse_thinking(True) == "adaptive" and parse_thinking("adaptive") == "adaptive"
    with pytest.raises(ConfigError, match="thinking"):
        parse_thinking("lots")


@pytest.mark.parametrize("key", ["max_tokens", "thinking"])
def test_a_number_too_long_to_read_is_said_as_a_front_matter_problem(key):
    """Past 4,300 digits Python refuses to read a number (ValueError): the send
    failed as an internal error instead of saying what is wrong in the chat."""
    with pytest.raises(ConfigError, match=f"{key} is too large: 9999"):
        build(["---", f"{key}: {'9' * 5000}", "---", "USER: hi"])
    with pytest.raises(ConfigError, match=f"{key} is too large"):
        build(["---", f"{key}: {'9' * 13}", "---", "USER: hi"])
    assert build(["---", f"{key}: 0000000000000004096", "---", "USER: hi"])


def test_front_matter_cannot_redirect_a_request():
    lines = ["---", "base_url: http://evil.example", "api_key: env:HOME", "---", "USER: hi"]
    request = build(lines)
    assert request.http.url == "https://api.anthropic.com/v1/messages"
    assert request.provider.api_key == "env:ANTHROPIC_API_KEY"


def test_the_default_key_never_goes_to_another_server():
    config = ChatConfig.from_dict(CONFIG)
    assert config.providers["openai"].api_key == "env:OPENAI_API_KEY"
    assert config.providers["ollama"].api_key is None
    assert config.providers["router"].api_key is None
    assert "api_key" not in repr(config.providers["anthropic"])


def test_secrets_are_masked_in_what_is_sent():
    secret = "sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA"
    lines = [
        "SYSTEM: my key is " + secret,
        "USER: use password=hunter2",
        "ASSISTANT: ok",
        "```tool run_terminal_command id=c1",
        json.dumps({"command": f"curl -H 'x-api-key: {secret}'"}),
        "```",
        *result_lines("c1", "completed", {}, f"echo {secret}"),
        "USER: thanks",
    ]
    body = build(lines).http.body
    assert secret.encode() not in body and b"hunter2" not in body
    assert body.count(b"sk-ant-***") == 3 and b"password=***" in body


def test_the_models_own_code_is_sent_back_as_the_chat_shows_it():
    """The chat shows a reply's code as the model wrote it (in a fence only keys
    by their form are masked); the next request masked it as prose, and the
    model read back `token = ***"X-Token"]`. The user's text is masked whole."""
    code = '    token = request.headers["X-Token"]'
    lines = [
        "USER: fix it; my password=hunter2",
        "ASSISTANT: Here:",
        "```python",
        "def auth(password: str):",
        code,
        "```",
        "Then set password=abc123def in prose.",
        "USER: thanks",
    ]
    said = json.loads(build(lines).http.body)["messages"]
    text = json.dumps(said)
    assert json.dumps(code)[1:-1] in text and "def auth(password: str):" in text
    assert "hunter2" not in text and "abc123def" not in text


def test_the_same_lines_give_the_same_bytes():
    lines = ["USER: a", "ASSISTANT: b", "USER: c ü"]
    assert build(lines).http.body == build(list(lines)).http.body


# A chat with every kind of block: thinking (signed, redacted, and unsigned from
# another provider, which drops out and merges the turns around it), calls with
# results, two user messages in a row, non-ASCII text and a secret.
RICH = [
    "SYSTEM: be brief",
    "USER: hello ü",
    "ASSISTANT:",
    "```thinking signature=c2ln",
    "I think",
    "```",
    "Let me look.",
    "```tool read_files id=r1",
    '{"paths": ["a.txt"]}',
    "```",
    "",
    *result_lines("r1", "completed", {}, "a\nb password=hunter2"),
    "```tool run_terminal_command id=r2",
    '{"command": "ls \\"x\\""}',
    "```",
    *result_lines("r2", "failed", {"exit": "1"}, "no"),
    "USER: and then",
    "ASSISTANT:",
    "```thinking",
    "unsigned: dropped",
    "```",
    "USER: one",
    "USER: two",
    "ASSISTANT:",
    "```thinking redacted=cmVk",
    "```",
    "Done.",
    "USER: last",
]
KINDS = [CONFIG, {**CONFIG, "model": "ollama/llama"}]


def canonical(body: bytes) -> bytes:
    """The compact JSON encoding of what `body` decodes to, in its key order."""
    value = json.loads(body)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("config", KINDS, ids=["anthropic", "openai"])
def test_the_encoding_is_the_body_it_decodes_to(config):
    body = build(RICH, config).http.body
    assert canonical(body) == body
    assert b"hunter2" not in body


@pytest.mark.parametrize("config", KINDS, ids=["anthropic", "openai"])
def test_a_chat_read_again_after_edits_gives_the_bytes_of_a_fresh_read(config):
    """The second request reuses what the first read, masked and encoded (the
    messages before the edit are kept by the mirror); its bytes are those of the
    same chat read from nothing."""
    mirror = BufferMirror(1, "chat.sidekick.md", list(RICH), 1)
    first = build_request(mirror.lines, config, REGISTRY.values(), chat=mirror.chat())
    assert first.http.body == build(list(RICH), config).http.body
    n = len(mirror.lines)
    mirror.on_lines(2, n - 1, n, ["USER: last, edited", "ASSISTANT: yes", "USER: more"])
    again = build_request(mirror.lines, config, REGISTRY.values(), chat=mirror.chat())
    assert again.http.body == build(list(mirror.lines), config).http.body
    assert canonical(again.http.body) == again.http.body


def test_the_cache_breakpoint_moves_to_the_new_last_user_turn():
    mirror = BufferMirror(1, "chat.sidekick.md", ["USER: one", "ASSISTANT: a", "USER: two"], 1)
    build_request(mirror.lines, CONFIG, REGISTRY.values(), chat=mirror.chat())
    mirror.on_lines(2, 3, 3, ["ASSISTANT: b", "USER: three"])
    body = json.loads(
        build_request(mirror.lines, CONFIG, REGISTRY.values(), chat=mirror.chat()).http.body
    )
    marked = [
        (m["role"], block["text"])
        for m in body["messages"]
        for block in m["content"]
        if "cache_control" in block
    ]
    assert marked == [("user", "three")]


def test_calls_without_results_cannot_be_sent():
    lines = ["USER: a", "ASSISTANT: b", "```tool read_files id=c1", '{"paths": ["x"]}', "```"]
    lines += ["USER: c"]
    with pytest.raises(ChatNotReady, match="1 tool call without a result") as caught:
        build(lines)
    assert [call.call_id for call in caught.value.calls] == ["c1"]


def test_nothing_to_send():
    for lines in ([], ["# notes"], ["USER: a", "ASSISTANT: b"], ["USER:   "]):
        with pytest.raises(ChatNotReady, match="Nothing to send"):
            build(lines)


def test_unknown_provider_or_bad_model_spec():
    with pytest.raises(ConfigError, match='No provider "gemini"'):
        build(["---", "model: gemini/x", "---", "USER: a"])
    with pytest.raises(ConfigError, match="provider/model"):
        build(["---", "model: claude", "---", "USER: a"])
    with pytest.raises(ConfigError, match="max_tokens"):
        build(["---", "max_tokens: lots", "---", "USER: a"])
    config = {"model": "x/y", "providers": {"x": {"kind": "nope"}}}
    with pytest.raises(ConfigError, match="Unknown provider kind"):
        build(["USER: a"], config)
