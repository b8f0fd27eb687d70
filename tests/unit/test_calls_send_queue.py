""":SidekickSend while calls of the last reply run (DESIGN §10): the send waits
for their results; what else is pending is denied; :SidekickStop cancels it.

The port stands in for Neovim: a BufferMirror it edits itself, extmarks that
move with its edits, and the notifications said. The request itself is not
built: `_send` is recorded.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sidekick_tools.buffers import BufferMirror
from sidekick_tools.calls import CallRunner
from sidekick_tools.calls.loop import Session
from sidekick_tools.config import Config
from sidekick_tools.tools.base import ToolResult

from tests.conftest import until

BUF = 1


class Port:
    def __init__(self, lines: list[str]) -> None:
        self.mirrors = {BUF: BufferMirror(BUF, "chat.sidekick.md", lines, 1)}
        self.marks: dict[int, int] = {}
        self.events: list[dict[str, Any]] = []
        self.told: list[tuple[str, str]] = []
        self.on_buffer_change = None

    async def mirror(self, buf: int) -> BufferMirror | None:
        return self.mirrors.get(buf)

    async def mark_rows(self, buf: int, marks: list[int]) -> dict[int, int]:
        await asyncio.sleep(0)
        return {m: self.marks.get(m, -1) for m in marks}

    def edit(self, start: int, end: int, lines: list[str]) -> None:
        mirror = self.mirrors[BUF]
        mirror.on_lines(mirror.tick + 1, start, end, lines)
        shift = len(lines) - (end - start)
        for mark, row in list(self.marks.items()):
            if row >= end:
                self.marks[mark] = row + shift
            elif start <= row < end and shift < 0 and row >= start + len(lines):
                del self.marks[mark]  # its row was deleted

    async def apply(self, buf: int, tick: int, edits: list, anchors: list | None = None) -> bool:
        await asyncio.sleep(0)
        if tick != self.mirrors[buf].tick:
            return False
        for start, end, lines in edits:  # bottom-up
            self.edit(start, end, lines)
        for mark, row in anchors or []:
            self.marks[mark] = row
        return True

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def notify_user(self, msg: str, level: str) -> None:
        self.told.append((msg, level))


class Tasks:
    def subscribe(self, fn: Any) -> None:
        pass

    def find_by_call(self, chat: str, call_id: str) -> None:
        return None

    def get(self, token: str) -> None:
        return None


def runner_for(lines: list[str], stub: bool = True) -> tuple[CallRunner, Port, list[Session]]:
    """`stub`: the request is recorded, not built (else it is built, and a
    chat that cannot be sent says why)."""
    port = Port(lines)
    runner = CallRunner(port, Tasks(), Config.from_dict({}))
    sent: list[Session] = []
    real = runner.loop._send

    async def send(session: Session) -> dict[str, Any]:
        sent.append(session)
        return {} if stub else await real(session)

    runner.loop._send = send  # type: ignore[method-assign]
    return runner, port, sent


async def running(runner: CallRunner, call_id: str) -> Any:
    """The call as a run started it: prepared (claimed), its state running."""
    call = runner.port.mirrors[BUF].chat().call_by_id(call_id)
    tracked = await runner.chain.marks.prepare(BUF, call)
    assert tracked is not None
    runner.registry.state(tracked, "running")
    return tracked


async def settle(runner: CallRunner) -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.gather(*runner.loop._bg, return_exceptions=True)


async def c1_runs_c2_pending() -> tuple[CallRunner, Port, list[Session], Any]:
    """A reply with c1 (running) and c2 (pending, needing consent), the
    user's USER: line empty: the runner, its port, the sends, c1's follower."""
    lines = ["USER: go", "", "ASSISTANT: Two.", ""]
    lines += call("run_terminal_command", "c1")
    lines += call("run_terminal_command", "c2", '{"command": "rm -rf x"}')
    runner, port, sent = runner_for([*lines, "USER: "])
    return runner, port, sent, await running(runner, "c1")


def two_makes() -> list[str]:
    """A reply with two calls, c1 `make a` and c2 `make b`."""
    lines = ["USER: go", "", "ASSISTANT: Two.", ""]
    lines += call("run_terminal_command", "c1", '{"command": "make a"}')
    return lines + call("run_terminal_command", "c2", '{"command": "make b"}')


def call(tool: str, call_id: str, body: str = '{"command": "make"}') -> list[str]:
    return [f"```tool {tool} id={call_id}", body, "```", ""]


def told(port: Port, words: str) -> list[str]:
    return [m for m, _ in port.told if words in m]


async def test_a_later_block_repeating_a_running_calls_id_is_not_said_to_run():
    """A reply (hostile, or a model reusing ids) repeats the id of a call of an
    earlier turn whose task runs in the background. The repeat never runs (its
    id is a duplicate): a send must not wait for it, which would wait forever,
    but say what is wrong with the chat."""
    lines = ["USER: go", "", "ASSISTANT: Starting.", ""]
    lines += call("run_terminal_command", "c_bg")[:3]
    lines += ["```result id=c_bg status=running task=abc123", "Started.", "```", ""]
    lines += ["USER: and?", "", "ASSISTANT: Again.", ""]
    lines += call("run_terminal_command", "c_bg", '{"command": "ls"}')
    lines += ["USER: "]
    runner, port, sent = runner_for(lines, stub=False)
    await running(runner, "c_bg")
    await runner.loop.send(BUF, "/")
    await settle(runner)
    session = runner.loop.sessions[BUF]
    assert not told(port, "still running") and not session.send_queued
    assert sent == [session]
    assert told(port, "without a result")  # the request could not be built: said


async def test_a_send_waiting_for_a_call_whose_block_was_deleted_goes_when_it_ends():
    """The user sends while c1 runs, then deletes c1's block: its result cannot
    be written (said). The send still goes then, not never, nor later when
    some other result is written (an old call run again) with whatever the
    user has typed by then."""
    lines = ["USER: go", "", "ASSISTANT: Running.", ""]
    lines += call("run_terminal_command", "c1")
    lines += ["USER: and then?"]
    runner, port, sent = runner_for(lines)
    tracked = await running(runner, "c1")
    await runner.loop.send(BUF, "/")
    await settle(runner)
    assert told(port, "c1 still running") and sent == []
    port.edit(4, 8, [])  # the user deletes the call's block
    await runner.chain.deliver(tracked, ToolResult.ok("done"))
    await settle(runner)
    assert told(port, "not written")
    assert sent == [runner.loop.sessions[BUF]]


async def test_a_stop_while_a_send_denies_pending_calls_cancels_it():
    """:SidekickSend denies c2 while c1 runs; :SidekickStop comes while the
    denial is being written: the send must not be queued after the stop
    (nor go when c1 ends)."""
    runner, port, sent, tracked = await c1_runs_c2_pending()
    sending = asyncio.ensure_future(runner.loop.send(BUF, "/"))
    for _ in range(100):  # until the denial of c2 is on its way
        await asyncio.sleep(0)
        c2 = runner.registry.get(BUF, "c2")
        if c2 is not None and c2.answering:
            break
    assert c2 is not None and c2.answering and not sending.done()
    runner.loop.stop(BUF)
    await sending
    assert "status=denied" in "\n".join(port.mirrors[BUF].lines)
    assert not runner.loop.sessions[BUF].send_queued
    await runner.chain.deliver(tracked, ToolResult.ok("done"))
    await settle(runner)
    assert sent == []


class Tool:
    """A tool that runs until the test lets it end."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run(self, params: dict[str, Any], ctx: Any) -> ToolResult:
        self.started.append(params)
        await self.gate
        return ToolResult.ok(f"ran {params['command']}")


