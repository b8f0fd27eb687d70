"""A second client attached to a test's Neovim as a real UI (ext_messages).

Without a UI, Neovim answers a confirm() dialog with its default at once; with
one attached it waits for the user's key, as in a terminal. The messages the
UI is shown (the dialog's text included) are recorded, so a test can read what
the user was asked and then answer with `editor.nvim.input`."""

from __future__ import annotations

import threading
from typing import Any

import pynvim

from tests.conftest import wait_for


class Screen:
    def __init__(self, editor: Any, width: int = 120, height: int = 40) -> None:
        self.messages: list[tuple[str, str]] = []  # (kind, text) of each msg_show
        self._lock = threading.Lock()
        address = editor.lua("return vim.fn.serverstart()")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                ui = pynvim.attach("socket", path=address)
                ui.ui_attach(width, height, rgb=True, ext_linegrid=True, ext_messages=True)
            except BaseException as exc:  # surfaced by the constructor below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                ui.run_loop(lambda _name, _args: None, self._on_notification)
            except (EOFError, OSError):
                pass  # Neovim quit at the end of the test

        threading.Thread(target=run, daemon=True).start()
        assert ready.wait(10), "the UI client never attached"
        if failure:
            raise failure[0]

    def _on_notification(self, name: str, args: list[Any]) -> None:
        if name != "redraw":
            return
        for event in args:
            if event[0] != "msg_show":
                continue
            for item in event[1:]:
                kind, content = item[0], item[1]
                text = "".join(str(chunk[1]) for chunk in content)
                with self._lock:
                    self.messages.append((kind, text))

    def shown(self, kind: str) -> list[str]:
        with self._lock:
            return [text for k, text in self.messages if k == kind]

    def dialog(self, n: int = 1, timeout: float = 20) -> str:
        """The text of the n-th confirm() dialog shown, once it has been shown."""

        def nth() -> str | None:
            dialogs = self.shown("confirm")
            return dialogs[n - 1] if len(dialogs) >= n else None

        return wait_for(nth, timeout)
