"""use_agent: delegate a message to a configured agent CLI, run as a task.

``config.agents[name].cmd`` is an argv list; every ``{message}`` inside an item
is replaced by the message (an item may hold more text around it). When no
item holds ``{message}``, the message is appended after ``--``, the end of
options (see `build_command`: a message never becomes an option). Each
item is quoted with `shlex.quote`, so the message reaches the agent as one
argument whatever it contains. The agent's ``env`` is added to the host's
environment (plus ``SIDEKICK_AGENT=<name>``); it runs in the agent's ``cwd``
(relative to the chat's directory, ``~`` expanded) or the chat's directory.

Hybrid execution exactly like run_terminal_command. The result is the agent's
summary (the manager's: ANSI stripped; the last ``[RESULT]`` section, else what
follows the last ``> `` prompt line, else the tail), not its transcript, with
``exit=N``; a non-zero exit is ``failed``.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from ..chat.render import join_streams
from ..programs import find_program, not_found
from ..tasks.on_exit_summarize import split_summary, stderr_summary
from . import _fs, _tasks
from . import run_terminal_command as rtc
from .base import Streams, ToolContext, ToolResult
from .schema import number, object_schema, string, validate

PLACEHOLDER = "{message}"
LABEL_CHARS = 80

_SETUP_HINT = 'setup({ agents = { name = { cmd = { "my-agent", "-p", "--", "{message}" } } } })'


class UseAgent:
    name = "use_agent"
    description = "Delegate a task to a configured agent CLI; answers with the agent's summary."
    schema = object_schema(
        {
            "agent": string(
                "Name of a configured agent (setup({ agents = {...} })).",
                min_length=1,
                max_length=200,
            ),
            "message": string("What the agent should do; passed as one argument.", min_length=1),
            "async": rtc.ASYNC_SCHEMA,
            "timeout_seconds": number(
                "Kill the agent after this many seconds (default {tasks.default_timeout}).",
                exclusive_minimum=0,
            ),
        },
        required=["agent", "message"],
    )

    def setup_problem(self, params: dict[str, Any], config: Any) -> str | None:
        """An agent the setup does not configure, or a message its cmd cannot
        take (one starting with "-" where it would be read as an option): the
        call can only fail."""
        name = params.get("agent")
        if not isinstance(name, str):
            return None
        agent = config.agents.get(name)
        if agent is None:
            return unknown_agent(name, sorted(config.agents))
        message = params.get("message")
        if isinstance(message, str) and agent.cmd:
            try:
                build_command(list(agent.cmd), message)
            except ValueError as e:
                return f'agent "{name}": {e}'
        return None

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        name = params.get("agent")
        agent = ctx.config.agents.get(name) if isinstance(name, str) else None
        return bool(agent is not None and agent.auto_accept)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        name: str = params["agent"]
        message: str = params["message"]
        if not message.strip():
            return ToolResult.fail('parameter "message": must not be blank')
        if "\x00" in message:
            return ToolResult.fail('parameter "message": must not contain a NUL character')
        agents = ctx.config.agents
        agent = agents.get(name)
        if agent is None:
            return ToolResult.fail(unknown_agent(name, sorted(agents)), reason="unknown_agent")
        if not agent.cmd:
            return ToolResult.fail(
                f'agent "{name}" has an empty cmd; configure it as {_SETUP_HINT}',
                reason="bad_config",
            )

        try:
            cwd = _fs.resolve(agent.cwd, ctx.cwd) if agent.cwd else os.path.abspath(ctx.cwd)
        except _fs.PathError as e:
            return ToolResult.fail(f'agent "{name}": cwd {e}', reason="bad_config")
        if not os.path.isdir(cwd):
            what = "is not a directory" if os.path.exists(cwd) else "does not exist"
            return ToolResult.fail(
                f'agent "{name}": working directory {cwd} {what}', reason="bad_config"
            )

        program = agent_program(agent)
        if program is None:
            return ToolResult.fail(
                f'agent "{name}": {not_found(str(agent.cmd[0]))}', reason="bad_config"
            )
        try:
            command = build_command([program, *agent.cmd[1:]], message)
        except ValueError as e:
            return ToolResult.fail(f'agent "{name}": {e}', reason="bad_message")
        env = agent_env(agent)
        env["SIDEKICK_AGENT"] = name
        timeout = params.get("timeout_seconds")
        spec = rtc.TaskSpec(
            tool=self.name,
            label=label_for(name, message),
            command=command,
            cwd=cwd,
            env=env,
            timeout=float(timeout) if timeout else None,
            chat=ctx.chat,
            call_id=ctx.call_id,
        )
        return await rtc.run_as_task(
            ctx, spec, params.get("async"), result_from_task, f'could not start agent "{name}"'
        )

    def result_from_task(self, task: Any) -> ToolResult:
        return result_from_task(task)


def build_command(cmd: list[str], message: str) -> str:
    """The shell command line for argv ``cmd`` with ``{message}`` substituted.

    The message must stay an argument: the agent CLI must never read it as an
    option (a message "--dangerously-skip-permissions ..." from a model, say).
    Without a ``{message}`` item it is appended after ``--`` (the end of
    options). A ``{message}`` item of its own, with no ``--`` before it, takes
    no message starting with ``-``: ValueError says how to configure the agent.
    An item with text around ``{message}`` (``--prompt={message}``) is safe."""
    argv = [str(part) for part in cmd]
    if not any(PLACEHOLDER in part for part in argv):
        return " ".join(shlex.quote(part) for part in [*argv, "--", message])
    if message.startswith("-"):
        for part in argv:
            if part == "--":
                break
            if part == PLACEHOLDER:
                raise ValueError(
                    'the message starts with "-", which the agent CLI would read as an '
                    'option: put "--" (the end of options) before "{message}" in the '
                    'agent\'s cmd, e.g. { "claude", "-p", "--", "{message}" }'
                )
    argv = [part.replace(PLACEHOLDER, message) for part in argv]
    return " ".join(shlex.quote(part) for part in argv)


def agent_env(agent: Any) -> dict[str, str]:
    """The variables an agent's configuration adds to its environment."""
    return {str(k): str(v) for k, v in (agent.env or {}).items()}


