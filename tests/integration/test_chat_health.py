""":checkhealth sidekick_tools reports the chat loop (DESIGN §10, issue #17): httpx2,
and for each configured provider its kind, base_url, whether its key resolves
(never printing it) and whether the base_url answers, against the fake provider
on loopback and a closed port."""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import pytest

from tests.fake_provider import ThreadedFakeProvider

pytestmark = pytest.mark.integration

ENV_KEY = "sk-env-" + "e" * 30
CMD_KEY = "sk-cmd-" + "c" * 30
FN_KEY = "sk-fn-" + "f" * 30


@pytest.fixture
def fake() -> Iterator[Any]:
    with ThreadedFakeProvider(api_key=ENV_KEY) as server:
        yield server


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(editor) -> str:
    editor.nvim.command("checkhealth sidekick_tools")
    return "\n".join(editor.nvim.current.buffer[:])


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("sidekick_tools: ", start + len(title))
    return text[start : end if end != -1 else None]


def line_with(text: str, *words: str) -> str:
    lines = [line for line in text.split("\n") if all(w in line for w in words)]
    assert lines, f"no line with {words} in:\n{text}"
    return lines[0]


def level(text: str, *words: str) -> str:
    """OK, WARNING or ERROR: how the line holding `words` reports (Neovim
    versions put an icon before the word, or none)."""
    line = line_with(text, *words)
    m = re.match(r"- (?:\S+ )?(OK|WARNING|ERROR) ", line)
    assert m, line
    return m.group(1)


def test_checkhealth_reports_httpx2_and_each_provider(editor, fake, tmp_path):
    port = closed_port()
    editor.lua(f"vim.env.FAKE_KEY = '{ENV_KEY}'")
    editor.lua(
        "local port, fn_key, cmd_key, fake_url, py, state = ...\n"
        "require('sidekick_tools').setup({ python = py, state_dir = state, chat = {\n"
        "  model = 'fake/test-model',\n"
        "  providers = {\n"
        "    fake = { kind = 'anthropic', base_url = fake_url, api_key = 'env:FAKE_KEY' },\n"
        "    closed = { kind = 'openai', base_url = 'http://127.0.0.1:' .. port .. '/v1',\n"
        "               api_key = 'cmd:echo ' .. cmd_key },\n"
        "    unset = { kind = 'openai', base_url = fake_url .. '/v1',\n"
        "              api_key = 'env:NO_SUCH_VAR_X' },\n"
        "    failing = { kind = 'openai', base_url = fake_url .. '/v1', api_key = 'cmd:false' },\n"
        "    lua = { kind = 'openai', base_url = fake_url:gsub('//', '//me:pw-secret@') .. '/v1',\n"
        "            api_key = function() return fn_key end },\n"
        "    odd = { kind = 'gopher', base_url = fake_url },\n"
        "  },\n"
        "} })",
        port,
        FN_KEY,
        CMD_KEY,
        fake.anthropic_url,
        sys.executable,
        str(editor.state_dir),
    )
    editor.open_chat("USER: hi\n")
    assert fake.requests == []  # nothing is contacted but from :checkhealth
    text = health(editor)
    chat = section(text, "sidekick_tools: chat")

    if sys.version_info >= (3, 10):
        version = metadata.version("httpx2")
        assert level(chat, f"httpx2 {version} is importable by {sys.executable}") == "OK"
    assert level(chat, "chat.model (new chats): fake/test-model") == "OK"

    assert f"provider fake: kind anthropic, base_url {fake.anthropic_url}" in chat
    assert level(chat, "provider fake: key from $FAKE_KEY is set") == "OK"
    assert level(chat, "provider fake:", "answers (HTTP 404)") == "OK"

    assert level(chat, f"127.0.0.1:{port}/v1", "does not answer") == "WARNING"
    assert "refused" in line_with(chat, f"127.0.0.1:{port}/v1", "does not answer").lower()
    assert level(chat, "provider closed: key from the api_key command `echo …` resolves") == "OK"

    assert level(chat, "provider unset: $NO_SUCH_VAR_X is not set") == "WARNING"
    assert "export NO_SUCH_VAR_X=" in chat
    assert level(chat, "provider failing:", "`false` failed (exit 1)") == "WARNING"
    # a provider without a key is not contacted
    assert "provider unset: " + fake.openai_url + " not contacted (no key)" in chat
    assert "provider failing: " + fake.openai_url + " not contacted (no key)" in chat
    assert level(chat, "provider lua: the api_key function returns a key") == "OK"
    odd = 'provider odd: kind "gopher" is not a wire protocol'
    assert level(chat, odd) == "ERROR" and "(anthropic, openai)" in line_with(chat, odd)

    # no key, nor any part of one, is shown or sent
    assert "provider lua: http://…@127.0.0.1" in chat
    assert "pw-secret" not in text
    for key in (ENV_KEY, CMD_KEY, FN_KEY):
        assert key not in text
        assert key[7:17] not in text
    # asked: fake (its anthropic url) and lua (its openai url), each once
    assert sorted(r.path for r in fake.requests) == ["/", "/v1"]
    for request in fake.requests:
        assert request.method == "GET"
        assert "x-api-key" not in request.headers and "authorization" not in request.headers


