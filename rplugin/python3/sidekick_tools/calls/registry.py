"""The calls this host follows, and the state each one is in.

A call is followed from the moment it is run (or its running block reopened)
until its final result is written. It is found by the extmark on its header
(`mark`), by its task's token, and by (chat, call id), so a task event finds
its call without scanning. Every state change is emitted to Lua as a `call`
event keyed by the mark; Lua draws it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from ..chat import ToolCall
from ..chat.edits import locate
from ..chat.parser import Chat
from ..tasks.model import ACTIVE


@dataclass
class Tracked:
    """A call this host follows, by its extmark."""

    buf: int
    mark: int
    call_id: str
    tool: str
    chat: str
    body: str | None = None  # its block's text when it started: found by it if its id is lost
    row: int = -1  # its header's row when it was marked
    reloaded: bool = False  # its chat was read anew (`:e!`): its block may have lost its id
    state: str = "pending"
    token: str | None = None
    background: bool = False  # its result block says running; the task ends later
    finishing: bool = False  # its background task ended; the final block is being written
    answering: bool = False  # its answer (a denial) is on its way to the buffer
    # queued behind the calls above it in one :SidekickRunTools: the user may
    # still run it at once or deny it (the batch then leaves it alone)
    waiting: bool = False
    # prepared to run or to be answered: from `prepare` on, no other command,
    # chain or loop takes the call, though its state is not running yet
    claimed: bool = False
    done: bool = False
    # its final result as written until the chat is saved (not kept past
    # FINAL_KEEP characters): a reload that takes it away (`:e!`) has it
    # written again
    final: Any = None
    unsaved: bool = False  # its final result is in the buffer, not yet in its file
    writing_again: bool = False  # that result is being written again

    def block_in(self, chat: Chat, row: int) -> ToolCall | None:
        """Its block in `chat` (`row`: its mark's, -1 when gone; see `locate`).
        Only after a reload is a block without an id that reads as it taken for
        it: else such a block is another call."""
        return locate(chat, self.call_id, row, self.tool, self.body, self.reloaded)

    @property
    def busy(self) -> bool:
        """Prepared, running, or answered and not yet written: not to be started
        or denied again (a call queued in a batch may still be)."""
        if self.done:
            return False
        return self.answering or not self.waiting and (self.claimed or self.state in ACTIVE)


class CallRegistry:
    def __init__(self, port: Any) -> None:
        self.port = port
        self.tracked: dict[tuple[int, str], Tracked] = {}
        self._by_token: dict[str, Tracked] = {}
        self._by_call: dict[tuple[str, str], Tracked] = {}  # (chat, call id)
        self._marks = itertools.count(1)

    def get(self, buf: int, call_id: str) -> Tracked | None:
        return self.tracked.get((buf, call_id))

    def in_buffer(self, buf: int) -> dict[str, Tracked]:
        """The followed calls of `buf`, by call id."""
        return {cid: t for (b, cid), t in self.tracked.items() if b == buf}

    def follow(
        self, buf: int, call_id: str, tool: str, chat: str, mark: int, body: str | None = None
    ) -> Tracked:
        """Follow a call, by the extmark `mark_for` gave it."""
        tracked = Tracked(buf=buf, mark=mark, call_id=call_id, tool=tool, chat=chat, body=body)
        self.tracked[(buf, call_id)] = tracked
        self._by_call[(chat, call_id)] = tracked
        return tracked

    def rename(self, buf: int, chat: str) -> list[str]:
        """The calls of `buf` belong to chat `chat` from now on (the buffer was
        saved under another name); the tokens of their tasks."""
        tokens = []
        for tracked in self.in_buffer(buf).values():
            if self._by_call.get((tracked.chat, tracked.call_id)) is tracked:
                del self._by_call[(tracked.chat, tracked.call_id)]
            tracked.chat = chat
            self._by_call[(chat, tracked.call_id)] = tracked
            if tracked.token:
                tokens.append(tracked.token)
        return tokens

    def new_mark(self) -> int:
        """A fresh extmark id (a reply's region takes one too)."""
        return next(self._marks)

    def mark_for(self, buf: int, call_id: str) -> int:
        """The extmark id a call has, or will have when followed."""
        old = self.tracked.get((buf, call_id))
        return old.mark if old else next(self._marks)

    def bind(self, tracked: Tracked, token: str | None) -> None:
        """The call follows task `token` from now on."""
        tracked.token = token
        if token:
            self._by_token[token] = tracked

    def forget(self, tracked: Tracked) -> None:
        """Stop following a call; Lua drops its state."""
        if self.tracked.get((tracked.buf, tracked.call_id)) is tracked:
            del self.tracked[(tracked.buf, tracked.call_id)]
        if tracked.token and self._by_token.get(tracked.token) is tracked:
            del self._by_token[tracked.token]
        if self._by_call.get((tracked.chat, tracked.call_id)) is tracked:
            del self._by_call[(tracked.chat, tracked.call_id)]
        self.port.emit({"type": "forget", "buf": tracked.buf, "mark": tracked.mark})

    def live(self, tracked: Tracked | None) -> Tracked | None:
        """`tracked` if it is still the call followed under its key, else None."""
        if tracked is not None and self.tracked.get((tracked.buf, tracked.call_id)) is tracked:
            return tracked
        return None

    def by_token(self, token: str) -> Tracked | None:
        return self.live(self._by_token.get(token))

    def for_task(self, task: Any) -> Tracked | None:
        """The followed call a task belongs to: by its token, else by (chat, call id)."""
        tracked = self.by_token(task.id)
        if tracked is not None and tracked.token == task.id:
            return tracked
        if not task.call_id:
            return None
        return self.live(self._by_call.get((task.chat, task.call_id)))

    def state(self, tracked: Tracked, state: str, **extra: Any) -> None:
        """Set a call's state and show it (extra: detail, started_at, progress...)."""
        tracked.state = state
        event = {"type": "call", "buf": tracked.buf, "mark": tracked.mark, "state": state}
        event["tool"] = tracked.tool
        event.update({k: v for k, v in extra.items() if v is not None})
        self.port.emit(event)