def agent_program(agent: Any) -> str | None:
    """The absolute path of an agent's program, as it is run: found on the PATH
    its own env gives, else the host's (`programs.find_program`)."""
    return find_program(str(agent.cmd[0]), agent_env(agent).get("PATH"))


def label_for(name: str, message: str) -> str:
    return f"{name}: {_tasks.short_label(message, LABEL_CHARS)}"


def unknown_agent(name: str, known: list[str]) -> str:
    if known:
        return f'Unknown agent "{name}". Configured agents: {", ".join(known)}.'
    return (
        f'Unknown agent "{name}": no agents are configured. '
        f"Configure one in Neovim with require('sidekick_tools').{_SETUP_HINT}"
    )


def result_from_task(task: Any) -> ToolResult:
    """The result block of an agent's task: its summary, ``exit=N``, duration.

    ``completed`` for exit 0, ``cancelled`` when halted, else ``failed`` (with
    ``reason=`` when it did not simply exit: timeout, signal...).
    """
    if _tasks.status_of(task) not in _tasks.TERMINAL:
        return rtc.running_result(task)
    status, reason, fields = rtc.final_status(task)

    body = _tasks.summary(task).strip("\n")
    if not body.strip():
        # an agent that never started printed nothing either: the note says why
        body = "(the agent printed nothing)" if task.started_at is not None else ""
    out, err = body, ""
    if _tasks.status_of(task) != "completed":  # the summary may end with stderr's tail
        out, err = split_summary(body, stderr_summary(task))
    error = task.error
    note = f"[{error}]" if status != "completed" and error and str(error) not in body else ""
    if note and reason == "cancelled":  # stopped by the plugin: as a command's result says it
        note = f"[cancelled: {error}]"
    streams = Streams(out, err, note)
    return ToolResult(status, join_streams(out, err, note), fields, streams=streams)


TOOL = UseAgent()