def test_checkhealth_without_providers_says_so(editor):
    editor.setup(chat={"model": "none/x", "providers": {}})
    chat = section(health(editor), "sidekick_tools: chat")
    assert level(chat, "no provider in chat.providers") == "WARNING"
    assert level(chat, 'chat.model none/x: no provider "none"') == "ERROR"


def test_checkhealth_resolves_providers_with_the_hosts_defaults(editor):
    """Where a provider kind goes, and with which key, when the provider names
    neither: :checkhealth (Lua) says what the host (Python) will do."""
    from sidekick_tools.llm import settings

    check = "return require('sidekick_tools.provider_check')"
    assert editor.lua(check + ".DEFAULT_BASE_URLS") == settings.DEFAULT_BASE_URLS
    assert editor.lua(check + ".DEFAULT_API_KEYS") == settings.DEFAULT_API_KEYS


def test_checkhealth_never_runs_a_key_command_the_project_holds(editor, tmp_path):
    """A `cmd:` key's program is looked up in PATH's absolute entries only, as
    the host does: with an empty entry in PATH (`PATH=...:`), the child that
    tries the key would run a `sidekick-key` of the working directory."""
    marker = tmp_path / "project-key-ran"
    script = editor.workdir / "sidekick-key"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho sk-from-the-project\n")
    script.chmod(0o755)
    editor.lua("vim.env.PATH = ':' .. vim.env.PATH")
    providers = {
        "p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "cmd:sidekick-key"}
    }
    editor.setup(chat={"model": "p/m", "providers": providers})
    chat = section(health(editor), "sidekick_tools: chat")
    assert not marker.exists()
    assert level(chat, "provider p:", "`sidekick-key`", "not found on PATH") == "WARNING"


def test_a_default_local_provider_that_is_not_running_is_no_warning(editor):
    """DESIGN §10's defaults name ollama on loopback: most users run none, so
    its silence is said, not warned about; a provider the user configured
    the same way is warned about."""
    editor.setup()
    chat = section(health(editor), "sidekick_tools: chat")
    line = line_with(chat, "provider ollama: http://127.0.0.1:11434/v1")
    if "answers" not in line:  # (an ollama may listen on this machine)
        assert "WARNING" not in line and "a default provider" in line, line
    url = f"http://127.0.0.1:{closed_port()}/v1"
    editor.setup(chat={"providers": {"mine": {"kind": "openai", "base_url": url}}})
    chat = section(health(editor), "sidekick_tools: chat")
    assert level(chat, f"provider mine: {url}") == "WARNING"
