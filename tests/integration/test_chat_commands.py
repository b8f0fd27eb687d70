"""The chat loop's commands and keys in a real headless Neovim (DESIGN §6, §10):
:SidekickSend and :SidekickStop with their chat-buffer keys, against the fake
provider on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.fake_provider import ThreadedFakeProvider, reply

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
                },
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
    wait_for(lambda: editor.lines()[-1] == "USER: ")
    assert fake.requests[0].json["model"] == "test-model"
    # the second reply hangs mid-stream until :SidekickStop closes the connection
    editor.nvim.command("call setline('$', 'USER: and more')")
    editor.nvim.command("SidekickSend")
    editor.wait_text("Part one. Part one.")
    editor.nvim.command("SidekickStop")
    editor.wait_text("```sidekick stopped")
    wait_for(lambda: fake.requests[1].disconnected)


def test_send_and_stop_keys_are_buffer_local_and_configurable(editor, fake):
    fake.push(reply("Answer by key."), reply("word " * 40, chunk=4, hang_after=8))
    setup(editor, fake, opts={"keymaps": {"send": "<F6>", "stop": "<F7>"}})
    editor.open_chat("USER: by key\n")
    for lhs, command in (("<F6>", "SidekickSend"), ("<F7>", "SidekickStop")):
        m = editor.lua("return vim.fn.maparg(..., 'n', false, true)", lhs)
        assert m["buffer"] == 1 and command in m["rhs"]
    feed(editor, "<F6>")
    editor.wait_text("ASSISTANT: Answer by key.")
    wait_for(lambda: editor.lines()[-1] == "USER: ")
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
