"""Run the tool calls of a chat buffer: find, consent, run, write back, chain.

Everything here is a coroutine on the host's loop. Buffer text comes from the
port's mirror; every edit is computed from the mirror at a changedtick and
applied by Lua only if the buffer is still at that tick (else recomputed), so
the user's typing is never overwritten.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from . import tools
from .chat import Chat, ToolCall, parse
from .chat.render import (
    clean_output,
    header_with_id,
    new_call_id,
    notice_lines,
    result_lines,
    truncate_tail,
)
from .config import Config
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
        self._scanned: dict[int, list[dict[str, Any]]] = {}  # last scan sent, per buffer
        self._bg: set[asyncio.Task[Any]] = set()
        # Result blocks and notices waiting to be written, per buffer. One writer per
        # buffer takes everything queued and writes it from one snapshot in one edit:
        # two hundred tasks ending together cost a few parses, not six hundred.
        self._queues: dict[int, list[_Pending]] = {}
        self._writers: dict[int, asyncio.Future[None]] = {}
        self._written_at: dict[int, float] = {}  # loop time of the last batch, per buffer
        self._seq = itertools.count()
        tasks.subscribe(self._on_task_event)
        port.on_buffer_change = self.schedule_scan

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

    async def chat_opened(self, buf: int) -> None:
        """Follow the `status=running task=T` blocks of a (re)opened chat."""
        mirror = await self._mirror(buf)
        for call in mirror.chat().calls:
            res = call.result
            if not (res and res.status == "running" and res.fields.get("task") and call.call_id):
                continue
            if (buf, call.call_id) in self.tracked:
                continue
            tracked = await self._prepare(buf, call)
            if tracked is None:
                continue
            tracked.background = True
            self._bind(tracked, res.fields["task"])
            task = self.tasks.get(tracked.token)
            if task is None:
                await self._write(
                    tracked,
                    ToolResult(
                        status="failed",
                        body=f"Task {tracked.token} is not in the task store (expired, or it "
                        "lived in an in-memory store of an earlier session).",
                        fields={"task": tracked.token, "reason": "not_found"},
                    ),
                )
            elif status_of(task) in TERMINAL:
                await self._finish_background(tracked, task)
            else:
                self._emit_state(tracked, "running", started_at=task.started_at)
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
        """The call's current block, by its extmark; None when the block is gone."""
        for _ in range(RETRIES):
            mirror = self.port.mirrors.get(tracked.buf)
            if mirror is None:
                return None
            rows = await self.port.mark_rows(tracked.buf, [tracked.mark])
            row = rows.get(tracked.mark, -1)
            if row < 0:
                self._forget(tracked)
                return None
            call = mirror.chat().call_at(row)
            if call is not None and call.start_row == row and call.call_id == tracked.call_id:
                return mirror, call
            await asyncio.sleep(0.005)  # the mirror has not seen the latest edit yet
        log.warning("call %s: block no longer matches its mark; not writing", tracked.call_id)
        return None

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
        """Write a batch from one snapshot; returns items to write in a later batch."""
        for attempt in range(RETRIES):
            mirror = self.port.mirrors.get(buf)
            if mirror is None:
                for item in batch:
                    item.resolve(False)
                return []
            results = [i for i in batch if i.tracked is not None]
            marks = [i.tracked.mark for i in results]  # type: ignore[union-attr]
            rows = await self.port.mark_rows(buf, marks) if marks else {}
            chat = mirror.chat()
            edits: list[tuple[int, int, list[str], int, int]] = []  # start, end, lines, rank, seq
            written: list[_Pending] = []
            resolving: list[ToolCall] = []
            later: list[_Pending] = []
            lagging = False
            for item in results:
                tracked = item.tracked
                assert tracked is not None
                row = rows.get(tracked.mark, -1)
                if row < 0:  # the block was deleted: the task's result goes nowhere
                    self._forget(tracked)
                    tracked.done = True
                    item.resolve(False)
                    continue
                if any(w.tracked is tracked for w in written):
                    later.append(item)  # a second block for the same call: next batch
                    continue
                call = chat.call_at(row)
                if call is None or call.start_row != row or call.call_id != tracked.call_id:
                    if attempt < RETRIES - 1:
                        lagging = True  # the mirror has not seen the latest edit yet
                        break
                    log.warning("call %s: block no longer matches its mark", tracked.call_id)
                    item.resolve(False)
                    continue
                if call.result is not None:
                    span = (call.result.start_row, call.result.end_row + 1)
                else:
                    span = (call.end_row + 1, call.end_row + 1)
                edits.append((*span, item.lines, 2, item.seq))
                written.append(item)
                resolving.append(call)
            if lagging:
                await asyncio.sleep(0.005)
                continue
            tail = self._user_line_edit(chat, resolving, mirror.lines)
            if tail is not None:
                edits.append((*tail, 0, 0))
            notices = [i for i in batch if i.tracked is None]
            for item in notices:
                edits.append((*self._notice_edit(chat, mirror.lines, item.lines), 1, item.seq))
            # bottom-up; at one row the USER: line first, then notices (the latest
            # first), then results, so they end up as results, notices, USER:
            edits.sort(key=lambda e: (-e[0], e[3], -e[4]))
            if await self.port.apply(buf, mirror.tick, [e[:3] for e in edits]):
                for item in written:
                    self._mark_done(item.tracked, item.result)  # type: ignore[arg-type]
                    item.resolve(True)
                for item in notices:
                    item.resolve(True)
                return later
            await asyncio.sleep(0.005)
        log.warning("buffer %d kept changing; %d blocks not written", buf, len(batch))
        for item in batch:
            item.resolve(False)
        return []

    @staticmethod
    def _notice_edit(chat: Chat, lines: list[str], notice: list[str]) -> tuple[int, int, list[str]]:
        n = len(lines)
        if chat.messages and chat.messages[-1].role == "USER":
            # the user may be typing there: put the notice before it
            at = chat.messages[-1].start_row
            return (at, at, [*notice, ""] if notice[-1] != "" else notice)
        pad = [""] if (n and lines[-1].strip() != "") else []
        return (n, n, pad + notice)

    def _shown(self, body: str, log_path: str | None, truncate: bool = True) -> str:
        """Text as the buffer shows it: clean, no trailing newline, and for process
        output only the tail (file tools bound their own results)."""
        text = clean_output(body.encode("utf-8", "replace"))
        if truncate:
            text = truncate_tail(text, self.config.result_max_lines, log_path)
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
        written = self._enqueue(tracked.buf, self._result_item(tracked, result))
        output = self._shown(result.body, _log_path(task))
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
        noticed = self._enqueue(tracked.buf, _Pending(next(self._seq), lines=notice_lines(payload)))
        await asyncio.gather(written, noticed)

    # -- diagnostics for calls this host does not follow ----------------------------------
    def schedule_scan(self, buf: int, delay: float = 0.15) -> None:
        handle = self._scan_timers.pop(buf, None)
        if handle is not None:
            handle.cancel()
        loop = asyncio.get_event_loop()
        self._scan_timers[buf] = loop.call_later(delay, self._scan, buf)

    def _scan(self, buf: int) -> None:
        self._scan_timers.pop(buf, None)
        mirror = self.port.mirrors.get(buf)
        if mirror is None:
            return
        items = scan_items(mirror.chat(), {cid for (b, cid) in self.tracked if b == buf})
        if items == self._scanned.get(buf):
            return  # typing inside a message changes no call's state: Neovim redraws nothing
        self._scanned[buf] = items
        self.port.emit({"type": "scan", "buf": buf, "items": items})

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


def scan_items(chat: Chat, tracked_ids: set[str]) -> list[dict[str, Any]]:
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


def _denied(reason: str) -> ToolResult:
    return ToolResult(status="denied", body=reason, fields={})


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
