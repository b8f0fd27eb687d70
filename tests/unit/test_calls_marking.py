"""A call is marked where it reads when it starts: text that moved between the
look that chose it and its start (a result written above) never makes another
block, or a later block repeating its id, take its place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sidekick_tools.buffers import BufferMirror
from sidekick_tools.calls.context import CallContext
from sidekick_tools.calls.marking import CallMarks, UserError
from sidekick_tools.calls.registry import CallRegistry
from sidekick_tools.config import Config
from sidekick_tools.tasks.model import Task, TaskStatus

BUF = 1


def block(tool: str, body: str, call_id: str | None = None) -> list[str]:
    header = f"```tool {tool}" + (f" id={call_id}" if call_id else "")
    return [header, body, "```", ""]


class Port:
    """Neovim as far as marking a call goes: a mirror it edits itself, and the
    extmarks it was asked to set."""

    def __init__(self, lines: list[str]) -> None:
        self.mirrors = {BUF: BufferMirror(BUF, "chat.sidekick.md", lines, 1)}
        self.anchors: list[tuple[int, int]] = []
        self.events: list[dict[str, Any]] = []

    async def mirror(self, buf: int) -> BufferMirror:
        return self.mirrors[buf]

    async def apply(self, buf: int, tick: int, edits: list, anchors: list) -> bool:
        mirror = self.mirrors[buf]
        for start, end, lines in edits:
            mirror.on_lines(mirror.tick + 1, start, end, lines)
        self.anchors += anchors
        return True

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def shrink(self, start: int, count: int) -> None:
        """The user's text loses `count` rows at `start` (a long result replaced)."""
        mirror = self.mirrors[BUF]
        mirror.on_lines(mirror.tick + 1, start, start + count, [])


def marks_for(port: Port) -> tuple[CallMarks, CallRegistry]:
    registry = CallRegistry(port)
    ctx = CallContext(port, registry, tasks=None, config=Config.from_dict({}))
    return CallMarks(ctx, writer=None), registry


LONG = ["```result id=c1 status=completed", "1", "2", "3", "4", "```", ""]


def after_a_long_result() -> list[str]:
    """A chat whose first call, c1, has a result of four lines: the calls
    written after it move up when that result is cut (`shrink_the_long_result`)."""
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    return lines + block("run_terminal_command", '{"command": "seq 5"}', "c1") + LONG


def shrink_the_long_result(port: Port) -> None:
    """c1's result loses its four lines before the call chosen starts."""
    port.shrink(LONG.index("1") + 8, 4)


async def test_a_later_block_repeating_the_id_does_not_take_the_calls_place():
    lines = after_a_long_result()
    lines += block("run_terminal_command", '{"command": "echo dup"}', "m7")
    lines += block("run_terminal_command", '{"command": "echo dup2"}', "m7")
    port = Port(lines)
    marks, registry = marks_for(port)
    first, second = [c for c in port.mirrors[BUF].chat().calls if c.call_id == "m7"]
    assert second.error and second.error.startswith("Duplicate id")
    # before the call starts, four rows above it go: the duplicate is on its row now
    shrink_the_long_result(port)
    assert port.mirrors[BUF].chat().call_at(first.start_row).start_row == first.start_row
    tracked = await marks.prepare(BUF, first)
    assert tracked is not None and registry.get(BUF, "m7") is tracked
    ((_, row),) = port.anchors
    assert tracked.row == row  # where run_tools finds it again
    now = port.mirrors[BUF].chat().call_at(row)
    assert (now.body, now.error) == ('{"command": "echo dup"}', None)


async def test_another_call_moved_onto_the_row_is_not_the_one_started():
    lines = after_a_long_result()
    lines += block("run_terminal_command", '{"command": "ls"}', "a1")
    lines += block("run_terminal_command", '{"command": "rm -rf build"}', "a2")
    port = Port(lines)
    marks, _ = marks_for(port)
    chosen = port.mirrors[BUF].chat().call_by_id("a1")
    shrink_the_long_result(port)
    tracked = await marks.prepare(BUF, chosen)
    assert tracked is not None and tracked.call_id == "a1"
    ((_, row),) = port.anchors
    assert port.mirrors[BUF].chat().call_at(row).call_id == "a1"


