"""Run the tool calls of a chat buffer: find, consent, run, write back, chain.

Everything here is a coroutine on the host's loop. Buffer text comes from the
port's mirror; every edit is computed from the mirror at a changedtick and
applied by Lua only if the buffer is still at that tick (else recomputed), so
the user's typing is never overwritten.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from . import tools
from .chat import Chat, ToolCall, parse
from .chat.render import (
    clean_output,
    header_with_id,
    is_notice,
    new_call_id,
    notice_lines,
    result_lines,
    truncate_tail,
)
from .config import Config
from .tasks.model import is_token
from .tools._tasks import TERMINAL, status_of
from .tools.base import ToolContext, ToolResult
from .tools.policy import decide

log = logging.getLogger(__name__)

RESULT_STATUSES = ("running", "completed", "failed", "cancelled", "denied")
STRUCTURAL = ("Unclosed fence", "Duplicate id")  # errors the text itself must fix
RETRIES = 50
# After writing into a buffer, the next batch for it waits until this much time
# has passed, so that a burst of results (many tasks ending together) is written
# in a few edits, each one parse, one round trip and one redraw. A result after
# a quiet spell is written at once.
WRITE_GAP = 0.025


class UserError(Exception):
    """A problem the user can act on; its message is shown as it is."""


@dataclass
class Tracked:
    """A call this host follows, by its extmark."""

    buf: int
    mark: int
    call_id: str
    tool: str
    chat: str
    state: str = "pending"
    token: str | None = None
    background: bool = False  # its result block says running; the task ends later
    finishing: bool = False  # its background task ended; the final block is being written
    done: bool = False


@dataclass
class _Pending:
    """A result block (with its call) or a completion notice waiting to be written."""

    seq: int
    tracked: Tracked | None = None
    result: ToolResult | None = None
    lines: list[str] = field(default_factory=list)
    fut: Any = None
    after: _Pending | None = None  # a notice: written only together with this result

    def resolve(self, written: bool) -> None:
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(written)


class CallRunner:
    def __init__(self, port: Any, tasks: Any, config: Config) -> None:
        self.port = port
        self.tasks = tasks
        self.config = config
        self.tracked: dict[tuple[int, str], Tracked] = {}
        # Indexes over `tracked`, so that a task event finds its call without a scan.
        self._by_token: dict[str, Tracked] = {}
        self._by_call: dict[tuple[str, str], Tracked] = {}  # (chat, call id)
        self._marks = itertools.count(1)
        self._scan_timers: dict[int, asyncio.TimerHandle] = {}
        self._scanned: dict[int, Any] = {}  # last scan sent (items, anchors), per buffer
        self._bg: set[asyncio.Task[Any]] = set()
        # Result blocks and notices waiting to be written, per buffer. One writer per
        # buffer takes everything queued and writes it from one snapshot in one edit:
        # two hundred tasks ending together cost a few parses, not six hundred.
        self._queues: dict[int, list[_Pending]] = {}
        self._writers: dict[int, asyncio.Future[None]] = {}
        self._written_at: dict[int, float] = {}  # loop time of the last batch, per buffer
        self._seq = itertools.count()
        tasks.subscribe(self._on_task_event)
        # Rows of the tracked call headers each buffer's last scan found: an edit
        # over one of them (a formatter rewriting the buffer) may have dropped its
        # extmark, so the next scan sends the rows to set the marks again.
        self._anchor_rows: dict[int, set[int]] = {}
        self._touched: set[int] = set()
        # running blocks of each buffer that name a task this host does not follow,
        # with why (a forged or copied block): shown as such, never rewritten
        self._unfollowed: dict[int, dict[str, str]] = {}
        port.on_buffer_change = self._on_buffer_change

    # -- entry points (called by host.py) ----------------------------------------
    async def run_tool(
        self, buf: int, row: int, cwd: str, gate: asyncio.Future[None] | None = None
    ) -> dict[str, Any]:
        mirror = await self._mirror(buf)
        chat = mirror.chat()
        call = chat.call_at(row)
        if call is None:
            raise UserError(
                f"sidekick_tools: no tool call at line {row + 1}. Put the cursor on a "
                "```tool block of an ASSISTANT message."
            )
        self._refuse_live(buf, call)
        tracked = await self._prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        # The mirror has seen _prepare's edit (Neovim sends a buffer's line events
        # before the reply to the request that made them): the call as the user
        # asked for it is at hand, with no round trip to look it up by its mark.
        # By row, not by id: a duplicate id names another block too.
        current = mirror.chat().call_at(call.start_row)
        same = current is not None and current.start_row == call.start_row
        found = (mirror, current) if same and current.call_id == tracked.call_id else None
        self._spawn(self._chain(tracked, cwd, chain=True, found=found, gate=gate))
        return {"id": tracked.call_id, "tool": tracked.tool}

    async def run_tools(
        self, buf: int, cwd: str, gate: asyncio.Future[None] | None = None
    ) -> dict[str, Any]:
        mirror = await self._mirror(buf)
        chat = mirror.chat()
        message = chat.last_assistant()
        pending = [c for c in (message.calls if message else []) if c.pending]
        if not pending:
            raise UserError("sidekick_tools: no pending tool call in the last assistant message")
        ids: list[str] = []
        first: Tracked | None = None
        for call in pending:
            tracked = await self._prepare(buf, call)
            if tracked is not None:
                ids.append(tracked.call_id)
                first = first or tracked
        self._spawn(self._run_ids(buf, ids, cwd, gate))
        return {"count": len(ids), "ids": ids}

    async def plan(self, buf: int, cwd: str) -> list[dict[str, Any]]:
        """What `run_tools` would do with each pending call of the last assistant
        message: ``verdict`` "approve" (the policy runs it by itself), "ask" (it
        needs the user's consent) or "deny" (the policy refuses it); a broken
        call says its ``problem``. :SidekickRunTools asks once for the "ask" ones."""
        mirror = await self._mirror(buf)
        chat = mirror.chat()
        message = chat.last_assistant()
        out = []
        for call in message.calls if message else []:
            if not call.pending:
                continue
            problem = call.error or tools.check_call(call.tool, call.params or {})
            ctx = self._context(cwd, mirror.name, call.call_id or "")
            verdict = "ask"
            if not problem:
                answer = await self._ask_policy(call, ctx)
                verdict = decide(call.tool, call.params or {}, ctx, answer)
            out.append(
                {
                    "id": call.call_id or "",
                    "tool": call.tool,
                    "row": call.start_row,
                    "verdict": verdict,
                    "what": describe(call),
                    "problem": problem or None,
                }
            )
        return out

    async def deny(self, buf: int, row: int, reason: str = "") -> dict[str, Any]:
        """Refuse the pending call at `row`: a ``status=denied`` result whose body
        (what the model reads) is the user's reason."""
        mirror = await self._mirror(buf)
        call = mirror.chat().call_at(row)
        if call is None:
            raise UserError(
                f"sidekick_tools: no tool call at line {row + 1}. Put the cursor on a "
                "```tool block to deny it."
            )
        if call.result is not None:
            raise UserError(
                f"sidekick_tools: {call.call_id} already has a result "
                f"(status={call.result.status}); only a pending call can be denied"
            )
        tracked = await self._prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while denying; try again")
        text = " ".join(reason.split()) or "The user denied this call."
        self._spawn(self._write(tracked, _denied(text, by="user")))
        return {"id": tracked.call_id, "tool": tracked.tool}

    async def run_call(self, buf: int, call_id: str, cwd: str) -> dict[str, Any]:
        """Run call `call_id` again (its result block is replaced); no chain."""
        mirror = await self._mirror(buf)
        call = mirror.chat().call_by_id(call_id)
        if call is None:
            raise UserError(f"sidekick_tools: no call {call_id} in {mirror.name or buf}")
        self._refuse_live(buf, call)
        tracked = await self._prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        self._spawn(self._chain(tracked, cwd, chain=False))
        return {"id": tracked.call_id, "tool": tracked.tool, "row": call.start_row}

    async def chat_opened(self, buf: int) -> None:
        """Follow the `status=running task=T` blocks of a (re)opened chat.

        Only a task this very call started is followed (DESIGN §12): the store
        must name this chat and this call id. A block naming an unknown task or
        another chat's (a forged block, a copied chat) is left as it is, with
        a diagnostic saying why; opening such a chat rewrites nothing."""
        mirror = await self._mirror(buf)
        unfollowed: dict[str, str] = {}
        for call in mirror.chat().calls:
            res = call.result
            if not (res and res.status == "running" and res.fields.get("task") and call.call_id):
                continue
            if (buf, call.call_id) in self.tracked:
                continue
            token = res.fields["task"]
            task = self.tasks.get(token) if is_token(token) else None
            if task is None:
                unfollowed[call.call_id] = f"task {token} not found; not followed"
                continue
            if task.chat != mirror.name or task.call_id != call.call_id:
                unfollowed[call.call_id] = f"task {token} is not this call's; not followed"
                continue
            tracked = await self._prepare(buf, call)
            if tracked is None:
                continue
            tracked.background = True
            self._bind(tracked, token)
            if status_of(task) in TERMINAL:
                await self._finish_background(tracked, task)
            else:
                self._emit_state(tracked, "running", started_at=task.started_at)
        self._unfollowed[buf] = unfollowed
        self.schedule_scan(buf, delay=0)

    def token_at(self, buf: int, row: int) -> str | None:
        mirror = self.port.mirrors.get(buf)
        if mirror is None:
            return None
        call = mirror.chat().call_at(row)
        if call is None:
            return None
        tracked = self.tracked.get((buf, call.call_id or ""))
        if tracked and tracked.token:
            return tracked.token
        if call.result and call.result.fields.get("task"):
            return call.result.fields["task"]
        return None

    # -- the chain -----------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        task.add_done_callback(_log_failure)

    async def _run_ids(
        self, buf: int, ids: list[str], cwd: str, gate: asyncio.Future[None] | None = None
    ) -> None:
        """Run the calls one after the other; their results are written as they
        come, several at once when they come together."""
        deliveries = []
        mirror = await self._mirror(buf)
        snapshot = mirror.chat()  # the calls as they were when the user asked
        for call_id in ids:
            tracked = self.tracked.get((buf, call_id))
            call = snapshot.call_by_id(call_id)
            if tracked is None or call is None:
                continue
            result = await self._run_call(
                tracked, cwd, explicit=True, found=(mirror, call), gate=gate
            )
            gate = None
            if result is not None:
                deliveries.append(asyncio.ensure_future(self._deliver(tracked, result)))
        if deliveries:
            await asyncio.gather(*deliveries)

    async def _chain(
        self,
        first: Tracked,
        cwd: str,
        chain: bool,
        found: tuple[Any, ToolCall] | None = None,
        gate: asyncio.Future[None] | None = None,
    ) -> None:
        current: Tracked | None = first
        explicit = True
        while current is not None:
            await self._execute(current, cwd, explicit=explicit, found=found, gate=gate)
            explicit, found, gate = False, None, None
            current = await self._next_auto(current, cwd) if chain else None

    async def _next_auto(self, previous: Tracked, cwd: str) -> Tracked | None:
        """The next pending call of the same message, when it may run without asking."""
        mirror = await self._mirror(previous.buf)
        chat = mirror.chat()
        prev = chat.call_by_id(previous.call_id)
        if prev is None:
            return None
        message = chat.messages[prev.message_index]
        following = [c for c in message.calls if c.start_row > prev.start_row and c.pending]
        if not following:
            return None
        call = following[0]
        if call.error or tools.check_call(call.tool, call.params or {}):
            return None  # a broken call needs a person; its ✗ shows why
        ctx = self._context(cwd, mirror.name, call.call_id or "")
        answer = await self._ask_policy(call, ctx)
        verdict = decide(call.tool, call.params or {}, ctx, answer)
        if verdict == "ask":
            return None
        tracked = await self._prepare(previous.buf, call)
        if tracked is None:
            return None
        if verdict == "deny":
            await self._write(tracked, _denied("denied by the auto-accept policy"))
            return await self._next_auto(tracked, cwd)
        return tracked

    async def _execute(
        self,
        tracked: Tracked,
        cwd: str,
        explicit: bool,
        found: tuple[Any, ToolCall] | None = None,
        gate: asyncio.Future[None] | None = None,
    ) -> None:
        result = await self._run_call(tracked, cwd, explicit, found, gate)
        if result is not None:
            await self._deliver(tracked, result)

    async def _run_call(
        self,
        tracked: Tracked,
        cwd: str,
        explicit: bool,
        found: tuple[Any, ToolCall] | None = None,
        gate: asyncio.Future[None] | None = None,
    ) -> ToolResult | None:
        """Check, ask, run. The result to write, or None when nothing can be written.
        `found`: the call as already read, else it is looked up by its mark.
        `gate`: the call starts working once it is done (see Host._run_request)."""
        found = found or await self._find(tracked)
        if found is None:
            return None
        mirror, call = found
        problem = call.error or tools.check_call(call.tool, call.params or {})
        if problem:
            if problem.startswith(STRUCTURAL):
                # No block can be written safely: only the diagnostic says what is wrong.
                self._emit_state(tracked, "failed", detail=problem)
                self.port.notify_user(f"sidekick_tools: {problem}", "error")
                return None
            return ToolResult(status="failed", body=problem, fields={})
        ctx = self._context(cwd, mirror.name, tracked.call_id)
        ctx.auto = not explicit  # approved by the policy, not run by the user's hand
        if explicit:
            answer = await self._ask_policy(call, ctx)
            if answer == "deny":
                return _denied("denied by the auto-accept policy")
        tool = tools.get_tool(call.tool)
        self._emit_state(tracked, "running", started_at=time.time())
        # The running state reaches Neovim before the tool starts: with the
        # reply of the request that started the call (the gate opens once that
        # is sent), else on its own.
        await (gate if gate is not None else asyncio.sleep(0))
        started = time.monotonic()
        try:
            result = await tool.run(call.params or {}, ctx)
        except Exception as exc:  # a tool bug must not take the host down
            log.exception("tool %s failed on call %s", call.tool, tracked.call_id)
            result = ToolResult(
                status="failed",
                body=f"Internal error in {call.tool}: {exc!r} (details in the host log)",
                fields={},
            )
        if "duration" not in result.fields and call.tool != "run_terminal_command":
            result.fields["duration"] = round(time.monotonic() - started, 2)
        if result.status == "running":
            self._bind(tracked, str(result.fields.get("task") or tracked.token or "") or None)
        return result

    async def _deliver(self, tracked: Tracked, result: ToolResult) -> None:
        """Write the result; a `running` one makes the call follow its task."""
        await self._write(tracked, result)
        if result.status == "running" and tracked.token:
            tracked.background = True
            task = self.tasks.get(tracked.token)
            if task is not None and status_of(task) in TERMINAL:
                await self._finish_background(tracked, task)

    # -- buffer work -----------------------------------------------------------------
    async def _mirror(self, buf: int) -> Any:
        mirror = await self.port.mirror(buf)
        if mirror is None:
            raise UserError(f"sidekick_tools: buffer {buf} is not loaded")
        return mirror

    def _refuse_live(self, buf: int, call: ToolCall) -> None:
        tracked = self.tracked.get((buf, call.call_id or ""))
        if tracked and tracked.state in ("queued", "running") and not tracked.done:
            what = f" as task {tracked.token}" if tracked.token else ""
            raise UserError(
                f"sidekick_tools: {call.call_id} is already running{what}; :SidekickHalt stops it"
            )

    async def _prepare(self, buf: int, call: ToolCall) -> Tracked | None:
        """Give the call an id (if hand-written without one) and an extmark."""
        row = call.start_row
        for _ in range(RETRIES):
            mirror = await self._mirror(buf)
            chat = mirror.chat()
            current = chat.call_at(row)
            if current is None or current.start_row != row:
                if call.call_id and chat.call_by_id(call.call_id):
                    current = chat.call_by_id(call.call_id)
                    row = current.start_row
                else:
                    return None
            edits: list[tuple[int, int, list[str]]] = []
            call_id = current.call_id
            if not call_id:
                taken = {c.call_id for c in chat.calls if c.call_id}
                call_id = new_call_id(taken)
                edits.append((row, row + 1, [header_with_id(mirror.lines[row], call_id)]))
            old = self.tracked.get((buf, call_id))
            mark = old.mark if old else next(self._marks)
            if await self.port.apply(buf, mirror.tick, edits, [(mark, row)]):
                tracked = Tracked(
                    buf=buf, mark=mark, call_id=call_id, tool=current.tool, chat=mirror.name
                )
                self.tracked[(buf, call_id)] = tracked
                self._by_call[(tracked.chat, call_id)] = tracked
                return tracked
            await asyncio.sleep(0.005)
        return None

    async def _find(self, tracked: Tracked) -> tuple[Any, ToolCall] | None:
        """The call's current block; None when the block is gone (said to the user)."""
        mirror = await self.port.mirror(tracked.buf)
        if mirror is None:
            self._lost(tracked, "its chat is no longer loaded")
            return None
        rows = await self.port.mark_rows(tracked.buf, [tracked.mark])
        call = locate(mirror.chat(), tracked.call_id, rows.get(tracked.mark, -1))
        if call is None:
            self._lost(tracked, "its block was deleted")
            return None
        return mirror, call

    async def _write(self, tracked: Tracked, result: ToolResult) -> bool:
        """Write (or replace) the call's result block, then update its state.
        False when the block is gone (deleted while its task ran)."""
        return await self._enqueue(tracked.buf, self._result_item(tracked, result))

    def _result_item(self, tracked: Tracked, result: ToolResult) -> _Pending:
        token = result.fields.get("task")
        log_path = None  # named only when lines are cut: look the task up only then
        if token and result.body.count("\n") >= self.config.result_max_lines:
            log_path = _log_path(self.tasks.get(str(token)))
        body = self._shown(result.body, log_path, truncate=bool(token))
        block = result_lines(tracked.call_id, result.status, result.fields, body)
        return _Pending(next(self._seq), tracked=tracked, result=result, lines=block)

    def _enqueue(self, buf: int, item: _Pending) -> asyncio.Future[bool]:
        item.fut = asyncio.get_event_loop().create_future()
        self._queues.setdefault(buf, []).append(item)
        if buf not in self._writers:
            self._writers[buf] = asyncio.ensure_future(self._drain(buf))
            self._writers[buf].add_done_callback(_log_failure)
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
                        item.resolve(False)
                self._written_at[buf] = loop.time()
                if later:
                    self._queues.setdefault(buf, [])[:0] = later
        finally:
            self._writers.pop(buf, None)

    async def _write_batch(self, buf: int, batch: list[_Pending]) -> list[_Pending]:
        """Write a batch from one snapshot; returns items to write in a later batch.

        A call is found by its id in the text (its mark only picks among
        duplicates): saving, reloading or reformatting the chat moves or drops
        extmarks but keeps the text. Nothing is dropped in silence: a result
        whose call is gone, or whose chat was closed, is said to the user."""
        attempt = 0
        while True:
            attempt += 1
            mirror = await self.port.mirror(buf)
            if mirror is None:  # unloaded: a reopened chat picks running blocks up again
                for item in batch:
                    if item.tracked is not None:
                        self._lost(item.tracked, "its chat is no longer loaded", item.result)
                    item.resolve(False)
                return []
            results = [i for i in batch if i.tracked is not None]
            marks = [i.tracked.mark for i in results]  # type: ignore[union-attr]
            rows = await self.port.mark_rows(buf, marks) if marks else {}
            chat = mirror.chat()
            edits: list[tuple[int, int, list[str], int, int]] = []  # start, end, lines, rank, seq
            anchors: list[tuple[int, int]] = []  # marks to set again before the edits
            written: list[_Pending] = []
            resolving: list[ToolCall] = []
            later: list[_Pending] = []
            gone: list[_Pending] = []
            for item in results:
                tracked = item.tracked
                assert tracked is not None
                if any(w.tracked is tracked for w in written):
                    later.append(item)  # a second block for the same call: next batch
                    continue
                row = rows.get(tracked.mark, -1)
                call = locate(chat, tracked.call_id, row)
                if call is None:
                    gone.append(item)
                    continue
                if call.start_row != row:
                    anchors.append((tracked.mark, call.start_row))
                if call.result is not None:
                    span = (call.result.start_row, call.result.end_row + 1)
                else:
                    span = (call.end_row + 1, call.end_row + 1)
                edits.append((*span, item.lines, 2, item.seq))
                written.append(item)
                resolving.append(call)
            tail = self._user_line_edit(chat, resolving, mirror.lines)
            if tail is not None:
                edits.append((*tail, 0, 0))
            notices = []
            for item in batch:
                if item.tracked is not None or item.after in gone:
                    continue
                if item.after in later:
                    later.append(item)  # its result waits for the next batch: so does it
                else:
                    notices.append(item)
            for item in notices:
                edits.append((*self._notice_edit(chat, mirror.lines, item.lines), 1, item.seq))
            # bottom-up; at one row the USER: line first, then notices (the latest
            # first), then results, so they end up as results, notices, USER:
            edits.sort(key=lambda e: (-e[0], e[3], -e[4]))
            if not edits or await self.port.apply(
                buf, mirror.tick, [e[:3] for e in edits], anchors=anchors
            ):
                for item in gone:
                    assert item.tracked is not None
                    self._lost(item.tracked, "its block was deleted", item.result)
                    item.resolve(False)
                for item in written:
                    self._mark_done(item.tracked, item.result)  # type: ignore[arg-type]
                    item.resolve(True)
                for item in batch:
                    if item.tracked is None and item not in later:
                        item.resolve(item in notices)
                return later
            # The text changed after the mirror's tick (the user is typing, or the
            # mirror has not seen the latest edit yet): compute again from the
            # newer text. Never given up on while the chat is loaded.
            if attempt % 200 == 0:
                log.warning("buffer %d: %d blocks still waiting to be written", buf, len(batch))
            await asyncio.sleep(min(0.1, 0.005 * (1 + attempt // 10)))

    @staticmethod
    def _notice_edit(chat: Chat, lines: list[str], notice: list[str]) -> tuple[int, int, list[str]]:
        n = len(lines)
        last = chat.messages[-1] if chat.messages else None
        if last is not None and last.role == "USER" and not is_notice(lines[last.start_row]):
            # the user may be typing there: put the notice before it (an earlier
            # notice is the plugin's own message: the next one goes after it)
            at = last.start_row
            return (at, at, [*notice, ""] if notice[-1] != "" else notice)
        pad = [""] if (n and lines[-1].strip() != "") else []
        return (n, n, pad + notice)

    def _shown(
        self, body: str, log_path: str | None, truncate: bool = True, lines: int | None = None
    ) -> str:
        """Text as the buffer shows it: clean, no trailing newline, and for process
        output only the tail (`lines`, default `result.max_lines`; file tools
        bound their own results)."""
        text = clean_output(body.encode("utf-8", "replace"))
        if truncate:
            keep = self.config.result_max_lines if lines is None else lines
            text = truncate_tail(text, keep, log_path)
        return text.rstrip("\n")

    def _user_line_edit(
        self, chat: Chat, resolving: list[ToolCall], lines: list[str]
    ) -> tuple[int, int, list[str]] | None:
        """Append `USER: ` when these resolve the last pending calls of the last
        assistant message, unless the chat already ends with a USER message."""
        last = chat.last_assistant()
        if last is None or not chat.messages or chat.messages[-1] is not last:
            return None
        now = {id(c) for c in resolving}
        if not any(id(c) in now for c in last.calls):
            return None
        if any(c.pending and id(c) not in now for c in last.calls):
            return None
        n = len(lines)
        add = ["USER: "] if (n and lines[-1].strip() == "") else ["", "USER: "]
        return (n, n, add)

    def _mark_done(self, tracked: Tracked, result: ToolResult) -> None:
        detail = _detail(result)
        if result.status == "running":
            task = self.tasks.get(tracked.token) if tracked.token else None
            if task is not None and status_of(task) == "queued":
                self._emit_state(tracked, "queued", ahead=self.tasks.queue_position(task.id))
            else:
                self._emit_state(
                    tracked,
                    "running",
                    started_at=getattr(task, "started_at", None),
                    progress=getattr(task, "progress", None),
                    progress_text=getattr(task, "progress_text", None),
                )
        else:
            tracked.done = True
            self._emit_state(tracked, result.status, detail=detail)

    def _lost(self, tracked: Tracked, why: str, result: ToolResult | None = None) -> None:
        """A result that cannot be written: stop following the call, and say so once."""
        if tracked.done:
            return
        tracked.done = True
        self._forget(tracked)
        status = result.status if result is not None else tracked.state
        what = f"call {tracked.call_id} ({tracked.tool})"
        if tracked.token:
            task = self.tasks.get(tracked.token)
            log_path = _log_path(task)
            what = f"task {tracked.token} of {what}"
            where = f"; its output: {log_path}" if log_path else ""
        else:
            where = ""
        reopen = ""
        if tracked.background and "loaded" in why:
            reopen = "; it is written when you open the chat again"
        self.port.notify_user(
            f"sidekick_tools: {what} ended {status}, not written: {why}{reopen}{where}", "warn"
        )
        log.info("%s: result not written (%s)", what, why)

    def _forget(self, tracked: Tracked) -> None:
        if self.tracked.get((tracked.buf, tracked.call_id)) is tracked:
            del self.tracked[(tracked.buf, tracked.call_id)]
        if tracked.token and self._by_token.get(tracked.token) is tracked:
            del self._by_token[tracked.token]
        if self._by_call.get((tracked.chat, tracked.call_id)) is tracked:
            del self._by_call[(tracked.chat, tracked.call_id)]
        self.port.emit({"type": "forget", "buf": tracked.buf, "mark": tracked.mark})

    # -- tasks ending in the background ------------------------------------------------
    def _on_task_event(self, event: Any) -> None:
        task = event.task
        self.port.emit(
            {
                "type": "task",
                "kind": event.kind,
                "finished": event.kind == "finished",
                "task": task.to_dict(),
            }
        )
        if event.kind in ("started", "finished"):
            self._refresh_queue()
        tracked = self._tracked_for(task)
        if tracked is None:
            return
        self._bind(tracked, task.id)
        status = status_of(task)
        if status == "queued":
            ahead = self.tasks.queue_position(task.id)
            self._emit_state(tracked, "queued", ahead=ahead)
        elif status == "running" and not tracked.done:
            self._emit_state(
                tracked,
                "running",
                started_at=task.started_at,
                progress=task.progress,
                progress_text=task.progress_text,
            )
        elif event.kind == "finished" and tracked.background and not tracked.finishing:
            self._spawn(self._finish_background(tracked, task))

    def _refresh_queue(self) -> None:
        """The queue moved: each queued call's "N ahead" changes."""
        for ahead, token in enumerate(self.tasks.queued_tokens()):
            tracked = self._live(self._by_token.get(token))
            if tracked is not None and tracked.state == "queued":
                self._emit_state(tracked, "queued", ahead=ahead)

    def _bind(self, tracked: Tracked, token: str | None) -> None:
        """The call follows task `token` from now on."""
        tracked.token = token
        if token:
            self._by_token[token] = tracked

    def _live(self, tracked: Tracked | None) -> Tracked | None:
        """`tracked` if it is still the call followed under its key, else None."""
        if tracked is not None and self.tracked.get((tracked.buf, tracked.call_id)) is tracked:
            return tracked
        return None

    def _tracked_for(self, task: Any) -> Tracked | None:
        tracked = self._live(self._by_token.get(task.id))
        if tracked is not None and tracked.token == task.id:
            return tracked
        if not task.call_id:
            return None
        return self._live(self._by_call.get((task.chat, task.call_id)))

    async def _finish_background(self, tracked: Tracked, task: Any) -> None:
        if tracked.done or tracked.finishing:
            return
        tracked.finishing = True
        result = tools.result_from_task(tracked.tool, task)
        result.fields.setdefault("task", task.id)
        # the final block and the notice go into the buffer together, in one edit
        final = self._result_item(tracked, result)
        written = self._enqueue(tracked.buf, final)
        # the notice stays short: the last few lines; the block above and the log have the rest
        output = self._shown(result.body, _log_path(task), lines=self.config.notice_lines)
        payload = {
            "id": task.id,
            "status": status_of(task),
            "started_at": _iso(task.started_at),
            "ended_at": _iso(task.ended_at),
            "duration_seconds": _duration(task),
            "exit_code": task.exit_code,
            "output": output,
            "log": _log_path(task),
        }
        notice = _Pending(next(self._seq), lines=notice_lines(payload), after=final)
        noticed = self._enqueue(tracked.buf, notice)
        await asyncio.gather(written, noticed)

    # -- diagnostics for calls this host does not follow ----------------------------------
    def schedule_scan(self, buf: int, delay: float = 0.15) -> None:
        handle = self._scan_timers.pop(buf, None)
        if handle is not None:
            handle.cancel()
        loop = asyncio.get_event_loop()
        self._scan_timers[buf] = loop.call_later(delay, self._scan, buf)

    def _on_buffer_change(self, buf: int, first: int, last: int) -> None:
        """Text changed in rows [first, last) (old numbering; last -1: to the end)."""
        rows = self._anchor_rows.get(buf)
        if rows and any(first <= r and (last < 0 or r < last) for r in rows):
            self._touched.add(buf)
        self.schedule_scan(buf)

    def _scan(self, buf: int) -> None:
        self._scan_timers.pop(buf, None)
        mirror = self.port.mirrors.get(buf)
        if mirror is None:
            return
        chat = mirror.chat()
        anchors = []
        for call in chat.calls:
            tracked = self.tracked.get((buf, call.call_id or ""))
            if tracked is None:
                continue
            if tracked.done and _text_state(call) != tracked.state:
                self._forget(tracked)  # undone (or edited) since: the text says what it is
                continue
            anchors.append([tracked.mark, call.start_row])
        self._anchor_rows[buf] = {row for _, row in anchors}
        items = scan_items(
            chat, {cid for (b, cid) in self.tracked if b == buf}, self._unfollowed.get(buf)
        )
        touched = buf in self._touched
        self._touched.discard(buf)
        if not touched and (items, anchors) == self._scanned.get(buf):
            return  # typing inside a message changes no call's state: Neovim redraws nothing
        self._scanned[buf] = (items, anchors)
        self.port.emit({"type": "scan", "buf": buf, "items": items, "anchors": anchors})

    # -- state & helpers ------------------------------------------------------------------
    def _emit_state(self, tracked: Tracked, state: str, **extra: Any) -> None:
        tracked.state = state
        event = {"type": "call", "buf": tracked.buf, "mark": tracked.mark, "state": state}
        event["tool"] = tracked.tool
        event.update({k: v for k, v in extra.items() if v is not None})
        self.port.emit(event)

    def _context(self, cwd: str, chat: str, call_id: str) -> ToolContext:
        return ToolContext(
            cwd=cwd, tasks=self.tasks, config=self.config, chat=chat, call_id=call_id
        )

    async def _ask_policy(self, call: ToolCall, ctx: ToolContext) -> str | None:
        if not self.config.auto_accept.has_policy:
            return None
        try:
            answer = await self.port.lua(
                "return require('sidekick_tools.bridge').policy(...)",
                call.tool,
                call.params or {},
                {"cwd": ctx.cwd, "chat": ctx.chat, "call_id": ctx.call_id},
            )
        except Exception:
            log.exception("policy function failed")
            return None
        return answer if answer in ("approve", "deny") else None


def scan_items(
    chat: Chat, tracked_ids: set[str], unfollowed: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Diagnostic state of the calls, as the text alone says it (DESIGN §5).

    Every pending, running, failed, cancelled or denied call is listed. Completed
    calls are listed only in the last assistant message: a long history of ✓ would
    cost Neovim a redraw of thousands of diagnostics on every change and tell the
    user nothing they need to act on.
    """
    items = []
    last = chat.last_assistant()
    recent = {id(c) for c in last.calls} if last else set()
    for call in chat.calls:
        if call.call_id and call.call_id in tracked_ids:
            continue
        res = call.result
        if res is not None and res.status == "completed" and id(call) not in recent:
            continue
        item: dict[str, Any] = {"row": call.start_row, "tool": call.tool}
        problem = call.error or tools.check_call(call.tool, call.params or {})
        if res is not None and res.status in RESULT_STATUSES:
            item["state"] = res.status
            if res.status == "failed":
                item["detail"] = _fields_detail(res.fields) or "failed"
            elif res.status == "running" and call.call_id in (unfollowed or {}):
                item["state"] = "failed"
                item["detail"] = (unfollowed or {})[call.call_id]
            elif res.status == "running" and res.fields.get("task"):
                item["detail"] = f"task {res.fields['task']}"
            elif res.status in ("cancelled", "denied"):
                item["detail"] = res.status
        elif problem:
            item["state"] = "failed"
            item["detail"] = problem
        else:
            item["state"] = "pending"
        items.append(item)
    return items


def locate(chat: Chat, call_id: str, row: int) -> ToolCall | None:
    """The block of call `call_id`: the one at `row` (its extmark's row, -1 when
    the mark is gone) if it has that id, else the first with that id."""
    call = chat.call_at(row) if row >= 0 else None
    if call is not None and call.start_row == row and call.call_id == call_id:
        return call
    return chat.call_by_id(call_id)


def _text_state(call: ToolCall) -> str:
    """The state the text gives a call: its result's status, else pending."""
    if call.result is None:
        return "pending"
    return call.result.status or "pending"


def _fields_detail(fields: dict[str, Any]) -> str:
    if fields.get("reason") == "timeout":
        return "timeout"
    if "exit" in fields:
        return f"exit {fields['exit']}"
    return str(fields.get("reason") or "")


def _detail(result: ToolResult) -> str | None:
    if result.status == "failed":
        first = result.body.strip().splitlines()[0] if result.body.strip() else "failed"
        return _fields_detail(result.fields) or first[:200]
    if result.status in ("cancelled", "denied"):
        return str(result.fields.get("reason") or result.status)
    return None


def _denied(reason: str, by: str = "policy") -> ToolResult:
    return ToolResult(status="denied", body=reason, fields={"reason": by})


def describe(call: ToolCall, limit: int = 120) -> str:
    """One line naming what a call would do: a command, paths, or its parameters."""
    params = call.params or {}
    if call.tool == "run_terminal_command" and isinstance(params.get("command"), str):
        text = params["command"]
    elif call.tool == "use_agent":
        text = f"{params.get('agent')}: {params.get('message')}"
    elif params:
        text = json.dumps(params, ensure_ascii=False)
    else:
        text = call.body
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _log_path(task: Any) -> str | None:
    if task is None or not getattr(task, "log_dir", None):
        return None
    return f"{task.log_dir}/stdout"


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def _duration(task: Any) -> float | None:
    if task.started_at is None or task.ended_at is None:
        return None
    return round(task.ended_at - task.started_at, 2)


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("background work failed", exc_info=fut.exception())


__all__ = ["CallRunner", "UserError", "scan_items", "parse"]
