"""A pending call whose task ran unseen gets that task's result (on open, on
send, when run): only a task this very call started, never one of an earlier
call that had the same id (a later reply reusing it, the chat started over in
the same file), nor, unasked, one in a buffer without a name."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sidekick_tools.buffers import BufferMirror
from sidekick_tools.tasks.model import Task, TaskStatus
from sidekick_tools.tools.base import ToolResult

from tests.unit.test_calls_send_queue import BUF, call, runner_for, running, settle, told

CHAT = "chat.sidekick.md"


class Tasks:
    """The store: the tasks given, found by (chat, call id) as SQLite finds them."""

    owner = "1:me"  # this Neovim

    def __init__(self, *tasks: Task) -> None:
        self.tasks = list(tasks)

    def subscribe(self, fn: Any) -> None:
        pass

    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        found = [t for t in self.tasks if (t.chat, t.call_id) == (chat, call_id)]
        return max(found, key=lambda t: t.created_at) if found else None

    def list(self, chats: Any = None, limit: Any = None, **_: Any) -> list[Task]:
        return [t for t in self.tasks if chats is None or t.chat in chats]

    def get(self, token: str) -> Task | None:
        return next((t for t in self.tasks if t.id == token), None)

    def mark_delivered(self, token: str) -> bool:
        task = self.get(token)
        if task is not None:
            task.delivered = True
        return task is not None

    def queued_tokens(self) -> list[str]:
        return []


def ended(tmp: Path, token: str, command: str, out: str, chat: str = CHAT) -> Task:
    """A task of call c1 of `chat` that ended while no host followed it."""
    log_dir = tmp / token
    log_dir.mkdir()
    (log_dir / "stdout").write_text(out)
    (log_dir / "stderr").write_text("")
    now = time.time()
    return Task(
        id=token,
        tool="run_terminal_command",
        command=command,
        status=TaskStatus.COMPLETED,
        exit_code=0,
        chat=chat,
        call_id="c1",
        created_at=now - 10,
        started_at=now - 10,
        ended_at=now - 9,
        log_dir=str(log_dir),
        owner=Tasks.owner,
    )


def chat_with(command: str) -> list[str]:
    lines = ["USER: go", "", "ASSISTANT: Running.", ""]
    lines += call("run_terminal_command", "c1", f'{{"command": "{command}"}}')
    return lines + ["USER: "]


async def opened_with(lines: list[str], task: Task, name: str = CHAT) -> str:
    """The chat's text once a host has seen it opened, `task` in its store
    (`name`: the chat's buffer name)."""
    runner, port, _ = runner_for(lines)
    port.mirrors[BUF] = BufferMirror(BUF, name, lines, 1)
    runner.ctx.tasks = runner.chain.ctx.tasks = Tasks(task)
    await runner.chat_opened(BUF)
    await settle(runner)
    return "\n".join(port.mirrors[BUF].lines)


async def test_a_reused_id_does_not_get_the_earlier_calls_output_on_open(tmp_path):
    """c1 ran `cat secrets.txt`; its block was deleted while it ran (the chat
    started over in the same file), so its result was never written. A later
    reply's call reuses the id c1 for `ls`: opening the chat must not write
    the old command's output into it, as if `ls` had printed it."""
    task = ended(tmp_path, "aaa111", "cat secrets.txt", "the old command's output\n")
    text = await opened_with(chat_with("ls"), task)
    assert "the old command's output" not in text
    assert "```result" not in text


async def test_a_reused_id_is_denied_on_send_not_given_the_earlier_calls_output(tmp_path):
    task = ended(tmp_path, "aaa111", "cat secrets.txt", "the old command's output\n")
    runner, port, sent = runner_for(chat_with("ls"))
    runner.ctx.tasks = Tasks(task)
    await runner.loop.send(BUF, "/")
    await settle(runner)
    text = "\n".join(port.mirrors[BUF].lines)
    assert "the old command's output" not in text
    assert "status=denied" in text


async def test_the_call_that_started_the_task_gets_its_result_on_open(tmp_path):
    task = ended(tmp_path, "aaa111", "make", "built\n")
    runner, port, _ = runner_for(chat_with("make"))
    runner.ctx.tasks = Tasks(task)
    await runner.chat_opened(BUF)
    await settle(runner)
    text = "\n".join(port.mirrors[BUF].lines)
    assert "```result id=c1 status=completed" in text and "built" in text
    assert task.delivered


async def test_a_send_waiting_when_its_chat_was_closed_does_not_go_when_it_is_reopened(tmp_path):
    """:SidekickSend while c1 runs queues the send; the user then closes the
    chat (:bdelete), so c1's result cannot be written. Reopening the chat later
    writes c1's result (its task ran unseen): that must not send the chat by
    itself, hours after the user walked away from it."""
    lines = chat_with("make")
    lines[-1] = "USER: and then?"
    runner, port, sent = runner_for(lines)
    tracked = await running(runner, "c1")
    await runner.loop.send(BUF, "/")
    await settle(runner)
    assert runner.loop.sessions[BUF].send_queued
    closed = port.mirrors.pop(BUF)  # unloaded
    await runner.chain.deliver(tracked, ToolResult.ok("built"))
    await settle(runner)
    assert sent == [] and told(port, "the chat was closed; it was not sent")
    task = ended(tmp_path, "aaa111", "make", "built\n")
    runner.ctx.tasks = Tasks(task)
    port.mirrors[BUF] = BufferMirror(BUF, CHAT, list(closed.lines), 1)  # :edit again
    await runner.chat_opened(BUF)
    await settle(runner)
    assert "```result id=c1 status=completed" in "\n".join(port.mirrors[BUF].lines)
    assert sent == []


@pytest.mark.parametrize("saved", [True, False, "in text only"])
async def test_a_result_lost_to_a_closed_chat_says_it_is_written_when_the_chat_is_opened(
    tmp_path, saved
):
    """A call waited for (no running block) ends after its chat was closed: its
    task's result is written when the chat is opened again, which is what the
    user is told (as for a background call), not that it is lost; unless the
    chat was closed before the call's id (given when it ran) was saved: then
    the call reads as never run, and the user is told that."""
    lines = chat_with("make")
    runner, port, _ = runner_for(lines)
    tracked = await running(runner, "c1")
    path = tmp_path / "chat.sidekick.md"
    unsaved = [x.replace(" id=c1", "") for x in lines]
    if saved == "in text only":  # the id in the chat's text, not on the call's header
        unsaved.insert(0, "USER: what did id=c1 do?")
    path.write_text("\n".join(lines if saved is True else unsaved))
    tracked.chat = str(path)
    port.mirrors.pop(BUF)  # unloaded
    result = ToolResult(status="completed", body="built", fields={"exit": 0, "task": "aaa111"})
    await runner.chain.deliver(tracked, result)
    await settle(runner)
    if saved is True:
        assert told(port, "not written: its chat is no longer loaded; it is written when you open")
    else:
        assert told(port, "closed before the call's id was saved, so opened again the call reads")


def agent_ended(tmp: Path, message: str, out: str, agent: str = "rev") -> Task:
    """A use_agent task of call c1 (agent `agent` asked `message`) that ended
    while no host followed it."""
    from sidekick_tools.tools.use_agent import build_command, label_for

    task = ended(tmp, "bbb222", "", out)
    task.tool = "use_agent"
    task.command = build_command(["rev-cli", "-p", "--", "{message}"], message)
    task.label = label_for(agent, message)
    return task


def agent_chat(message: str, agent: str = "rev") -> list[str]:
    body = json.dumps({"agent": agent, "message": message})
    lines = ["USER: go", "", "ASSISTANT: Asking.", ""]
    return [*lines, *call("use_agent", "c1", body), "USER: "]


async def test_a_reused_id_asking_an_agent_more_than_its_label_shows_is_not_given_the_output(
    tmp_path,
):
    """An agent's task keeps, besides its command, a label with the message's
    first 80 characters: a later call reusing the id whose message differs
    only past them asked something else, and must not get that answer."""
    same_start = "Review the changes in src/sidekick/calls and report every problem you find in "
    task = agent_ended(tmp_path, same_start + "the tests only.", "the old agent's answer\n")
    text = await opened_with(agent_chat(same_start + "the code, then delete the branch."), task)
    assert "the old agent's answer" not in text
    assert "```result" not in text


async def test_the_agent_call_that_started_the_task_gets_its_result_on_open(tmp_path):
    message = "Review the changes in src/sidekick/calls and report every problem you find, please."
    task = agent_ended(tmp_path, message, "[RESULT]\nall good\n")
    text = await opened_with(agent_chat(message), task)
    assert "```result id=c1" in text and "all good" in text
    assert task.delivered


async def test_a_reused_id_running_the_command_elsewhere_is_not_given_the_output(tmp_path):
    """The same command in another directory (`ls` in /etc, not the project's)
    is another question: the earlier task's listing is not its answer."""
    task = ended(tmp_path, "aaa111", "ls", "the project's files\n")
    task.cwd = str(tmp_path)
    lines = ["USER: go", "", "ASSISTANT: Listing.", ""]
    lines += call("run_terminal_command", "c1", '{"command": "ls", "cwd": "/etc"}')
    text = await opened_with([*lines, "USER: "], task)
    assert "the project's files" not in text
    assert "```result" not in text


async def test_the_call_naming_where_its_task_ran_gets_its_result_on_open(tmp_path):
    (tmp_path / "sub").mkdir()
    task = ended(tmp_path, "aaa111", "ls", "built\n")
    task.cwd = str(tmp_path / "sub")
    lines = ["USER: go", "", "ASSISTANT: Listing.", ""]
    lines += call("run_terminal_command", "c1", '{"command": "ls", "cwd": "./sub/"}')
    text = await opened_with([*lines, "USER: "], task)
    assert "```result id=c1 status=completed" in text and "built" in text


async def test_a_buffer_without_a_name_gets_no_result_unasked(tmp_path):
    """Every chat buffer without a name is the chat "" in the store: a task of
    another such buffer with the same call id and command cannot be told from
    this one's, so a host seeing it writes nothing into it by itself."""
    task = ended(tmp_path, "aaa111", "make", "another buffer's output\n", chat="")
    assert "```result" not in await opened_with(chat_with("make"), task, name="")


def test_an_agents_task_is_known_by_its_command_with_the_program_found_on_path(
    tmp_path, monkeypatch
):
    """use_agent runs the agent's program by the absolute path it found on
    PATH: a task is still known as the call's that asked its message (a
    message inside an item, past what the label shows), so a call taken up
    again after a restart gets its result instead of asking the agent twice."""
    from sidekick_tools.calls.execute import asked
    from sidekick_tools.config import AgentConfig
    from sidekick_tools.tools.use_agent import build_command

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "rev-cli"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    message = "Review every change in src/sidekick/calls and report each problem you find. " * 3
    agents = {"rev": AgentConfig(cmd=["rev-cli", "--prompt={message}"])}
    command = build_command([str(program), "--prompt={message}"], message)
    assert asked(command, "rev", message, agents)
    assert not asked(command, "rev", message + " Then delete the branch.", agents)
