"""The call layer's writer puts results that arrive together into one edit of
the buffer, and its chain runs a call once the host's reply is sent.

The port is a stand-in for Neovim: a BufferMirror it edits itself, extmark rows
found by the call's header line, and a record of every edit applied.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sidekick_tools.buffers import BufferMirror
from sidekick_tools.calls import CallRunner, Tracked
from sidekick_tools.calls import execute as execute_mod
from sidekick_tools.calls import writer as writer_mod
from sidekick_tools.calls.marking import UserError
from sidekick_tools.chat import parse
from sidekick_tools.config import Config
from sidekick_tools.tools.base import ToolResult

BUF = 1
N = 6


def chat_lines(n: int) -> list[str]:
    lines = ["USER: go", "", "ASSISTANT: Running them.", ""]
    for i in range(n):
        lines += [f"```tool run_terminal_command id=c{i}", '{"command": "true"}', "```", ""]
    return lines


class Port:
    def __init__(self, lines: list[str]) -> None:
        self.mirrors = {BUF: BufferMirror(BUF, "chat.sidekick.md", lines, 1)}
        self.applied: list[list[tuple[int, int, list[str]]]] = []
        self.events: list[dict[str, Any]] = []
        self.on_buffer_change = None

    async def mark_rows(self, buf: int, marks: list[int]) -> dict[int, int]:
        await asyncio.sleep(0)  # a round trip: other coroutines run meanwhile
        chat = parse(self.mirrors[buf].lines)
        return {m: chat.call_by_id(f"c{m}").start_row for m in marks}

    async def mirror(self, buf: int) -> BufferMirror | None:
        return self.mirrors.get(buf)

    async def apply(
        self,
        buf: int,
        tick: int,
        edits: list[tuple[int, int, list[str]]],
        anchors: list[tuple[int, int]] | None = None,
    ) -> bool:
        await asyncio.sleep(0)
        mirror = self.mirrors[buf]
        if tick != mirror.tick:
            return False
        self.applied.append(edits)
        for start, end, lines in edits:  # CallRunner sends them bottom-up
            mirror.on_lines(mirror.tick + 1, start, end, lines)
        return True

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)


class Tasks:
    def subscribe(self, fn: Any) -> None:
        pass


async def write_staggered(gap: float, monkeypatch: pytest.MonkeyPatch) -> Port:
    """The first result, then the others one loop turn apart, as tasks end."""
    monkeypatch.setattr(writer_mod, "WRITE_GAP", gap)
    port = Port(chat_lines(N))
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    writes = []
    for i in range(N):
        tracked = Tracked(BUF, i, f"c{i}", "run_terminal_command", "chat.sidekick.md")
        writes.append(runner.writer.write(tracked, ToolResult.ok(f"out {i}")))
        await asyncio.sleep(0)
    assert await asyncio.gather(*writes) == [True] * N
    return port


async def test_a_burst_of_results_is_written_in_few_edits(monkeypatch):
    port = await write_staggered(0.5, monkeypatch)
    # what arrived in the first turn at once, then everything that arrived
    # during the gap in one edit (which also opens the next USER: message)
    assert len(port.applied) == 2
    assert port.mirrors[BUF].lines[-1] == "USER: "
    chat = parse(port.mirrors[BUF].lines)
    assert [c.result.body for c in chat.calls] == [f"out {i}" for i in range(N)]
    assert [c.result.status for c in chat.calls] == ["completed"] * N
    done = [e["mark"] for e in port.events if e.get("state") == "completed"]
    assert sorted(done) == list(range(N))


async def test_without_a_gap_each_turn_writes_what_it_has(monkeypatch):
    port = await write_staggered(0.0, monkeypatch)
    assert len(port.applied) > 2  # the same arrivals, more edits: the gap is what batches
    chat = parse(port.mirrors[BUF].lines)
    assert [c.result.body for c in chat.calls] == [f"out {i}" for i in range(N)]


async def test_a_gated_call_shows_running_and_starts_when_the_gate_opens(monkeypatch):
    """The host answers :SidekickRunTool (with the running state) before the
    call's tool starts: the first call waits on a gate the host opens once the
    reply is sent."""
    port = Port(chat_lines(1))
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    started: list[dict[str, Any]] = []

    class Tool:
        async def run(self, params: dict[str, Any], ctx: Any) -> ToolResult:
            started.append(params)
            return ToolResult.ok("done")

    monkeypatch.setattr(execute_mod.tools, "get_tool", lambda name: Tool())
    mirror = port.mirrors[BUF]
    call = mirror.chat().calls[0]
    tracked = Tracked(BUF, 0, "c0", "run_terminal_command", "chat.sidekick.md")
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    run = asyncio.ensure_future(
        runner.chain.executor.run(tracked, "/", explicit=False, found=(mirror, call), gate=gate)
    )
    for _ in range(10):
        await asyncio.sleep(0)
    assert [e["state"] for e in port.events if e["type"] == "call"] == ["running"]
    assert started == [] and not run.done()
    gate.set_result(None)
    result = await run
    assert started == [{"command": "true"}]
    assert result.body == "done"


async def test_two_answers_for_one_call_in_one_batch_leave_one_result_block():
    """Two followers of one call (one replaced the other) each send an answer
    in the same turn: the second replaces the first, never a second block."""
    port = Port(chat_lines(1))
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    old = Tracked(BUF, 0, "c0", "run_terminal_command", "chat.sidekick.md")
    new = Tracked(BUF, 0, "c0", "run_terminal_command", "chat.sidekick.md")
    writes = [
        runner.writer.write(old, ToolResult(status="failed", body="first", fields={})),
        runner.writer.write(new, ToolResult(status="denied", body="second", fields={})),
    ]
    assert await asyncio.gather(*writes) == [True, True]
    text = "\n".join(port.mirrors[BUF].lines)
    assert text.count("```result id=c0") == 1
    (call,) = parse(port.mirrors[BUF].lines).calls
    assert (call.result.status, call.result.body) == ("denied", "second")


async def test_a_call_the_chain_takes_while_the_user_starts_it_is_said_to_run():
    """:SidekickRunTool on a call the chain is starting at that very moment (a
    safe call after the one that just ended): it runs once, and the user is
    told it runs, not that it changed."""
    port = Port(chat_lines(1))
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    call = port.mirrors[BUF].chat().calls[0]
    took, user = await asyncio.gather(
        runner.chain.marks.prepare(BUF, call),  # the chain, a moment earlier
        runner.chain.run_tool(BUF, call.start_row, "/"),
        return_exceptions=True,
    )
    assert isinstance(took, Tracked) and took.claimed
    assert isinstance(user, UserError) and "c0 is already running" in str(user)


async def test_a_result_the_writer_failed_on_leaves_its_call_free_and_is_said():
    port = Port(chat_lines(1))
    told: list[str] = []
    port.notify_user = lambda msg, level: told.append(msg)  # type: ignore[attr-defined]
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    call = port.mirrors[BUF].chat().calls[0]
    tracked = await runner.chain.marks.prepare(BUF, call)
    assert tracked is not None and runner.chain.marks.busy(BUF, call) is tracked

    async def broken(buf: int, batch: list) -> list:
        raise RuntimeError("a bug")

    runner.writer._write_batch = broken  # type: ignore[method-assign]
    assert await runner.writer.write(tracked, ToolResult.ok("out")) is False
    assert runner.chain.marks.busy(BUF, call) is None  # it can be run again
    assert any("not written: an internal error" in m for m in told)


async def test_the_consent_question_lists_a_call_to_an_agent_not_configured_as_unable_to_run():
    lines = ["USER: go", "", "ASSISTANT: Asking.", ""]
    lines += ["```tool use_agent id=c0", '{"agent": "nosuch", "message": "fix it"}', "```", ""]
    config = Config.from_dict({"agents": {"helper": {"cmd": ["true", "{message}"]}}})
    runner = CallRunner(Port(lines), Tasks(), config)
    (entry,) = await runner.batch.plan(BUF, "/")
    assert entry["problem"] == 'Unknown agent "nosuch". Configured agents: helper.'
