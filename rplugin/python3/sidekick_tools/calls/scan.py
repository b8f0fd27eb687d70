"""The state of every call of a chat, as its text says it, for Lua to draw.

A change to a chat is scanned a moment later (typing is debounced): the calls
no host follows get their state from the text (chat/states.py); the followed
ones get their header row, so a mark that saving, reloading or a formatter
dropped is set again. Nothing is sent when nothing a diagnostic shows changed,
unless the change went over a call's row: a formatter that rewrites every line
moves every mark, Neovim's diagnostics' own included, to the top (``rewritten``:
Lua then draws them again where they belong).
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import tools
from ..chat import ToolCall
from ..chat.edits import asks_the_same
from ..chat.states import names_task, scan_items, text_state
from .registry import CallRegistry, Tracked

SCAN_DELAY = 0.15  # seconds after the last change


def call_problem(call: ToolCall) -> str | None:
    """What is wrong with a call's text or its parameters, if anything."""
    return call.error or tools.check_call(call.tool, call.params or {})


class DiagnosticScan:
    def __init__(self, port: Any, registry: CallRegistry) -> None:
        self.port = port
        self.registry = registry
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._sent: dict[int, Any] = {}  # last scan sent (items, anchors), per buffer
        # Rows of the call headers with a state each buffer's last scan found: an
        # edit over one of them (a formatter rewriting the buffer) may have moved
        # its extmarks, so the next scan sends the rows to set the marks again.
        self._call_rows: dict[int, list[int]] = {}  # sorted
        self._touched: set[int] = set()
        # ids of the calls of each buffer that ran in this session and were let
        # go because an undo took their result away: a redo brings their ✓ back
        self._ran: dict[int, set[str]] = {}
        # running blocks of each buffer that name a task this host does not
        # follow, with why (a forged or copied block): shown as such
        self.unfollowed: dict[int, dict[str, tuple[str, str]]] = {}
        # called with a buffer whose text holds a running block nobody looked at
        # yet (an undo or a reload brought it back), and whether the buffer was
        # read anew since its last scan: the calls follow it, as on opening
        self.on_running_block: Callable[[int, bool], None] | None = None
        self._reloaded: set[int] = set()  # buffers read anew since their last scan
        # called with each buffer scanned (its text settled after a change)
        self.on_scanned: Callable[[int], None] | None = None
        # called with a followed call whose block lost its id (`:e!` of a chat
        # saved before the id was added): the id goes back on the block
        self.on_id_lost: Callable[[Tracked], None] | None = None
        # called with a buffer and its calls whose results a reload took away
        # (written, not saved: `:e!`) and that can have them again
        # (`Tracked.final`, or their task's): written again, as DESIGN §5 promises
        self.on_result_reloaded: Callable[[int, list[Tracked]], None] | None = None
        # whether a reply streams into a buffer: its calls are not finished yet
        self.streaming: Callable[[int], bool] = lambda _buf: False
        port.on_buffer_change = self.changed

    def changed(self, buf: int, first: int, last: int) -> None:
        """Text changed in rows [first, last) (old numbering; last -1: to the end)."""
        rows = self._call_rows.get(buf)
        if rows and buf not in self._touched:  # a change event per edit: one look each
            i = bisect_left(rows, first)
            if i < len(rows) and (last < 0 or rows[i] < last):
                self._touched.add(buf)
        if first == 0 and last < 0:  # the whole text came anew (`:e!`)
            if buf in self._call_rows:  # scanned before: not the first text a host is given
                self._reloaded.add(buf)
            for tracked in self.registry.in_buffer(buf).values():
                tracked.reloaded = True
        self.schedule(buf)

    def undone(self, tracked: Tracked) -> None:
        """An ended call whose result the text no longer has (an undo, an edit):
        the text says what it is."""
        if tracked.state == "completed":
            self._ran.setdefault(tracked.buf, set()).add(tracked.call_id)
        self.registry.forget(tracked)

    def _can_write_again(self, tracked: Tracked) -> bool:
        """Whether a result a reload took away can be written again."""
        return (
            self.on_result_reloaded is not None
            and tracked.unsaved
            and (tracked.final is not None or bool(tracked.token))
        )

    def schedule(self, buf: int, delay: float = SCAN_DELAY) -> None:
        handle = self._timers.pop(buf, None)
        if handle is not None:
            handle.cancel()
        self._timers[buf] = asyncio.get_event_loop().call_later(delay, self.scan, buf)

    def scan(self, buf: int) -> None:
        self._timers.pop(buf, None)
        mirror = self.port.mirrors.get(buf)
        if mirror is None:  # not mirrored again yet after a reload: it is scanned then
            return
        reloaded = buf in self._reloaded
        self._reloaded.discard(buf)
        chat = mirror.chat()
        if self.on_scanned is not None:
            self.on_scanned(buf)
        followed = self.registry.in_buffer(buf)
        anchors = []
        blocks = Counter(c.call_id for c in chat.calls)
        again: list[Tracked] = []  # results a reload took away, to be written again
        twins: dict[int, Tracked] = {}  # those found by their text, by the block's row
        for call in chat.calls:
            tracked = followed.get(call.call_id or "")
            if tracked is None or blocks[call.call_id] > 1:
                # a repeated id names two blocks: which one is the call's, its
                # mark says (the block the text says is not necessarily its)
                continue
            if tracked.done and text_state(call) != tracked.state:
                if reloaded and call.result is None and self._can_write_again(tracked):
                    again.append(tracked)
                    anchors.append([tracked.mark, call.start_row])
                    continue
                self.undone(tracked)
                del followed[tracked.call_id]
                continue
            if tracked.body is not None and not asks_the_same(call, tracked.tool, tracked.body):
                # a block reusing its id (its own was deleted): another call,
                # shown as its text says, and its mark stays off it
                del followed[tracked.call_id]
                continue
            anchors.append([tracked.mark, call.start_row])
        if self.on_id_lost is not None:
            # Only a reload takes an id away from a block that stays (the file
            # as saved before the id was added); a block deleted by hand is gone,
            # and a block elsewhere reading the same is another call.
            for tracked in list(followed.values()):
                if tracked.call_id in blocks:
                    tracked.reloaded = False  # its block has its id: found by it
                    continue
                lost = tracked.reloaded and not tracked.done
                if lost and tracked.block_in(chat, -1):
                    self.on_id_lost(tracked)
                elif reloaded and tracked.done:
                    # its id and result went with the reload: the block reading
                    # as it did gets both back
                    block = tracked.block_in(chat, -1)
                    if (
                        block is not None
                        and block.result is None
                        and self._can_write_again(tracked)
                    ):
                        # the block's newest run (a call run again after a
                        # reload is a new call with the same text) is its own
                        other = twins.get(block.start_row)
                        if other is None or other.mark < tracked.mark:
                            if other is not None:
                                self.undone(other)
                            twins[block.start_row] = tracked
                        else:
                            self.undone(tracked)
                    elif block is not None and block.result is None:
                        self.undone(tracked)  # its ✓ is no longer the text's (saved before)
            again += twins.values()
        if again and self.on_result_reloaded is not None:
            self.on_result_reloaded(buf, again)
        known = self.unfollowed.get(buf) or {}
        if self.on_running_block is not None and any(
            c.call_id not in followed and c.call_id not in known and names_task(c)
            for c in chat.calls
        ):
            self.on_running_block(buf, reloaded)
        items = scan_items(
            chat, set(followed), call_problem, self.unfollowed.get(buf), self._ran.get(buf)
        )
        if self.streaming(buf):
            items = _unfinished_dropped(chat, items)
        self._call_rows[buf] = sorted({row for _, row in anchors} | {item["row"] for item in items})
        touched = buf in self._touched
        self._touched.discard(buf)
        if not touched and (items, anchors) == self._sent.get(buf):
            return  # typing inside a message changes no call's state: Neovim redraws nothing
        self._sent[buf] = (items, anchors)
        self.port.emit(
            {"type": "scan", "buf": buf, "items": items, "anchors": anchors, "rewritten": touched}
        )


def _unfinished_dropped(chat: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """While a reply streams, the calls of its message (the last assistant one)
    are not called broken: a call whose JSON is half in reads as malformed until
    its input is complete. Nor are they offered to run (▶): they are run or
    denied once the reply has ended. They are scanned again when it ends."""
    rows = {c.start_row for c in chat.unanswered()}
    return [i for i in items if not (i["row"] in rows and i["state"] in ("failed", "pending"))]
