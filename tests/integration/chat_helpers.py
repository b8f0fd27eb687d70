"""Pointing a test's Neovim at the fake provider (tests/fake_provider)."""

from __future__ import annotations

from typing import Any


def use_fake(editor: Any, fake: Any, key: str, kind: str = "anthropic", **opts: Any) -> None:
    """setup() with one provider, "fake", on `fake`'s loopback URL for `kind`, its
    key read from $FAKE_KEY (set to `key`); `chat` keys and other options in `opts`."""
    url = fake.anthropic_url if kind == "anthropic" else fake.openai_url
    editor.lua("vim.env.FAKE_KEY = ...", key)
    chat = {
        "model": "fake/test-model",
        "providers": {"fake": {"kind": kind, "base_url": url, "api_key": "env:FAKE_KEY"}},
        **opts.pop("chat", {}),
    }
    editor.setup(chat=chat, **opts)


def send(editor: Any) -> Any:
    """:SidekickSend through the Lua API; its answer."""
    return editor.lua("return require('sidekick_tools').send()")


def wait_replies(editor: Any, count: int) -> None:
    """Until `count` replies of the current chat have ended: each shows its token
    usage on its ASSISTANT: line when its stream is over (the fake sends usage), and
    only then does :SidekickSend take the next message."""
    from tests.conftest import wait_for

    ns = "vim.api.nvim_create_namespace('sidekick_tools_usage')"
    marks = f"return #vim.api.nvim_buf_get_extmarks(0, {ns}, 0, -1, {{}})"
    wait_for(lambda: editor.lua(marks) >= count)


def usage_rows(editor: Any) -> list[int]:
    """The rows (0-based) that show a reply's token usage in the current chat."""
    ns = "vim.api.nvim_create_namespace('sidekick_tools_usage')"
    return editor.lua(
        "local rows = {}\n"
        f"for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, {ns}, 0, -1, {{}})) do\n"
        "  table.insert(rows, m[2])\n"
        "end\n"
        "return rows"
    )


def mid_stream(editor: Any, lua: str, ended: int = 0) -> bool:
    """Run the Lua code `lua` in Neovim while the reply streams, in one request:
    only if no more than `ended` replies have ended (shown their token usage).
    False when the reply had ended first (a machine too slow for the test: the
    caller skips, it proves nothing then)."""
    ns = "vim.api.nvim_create_namespace('sidekick_tools_usage')"
    return editor.lua(
        f"if #vim.api.nvim_buf_get_extmarks(0, {ns}, 0, -1, {{}}) > {int(ended)} then\n"
        "  return false\n"
        f"end\n{lua}\nreturn true"
    )


def edit_mid_stream(editor: Any, lua: str, ended: int = 0) -> None:
    """`mid_stream`, then wait for that reply to end; the test is skipped,
    saying why, when the reply had ended before the edit (it proves nothing)."""
    import pytest

    if not mid_stream(editor, lua, ended):
        pytest.skip("the reply ended before the edit: this machine was too slow to test it")
    wait_replies(editor, ended + 1)
