"""Running a chat's calls: what the user runs, and the chain after it.

`:SidekickRunTool` runs the call under the cursor, then each following call
of the same assistant message while the auto-accept policy approves it, and
stops at the first it does not (DESIGN §6). `:SidekickRunTools` runs every
pending call of the last assistant message. A call first gets an id (a
hand-written one may have none) and an extmark, then is checked, run, and its
result handed to the writer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from ..chat import ToolCall
from ..chat.edits import describe
from ..tasks.identity import owner_gone
from ..tools import setup_problem
from ..tools.base import ToolResult
from ..tools.policy import judge, judge_why, outside_note
from .context import CallContext
from .execute import CallExecutor, denied
from .follow import TaskFollower
from .marking import CallMarks, Found, UserError
from .registry import Tracked
from .scan import STRUCTURAL, call_problem
from .writer import ResultWriter, log_failure

log = logging.getLogger(__name__)


class CallChain:
    def __init__(self, ctx: CallContext, writer: ResultWriter, follower: TaskFollower) -> None:
        self.ctx = ctx
        self.writer = writer
        self.follower = follower
        self.marks = CallMarks(ctx, writer)
        self.executor = CallExecutor(ctx, self.marks)
        # Whether the chat loop is in charge of a buffer's calls (armed): then a
        # call the model got wrong (an unknown tool, a bad parameter) is answered
        # with its failed result, as running it by hand would, and the chain goes
        # on; else it waits for the user, its ✗ saying why.
        self.answers_broken: Callable[[int], bool] = lambda _buf: False
        # whether a reply streams into a buffer: its calls are not all there yet
        self.streaming: Callable[[int], bool] = lambda _buf: False
        # called when calls a batch was to run will not get a result from it
        self.dropped: Callable[[int], None] = lambda _buf: None
        self._bg: set[asyncio.Future[Any]] = set()

    # -- what the user runs -------------------------------------------------------------
    async def run_tool(
        self, buf: int, row: int, cwd: str, gate: asyncio.Future[None] | None = None
    ) -> dict[str, Any]:
        mirror, call = await self.marks.call_at(buf, row, "of an ASSISTANT message")
        self.marks.refuse_busy(buf, call)
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            self.marks.refuse_busy(buf, call)  # the chain or the loop took it meanwhile
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        # The mirror has seen prepare's edit (Neovim sends a buffer's line events
        # before the reply to the request that made them): the call as the user
        # asked for it is at hand, with no round trip to look it up by its mark.
        # By row, not by id: a duplicate id names another block too.
        current = mirror.chat().call_at(tracked.row)
        same = current is not None and current.start_row == tracked.row
        found = (mirror, current) if same and current.call_id == tracked.call_id else None
        self.spawn(self.chain(tracked, cwd, found=found, gate=gate))
        return {"id": tracked.call_id, "tool": tracked.tool}

    async def run_tools(
        self,
        buf: int,
        cwd: str,
        gate: asyncio.Future[None] | None = None,
        ids: Iterable[str] | dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run the pending calls of the last assistant message (only `ids`, when
        given: the ones the user agreed to; with the `seen` digest of the text
        they were shown, a call whose text changed since is not run), one after
        the other."""
        self._refuse_streaming(buf)
        mirror = await self.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        pending = [c for c in (message.calls if message else []) if c.pending]
        changed: list[ToolCall] = []
        if ids is not None:
            seen = ids if isinstance(ids, dict) else dict.fromkeys(ids, "")
            pending = [c for c in pending if c.call_id in seen]
            changed = [
                c
                for c in pending
                if not (c.error or "").startswith(STRUCTURAL)  # never run: no matter
                and seen[c.call_id or ""] not in ("", digest(c))
            ]
            pending = [c for c in pending if c not in changed]
        for call in changed:
            self.ctx.port.notify_user(
                f"sidekick_tools: {call.call_id} changed after you were asked; not run", "warn"
            )
        if not pending:
            if changed:
                raise UserError("sidekick_tools: the calls changed after you were asked; none ran")
            raise UserError("sidekick_tools: no pending tool call in the last assistant message")
        chosen: list[tuple[Tracked, ToolCall]] = []  # each call with its text as agreed to
        broken, busy = [], []
        try:
            for call in pending:
                if call.error and call.error.startswith(STRUCTURAL):
                    broken.append(call)  # no block can be told apart from another
                    continue
                if self.marks.busy(buf, call):
                    busy.append(call)  # started or denied a moment ago: its result is coming
                    continue
                tracked = await self.marks.prepare(buf, call)
                if tracked is not None:
                    chosen.append((tracked, call))
        except BaseException:
            # taking the next call failed (its chat unloaded): those taken are
            # free again, not left taken for a batch that never runs
            self._release(buf, [t for t, _ in chosen])
            raise
        if not chosen:
            if broken:
                problem = broken[0].error
            elif busy:
                problem = f"{busy[0].call_id} already runs or was denied; its result is coming"
            else:
                problem = "they changed while starting"
            raise UserError(f"sidekick_tools: no pending call can run: {problem}")
        self.spawn(self._run_tracked(buf, chosen, cwd, gate))
        return {"count": len(chosen), "ids": [t.call_id for t, _ in chosen]}

    async def write_unseen(self, buf: int) -> None:
        """Pending calls whose task ran while no host followed them (it died, or
        Neovim quit with `kill_on_exit` off before the call's block said
        running) get that task's result when their chat is opened: the call
        reads as never run otherwise, and running it again would run it twice.
        A task of another Neovim that still runs is that Neovim's to write
        (the same chat open in both): opening it here writes nothing. Nor is
        anything written unasked into a buffer without a name, whose tasks
        cannot be told from another such buffer's."""
        mirror = await self.marks.mirror(buf)
        pending = [c for c in mirror.chat().calls if c.result is None and c.call_id]
        if not pending or not mirror.name:
            return
        # one look at the chat's tasks, not one per call (a chat may hold many)
        newest: dict[str, Any] = {}
        for task in self.ctx.tasks.list(chats=[mirror.name], limit=None):  # newest first
            newest.setdefault(task.call_id, task)
        gone: dict[str, bool] = {}  # each owner looked at once
        for call in pending:
            task = newest.get(call.call_id or "")
            if not self.executor.undelivered(task, call) or call_problem(call):
                continue
            if task.owner != self.ctx.tasks.owner and not owner_gone(task.owner, gone):
                continue  # the Neovim that runs it (the chat open there too) writes it
            if self.marks.coming(buf, call):
                continue
            tracked = await self.marks.prepare(buf, call)
            if tracked is None:
                continue
            earlier = self.executor.earlier_result(tracked, mirror.name, call)
            if earlier is None:  # delivered meanwhile: not ours to write
                self.ctx.registry.forget(tracked)
                continue
            await self.deliver(tracked, earlier)

    def _refuse_streaming(self, buf: int) -> None:
        if self.streaming(buf):
            raise UserError(
                "sidekick_tools: a reply is still streaming into this chat; "
                "run its calls once it has ended"
            )

    async def run_call(self, buf: int, call_id: str, cwd: str) -> dict[str, Any]:
        """Run call `call_id` again (its result block is replaced); no chain."""
        mirror = await self.marks.mirror(buf)
        blocks = [c for c in mirror.chat().calls if c.call_id == call_id]
        if not blocks:
            raise UserError(f"sidekick_tools: no call {call_id} in {mirror.name or buf}")
        if len(blocks) > 1:
            raise UserError(
                f"sidekick_tools: {len(blocks)} calls have the id {call_id}; run the one you "
                "mean with :SidekickRunTool on it"
            )
        call = blocks[0]
        self.marks.refuse_busy(buf, call)
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            self.marks.refuse_busy(buf, call)  # the chain or the loop took it meanwhile
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        self.spawn(self.chain(tracked, cwd, follow_on=False))
        return {"id": tracked.call_id, "tool": tracked.tool, "row": call.start_row}

    async def plan(self, buf: int, cwd: str) -> list[dict[str, Any]]:
        """What `run_tools` would do with each pending call of the last assistant
        message: ``verdict`` "approve" (the policy runs it by itself), "ask" (it
        needs the user's consent; a command says ``why``) or "deny" (the policy
        refuses it); a broken call says its ``problem``. Calls written without an
        id get one here, so the user's answer can name them (`run_tools(..., ids)`)."""
        self._refuse_streaming(buf)
        await self.marks.give_ids(buf)
        mirror = await self.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        out = []
        for call in message.calls if message else []:
            if not call.pending:
                continue
            problem = call_problem(call) or setup_problem(call.tool, call.params, self.ctx.config)
            ctx = self.executor.context(cwd, mirror.name, call.call_id or "")
            verdict, why = "ask", None
            if not problem:
                answer = await self.executor.ask_policy(call, ctx)
                verdict, why = await judge_why(call.tool, call.params or {}, ctx, answer)
            out.append(
                {
                    "id": call.call_id or "",
                    "tool": call.tool,
                    "row": call.start_row,
                    "verdict": verdict,
                    "what": describe(call) + outside_note(call.params, cwd),
                    "problem": problem or None,
                    "why": why,
                    "seen": digest(call),
                }
            )
        return out

    async def deny(self, buf: int, row: int, reason: str = "") -> dict[str, Any]:
        """Refuse the pending call at `row`: a ``status=denied`` result whose body
        (what the model reads) is the user's reason."""
        _, call = await self.marks.call_at(buf, row, "to deny it")
        if call.result is not None:
            raise UserError(
                f"sidekick_tools: {call.call_id} already has a result "
                f"(status={call.result.status}); only a pending call can be denied"
            )
        self.marks.refuse_busy(buf, call)
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            self.marks.refuse_busy(buf, call)  # the chain or the loop took it meanwhile
            raise UserError("sidekick_tools: the tool call changed while denying; try again")
        text = " ".join(reason.split()) or "The user denied this call."
        self.spawn(self.answer(tracked, denied(text, by="user")))
        return {"id": tracked.call_id, "tool": tracked.tool}

    # -- the chain ----------------------------------------------------------------------
    async def chain(
        self,
        first: Tracked,
        cwd: str,
        found: Found | None = None,
        gate: asyncio.Future[None] | None = None,
        follow_on: bool = True,
        explicit: bool = True,
    ) -> ToolCall | None:
        """Run `first` (the user's, unless `explicit` is false), then while
        `follow_on`, each next call the policy approves. Returns the call the
        chain stopped at because it needs the user's consent, if any."""
        current: Tracked | None = first
        while current is not None:
            result = await self.executor.run(
                current, cwd, explicit=explicit, found=found, gate=gate
            )
            if result is not None:
                await self.deliver(current, result)
            explicit, found, gate = False, None, None
            if not follow_on:
                return None
            current, waiting = await self._next_auto(current, cwd)
            if waiting is not None:
                return waiting
        return None

    async def run_unasked(self, buf: int, call: ToolCall, cwd: str) -> ToolCall | None:
        """The chat loop: run a reply's calls from `call` on while the policy
        approves them (none is the user's own). Returns the call that needs the
        user's consent, if the chain stopped at one."""
        tracked, waiting = await self._approved(buf, call, cwd)
        if tracked is None:
            return waiting
        return await self.chain(tracked, cwd, explicit=False)

    async def _run_tracked(
        self,
        buf: int,
        chosen: list[tuple[Tracked, ToolCall]],
        cwd: str,
        gate: asyncio.Future[None] | None = None,
    ) -> None:
        """Run the calls one after the other; their results are written as they
        come, several at once when they come together. Each is the very block
        prepared, at its row then (not looked up by id again: an earlier block
        may carry the same id). A call the policy approves runs as it
        would unasked (checked again, hardened, under the auto-run timeout);
        the others run as the user agreed to them."""
        deliveries = []
        started: set[int] = set()  # id() of the followers handed to the executor
        for tracked, _ in chosen[1:]:  # shown waiting their turn, not ▶ to run by hand
            tracked.waiting = True
            self.ctx.registry.state(tracked, "queued")
        try:
            mirror = await self.marks.mirror(buf)
            snapshot = mirror.chat()  # the calls as they were when the user asked
            for tracked, agreed in chosen:
                if self.ctx.registry.live(tracked) is None:
                    continue  # denied (or run on its own) meanwhile: followed anew, not ours
                tracked.waiting = False
                call = snapshot.call_at(tracked.row)  # where it was marked
                if (
                    call is None
                    or call.start_row != tracked.row
                    or call.call_id != tracked.call_id
                    or digest(call) != digest(agreed)  # its text is the one agreed to
                ):
                    self.ctx.registry.forget(tracked)  # moved or changed: its text says its state
                    self.dropped(buf)
                    continue
                started.add(id(tracked))
                result = await self.executor.run(
                    tracked, cwd, explicit=None, found=(mirror, call), gate=gate
                )
                gate = None
                if result is not None:
                    deliveries.append(asyncio.ensure_future(self.deliver(tracked, result)))
        finally:  # the batch stopped early (its chat went away)
            self._release(buf, [t for t, _ in chosen if id(t) not in started])
        if deliveries:
            await asyncio.gather(*deliveries)

    def _release(self, buf: int, taken: list[Tracked]) -> None:
        """Calls a batch took but will not run: none is left "queued", nor taken
        for a run that never comes (one the user denied meanwhile is theirs)."""
        left = [t for t in taken if self.ctx.registry.live(t) is t and not t.answering]
        for tracked in left:
            tracked.waiting = False
            self.ctx.registry.forget(tracked)
        if left:
            self.dropped(buf)

    async def _next_auto(
        self, previous: Tracked, cwd: str
    ) -> tuple[Tracked | None, ToolCall | None]:
        """The next pending call of the same message, when it may run without
        asking; else the call that needs consent (or neither: no call left, or
        a broken one, whose ✗ shows why)."""
        mirror = await self.marks.mirror(previous.buf)
        chat = mirror.chat()
        rows = await self.ctx.port.mark_rows(previous.buf, [previous.mark])
        prev = previous.block_in(chat, rows.get(previous.mark, -1))  # this very block
        if prev is None:
            return None, None
        message = chat.messages[prev.message_index]
        following = [c for c in message.calls if c.start_row > prev.start_row and c.pending]
        if not following:
            return None, None
        return await self._approved(previous.buf, following[0], cwd)

    async def _approved(
        self, buf: int, call: ToolCall, cwd: str
    ) -> tuple[Tracked | None, ToolCall | None]:
        """`call`, followed, when the policy approves it (one it denies gets its
        denied result and the next call is tried); else the call to ask about.
        A broken call is followed only when the loop answers it (the executor
        then gives it its failed result without running anything)."""
        if self.marks.busy(buf, call):
            return None, None  # it runs, or its answer is on its way
        problem = call_problem(call)
        if problem:
            if problem.startswith(STRUCTURAL) or not self.answers_broken(buf):
                return None, None  # a person fixes it: its ✗ shows why
            return await self.marks.prepare(buf, call), None
        mirror = await self.marks.mirror(buf)
        ctx = self.executor.context(cwd, mirror.name, call.call_id or "")
        answer = await self.executor.ask_policy(call, ctx)
        verdict = await judge(call.tool, call.params or {}, ctx, answer)
        if verdict == "ask":
            return None, call
        if self.marks.busy(buf, call):  # the user ran or denied it meanwhile
            return None, None
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            return None, None
        if verdict == "deny":
            await self.answer(tracked, denied("denied by the auto-accept policy"))
            return await self._next_auto(tracked, cwd)
        return tracked, None

    def answer(self, tracked: Tracked, result: ToolResult) -> asyncio.Future[bool]:
        """Write a call's answer without running it (a denial): until it is in the
        buffer, the call is not started or denied again."""
        tracked.answering = True
        return self.writer.write(tracked, result)

    async def deliver(self, tracked: Tracked, result: ToolResult) -> None:
        """Write the result; a `running` one makes the call follow its task."""
        await self.writer.write(tracked, result)
        await self.follower.delivered(tracked, result)

    def spawn(self, coro: Any) -> None:
        fut = asyncio.ensure_future(coro)
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)
        fut.add_done_callback(log_failure)


def digest(call: ToolCall) -> str:
    """A short fingerprint of a call's tool and text: what the user was asked
    about is what runs."""
    text = f"{call.tool}\0{call.body}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()[:16]
