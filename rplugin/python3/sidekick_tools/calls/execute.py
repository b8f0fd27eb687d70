"""One call run: checked, asked where the user's policy has a say, taken up
from the task it started before if that task's result never reached the chat,
then its tool run. What the chain and the user's commands share."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from .. import tools
from ..chat import ToolCall
from ..tasks.model import TaskStatus
from ..tools.base import ToolContext, ToolResult
from ..tools.policy import judge
from ..tools.use_agent import LABEL_CHARS, agent_program, build_command, label_for
from .context import CallContext
from .marking import CallMarks, Found
from .registry import Tracked
from .scan import call_problem

log = logging.getLogger(__name__)


# What a call cut short by the reply's token limit is answered with, after its
# JSON's problem: the model is told why, and what to do.
CUT_SHORT = (
    "\nThe reply reached its token limit (max_tokens) and was cut inside this call's "
    "input: write it again in smaller parts (a long file in several calls), or raise "
    "max_tokens (chat.max_tokens, or max_tokens: in the chat's front matter)."
)
_CUT_NOTE = re.compile(r"^`{3,}sidekick max_tokens\s*$")


def cut_by_max_tokens(mirror: Any, call: ToolCall) -> bool:
    """Whether `call`'s message ends with the plugin's note that the reply was
    cut by chat.max_tokens (reply_stream writes it under such a reply)."""
    for message in mirror.chat().messages:
        if message.start_row <= call.start_row <= message.end_row:
            rows = mirror.lines[call.start_row : message.end_row + 1]
            return any(_CUT_NOTE.match(line) for line in rows)
    return False


def started_by(task: Any, call: ToolCall, agents: Any = None) -> bool:
    """Whether `task` is what `call`, as it reads now, started: the store keeps
    only a call's chat and id, which a later call may share (a reply reusing
    an earlier call's id after that call's block was deleted), so the tool and
    what it ran must match too: the command, or the agent and its message.
    (`agents`: the configured ones, by name.)"""
    params = call.params if isinstance(call.params, dict) else {}
    if task.tool != call.tool:
        return False
    if call.tool == "run_terminal_command":
        if (task.call_command or task.command) != params.get("command"):
            return False
        return ran_in(task.cwd, params.get("cwd"))
    if call.tool == "use_agent":
        agent, message = params.get("agent"), params.get("message")
        if not (isinstance(agent, str) and isinstance(message, str)):
            return False
        if task.label != label_for(agent, message):
            return False
        return asked(task.command, agent, message, agents)
    return True


def ran_in(task_cwd: str, cwd: Any) -> bool:
    """Whether a task that ran in `task_cwd` may be one of a call naming `cwd`
    (its parameter, relative to the chat's directory, which the store does
    not keep): an absolute `cwd` must be it, a relative one must end it."""
    if not isinstance(cwd, str) or not cwd or "\x00" in cwd or not task_cwd:
        return True  # the chat's directory, or a call that fails anyway
    path = os.path.normpath(os.path.expanduser(cwd))
    if os.path.isabs(path):
        return path == task_cwd
    if path == os.curdir or path.split(os.sep)[0] == os.pardir:
        return True  # the chat's directory decides: not known here
    return task_cwd == path or task_cwd.endswith(os.sep + path)


def asked(command: str, agent: str, message: str, agents: Any) -> bool:
    """Whether an agent's task, run as `command` and labelled as `agent` asked
    `message`, asked that very message: its label shows only the message's
    first words, and two messages may start alike. The command holds it whole,
    one argument of its own, or inside one as the agent's cmd puts it."""
    try:
        if message in shlex.split(command):
            return True
    except ValueError:
        pass
    configured = (agents or {}).get(agent)
    if configured is not None and configured.cmd:
        # as use_agent runs it: its program found on PATH (programs.py); as
        # it reads, for a task started before the program was looked up so
        program = agent_program(configured)
        spellings = [configured.cmd]
        if program is not None:
            spellings.append([program, *configured.cmd[1:]])
        for cmd in spellings:
            try:
                if build_command(cmd, message) == command:
                    return True
            except ValueError:
                pass
    # The agent's cmd changed since (or it is gone): the label says it all
    # only when it shows the whole message.
    return len(" ".join(message.split())) <= LABEL_CHARS


def unsaved_changes(path: str, bufs: list[int]) -> ToolResult:
    """The answer to a write of a file that Neovim holds unsaved changes to:
    written, it would lose the user's changes or theirs the tool's."""
    which = f"buffer {bufs[0]}" if len(bufs) == 1 else "buffers " + ", ".join(map(str, bufs))
    return ToolResult.fail(
        f"{path}: has unsaved changes in Neovim ({which}); nothing was written, so that "
        "neither those changes nor this edit is lost. Save or discard them (:w or :e!), "
        "then run the call again."
    )


def denied(reason: str, by: str = "policy") -> ToolResult:
    return ToolResult(status="denied", body=reason, fields={"reason": by})


