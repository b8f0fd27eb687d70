"""A reopened chat's running blocks: the follower takes up their tasks, and one
that ends while the call is being followed still gets its final block."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from sidekick_tools.buffers import BufferMirror
from sidekick_tools.calls.context import CallContext
from sidekick_tools.calls.follow import TaskFollower
from sidekick_tools.calls.registry import CallRegistry
from sidekick_tools.config import Config
from sidekick_tools.tasks.model import Task, TaskStatus

CHAT = "/w/chat.sidekick.md"
TOKEN = "877e4c"
LINES = [
    "USER: go",
    "",
    "ASSISTANT: On it.",
    "",
    "```tool run_terminal_command id=k2",
    '{"command": "make", "async": true}',
    "```",
    f"```result id=k2 status=running task={TOKEN}",
    "Started in the background.",
    "```",
]


class Port:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.mirrors: dict[int, BufferMirror] = {}  # none attached: no chat to wait for

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)


class Tasks:
    """The store's view: every `get` is a fresh copy, as SQLite gives it."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.listeners: list[Any] = []
        self.owner = task.owner  # this Neovim's, as the manager's own tasks are

    def subscribe(self, fn: Any) -> None:
        self.listeners.append(fn)

    def queued_tokens(self) -> list[str]:
        return []

    def get(self, token: str) -> Task | None:
        return dataclasses.replace(self.task) if token == self.task.id else None

    def end(self, code: int) -> None:
        self.task.status, self.task.exit_code = TaskStatus.FAILED, code
        self.task.ended_at = self.task.started_at + 1
        event = type("Event", (), {"kind": "finished", "task": dataclasses.replace(self.task)})
        for fn in self.listeners:
            fn(event)


class Writer:
    def __init__(self) -> None:
        self.written: list[tuple[Any, Any, list[str]]] = []

    def shown(self, result: Any, task: Any, lines: int) -> str:
        return result.body

    async def write_with_notice(self, tracked: Any, result: Any, notice: list[str]) -> bool:
        self.written.append((tracked, result, notice))
        return True


async def test_a_task_that_ends_while_its_call_is_taken_up_gets_its_final_block():
    task = Task(
        id=TOKEN,
        tool="run_terminal_command",
        command="make",
        status=TaskStatus.RUNNING,
        chat=CHAT,
        call_id="k2",
        started_at=100.0,
    )
    tasks, writer, port = Tasks(task), Writer(), Port()
    registry = CallRegistry(port)
    follower = TaskFollower(CallContext(port, registry, tasks, Config.from_dict({})), writer)

    async def prepare(buf: int, call: Any) -> Any:
        tracked = registry.follow(buf, call.call_id, call.tool, CHAT, registry.new_mark())
        await asyncio.sleep(0)  # the round trip to Neovim for the call's extmark
        tasks.end(5)  # the task ends meanwhile: its event finds a call not yet following
        return tracked

    mirror = BufferMirror(1, CHAT, LINES, 1)
    assert [call.call_id for call in mirror.chat().calls] == ["k2"]
    assert await follower.reattach(1, mirror, prepare) == {}
    (tracked, result, notice), *more = writer.written
    assert not more
    assert (tracked.call_id, result.status, result.fields["exit"]) == ("k2", "failed", 5)
    assert any(TOKEN in line and "failed" in line for line in notice)


async def test_a_gone_neovims_blocks_wait_for_a_look_under_way():
    """The Neovim that ran a chat's task is gone while a look at the chat is
    under way (begun while it ran: it leaves the block that Neovim's). The
    chat is looked at again once that look is over, not never."""
    from sidekick_tools.calls import CallRunner

    from tests.conftest import until

    reopened: list[int] = []

    class Runner:
        _reattaching = {7}

        def _reattach_soon(self, buf: int, reloaded: bool = False) -> None:
            reopened.append(buf)

        _reopen = CallRunner._reopen

    runner = Runner()
    runner._reopen(7)
    assert reopened == []  # a look is under way
    Runner._reattaching = set()
    await until(lambda: reopened == [7], timeout=10)  # at the next poll