def gated_tools(monkeypatch: Any) -> Tool:
    from sidekick_tools.calls import execute

    tool = Tool()
    monkeypatch.setattr(execute.tools, "get_tool", lambda name: tool)
    return tool


async def test_a_send_during_a_batch_runs_the_calls_queued_in_it_first(monkeypatch):
    """:SidekickRunTools runs c1 and c2 (the user agreed to both); :SidekickSend
    while c1 runs and c2 waits its turn: c2 is not denied (telling the model
    the user went on without it would be false); the chat goes once both
    have their results."""
    tool = gated_tools(monkeypatch)
    lines = two_makes()
    lines += ["USER: and then?"]
    runner, port, sent = runner_for(lines)
    await runner.batch.run_tools(BUF, "/")
    # c1 starts once the policy has judged it, in a worker thread: the first one
    # a process starts takes more than a few loop turns
    await until(lambda: tool.started)
    assert tool.started == [{"command": "make a"}]
    await runner.loop.send(BUF, "/")
    assert told(port, "c1, c2 still running") and sent == []
    tool.gate.set_result(None)
    await until(lambda: sent)
    text = "\n".join(port.mirrors[BUF].lines)
    assert "status=denied" not in text
    assert "ran make a" in text and "ran make b" in text
    assert sent == [runner.loop.sessions[BUF]]


