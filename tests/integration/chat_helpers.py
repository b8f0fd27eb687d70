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