async def test_a_call_without_an_id_is_found_by_its_text_or_not_started():
    lines = after_a_long_result()
    lines += block("run_terminal_command", '{"command": "make"}')
    lines += block("run_terminal_command", '{"command": "make install"}')
    port = Port(lines)
    marks, _ = marks_for(port)
    chosen = [c for c in port.mirrors[BUF].chat().calls if not c.call_id][0]
    shrink_the_long_result(port)
    tracked = await marks.prepare(BUF, chosen)
    assert tracked is not None
    ((_, row),) = port.anchors
    now = port.mirrors[BUF].chat().call_at(row)
    assert (now.call_id, now.body) == (tracked.call_id, '{"command": "make"}')
    # two blocks reading alike, neither with an id: which one was meant cannot be told
    twin = ["USER: go", "", "ASSISTANT: ok", ""] + block("run_terminal_command", "{}") * 2
    port = Port(twin + ["x"] * 8)
    marks, _ = marks_for(port)
    chosen = port.mirrors[BUF].chat().calls[1]
    port.shrink(len(twin), 0)  # nothing moves: it is marked where it is
    assert await marks.prepare(BUF, chosen) is not None
    port = Port(["USER: a", "", "ASSISTANT: ok", "", "x", "y"] + twin[4:])
    marks, _ = marks_for(port)
    chosen = port.mirrors[BUF].chat().calls[0]
    port.shrink(4, 2)  # the text moves, and two blocks read alike: neither is taken
    assert await marks.prepare(BUF, chosen) is None


def test_locate_finds_a_call_whose_id_a_reload_took_away_by_its_text():
    from sidekick_tools.chat import parse
    from sidekick_tools.chat.edits import locate

    make = '{"command": "make"}'
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    lines += block("run_terminal_command", make) + block(
        "run_terminal_command", '{"command": "ls"}'
    )
    chat = parse(lines)
    assert locate(chat, "call_0a0b0c", -1) is None  # by id alone: gone
    found = locate(chat, "call_0a0b0c", -1, "run_terminal_command", make, reloaded=True)
    assert found is not None and found.start_row == 4
    assert locate(chat, "call_0a0b0c", -1, "read_files", make, reloaded=True) is None
    # not after a reload: a block without an id reading the same is another call
    assert locate(chat, "call_0a0b0c", -1, "run_terminal_command", make) is None
    # two blocks read the same: the one on the call's row, else none
    twins = parse(lines[:8] + block("run_terminal_command", make))
    assert locate(twins, "call_0a0b0c", 8, "run_terminal_command", make, True).start_row == 8
    assert locate(twins, "call_0a0b0c", -1, "run_terminal_command", make, True) is None


def test_locate_takes_a_block_with_the_id_for_the_call_only_if_it_asks_the_same():
    from sidekick_tools.chat import parse
    from sidekick_tools.chat.edits import locate

    make = '{"command": "make"}'
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    chat = parse(lines + block("run_terminal_command", '{ "command" :  "make" }', "c1"))
    found = locate(chat, "c1", -1, "run_terminal_command", make)  # respaced by a formatter
    assert found is not None and found.start_row == 4
    reused = parse(lines + block("run_terminal_command", '{"command": "ls"}', "c1"))
    assert locate(reused, "c1", -1, "run_terminal_command", make) is None
    assert locate(reused, "c1", -1, "read_files", '{"command": "ls"}') is None
    assert locate(reused, "c1", 4, "run_terminal_command", make) is None  # even at its mark's row