async def test_a_queued_send_is_given_up_when_what_is_missing_needs_the_user():
    """Send while c1 runs; c2 is denied; the user undoes the denial. When c1
    ends, c2 has no result and nothing brings one: the send is given up, said,
    and does not go later when the user runs c2 by hand."""
    runner, port, sent, tracked = await c1_runs_c2_pending()
    await runner.loop.send(BUF, "/")
    await settle(runner)
    assert told(port, "c1 still running")
    denial = port.mirrors[BUF].lines.index("```result id=c2 status=denied reason=user")
    port.edit(denial, denial + 4, [])  # the undo: c2 pending again
    assert port.mirrors[BUF].chat().call_by_id("c2").result is None
    await runner.chain.deliver(tracked, ToolResult.ok("done"))
    await settle(runner)
    session = runner.loop.sessions[BUF]
    assert told(port, "the chat was not sent: c2 without a result")
    assert not session.send_queued and sent == []
    # c2 answered by hand later: nothing goes by itself
    c2 = await runner.chain.marks.prepare(BUF, port.mirrors[BUF].chat().call_by_id("c2"))
    await runner.chain.deliver(c2, ToolResult.ok("by hand"))
    await settle(runner)
    assert sent == []


async def test_a_batch_whose_chat_went_away_leaves_no_call_taken(monkeypatch):
    """:SidekickRunTools prepared c1 and c2, then its chat could not be read:
    neither is left taken (:SidekickRunTool would say "already running" for
    ever) nor queued."""
    gated_tools(monkeypatch)
    lines = two_makes()
    runner, port, _ = runner_for(lines)
    real = port.mirror
    calls = 0

    async def mirror(buf: int) -> Any:
        nonlocal calls
        calls += 1
        if calls > 3:  # after run_tools looked: the batch's own look fails
            raise RuntimeError("buffer unloaded")
        return await real(buf)

    port.mirror = mirror  # type: ignore[method-assign]
    await runner.batch.run_tools(BUF, "/")
    await asyncio.gather(*runner.chain._bg, return_exceptions=True)
    chat = (await real(BUF)).chat()
    for call_id in ("c1", "c2"):
        assert runner.chain.marks.busy(BUF, chat.call_by_id(call_id)) is None
        assert runner.registry.get(BUF, call_id) is None


async def test_run_tools_failing_while_it_takes_its_calls_leaves_none_taken(monkeypatch):
    """:SidekickRunTools took c1, then taking c2 failed (its chat unloaded, an
    RPC error): c1 must not stay taken for a batch that never runs, where
    :SidekickRunTool and :SidekickDeny would say it "already runs" for ever."""
    gated_tools(monkeypatch)
    lines = two_makes()
    runner, port, _ = runner_for(lines)
    real = port.apply
    applied = 0

    async def apply(*args: Any, **kwargs: Any) -> bool:
        nonlocal applied
        applied += 1
        if applied == 2:
            raise RuntimeError("buffer unloaded")
        return await real(*args, **kwargs)

    port.apply = apply  # type: ignore[method-assign]
    try:
        await runner.batch.run_tools(BUF, "/")
    except RuntimeError:
        pass
    chat = port.mirrors[BUF].chat()
    assert runner.chain.marks.busy(BUF, chat.call_by_id("c1")) is None
    await runner.chain.deny(BUF, chat.call_by_id("c1").start_row)


async def test_a_block_reusing_a_deleted_running_calls_id_gets_none_of_its_result():
    """c1 runs `cat secrets.txt`; the user deletes its block; a later reply
    writes another call with the id c1 (`ls`). The scan does not take the new
    block for c1 (its mark stays off it, its state is its own), and c1's
    output is not written into it: it is said not written."""
    lines = ["USER: go", "", "ASSISTANT: Reading.", ""]
    lines += call("run_terminal_command", "c1", '{"command": "cat secrets.txt"}')
    runner, port, _ = runner_for([*lines, "USER: "])
    tracked = await running(runner, "c1")
    port.edit(4, 8, [])  # the block deleted (its mark with it)
    end = len(port.mirrors[BUF].lines)
    again = ["", "ASSISTANT: Again.", "", *call("run_terminal_command", "c1", '{"command": "ls"}')]
    port.edit(end, end, again)
    runner.scan.scan(BUF)
    (scan,) = [e for e in port.events if e["type"] == "scan"]
    assert scan["anchors"] == []  # c1's mark is not moved onto the new block
    assert [i["state"] for i in scan["items"]] == ["pending"]
    await runner.chain.deliver(tracked, ToolResult.ok("SECRET=hunter2"))
    await settle(runner)
    assert "hunter2" not in "\n".join(port.mirrors[BUF].lines)
    assert told(port, "not written")
