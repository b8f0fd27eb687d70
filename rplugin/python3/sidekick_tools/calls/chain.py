"""Running a chat's calls: what the user runs, and the chain after it.

`:SidekickRunTool` runs the call under the cursor, then each following call
of the same assistant message while the auto-accept policy approves it, and
stops at the first it does not (DESIGN §6); the chat loop runs a reply's
calls the same way, none of them the user's. A call first gets an id (a
hand-written one may have none) and an extmark, then is checked, run, and its
result handed to the writer. `:SidekickRunTools`' batch is batch.py's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from ..chat import ToolCall
from ..chat.edits import describe
from ..tools.base import ToolResult
from ..tools.policy import CODE_WORDS, hidden_code, hidden_outside, judge
from .context import CallContext
from .execute import CallExecutor, denied, started_by
from .follow import TaskFollower
from .marking import CallMarks, Found, UserError
from .registry import Tracked
from .scan import call_problem
from .writer import ResultWriter, log_failure

log = logging.getLogger(__name__)

# What the results of one assistant message may hold before its next call
# runs only with the user's consent (characters of result bodies). A call is a
# few bytes of the model's and its result up to 2 MiB (read_files; a command's
# tail is 256 KiB): a reply of many would fill the editor's memory, then the
# next request.
AUTO_RESULT_BUDGET = 4 << 20
# And how many results it may hold: small ones add up too (a reply of up to
# 16 MiB holds a hundred thousand calls, each result written in turn).
AUTO_CALL_LIMIT = 64


def over_budget(chat: Any, call: ToolCall) -> str | None:
    """Why `call` may no longer run unasked: what the results of its message
    hold already (AUTO_RESULT_BUDGET, AUTO_CALL_LIMIT); None while it may."""
    if not 0 <= call.message_index < len(chat.messages):
        return None
    results = [c.result for c in chat.messages[call.message_index].calls if c.result is not None]
    size = sum(len(r.body) for r in results)
    if size >= AUTO_RESULT_BUDGET:
        return f"the results of this message already hold {size / (1 << 20):.1f} MiB"
    if len(results) >= AUTO_CALL_LIMIT:
        return f"this message already has {len(results)} results"
    return None


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
        self,
        buf: int,
        row: int,
        cwd: str,
        gate: asyncio.Future[None] | None = None,
        confirmed: bool = False,
    ) -> dict[str, Any]:
        """Run the call at `row`, then the chain after it. A call whose path
        reads as inside the working directory but leads outside it through a
        link in the project is not run: the answer is `{"confirm": question}`,
        and the user's yes runs it (`confirmed`)."""
        mirror, call = await self.marks.call_at(buf, row, "of an ASSISTANT message")
        self.refuse_streaming(buf, mirror, call)
        self.marks.refuse_busy(buf, call)
        question = None if confirmed else await hand_question(call, cwd)
        if question:
            return question
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

    async def run_call(
        self,
        buf: int,
        call_id: str,
        cwd: str,
        token: str | None = None,
        confirmed: bool = False,
    ) -> dict[str, Any]:
        """Run call `call_id` again (its result block is replaced); no chain.
        `token`: the task the user chose to run again (the task list shows
        what it ran): refused when the call now reads otherwise (the chat was
        edited, or changed on disk), which the user has not seen. A path that
        leads outside through a link is asked about first, as by `run_tool`."""
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
        task = self.ctx.tasks.get(token) if token else None
        if task is not None and not started_by(task, call, self.ctx.config.agents):
            raise UserError(
                f"sidekick_tools: call {call_id} no longer reads as what task {token} ran "
                f"(its chat changed since); read it in {mirror.name or buf} and run it "
                "there with :SidekickRunTool"
            )
        self.refuse_streaming(buf, mirror, call)
        self.marks.refuse_busy(buf, call)
        question = None if confirmed else await hand_question(call, cwd)
        if question:
            return question
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            self.marks.refuse_busy(buf, call)  # the chain or the loop took it meanwhile
            raise UserError("sidekick_tools: the tool call changed while starting; try again")
        self.spawn(self.chain(tracked, cwd, follow_on=False))
        return {"id": tracked.call_id, "tool": tracked.tool, "row": call.start_row}

    async def deny(
        self, buf: int, row: int, reason: str = "", cwd: str | None = None
    ) -> dict[str, Any]:
        """Refuse the pending call at `row`: a ``status=denied`` result whose body
        (what the model reads) is the user's reason. Then, with `cwd`, as after
        :SidekickRunTool (and after a call the policy denies), each following
        pending call of the message runs while it is auto-acceptable: the chat
        loop, stopped at the call for the user's answer, goes on. Not while a
        :SidekickRunTools batch holds calls of the chat: the batch runs them."""
        mirror, call = await self.marks.call_at(buf, row, "to deny it")
        self.refuse_streaming(buf, mirror, call)
        if call.result is not None:
            raise UserError(
                f"sidekick_tools: {call.call_id} already has a result "
                f"(status={call.result.status}); only a pending call can be denied"
            )
        self.marks.refuse_busy(buf, call)
        batch = any(t.waiting for t in self.ctx.registry.in_buffer(buf).values())
        tracked = await self.marks.prepare(buf, call)
        if tracked is None:
            self.marks.refuse_busy(buf, call)  # the chain or the loop took it meanwhile
            raise UserError("sidekick_tools: the tool call changed while denying; try again")
        text = " ".join(reason.split()) or "The user denied this call."
        answered = self.answer(tracked, denied(text, by="user"))
        if cwd is None or batch:
            self.spawn(answered)
        else:
            self.spawn(self._chain_after(tracked, answered, cwd))
        return {"id": tracked.call_id, "tool": tracked.tool}

    def refuse_streaming(self, buf: int, mirror: Any, call: ToolCall) -> None:
        """A call of the reply still streaming is not run nor denied: the calls
        after it are not all there yet (a chain would run one half arrived),
        and the reply's region is written whole when it ends, over any result
        put inside it meanwhile."""
        if not self.streaming(buf):
            return
        reply = mirror.chat().last_assistant()
        if reply is not None and call.start_row >= reply.start_row:
            raise UserError(
                "sidekick_tools: a reply is still streaming into this chat; "
                "run or deny its calls once it has ended"
            )

    async def _chain_after(self, denied_call: Tracked, answered: Any, cwd: str) -> None:
        """The calls after a denied one, once its denial is in the chat."""
        if not await answered:
            return
        current, _waiting = await self._next_auto(denied_call, cwd)
        if current is not None:
            await self.chain(current, cwd, explicit=False)

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

    async def _next_auto(
        self, previous: Tracked, cwd: str
    ) -> tuple[Tracked | None, ToolCall | None]:
        """The next pending call of the same message, when it may run without
        asking; else the call that needs consent (or neither: no call left, or
        a broken one, whose ✗ shows why)."""
        mirror = await self.ctx.port.mirror(previous.buf)
        if mirror is None:  # its chat was closed meanwhile: nothing follows
            return None, None
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
        denied result and the next call is tried); else the call to ask about,
        as is every call once its message's results hold AUTO_RESULT_BUDGET
        or number AUTO_CALL_LIMIT.
        A broken call is followed only when the loop answers it (the executor
        then gives it its failed result without running anything)."""
        if self.marks.busy(buf, call):
            return None, None  # it runs, or its answer is on its way
        mirror = await self.marks.mirror(buf)
        why = over_budget(mirror.chat(), call)
        if why is not None:
            self.ctx.port.notify_user(
                f"sidekick_tools: {why}: {call.call_id or 'the next call'} and the calls "
                "after it run only when you run them",
                "warn",
            )
            return None, call
        problem = call_problem(call)
        if problem:
            if call.structural or not self.answers_broken(buf):
                return None, None  # a person fixes it: its ✗ shows why
            return await self.marks.prepare(buf, call), None
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


# A `\uXXXX` escape of an ASCII character: a plain one needs none, a line
# break or tab has its short one (`\n`), and the plugin writes a model's calls
# with neither, so a chat file's call written with them hides what runs from
# whoever reads it (`make test\u003b\u0020rm …`, `echo ok\u000arm …`). An
# escaped backslash before one makes it no escape.
_NEEDLESS_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u00[0-7][0-9A-Fa-f]")


async def hand_question(call: ToolCall, cwd: str) -> dict[str, Any] | None:
    """`{"confirm": question}` for a call run by hand whose text does not show
    what it does: one written with needless escapes (`\\u003b` for `;`: the
    question shows it decoded), one whose `path`, `paths` or `cwd` reads as
    inside the working directory but leads outside it through a link in the
    project, or a write that a link leads into a folder whose files tools run
    (`.git`, a hooks folder: `_fs.runs_code`). Running a call by hand is
    consent to what its text shows."""

    def found() -> list[str]:
        out = [(hidden_outside(call.params, cwd), "outside the working directory")]
        out.append((hidden_code(call.tool, call.params, cwd), CODE_WORDS))
        return [
            "; ".join(f"{path} leads to {real}" for path, real in hidden)
            + f", {where}, through a link in the project"
            for hidden, where in out
            if hidden
        ]

    why = await asyncio.to_thread(found)
    if call.params is not None and _NEEDLESS_ESCAPE.search(call.body):
        why.insert(
            0,
            "its text writes characters as \\u escapes, which hide what it does; "
            f"decoded: {describe(call)}",
        )
    if not why:
        return None
    name = f"{call.tool} {call.call_id}" if call.call_id else call.tool
    return {"confirm": f"{name}: {'; '.join(why)}. Run it?"}