def test_the_scan_never_moves_a_calls_mark_onto_a_block_repeating_its_id():
    from sidekick_tools.calls.scan import DiagnosticScan

    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    lines += block("run_terminal_command", '{"command": "echo first"}', "m7")
    lines += block("run_terminal_command", '{"command": "echo dup"}', "m7")
    lines += block("run_terminal_command", '{"command": "ls"}', "c2")
    port = Port(lines)
    port.on_buffer_change = None
    registry = CallRegistry(port)
    scan = DiagnosticScan(port, registry)
    first = registry.follow(BUF, "m7", "run_terminal_command", "chat.sidekick.md", 1)
    registry.state(first, "running")
    other = registry.follow(BUF, "c2", "run_terminal_command", "chat.sidekick.md", 2)
    registry.state(other, "running")
    scan.scan(BUF)
    (sent,) = [e for e in port.events if e["type"] == "scan"]
    # c2's mark is set again on its block; m7's is left where it is (on the
    # block it was given), never put on the later block with the same id
    assert sent["anchors"] == [[2, 12]]
    assert registry.get(BUF, "m7") is first


class SlowPort(Port):
    """Neovim's round trip: other coroutines run while an edit is on its way."""

    async def apply(self, buf: int, tick: int, edits: list, anchors: list) -> bool:
        await asyncio.sleep(0)
        if tick != self.mirrors[buf].tick:
            return False  # the text changed since the look the edit was made from
        return await super().apply(buf, tick, edits, anchors)


async def test_two_takers_of_one_call_at_once_get_it_once():
    """The loop answering a broken call as the reply ends and the user's
    :SidekickSend denying it both looked while neither had prepared it: only
    one may take it, else the call gets two result blocks."""
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    lines += block("read_files", '{"paths": 7}', "c1")
    port = SlowPort(lines)
    marks, registry = marks_for(port)
    call = port.mirrors[BUF].chat().call_by_id("c1")
    assert marks.busy(BUF, call) is None  # both look: free
    first, second = await asyncio.gather(marks.prepare(BUF, call), marks.prepare(BUF, call))
    taken = [t for t in (first, second) if t is not None]
    assert len(taken) == 1 and registry.get(BUF, "c1") is taken[0]
    # taken, though it neither runs nor has an answer on its way yet
    assert taken[0].state == "pending" and marks.busy(BUF, call) is taken[0]
    assert await marks.prepare(BUF, call) is None


async def test_a_call_without_an_id_taken_twice_at_once_gets_one_id():
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    lines += block("run_terminal_command", '{"command": "make"}')
    port = SlowPort(lines)
    marks, _ = marks_for(port)
    call = port.mirrors[BUF].chat().calls[0]
    results = await asyncio.gather(marks.prepare(BUF, call), marks.prepare(BUF, call))
    assert len([t for t in results if t is not None]) == 1
    (now,) = port.mirrors[BUF].chat().calls
    assert now.call_id and now.call_id == next(t for t in results if t).call_id


def test_a_prepared_call_queued_in_a_batch_may_still_be_run_or_denied():
    registry = CallRegistry(Port([]))
    tracked = registry.follow(BUF, "c1", "read_files", "chat.sidekick.md", 1)
    assert not tracked.busy
    tracked.claimed = True
    assert tracked.busy
    tracked.waiting = True
    assert not tracked.busy
    tracked.answering = True  # the user denied it: its answer is on its way
    assert tracked.busy
    tracked.done = True
    assert not tracked.busy


def test_locate_reads_a_respaced_body_as_the_chat_reads_it():
    """A body the chat decodes (a lone surrogate escape made U+FFFD, as every
    body from outside) reads the same respaced; a value whose JSON type
    changed (true for 1) asks something else, though Python finds them equal."""
    from sidekick_tools.chat import parse
    from sidekick_tools.chat.edits import locate

    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    odd = '{"command": "printf \\ud800"}'
    chat = parse(lines + block("run_terminal_command", '{ "command" : "printf \\ud800" }', "c1"))
    found = locate(chat, "c1", -1, "run_terminal_command", odd)
    assert found is not None and found.start_row == 4
    typed = '{"command": "sleep 9", "async": 1}'
    chat = parse(
        lines + block("run_terminal_command", '{"command": "sleep 9", "async": true}', "c1")
    )
    assert locate(chat, "c1", -1, "run_terminal_command", typed) is None


