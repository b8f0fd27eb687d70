"""The host's mirror of a buffer against a scripted Neovim: the order in which
Neovim answers requests and sends a buffer's events is the test's to choose."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from sidekick_tools.nvim_port import NvimPort

BUF = 1
WITH_RESULT = ["ASSISTANT:", "```tool t id=e1", "{}", "```", "```result id=e1", "ok", "```"]
WITHOUT_RESULT = WITH_RESULT[:4]


class ScriptedNvim:
    """A Neovim whose answers wait in a queue until the test hands them over
    (`answer_next`): what happened to the buffer between a request's answer
    and the host reading it is the test's to say."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lines: list[str], tick: int) -> None:
        self.loop = loop
        self.lines = list(lines)
        self.tick = tick
        self.attached = False  # whether the host's channel gets this buffer's events
        self.asked: deque[Callable[[], None]] = deque()
        self.port: NvimPort | None = None

    def async_call(self, fn: Callable[[], None]) -> None:
        self.asked.append(fn)

    def request(self, method: str, *args: Any) -> Any:
        if method == "nvim_buf_attach":
            self.attached = True
            return True
        if method == "nvim_exec_lua" and "snapshot" in args[0]:
            return {"tick": self.tick, "lines": list(self.lines), "name": "/chat.sidekick.md"}
        raise AssertionError(f"unexpected request {method}")

    def answer_next(self) -> str:
        """Neovim answers the oldest request; the host has not read it yet."""
        self.asked.popleft()()
        return "asked" if self.asked else "all answered"

    def edit(self) -> None:
        """The result block deleted by hand: Neovim says so."""
        assert self.port is not None
        self.tick += 1
        if self.attached:
            gone = [BUF, self.tick, len(WITHOUT_RESULT), len(self.lines), [], False]
            self.port.on_notification("nvim_buf_lines_event", gone)
        self.lines = list(WITHOUT_RESULT)

    def undo_past_reload(self) -> None:
        """`u` `u` after `:e!`: the first undo (of the reload) sends the whole
        text and stops the buffer's events; the second goes unsaid."""
        assert self.port is not None
        self.tick += 1
        if self.attached:
            self.port.on_notification(
                "nvim_buf_lines_event",
                [BUF, self.tick, 0, len(self.lines), list(self.lines), False],
            )
            self.port.on_notification("nvim_buf_detach_event", [BUF])
        self.attached = False
        self.tick += 1
        self.lines = list(WITHOUT_RESULT)


async def settle() -> None:
    """Let the host's coroutines run until each waits on Neovim again."""
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.mark.parametrize("change", ["undo_past_reload", "edit"])
async def test_a_change_while_two_look_at_a_buffer_leaves_its_mirror_current(change):
    """Two parts of the host ask for a buffer's mirror at once (a chat reopened
    by `:e!` and the look at it again after the reload's detach). Neovim answers
    what they asked, then the text changes (an undo back past the reload, which
    stops the buffer's events; an edit) before the host has read the answers:
    the mirror ends as the text is, and Neovim sends it the buffer's changes."""
    nvim = ScriptedNvim(asyncio.get_running_loop(), WITH_RESULT, tick=9)
    port = NvimPort(nvim)
    nvim.port = port
    looks = [asyncio.ensure_future(port.mirror(BUF)) for _ in range(2)]
    await settle()
    undone = False
    while nvim.asked:
        if nvim.answer_next() == "all answered" and not undone:
            getattr(nvim, change)()  # before the host reads the last answer
            undone = True
        await settle()
    await asyncio.gather(*looks)
    assert undone
    mirror = await port.mirror(BUF)
    assert (mirror.lines, mirror.tick) == (WITHOUT_RESULT, nvim.tick)
    assert nvim.attached


class WipedNvim(ScriptedNvim):
    """A buffer wiped between the attach and the snapshot: the snapshot fails."""

    def request(self, method: str, *args: Any) -> Any:
        if method == "nvim_exec_lua" and "snapshot" in args[0]:
            raise RuntimeError("Invalid buffer id: 1")
        return super().request(method, *args)


async def test_a_failed_look_leaves_no_buffer_holding_its_events():
    """A look whose snapshot fails answers with the error; the buffer's events
    that come after it are not kept for a look that is over (they would pile up
    for as long as the buffer lives)."""
    nvim = WipedNvim(asyncio.get_running_loop(), WITH_RESULT, tick=9)
    port = NvimPort(nvim)
    nvim.port = port
    look = asyncio.ensure_future(port.mirror(BUF))
    await settle()
    while nvim.asked:
        nvim.answer_next()
        await settle()
    with pytest.raises(RuntimeError, match="Invalid buffer id"):
        await look
    for _ in range(3):
        nvim.edit()
    assert port._attaching == {}


class ReopenedNvim(ScriptedNvim):
    """A chat closed (`:bdelete`), then opened again (`:edit`): while it is
    unloaded, `nvim_buf_attach` answers False."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.loaded = False

    def request(self, method: str, *args: Any) -> Any:
        if method == "nvim_buf_attach" and not self.loaded:
            return False
        return super().request(method, *args)


async def test_a_chat_opened_while_a_look_finds_it_unloaded_is_looked_at_again():
    """A task of a closed chat ends: writing its result looks at the buffer,
    and Neovim answers that it is not loaded. The user opens the chat before
    the host has read that answer, and the chat's BufReadPost asks for its
    mirror: it gets the reopened buffer, not the answer of the look that was
    under way (the chat's running block was never followed, and its result
    never written)."""
    nvim = ReopenedNvim(asyncio.get_running_loop(), WITHOUT_RESULT, 9)
    port = NvimPort(nvim)
    nvim.port = port
    writing = asyncio.ensure_future(port.mirror(BUF))
    await settle()
    nvim.answer_next()  # not loaded; the host has not read it yet
    nvim.loaded = True  # :edit
    opened = asyncio.ensure_future(port.mirror(BUF))
    await settle()
    while nvim.asked:
        nvim.answer_next()
        await settle()
    assert await writing is None
    mirror = await opened
    assert mirror is not None and mirror.lines == WITHOUT_RESULT
    assert nvim.attached
