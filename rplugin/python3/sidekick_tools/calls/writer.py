"""Writing results and completion notices into chat buffers.

Everything waiting for one buffer is written together, from one snapshot of
its text, in one edit: two hundred tasks ending together cost a few parses
and round trips, not six hundred. Each edit is computed from the host's
mirror at a changedtick and applied by Lua only if no text changed since (else
computed again from the newer text), so the user's typing is never
overwritten. A call is found by its id in the text; nothing is dropped in
silence: a result whose call is gone, or whose chat was closed, is said once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..chat import ToolCall
from ..chat.edits import notice_edit, result_span, user_line_edit
from ..chat.render import (
    clean_output,
    header_with_id,
    join_streams,
    result_lines,
    truncate_streams,
    truncate_tail,
)
from ..secrets_mask import mask
from ..tasks.model import ACTIVE, Task
from ..tools.base import ToolResult
from .context import CallContext
from .registry import Tracked

log = logging.getLogger(__name__)

# why a result cannot be written when its call's block is not in the chat
CALL_GONE = "its call is no longer in the chat (deleted, or its id changed)"
CALL_EDITED = "its call now asks for something else (edited while it ran)"


def call_lost(chat: Any, tracked: Tracked) -> str:
    """Why a followed call's block was not found in `chat`: gone, or a block
    with its id that reads otherwise (`Tracked.block_in` refuses it)."""
    return CALL_EDITED if chat.call_by_id(tracked.call_id) is not None else CALL_GONE


def saved_with_id(tracked: Tracked) -> bool:
    """Whether the chat's file has the call's block with its id: opened again,
    the call is found by it (a call run without one got it in the buffer
    only). Its header, not the id anywhere in the text."""
    if not os.path.isabs(tracked.chat):
        return False
    call_id = re.escape(tracked.call_id.encode())
    header = re.compile(rb"^`{3,}tool[ \t][^\n]*?[ \t]id=" + call_id + rb"(?=[ \t\r]|$)", re.M)
    try:
        with open(tracked.chat, "rb") as f:
            return header.search(f.read(64 << 20)) is not None
    except OSError:
        return False


# After writing into a buffer, the next batch for it waits until this much time
# has passed, so that a burst of results (many tasks ending together) is written
# in a few edits. A result after a quiet spell is written at once.
WRITE_GAP = 0.025


@dataclass
class Pending:
    """A result block (with its call) or a completion notice waiting to be written."""

    seq: int
    tracked: Tracked | None = None
    result: ToolResult | None = None
    lines: list[str] = field(default_factory=list)
    fut: Any = None
    after: Pending | None = None  # a notice: written only together with this result

    def resolve(self, written: bool) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(written)


def _shown_text(text: str) -> str:
    return mask(clean_output(text.encode("utf-8", "replace")))


class ResultWriter:
    def __init__(self, ctx: CallContext) -> None:
        self.ctx = ctx
        # Called once a call's result is in the buffer (its state follows).
        self.on_written: Callable[[Tracked, ToolResult], None] = lambda _t, _r: None
        # Called once a call's result cannot be written (said to the user).
        self.on_lost: Callable[[Tracked], None] = lambda _t: None
        self._queues: dict[int, list[Pending]] = {}
        self._writers: dict[int, asyncio.Future[None]] = {}
        self._written_at: dict[int, float] = {}  # loop time of the last batch, per buffer
        self._seq = itertools.count()

    # -- what callers use ----------------------------------------------------------
    def write(self, tracked: Tracked, result: ToolResult) -> asyncio.Future[bool]:
        """Write (or replace) the call's result block; True once it is in the
        buffer, False when it cannot be (said to the user)."""
        return self._enqueue(tracked.buf, self._result_item(tracked, result))

    def write_with_notice(
        self, tracked: Tracked, result: ToolResult, notice: list[str]
    ) -> asyncio.Future[list[bool]]:
        """A background task's final block and its completion notice, in one edit
        (the notice is not written when the block cannot be)."""
        final = self._result_item(tracked, result)
        written = self._enqueue(tracked.buf, final)
        notice_item = Pending(next(self._seq), lines=notice, after=final)
        noticed = self._enqueue(tracked.buf, notice_item)
        return asyncio.gather(written, noticed)

    def write_notice(self, buf: int, notice: list[str]) -> asyncio.Future[bool]:
        """A completion notice alone (its task's block was written before)."""
        return self._enqueue(buf, Pending(next(self._seq), lines=notice))

    def shown(
        self, result: ToolResult, task: Task | None, truncate: bool = True, lines: int | None = None
    ) -> str:
        """A result's body as the buffer shows it: clean, secrets masked (the raw
        log keeps them, 0600), no trailing newline, and for process output only
        the tail (`lines`, default `result.max_lines`; file tools bound their own
        results), each stream its share (`truncate_streams`), naming `task`'s
        logs where lines were cut."""
        keep = self.ctx.config.result_max_lines if lines is None else lines
        log_path, err_path = (task.log_path, task.stderr_path) if task is not None else (None, None)
        parts = result.streams
        if parts is None:
            text = _shown_text(result.body)
            if truncate:
                text = truncate_tail(text, keep, log_path)
        else:
            out, err, note = (_shown_text(part) for part in (parts.out, parts.err, parts.note))
            if truncate:
                cuts = (parts.out_cut, parts.err_cut)
                text = truncate_streams(out, err, note, keep, log_path, err_path, *cuts)
            else:
                text = join_streams(out, err, note)
        return text.rstrip("\n")

    def lost(self, tracked: Tracked, why: str, result: ToolResult | None = None) -> None:
        """A result that cannot be written: stop following the call, and say so once."""
        if tracked.done:
            return
        tracked.done = True
        self.ctx.registry.forget(tracked)
        status = result.status if result is not None else tracked.state
        what = f"call {tracked.call_id} ({tracked.tool})"
        where = ""
        if tracked.token:
            task = self.ctx.tasks.get(tracked.token)
            log_path = task.log_path if task is not None else None
            what = f"task {tracked.token} of {what}"
            where = f"; its output: {log_path}" if log_path else ""
        if status in ACTIVE:  # its state could not be written: the task goes on
            said = f"{what} runs on, but its state is not written: {why}; :SidekickTasks shows it"
        else:
            said = f"{what} ended {status}, not written: {why}"
            # its task's result: a background block's (reattached), or one
            # waited for, written as ran unseen (`unseen.write_unseen`)
            # (a halted task's is not: the call runs again)
            waited = result is not None and bool(result.fields.get("task"))
            if (tracked.background or waited and status != "cancelled") and "loaded" in why:
                if saved_with_id(tracked):
                    said += "; it is written when you open the chat again"
                else:  # closed unsaved, the id the call got when it ran with it
                    said += (
                        "; its chat was closed before the call's id was saved, so opened "
                        "again the call reads as never run"
                    )
        self.ctx.port.notify_user(f"sidekick_tools: {said}{where}", "warn")
        log.info("%s: result not written (%s)", what, why)
        self.on_lost(tracked)

    def delivered(self, tracked: Tracked, result: ToolResult) -> None:
        """A task's final result is in the chat: the store says so, so that the
        call is never given its task's result twice nor run again by mistake.
        Only the call's own task (its chat and call id) is marked."""
        token = result.fields.get("task")
        if not token or result.status in ACTIVE:
            return
        try:
            task = self.ctx.tasks.get(str(token))
            if task is not None and task.of_call(tracked.chat, tracked.call_id):
                self.ctx.tasks.mark_delivered(str(token))
        except Exception:
            log.warning("marking task %s delivered failed", token, exc_info=True)

    # -- the queue -----------------------------------------------------------------
    def _result_item(self, tracked: Tracked, result: ToolResult) -> Pending:
        token = result.fields.get("task")
        task = None  # its logs are named only when lines are cut: looked up only then
        if token and result.body.count("\n") >= self.ctx.config.result_max_lines:
            task = self.ctx.tasks.get(str(token))
        body = self.shown(result, task, truncate=bool(token))
        block = result_lines(tracked.call_id, result.status, result.fields, body)
        return Pending(next(self._seq), tracked=tracked, result=result, lines=block)

    def _enqueue(self, buf: int, item: Pending) -> asyncio.Future[bool]:
        item.fut = asyncio.get_event_loop().create_future()
        self._queues.setdefault(buf, []).append(item)
        if buf not in self._writers:
            self._writers[buf] = asyncio.ensure_future(self._drain(buf))
            self._writers[buf].add_done_callback(log_failure)
        return item.fut

    async def _drain(self, buf: int) -> None:
        try:
            loop = asyncio.get_event_loop()
            while self._queues.get(buf):
                # let whatever else ends this turn (or, in a burst, within the
                # write gap) join the batch
                last = self._written_at.get(buf)
                wait = 0.0 if last is None else last + WRITE_GAP - loop.time()
                await asyncio.sleep(max(0.0, wait))
                batch = self._queues.pop(buf)
                try:
                    later = await self._write_batch(buf, batch)
                except Exception:
                    log.exception("writing %d blocks into buffer %d failed", len(batch), buf)
                    later = []
                    for item in batch:
                        if item.tracked is not None:  # said, and the call is free again
                            why = "an internal error (see the host log)"
                            self.lost(item.tracked, why, item.result)
                        item.resolve(False)
                self._written_at[buf] = loop.time()
                if later:
                    self._queues.setdefault(buf, [])[:0] = later
        finally:
            self._writers.pop(buf, None)

    async def _write_batch(self, buf: int, batch: list[Pending]) -> list[Pending]:
        """Write a batch from one snapshot; returns items for a later batch."""
        attempt = 0
        while True:
            attempt += 1
            mirror = await self.ctx.port.mirror(buf)
            if mirror is None:  # unloaded: a reopened chat picks running blocks up again
                for item in batch:
                    if item.tracked is not None:
                        self.lost(item.tracked, "its chat is no longer loaded", item.result)
                    item.resolve(False)
                return []
            plan = await self._plan(buf, mirror, batch)
            if not plan.edits or await self.ctx.port.apply(
                buf, mirror.tick, plan.edits, anchors=plan.anchors
            ):
                plan.settle(self, batch)
                return plan.later
            # The text changed after the mirror's tick (the user is typing, or the
            # mirror has not seen the latest edit yet): compute again from the
            # newer text. Never given up on while the chat is loaded.
            if attempt % 200 == 0:
                log.warning("buffer %d: %d blocks still waiting to be written", buf, len(batch))
            await asyncio.sleep(min(0.1, 0.005 * (1 + attempt // 10)))

    async def _plan(self, buf: int, mirror: Any, batch: list[Pending]) -> _Batch:
        results = [i for i in batch if i.tracked is not None]
        marks = [i.tracked.mark for i in results]  # type: ignore[union-attr]
        rows = await self.ctx.port.mark_rows(buf, marks) if marks else {}
        chat = mirror.chat()
        plan = _Batch()
        ranked: list[tuple[int, int, list[str], int, int]] = []  # start, end, lines, rank, seq
        resolving: list[ToolCall] = []
        written_marks: set[int] = set()
        for item in results:
            tracked = item.tracked
            assert tracked is not None
            if tracked.mark in written_marks:
                plan.later.append(item)  # a second block for the same call: next batch
                continue
            row = rows.get(tracked.mark, -1)
            call = tracked.block_in(chat, row)
            if call is None:
                plan.gone.append(item)
                plan.why[item.seq] = call_lost(chat, tracked)
                continue
            if call.start_row != row:
                plan.anchors.append((tracked.mark, call.start_row))
            if call.call_id != tracked.call_id:  # its id was lost (`:e!`): given back
                header = header_with_id(mirror.lines[call.start_row], tracked.call_id)
                ranked.append((call.start_row, call.start_row + 1, [header], 2, item.seq))
            ranked.append((*result_span(call), item.lines, 2, item.seq))
            plan.written.append(item)
            written_marks.add(tracked.mark)
            resolving.append(call)
        tail = user_line_edit(chat, resolving, mirror.lines)
        if tail is not None:
            ranked.append((*tail, 0, 0))
        for item in batch:
            if item.tracked is not None or item.after in plan.gone:
                continue
            if item.after in plan.later:
                plan.later.append(item)  # its result waits for the next batch: so does it
            else:
                plan.notices.append(item)
                ranked.append((*notice_edit(chat, mirror.lines, item.lines), 1, item.seq))
        # bottom-up; at one row the USER: line first, then notices (the latest
        # first), then results, so they end up as results, notices, USER:
        ranked.sort(key=lambda e: (-e[0], e[3], -e[4]))
        plan.edits = [e[:3] for e in ranked]
        return plan


@dataclass
class _Batch:
    """What one attempt at writing a batch would do."""

    edits: list[tuple[int, int, list[str]]] = field(default_factory=list)
    anchors: list[tuple[int, int]] = field(default_factory=list)  # marks set again
    written: list[Pending] = field(default_factory=list)
    notices: list[Pending] = field(default_factory=list)
    gone: list[Pending] = field(default_factory=list)  # their call was deleted
    why: dict[int, str] = field(default_factory=dict)  # seq of a gone item: why
    later: list[Pending] = field(default_factory=list)

    def settle(self, writer: ResultWriter, batch: list[Pending]) -> None:
        """The edit is in the buffer: resolve every item of the batch."""
        for item in self.gone:
            assert item.tracked is not None
            writer.lost(item.tracked, self.why.get(item.seq, CALL_GONE), item.result)
            item.resolve(False)
        for item in self.written:
            writer.delivered(item.tracked, item.result)  # type: ignore[arg-type]
            writer.on_written(item.tracked, item.result)  # type: ignore[arg-type]
            item.resolve(True)
        for item in batch:
            if item.tracked is None and item not in self.later:
                item.resolve(item in self.notices)


def log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("background work failed", exc_info=fut.exception())
