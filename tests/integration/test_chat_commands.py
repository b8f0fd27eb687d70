"""The chat loop's commands and keys in a real headless Neovim (DESIGN §6, §10):
:SidekickSend and :SidekickStop with their chat-buffer keys, :SidekickChat (a new
chat file) and :SidekickModel (show or set a chat's model), against the fake
provider on loopback."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.fake_provider import ThreadedFakeProvider, reply
from tests.integration.chat_helpers import wait_replies
from tests.integration.conftest import SETUP_SAID, setup_errors

pytestmark = pytest.mark.integration

KEY = "fake-key-" + "q" * 24


@pytest.fixture
def fake() -> Iterator[Any]:
    with ThreadedFakeProvider(api_key=KEY) as server:
        yield server


def setup(editor, fake, **chat: Any) -> None:
    editor.lua(f"vim.env.FAKE_KEY = '{KEY}'")
    opts = chat.pop("opts", {})
    editor.setup(
        chat={
            "model": "fake/test-model",
            "providers": {
                "fake": {
                    "kind": "anthropic",
                    "base_url": fake.anthropic_url,
                    "api_key": "env:FAKE_KEY",
                    "models": ["small", "large"],
                },
                "local": {"kind": "openai", "base_url": fake.openai_url, "models": ["llama"]},
            },
            **chat,
        },
        **opts,
    )


def feed(editor, keys: str) -> None:
    editor.nvim.feedkeys(editor.nvim.replace_termcodes(keys, True, False, True), "x", False)


def errors(editor) -> list[str]:
    return [n for n in editor.notifications() if "sidekick_tools" in n]


# --- :SidekickSend, :SidekickStop and their keys ----------------------------------------


def test_send_and_stop_commands(editor, fake):
    fake.push(
        reply("First answer."),
        reply("Part one. " * 30, chunk=5, hang_after=10),
    )
    setup(editor, fake)
    editor.open_chat("USER: hello\n")
    editor.nvim.command("SidekickSend")
    editor.wait_text("ASSISTANT: First answer.")
    wait_replies(editor, 1)
    assert editor.lines()[-1] == "USER: "
    assert fake.requests[0].json["model"] == "test-model"
    # the second reply hangs mid-stream until :SidekickStop closes the connection
    editor.nvim.command("call setline('$', 'USER: and more')")
    editor.nvim.command("SidekickSend")
    editor.wait_text("Part one. Part one.")
    editor.nvim.command("SidekickStop")
    editor.wait_text("```sidekick stopped")
    wait_for(lambda: fake.requests[1].disconnected)


def test_usage_stays_on_its_reply_or_goes_when_a_formatter_rewrites_the_chat(editor, fake):
    """A reply's token usage is virtual text on its ASSISTANT: line. A formatter
    that rewrites every line moves every extmark to the first line: there the
    usage of every reply would pile up on the USER: line, so it is dropped."""
    fake.push(reply("First answer."), reply("Second answer."))
    setup(editor, fake)
    editor.open_chat("USER: hello\n")
    editor.nvim.command("SidekickSend")
    wait_replies(editor, 1)
    editor.nvim.command("call setline('$', 'USER: more')")
    editor.nvim.command("SidekickSend")
    wait_replies(editor, 2)
    shown = (
        "local ns = vim.api.nvim_create_namespace('sidekick_tools_usage')\n"
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do\n"
        "  if not m[4].invalid then table.insert(out, m[2]) end\n"
        "end\n"
        "return out"
    )
    rows = editor.lua(shown)
    assert len(rows) == 2
    assert all(editor.lines()[r].startswith("ASSISTANT: ") for r in rows)
    editor.nvim.command("%!cat")
    assert editor.lua(shown) == []


def test_send_and_stop_keys_are_buffer_local_and_configurable(editor, fake):
    fake.push(reply("Answer by key."), reply("word " * 40, chunk=4, hang_after=8))
    setup(editor, fake, opts={"keymaps": {"send": "<F6>", "stop": "<F7>"}})
    editor.open_chat("USER: by key\n")
    for lhs, command in (("<F6>", "SidekickSend"), ("<F7>", "SidekickStop")):
        m = editor.lua("return vim.fn.maparg(..., 'n', false, true)", lhs)
        assert m["buffer"] == 1 and command in m["rhs"]
        assert m["desc"].startswith("sidekick_tools: ")  # "sidekick" is another plugin
    feed(editor, "<F6>")
    editor.wait_text("ASSISTANT: Answer by key.")
    wait_replies(editor, 1)
    assert editor.lines()[-1] == "USER: "
    editor.nvim.command("call setline('$', 'USER: long one')")
    feed(editor, "<F6>")
    editor.wait_text("word word")
    feed(editor, "<F7>")
    editor.wait_text("```sidekick stopped")
    # not in other buffers
    editor.nvim.command("enew")
    assert editor.lua("return vim.fn.maparg('<F6>', 'n')") == ""


def test_send_and_stop_keys_can_be_turned_off(editor, fake):
    setup(editor, fake, opts={"keymaps": {"send": False}})
    editor.open_chat("USER: hi\n")
    assert editor.lua("return vim.fn.maparg('<leader>ss', 'n')") == ""
    stop = editor.lua("return vim.fn.maparg('<leader>sx', 'n', false, true)")
    assert stop["buffer"] == 1 and "SidekickStop" in stop["rhs"]


# --- :SidekickChat ------------------------------------------------------------------------


def chat_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.sidekick.md"))


def test_sidekick_chat_opens_a_new_chat_under_chat_dir(editor, fake, tmp_path):
    chats = tmp_path / "chats" / "nested"
    setup(editor, fake, dir=str(chats))
    editor.nvim.command("SidekickChat")
    first = chat_files(chats)
    assert len(first) == 1
    path = first[0]
    assert path.read_text() == "---\nmodel: fake/test-model\n---\nUSER: \n"
    assert editor.nvim.current.buffer.name == str(path)
    assert editor.lines() == ["---", "model: fake/test-model", "---", "USER: "]
    row, col = editor.nvim.current.window.cursor
    assert row == 4 and col >= len("USER:")
    # a chat buffer: its keys are there
    assert editor.lua("return vim.fn.maparg('<leader>ss', 'n', false, true).buffer") == 1
    # with a model: another new file, that model in its front matter
    editor.nvim.command("SidekickChat local/llama")
    files = chat_files(chats)
    assert len(files) == 2
    second = next(p for p in files if p != path)
    assert second.read_text() == "---\nmodel: local/llama\n---\nUSER: \n"
    assert path.read_text() == "---\nmodel: fake/test-model\n---\nUSER: \n"


def test_sidekick_chat_never_overwrites_a_file(editor, fake, tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    setup(editor, fake, dir=str(chats))
    # the names of this minute and the next are taken already
    now = datetime.datetime.now()
    taken = {}
    for t in (now, now + datetime.timedelta(minutes=1)):
        stamp = t.strftime("%Y-%m-%d-%H%M")
        for name in (stamp, stamp + "-2"):
            path = chats / f"{name}.sidekick.md"
            path.write_text(f"USER: keep {name}\n")
            taken[path] = path.read_text()
    editor.nvim.command("SidekickChat")
    new = [p for p in chat_files(chats) if p not in taken]
    assert len(new) == 1
    assert new[0].name.endswith("-3.sidekick.md")
    assert new[0].read_text().startswith("---\nmodel: fake/test-model\n")
    for path, text in taken.items():
        assert path.read_text() == text


def test_sidekick_chat_leaves_no_file_when_it_cannot_open_it(editor, fake, tmp_path):
    chats = tmp_path / "chats"
    setup(editor, fake, dir=str(chats))
    editor.nvim.command("set nohidden")
    editor.open_chat("USER: unsaved\n")
    editor.nvim.command("call setline(1, 'USER: changed, not saved')")
    editor.nvim.command("SidekickChat")
    assert "E37" in errors(editor)[-1] or "No write" in errors(editor)[-1]
    assert chat_files(chats) == []
    assert editor.lines() == ["USER: changed, not saved"]


@pytest.mark.parametrize("kind", ["cannot be created", "is a file"])
def test_sidekick_chat_says_an_unusable_chat_dir_with_its_option(editor, fake, tmp_path, kind):
    if kind == "is a file":
        chats = tmp_path / "chats-file"
        chats.write_text("not a directory\n")
        reason = "ENOTDIR: not a directory"
    else:
        chats = Path("/proc/sidekick_chats")  # no directory can be made under /proc
        reason = "ENOENT: no such file or directory"
    setup(editor, fake, dir=str(chats))
    before = editor.nvim.current.buffer.number
    editor.nvim.command("SidekickChat")
    said = editor.notifications()
    assert len(said) == 1, said
    assert said[0].startswith(f"sidekick_tools: chat.dir {chats} cannot be used: {reason}")
    assert "E739" not in said[0]
    assert editor.nvim.current.buffer.number == before


def test_sidekick_chat_default_dir_is_under_stdpath_data(editor, fake):
    setup(editor, fake)
    editor.nvim.command("SidekickChat")
    data = Path(editor.lua("return vim.fn.stdpath('data')"))
    files = chat_files(data / "sidekick_tools" / "chats")
    assert len(files) == 1
    assert editor.nvim.current.buffer.name == str(files[0])


def test_sidekick_chat_refuses_an_unknown_provider(editor, fake, tmp_path):
    chats = tmp_path / "chats"
    setup(editor, fake, dir=str(chats))
    editor.nvim.command("SidekickChat nosuch/model-x")
    assert not chats.exists() or not chat_files(chats)
    said = errors(editor)[-1]
    assert 'no provider "nosuch"' in said
    assert "configured: fake, local" in said
    editor.nvim.command("SidekickChat no-slash")
    assert "is not provider/model" in errors(editor)[-1]
    assert not chats.exists() or not chat_files(chats)


def test_completion_offers_the_configured_models(editor, fake):
    setup(editor, fake)
    for command in ("SidekickChat", "SidekickModel"):
        got = editor.lua("return vim.fn.getcompletion(..., 'cmdline')", command + " ")
        assert got == ["fake/test-model", "fake/small", "fake/large", "local/llama"]
        got = editor.lua("return vim.fn.getcompletion(..., 'cmdline')", command + " local/")
        assert got == ["local/llama"]


def test_a_models_list_must_hold_names(editor):
    said = setup_errors(editor, {"chat": {"providers": {"x": {"kind": "openai", "models": [1]}}}})
    assert any("chat.providers.x.models must be a list of model names" in x for x in said), said


@pytest.mark.parametrize("url", ["htp:/nonsense", "127.0.0.1:34945/v1", 8080])
def test_a_base_url_must_be_an_http_url(editor, url):
    """A base_url with no http:// or https:// was taken, and its first send said
    "the connection broke before the reply was complete", as if one had been made."""
    said = setup_errors(editor, {"chat": {"providers": {"x": {"kind": "openai", "base_url": url}}}})
    want = "chat.providers.x.base_url must be an http:// or https:// URL"
    assert any(want in line for line in said), said


def test_setup_warns_of_a_provider_kind_it_does_not_speak(editor):
    """A misspelt `kind` was said by :checkhealth only: setup() took it, and the
    first sign of it was a send failing. It is a warning (the other providers
    work), naming the provider and the kinds there are."""
    said = editor.lua(
        SETUP_SAID,
        {
            "chat": {
                "model": "good/m",
                "providers": {
                    "good": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
                    "typo": {"kind": "antropic"},
                    "anthropic": {},  # no kind: its name is its kind
                    "nameless": {},
                },
            }
        },
    )[2]
    warnings = [msg for msg, level in said if level == 3]
    assert [msg for msg, level in said if level == 4] == []
    assert len(warnings) == 1, said
    assert warnings[0].split("\n") == [
        "sidekick_tools: setup(): chat.providers.nameless.kind is nil, not a protocol the "
        'plugin speaks ("anthropic" or "openai")',
        'chat.providers.typo.kind is "antropic", not a protocol the plugin speaks '
        '("anthropic" or "openai") (:h sidekick_tools-chat-providers)',
    ]
    # the providers are kept: the good one is in force
    assert editor.lua("return require('sidekick_tools.config').current.chat.model") == "good/m"


def test_setup_warns_of_a_model_whose_provider_is_not_configured(editor):
    """Providers configured and chat.model left at its default (an "anthropic/"
    model): the first sign was :SidekickChat or :SidekickSend failing. setup()
    now says it, as a warning (a chat's front matter may name a configured model),
    and a model whose provider is there is not warned of."""
    local = {"local_": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}
    said = editor.lua(SETUP_SAID, {"chat": {"providers": local}})[2]
    assert [msg for msg, level in said if level == 4] == []
    assert [msg for msg, level in said if level == 3] == [
        'sidekick_tools: setup(): chat.model is "anthropic/claude-sonnet-4-5", but '
        'chat.providers has no "anthropic" (configured: local_): new chats and chats '
        "without a model in their front matter cannot send (:h sidekick_tools-chat-providers)"
    ]
    said = editor.lua(SETUP_SAID, {"chat": {"providers": local, "model": "local_/llama"}})[2]
    assert said == []


# --- :SidekickModel ------------------------------------------------------------------------


def test_sidekick_model_shows_the_chat_model_and_where_it_comes_from(editor, fake):
    setup(editor, fake)
    editor.open_chat("USER: hi\n")
    editor.nvim.command("SidekickModel")
    said = editor.notifications()[-1]
    assert "fake/test-model" in said and "chat.model" in said
    editor.open_chat("---\nmodel: local/llama\n---\nUSER: hi\n", name="other.sidekick.md")
    editor.nvim.command("SidekickModel")
    said = editor.notifications()[-1]
    assert "local/llama" in said and "front matter" in said


def test_sidekick_model_sets_the_front_matter_in_one_undo_step(editor, fake):
    fake.push(reply("Small model here."))
    setup(editor, fake)
    original = ["USER: which model?"]
    editor.open_chat("\n".join(original) + "\n")
    editor.nvim.command("SidekickModel fake/small")
    assert editor.lines() == ["---", "model: fake/small", "---", *original]
    editor.nvim.command("undo")
    assert editor.lines() == original
    editor.nvim.command("redo")
    # a front matter with other keys: only the model line changes
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, 0, 3, false,"
        " { '---', 'max_tokens: 100', 'model: \"fake/small\"', '---' })"
    )
    editor.nvim.command("SidekickModel fake/large")
    assert editor.lines()[:4] == ["---", "max_tokens: 100", "model: fake/large", "---"]
    editor.nvim.command("undo")
    assert editor.lines()[2] == 'model: "fake/small"'
    # the model the command set is the one the request names
    editor.nvim.command("SidekickModel fake/small")
    editor.nvim.command("SidekickSend")
    editor.wait_text("ASSISTANT: Small model here.")
    assert fake.requests[0].json["model"] == "small"


def test_sidekick_model_adds_a_model_line_to_a_front_matter_without_one(editor, fake):
    setup(editor, fake)
    editor.open_chat("---\nmax_tokens: 50\n---\nUSER: hi\n")
    editor.nvim.command("SidekickModel local/llama")
    assert editor.lines() == ["---", "model: local/llama", "max_tokens: 50", "---", "USER: hi"]


def test_sidekick_model_refuses_an_unknown_provider(editor, fake):
    setup(editor, fake)
    editor.open_chat("USER: hi\n")
    editor.nvim.command("SidekickModel elsewhere/gpt")
    said = errors(editor)[-1]
    assert 'no provider "elsewhere"' in said and "configured: fake, local" in said
    assert editor.lines() == ["USER: hi"]


@pytest.mark.parametrize("name", ["hello.py", "notes.md"])
def test_sidekick_model_leaves_a_buffer_that_is_not_a_chat_alone(editor, fake, name):
    setup(editor, fake)
    path = editor.workdir / name
    path.write_text("print('hello')\n")
    editor.nvim.command(f"edit {path}")
    editor.nvim.command("SidekickModel fake/small")
    assert editor.lines() == ["print('hello')"]
    assert editor.lua("return vim.bo.modified") is False
    said = errors(editor)
    assert len(said) == 1, said
    assert said[0].startswith("sidekick_tools: this buffer is not a chat (a *.sidekick.md file)")
    assert "nothing was changed" in said[0] and "now uses" not in said[0]
    # without a model: no chat here, and what a new one would use
    editor.nvim.command("SidekickModel")
    said = errors(editor)
    assert len(said) == 2, said
    assert said[1] == (
        "sidekick_tools: this buffer is not a chat (a *.sidekick.md file); "
        ":SidekickChat opens one using fake/test-model (chat.model)"
    )