@dataclass(eq=False)
class CallExecutor:
    ctx: CallContext
    marks: CallMarks

    async def run(
        self,
        tracked: Tracked,
        cwd: str,
        explicit: bool | None,
        found: Found | None = None,
        gate: asyncio.Future[None] | None = None,
    ) -> ToolResult | None:
        """Check, ask, run. The result to write, or None when nothing can be written.
        `explicit`: the user runs the call (True), the policy does (False), or the
        user does, but it runs as it would unasked where the policy approves it
        (None: checked again, hardened, under the auto-run time limit).
        `found`: the call as already read, else it is looked up again.
        `gate`: the call starts working once it is done (see Host._run_request).
        Nothing to write leaves the call free to be run again."""
        try:
            result = await self._run(tracked, cwd, explicit, found, gate)
        except BaseException:
            tracked.claimed = False
            raise
        if result is None:
            tracked.claimed = False
        return result

    async def _run(
        self,
        tracked: Tracked,
        cwd: str,
        explicit: bool | None,
        found: Found | None,
        gate: asyncio.Future[None] | None,
    ) -> ToolResult | None:
        found = found or await self.marks.find(tracked)
        if found is None:
            return None
        mirror, call = found
        problem = call_problem(call)
        if problem:
            if call.structural:
                # No block can be written safely: only the diagnostic says what is wrong.
                self.ctx.registry.state(tracked, "failed", detail=problem)
                self.ctx.port.notify_user(f"sidekick_tools: {problem}", "error")
                return None
            if problem.startswith("Malformed JSON") and cut_by_max_tokens(mirror, call):
                problem += CUT_SHORT
            return ToolResult(status="failed", body=problem, fields={})
        earlier = self.earlier_result(tracked, mirror.name, call)
        if earlier is not None:
            return earlier
        ctx = self.context(cwd, mirror.name, tracked.call_id)
        answer = None
        if explicit is not False:
            answer = await self.ask_policy(call, ctx)
            if answer == "deny":
                return denied("denied by the auto-accept policy")
        tool = tools.get_tool(call.tool)
        assert tool is not None  # call_problem checked it exists
        self.ctx.registry.state(tracked, "running", started_at=time.time())
        # The running state reaches Neovim before the tool starts: with the
        # reply of the request that started the call (the gate opens once that
        # is sent), else on its own.
        await (gate if gate is not None else asyncio.sleep(0))
        if explicit is None:  # as it would run unasked, when the policy approves it
            explicit = await judge(call.tool, call.params or {}, ctx, answer) != "approve"
        ctx.auto = not explicit  # approved by the policy, not run by the user's hand
        started = time.monotonic()
        result = await self._work(tool, call, ctx, tracked)
        if "duration" not in result.fields and call.tool != "run_terminal_command":
            result.fields["duration"] = round(time.monotonic() - started, 2)
        if result.status == "running":
            token = str(result.fields.get("task") or tracked.token or "") or None
            self.ctx.registry.bind(tracked, token)
        return result

    async def _work(
        self, tool: Any, call: ToolCall, ctx: ToolContext, tracked: Tracked
    ) -> ToolResult:
        """The tool's run. A file the call writes is not written while Neovim
        holds unsaved changes to it; once written, its buffers read it again."""
        params = call.params or {}
        written = tools.written_file(call.tool, params, ctx.cwd)
        held = await self.ctx.port.unsaved(written) if written is not None else []
        if held:
            return unsaved_changes(str(params.get("path")), held)
        try:
            result = await tool.run(params, ctx)
        except Exception as exc:  # a tool bug must not take the host down
            log.exception("tool %s failed on call %s", call.tool, tracked.call_id)
            return ToolResult(
                status="failed",
                body=f"Internal error in {call.tool}: {exc!r} (details in the host log)",
                fields={},
            )
        if written is not None and result.status == "completed":
            self.ctx.port.written(written)
        return result

    def earlier_result(self, tracked: Tracked, chat: str, call: ToolCall) -> ToolResult | None:
        """The result of the task this pending call already started, when that
        task's result never reached the chat (the host died before writing it,
        or an undo took the call away meanwhile): that task is the call's,
        running or ended. Running the call again would run it twice, and
        denying it would tell the model it never ran."""
        earlier = self._undelivered_task(chat, call)
        if earlier is None:
            return None
        self.ctx.registry.bind(tracked, earlier.id)
        result = tools.result_from_task(call.tool, earlier)
        result.fields.setdefault("task", earlier.id)
        return result

    def undelivered(self, task: Any, call: ToolCall) -> bool:
        """Whether `task`, found by `call`'s chat and id, is the task this pending
        call started and its result was never written (a result the user
        deleted was delivered: the call runs again). A task that was stopped
        (halted, or by `kill_on_exit` when its Neovim quit with the chat
        unsaved) did not do its work: running the call again is what the user
        asks for. A task of another call that had this id (a later reply
        reusing it, the chat started over in the same file) is not this one's."""
        if task is None or task.delivered or task.status is TaskStatus.CANCELLED:
            return False
        return started_by(task, call, self.ctx.config.agents)

    def _undelivered_task(self, chat: str, call: ToolCall) -> Any:
        """The task this pending call started before, if `undelivered`."""
        if call.result is not None or not call.call_id:
            return None
        try:
            task = self.ctx.tasks.find_by_call(chat, call.call_id)
        except Exception:  # an unreadable store must not stop the call
            log.warning("looking up earlier tasks of call %s failed", call.call_id, exc_info=True)
            return None
        return task if self.undelivered(task, call) else None

    def context(self, cwd: str, chat: str, call_id: str) -> ToolContext:
        return ToolContext(
            cwd=cwd, tasks=self.ctx.tasks, config=self.ctx.config, chat=chat, call_id=call_id
        )

    async def ask_policy(self, call: ToolCall, ctx: ToolContext) -> str | None:
        """The user's Lua policy function's answer, when one is configured."""
        if not self.ctx.config.auto_accept.has_policy:
            return None
        try:
            answer = await self.ctx.port.ask_policy(
                call.tool,
                call.params or {},
                {"cwd": ctx.cwd, "chat": ctx.chat, "call_id": ctx.call_id},
            )
        except Exception:
            log.exception("policy function failed")
            return None
        return answer if answer in ("approve", "deny") else None
