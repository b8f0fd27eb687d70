"""Finding a chat's calls and marking them: the id a hand-written call gets,
the extmark that follows a call's header through edits, and the call's block
found again by mark and id (never by row alone: an earlier block may carry the
same id). Every edit is applied at the mirror's changedtick, tried again
while the buffer moves on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..chat import ToolCall
from ..chat.render import header_with_id, new_call_id
from .context import CallContext
from .registry import Tracked
from .writer import call_lost

RETRIES = 50  # a call's id and mark, while the mirror catches up with the buffer

Found = tuple[Any, ToolCall]  # (mirror, the call as it reads there)


class UserError(Exception):
    """A problem the user can act on; its message is shown as it is."""


class CallMarks:
    def __init__(self, ctx: CallContext, writer: Any) -> None:
        self.ctx = ctx
        self.writer = writer

    async def mirror(self, buf: int) -> Any:
        mirror = await self.ctx.port.mirror(buf)
        if mirror is None:
            raise UserError(f"sidekick_tools: buffer {buf} is not loaded")
        return mirror

    async def call_at(self, buf: int, row: int, hint: str) -> Found:
        """The call whose block holds ``row``, with the mirror it was read in; a
        UserError that ends in ``hint`` (what the block is for) when there is none."""
        mirror = await self.mirror(buf)
        call = mirror.chat().call_at(row)
        if call is None:
            raise UserError(
                f"sidekick_tools: no tool call at line {row + 1}. Put the cursor on a "
                f"```tool block {hint}."
            )
        return mirror, call

    def busy(self, buf: int, call: ToolCall) -> Tracked | None:
        """The call's follower, when the call runs or its answer is on its way
        (a pending block, for a moment): it must not start again, nor be denied."""
        tracked = self.ctx.registry.get(buf, call.call_id or "")
        return tracked if tracked is not None and tracked.busy else None

    def coming(self, buf: int, call: ToolCall) -> bool:
        """The call's result is on its way without the user: it runs, its
        answer is being written, or it waits its turn in a :SidekickRunTools
        batch the user agreed to. A block whose id is broken (a repeat of a
        running call's id) is never that call."""
        if call.structural:
            return False
        tracked = self.ctx.registry.live(self.ctx.registry.get(buf, call.call_id or ""))
        return tracked is not None and (tracked.busy or tracked.waiting and not tracked.done)

    def refuse_busy(self, buf: int, call: ToolCall) -> None:
        tracked = self.busy(buf, call)
        if tracked is None:
            return
        if tracked.answering:
            raise UserError(f"sidekick_tools: {call.call_id} is already denied")
        what = f" as task {tracked.token}" if tracked.token else ""
        if tracked.finishing or self._ended(tracked.token):
            raise UserError(
                f"sidekick_tools: {call.call_id} has just ended{what}; its result is being written"
            )
        raise UserError(
            f"sidekick_tools: {call.call_id} is already running{what}; :SidekickHalt stops it"
        )

    def _ended(self, token: str | None) -> bool:
        """Whether task `token` has ended (its result not written yet)."""
        task = self.ctx.tasks.get(token) if token and self.ctx.tasks is not None else None
        return task is not None and task.terminal

    async def prepare(self, buf: int, call: ToolCall) -> Tracked | None:
        """Give the call an id (if hand-written without one) and an extmark; follow it."""
        return (await self.prepare_all(buf, [call]))[0]

    async def prepare_all(self, buf: int, calls: list[ToolCall]) -> list[Tracked | None]:
        """`prepare` for each of `calls`, in one edit of the buffer: a reply of
        thousands of calls costs one request to Neovim, not one each. None for
        a call whose block is gone (or cannot be told apart), or taken."""
        rows = [call.start_row for call in calls]
        for _ in range(RETRIES):
            mirror = await self.mirror(buf)
            chat = mirror.chat()
            ids = _NewIds(chat, mirror.lines)
            edits: list[tuple[int, int, list[str]]] = []
            marks: list[tuple[int, int]] = []
            found: list[tuple[ToolCall, str, int, int] | None] = []
            for i, call in enumerate(calls):
                current = chat.call_at(rows[i])
                if current is None or current.start_row != rows[i] or not same_call(current, call):
                    # The text moved meanwhile (a result written above it): another
                    # block may sit on this row now, a duplicate of its id even.
                    current = find_again(chat, call)
                    if current is None:
                        found.append(None)
                        continue
                    rows[i] = current.start_row
                if current.result is not None and call.result is None:
                    # answered since it was chosen (a task that ran unseen, written
                    # as the chat was taken up again): run now, it would run twice
                    found.append(None)
                    continue
                row, call_id = rows[i], current.call_id
                if not call_id:
                    call_id = ids.give(row, edits)
                mark = self.ctx.registry.mark_for(buf, call_id)
                marks.append((mark, row))
                found.append((current, call_id, mark, row))
            if not marks:
                return [None] * len(calls)
            if await self.ctx.port.apply(buf, mirror.tick, edits, marks):
                return [self._follow(buf, mirror.name, f) if f else None for f in found]
            await asyncio.sleep(0.005)
        return [None] * len(calls)

    def _follow(self, buf: int, name: str, found: tuple[ToolCall, str, int, int]) -> Any:
        current, call_id, mark, row = found
        taken = self.ctx.registry.get(buf, call_id)
        if taken is not None and taken.busy:
            return None  # another command, the chain or the loop took it meanwhile
        tracked = self.ctx.registry.follow(buf, call_id, current.tool, name, mark, current.body)
        tracked.row = row
        tracked.claimed = True  # before anything else can look: no await since
        return tracked

    async def give_ids(self, buf: int) -> None:
        """Every pending call of the last assistant message gets an id."""
        for _ in range(RETRIES):
            mirror = await self.mirror(buf)
            chat = mirror.chat()
            message = chat.last_assistant()
            missing = [c for c in (message.calls if message else []) if c.pending and not c.call_id]
            if not missing:
                return
            ids = _NewIds(chat, mirror.lines)
            edits: list[tuple[int, int, list[str]]] = []
            for call in reversed(missing):
                ids.give(call.start_row, edits)
            if await self.ctx.port.apply(buf, mirror.tick, edits):
                return
            await asyncio.sleep(0.005)

    async def give_id_back(self, tracked: Tracked) -> None:
        """The followed call's block reads as it did but lost its id (`:e!` of
        the chat as saved before the id was added): it gets it back, so that
        the block shows the call's state and is not taken for a new call."""
        for _ in range(RETRIES):
            mirror = await self.mirror(tracked.buf)
            chat = mirror.chat()
            call = tracked.block_in(chat, -1)
            if call is None or call.call_id == tracked.call_id or tracked.done:
                return
            row = call.start_row
            edits = [(row, row + 1, [header_with_id(mirror.lines[row], tracked.call_id)])]
            if await self.ctx.port.apply(tracked.buf, mirror.tick, edits, [(tracked.mark, row)]):
                return
            await asyncio.sleep(0.005)

    async def find(self, tracked: Tracked) -> Found | None:
        """The call's current block; None when the block is gone (said to the user)."""
        mirror = await self.ctx.port.mirror(tracked.buf)
        if mirror is None:
            self.writer.lost(tracked, "its chat is no longer loaded")
            return None
        rows = await self.ctx.port.mark_rows(tracked.buf, [tracked.mark])
        call = tracked.block_in(mirror.chat(), rows.get(tracked.mark, -1))
        if call is None:
            self.writer.lost(tracked, call_lost(mirror.chat(), tracked))
            return None
        return mirror, call


def same_call(a: ToolCall, b: ToolCall) -> bool:
    """Whether two reads of a chat show the same call: its id, tool and text,
    and whether it is well formed (a later block repeating an id is not)."""
    return (a.call_id, a.tool, a.body, a.error is None) == (
        b.call_id,
        b.tool,
        b.body,
        b.error is None,
    )


def find_again(chat: Any, call: ToolCall) -> ToolCall | None:
    """`call`, read before, in `chat` as it reads now: the block with its id
    (or, without one, the only pending block of the same tool and text) that
    still reads the same; None when it changed or cannot be told apart."""
    if call.call_id:
        found = chat.call_by_id(call.call_id)
        return found if found is not None and same_call(found, call) else None
    twins = [c for c in chat.calls if c.pending and same_call(c, call)]
    return twins[0] if len(twins) == 1 else None


class _NewIds:
    """Ids for calls written without one, none taken in the chat: each given
    with the edit that writes it into the call's header."""

    def __init__(self, chat: Any, lines: list[str]) -> None:
        self._chat = chat
        self._lines = lines
        self._taken: set[str] | None = None  # looked up on the first id given

    def give(self, row: int, edits: list[tuple[int, int, list[str]]]) -> str:
        if self._taken is None:
            self._taken = {c.call_id for c in self._chat.calls if c.call_id}
        call_id = new_call_id(self._taken)
        self._taken.add(call_id)
        edits.append((row, row + 1, [header_with_id(self._lines[row], call_id)]))
        return call_id