class Tasks:
    """The task engine as far as a refusal goes: the tasks there are."""

    def __init__(self, **status: str) -> None:
        self.tasks = {token: Task(id=token, status=TaskStatus(s)) for token, s in status.items()}

    def get(self, token: str) -> Task | None:
        return self.tasks.get(token)


def refusal(tracked_state: dict[str, Any], tasks: Tasks | None) -> str:
    """What :SidekickRunTool says of call c1, followed in the state given."""
    port = Port(["ASSISTANT: ok", ""] + block("run_terminal_command", '{"command": "ls"}', "c1"))
    registry = CallRegistry(port)
    ctx = CallContext(port, registry, tasks=tasks, config=Config.from_dict({}))
    tracked = registry.follow(BUF, "c1", "run_terminal_command", "chat.sidekick.md", 1)
    registry.bind(tracked, "abc123")
    for key, value in tracked_state.items():
        setattr(tracked, key, value)
    call = port.mirrors[BUF].chat().calls[0]
    try:
        CallMarks(ctx, writer=None).refuse_busy(BUF, call)
    except UserError as e:
        return str(e)
    return "started"


def test_a_call_whose_task_just_ended_is_not_said_to_be_running():
    """Run again in the moment between its task's end and its result's write, a
    call is refused (its result is coming), but not as running: that task is over."""
    running = refusal({"state": "running"}, Tasks(abc123="running"))
    assert running.startswith("sidekick_tools: c1 is already running as task abc123")
    for state, tasks in [
        ({"state": "running"}, Tasks(abc123="completed")),  # a foreground task ended
        ({"state": "running", "background": True, "finishing": True}, Tasks(abc123="failed")),
        ({"state": "running", "finishing": True}, None),
    ]:
        said = refusal(state, tasks)
        assert said == (
            "sidekick_tools: c1 has just ended as task abc123; its result is being written"
        ), state


async def test_a_call_answered_since_it_was_chosen_is_not_taken_to_run():
    """A batch chose its pending calls; meanwhile another path wrote one of
    them its result (a task that ran unseen, written as its chat was taken up
    again). Taken to run after all, it ran a second time: its task was marked
    delivered, so nothing said it had run."""
    lines = ["USER: go", "", "ASSISTANT: ok", ""]
    lines += block("run_terminal_command", '{"command": "printf x >> count"}', "c1")
    port = Port(lines)
    marks, registry = marks_for(port)
    (chosen,) = port.mirrors[BUF].chat().calls
    assert chosen.result is None
    end = chosen.last_row + 1
    port.mirrors[BUF].on_lines(
        port.mirrors[BUF].tick + 1, end, end, ["```result id=c1 status=completed exit=0", "```"]
    )
    assert await marks.prepare(BUF, chosen) is None
    assert registry.get(BUF, "c1") is None
    # a call run again by the user, its result there when they chose it, is taken
    (again,) = port.mirrors[BUF].chat().calls
    assert again.result is not None and await marks.prepare(BUF, again) is not None


@pytest.mark.parametrize(
    "body, asks",
    [
        (r'{"command": "make test\u003b\u0020touch x"}', True),  # `; ` spelled out
        (r'{"command": "echo ok\u000atouch x"}', True),  # a line break: `\n` would do
        (r'{"command": "echo ok\u0009x"}', True),
        (r'{"command": "echo \\u003b"}', False),  # an escaped backslash: text
        (r'{"command": "echo \\\u003b"}', True),
        (r'{"command": "echo caf\u00e9 \n ok"}', False),  # é and a short escape
    ],
)
def test_a_call_written_with_needless_escapes_is_told(body, asks):
    from sidekick_tools.calls.chain import _NEEDLESS_ESCAPE

    assert bool(_NEEDLESS_ESCAPE.search(body)) is asks
