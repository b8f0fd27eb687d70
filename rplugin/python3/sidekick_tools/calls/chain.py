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
import logging
import time
from collections.abc import Iterable
from typing import Any

from .. import tools
from ..chat import ToolCall
from ..chat.edits import describe, locate
from ..config import Config
from ..tools.base import ToolContext, ToolResult
from ..tools.policy import decide
from .follow import TaskFollower
from .marking import CallMarks, Found, UserError
from .registry import CallRegistry, Tracked
from .scan import call_problem
from .writer import ResultWriter, log_failure

log = logging.getLogger(__name__)

STRUCTURAL = ("Unclosed fence", "Duplicate id")  # errors the text itself must fix


def denied(reason: str, by: str = "policy") -> ToolResult:
    return ToolResult(status="denied", body=reason, fields={"reason": by})


class CallChain:
    def __init__(
        self,
        port: Any,
        registry: CallRegistry,
        writer: ResultWriter,
        follower: TaskFollower,
        tasks: Any,
        config: Config,
    ) -> None:
        self.port = port
        self.registry = registry
        self.writer = writer
        self.follower = follower
        self.tasks = tasks
        self.config = config
        self.marks = CallMarks(port, registry, writer)
        self._bg: set[asyncio.Future[Any]] = set()

    # -- what the user runs -------------------------------------------------------------
    async def run_tool(
        self, buf: int, row: int, cwd: str, gate: asyncio.Future[None] | None = None
    ) -> dict[str, Any]:
        mirror = await self.marks.mirror(buf)
        call = mirror.chat().call_at(row)
        if call is None:
            raise UserError(
                f"sidekick_tools: no tool call at line {row + 1}. Put the cursor on a "
                "```tool block of an ASSISTANT message."
            )
        self.marks.refuse_live(buf, call)
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        # The mirror has seen prepare's edit (Neovim sends a buffer's line events
        # before the reply to the request that made them): the call as the user
        # asked for it is at hand, with no round trip to look it up by its mark.
        # By row, not by id: a duplicate id names another block too.
        current = mirror.chat().call_at(call.start_row)
        same = current is not None and current.start_row == call.start_row
        found = (mirror, current) if same and current.call_id == tracked.call_id else None
        self.spawn(self.chain(tracked, cwd, found=found, gate=gate))
        return {"id": tracked.call_id, "tool": tracked.tool}

    async def run_tools(
        self,
        buf: int,
        cwd: str,
        gate: asyncio.Future[None] | None = None,
        ids: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Run the pending calls of the last assistant message (only `ids`, when
        given: the ones the user agreed to), one after the other."""
        mirror = await self.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        pending = [c for c in (message.calls if message else []) if c.pending]
        if ids is not None:
            wanted = set(ids)
            pending = [c for c in pending if c.call_id in wanted]
        if not pending:
            raise UserError("sidekick_tools: no pending tool call in the last assistant message")
        chosen: list[tuple[Tracked, int]] = []  # each call with its header's row
        broken = []
        for call in pending:
            if call.error and call.error.startswith(STRUCTURAL):
                broken.append(call)  # no block can be told apart from another
                continue
            tracked = await self.marks.prepare(buf, call)  # an id added keeps the row
            if tracked is not None:
                chosen.append((tracked, call.start_row))
        if not chosen:
            problem = broken[0].error if broken else "they changed while starting"
            raise UserError(f"sidekick_tools: no pending call can run: {problem}")
        self.spawn(self._run_tracked(buf, chosen, cwd, gate))
        return {"count": len(chosen), "ids": [t.call_id for t, _ in chosen]}

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
        self.marks.refuse_live(buf, call)
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        self.spawn(self.chain(tracked, cwd, follow_on=False))
        return {"id": tracked.call_id, "tool": tracked.tool, "row": call.start_row}

    async def plan(self, buf: int, cwd: str) -> list[dict[str, Any]]:
        """What `run_tools` would do with each pending call of the last assistant
        message: ``verdict`` "approve" (the policy runs it by itself), "ask" (it
        needs the user's consent) or "deny" (the policy refuses it); a broken
        call says its ``problem``. Calls written without an id get one here, so
        the user's answer can name them (`run_tools(..., ids)`)."""
        await self.marks.give_ids(buf)
        mirror = await self.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        out = []
        for call in message.calls if message else []:
            if not call.pending:
                continue
            problem = call_problem(call)
            ctx = self.context(cwd, mirror.name, call.call_id or "")
            verdict = "ask"
            if not problem:
                answer = await self.ask_policy(call, ctx)
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
        mirror = await self.marks.mirror(buf)
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
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            raise UserError("sidekick_tools: the tool call changed while denying; try again")
        text = " ".join(reason.split()) or "The user denied this call."
        self.spawn(self.writer.write(tracked, denied(text, by="user")))
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
            result = await self.run_one(current, cwd, explicit=explicit, found=found, gate=gate)
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
        chosen: list[tuple[Tracked, int]],
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
        mirror = await self.marks.mirror(buf)
        snapshot = mirror.chat()  # the calls as they were when the user asked
        for tracked, row in chosen:
            call = snapshot.call_at(row)
            if call is None or call.start_row != row or call.call_id != tracked.call_id:
                continue
            explicit = True
            if not call_problem(call):
                ctx = self.context(cwd, mirror.name, tracked.call_id)
                answer = await self.ask_policy(call, ctx)
                explicit = decide(call.tool, call.params or {}, ctx, answer) != "approve"
            result = await self.run_one(
                tracked, cwd, explicit=explicit, found=(mirror, call), gate=gate
            )
            gate = None
            if result is not None:
                deliveries.append(asyncio.ensure_future(self.deliver(tracked, result)))
        if deliveries:
            await asyncio.gather(*deliveries)

    async def _next_auto(
        self, previous: Tracked, cwd: str
    ) -> tuple[Tracked | None, ToolCall | None]:
        """The next pending call of the same message, when it may run without
        asking; else the call that needs consent (or neither: no call left, or
        a broken one, whose ✗ shows why)."""
        mirror = await self.marks.mirror(previous.buf)
        chat = mirror.chat()
        rows = await self.port.mark_rows(previous.buf, [previous.mark])
        prev = locate(chat, previous.call_id, rows.get(previous.mark, -1))  # this very block
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
        denied result and the next call is tried); else the call to ask about."""
        if call_problem(call):
            return None, None  # a broken call needs a person; its ✗ shows why
        mirror = await self.marks.mirror(buf)
        ctx = self.context(cwd, mirror.name, call.call_id or "")
        verdict = decide(call.tool, call.params or {}, ctx, await self.ask_policy(call, ctx))
        if verdict == "ask":
            return None, call
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            return None, None
        if verdict == "deny":
            await self.writer.write(tracked, denied("denied by the auto-accept policy"))
            return await self._next_auto(tracked, cwd)
        return tracked, None

    async def run_one(
        self,
        tracked: Tracked,
        cwd: str,
        explicit: bool,
        found: Found | None = None,
        gate: asyncio.Future[None] | None = None,
    ) -> ToolResult | None:
        """Check, ask, run. The result to write, or None when nothing can be written.
        `found`: the call as already read, else it is looked up again.
        `gate`: the call starts working once it is done (see Host._run_request)."""
        found = found or await self.marks.find(tracked)
        if found is None:
            return None
        mirror, call = found
        problem = call_problem(call)
        if problem:
            if problem.startswith(STRUCTURAL):
                # No block can be written safely: only the diagnostic says what is wrong.
                self.registry.state(tracked, "failed", detail=problem)
                self.port.notify_user(f"sidekick_tools: {problem}", "error")
                return None
            return ToolResult(status="failed", body=problem, fields={})
        earlier = self._undelivered_task(mirror.name, call)
        if earlier is not None:
            # This call already started a task whose result never reached the
            # chat (the host died before writing it): that task is the call's,
            # running or ended. Running the call again would run it twice.
            self.registry.bind(tracked, earlier.id)
            result = tools.result_from_task(call.tool, earlier)
            result.fields.setdefault("task", earlier.id)
            return result
        ctx = self.context(cwd, mirror.name, tracked.call_id)
        if explicit:
            answer = await self.ask_policy(call, ctx)
            if answer == "deny":
                return denied("denied by the auto-accept policy")
        ctx.auto = not explicit  # approved by the policy, not run by the user's hand
        tool = tools.get_tool(call.tool)
        assert tool is not None  # call_problem checked it exists
        self.registry.state(tracked, "running", started_at=time.time())
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
            token = str(result.fields.get("task") or tracked.token or "") or None
            self.registry.bind(tracked, token)
        return result

    def _undelivered_task(self, chat: str, call: ToolCall) -> Any:
        """The task this pending call started before, if its result was never
        written (a result the user deleted was delivered: the call runs again)."""
        if call.result is not None or not call.call_id:
            return None
        try:
            task = self.tasks.find_by_call(chat, call.call_id)
        except Exception:  # an unreadable store must not stop the call
            log.warning("looking up earlier tasks of call %s failed", call.call_id, exc_info=True)
            return None
        if task is None or task.delivered:
            return None
        return task

    async def deliver(self, tracked: Tracked, result: ToolResult) -> None:
        """Write the result; a `running` one makes the call follow its task."""
        await self.writer.write(tracked, result)
        await self.follower.delivered(tracked, result)

    # -- policy and context ---------------------------------------------------------------
    def context(self, cwd: str, chat: str, call_id: str) -> ToolContext:
        return ToolContext(
            cwd=cwd, tasks=self.tasks, config=self.config, chat=chat, call_id=call_id
        )

    async def ask_policy(self, call: ToolCall, ctx: ToolContext) -> str | None:
        """The user's Lua policy function's answer, when one is configured."""
        if not self.config.auto_accept.has_policy:
            return None
        try:
            answer = await self.port.ask_policy(
                call.tool,
                call.params or {},
                {"cwd": ctx.cwd, "chat": ctx.chat, "call_id": ctx.call_id},
            )
        except Exception:
            log.exception("policy function failed")
            return None
        return answer if answer in ("approve", "deny") else None

    def spawn(self, coro: Any) -> None:
        fut = asyncio.ensure_future(coro)
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)
        fut.add_done_callback(log_failure)
