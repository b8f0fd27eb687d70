"""The supervisor's seams on their own: how an outcome settles a task's status,
and the admission queue."""

from __future__ import annotations

import pytest
from sidekick_tools.tasks.model import IllegalTransition, Reason, Task, TaskStatus
from sidekick_tools.tasks.process import Outcome
from sidekick_tools.tasks.queue import TaskQueue
from sidekick_tools.tasks.supervisor import StopRequest, settle

S = TaskStatus


def running(started: float = 100.0) -> Task:
    return Task(id="abc123", status=S.RUNNING, started_at=started)


@pytest.mark.parametrize(
    "outcome, stop, status, reason, error",
    [
        (Outcome(0, None, 110.0, True), None, S.COMPLETED, Reason.EXIT, None),
        (Outcome(3, None, 110.0, True), None, S.FAILED, Reason.EXIT, "exit 3"),
        (
            Outcome(3, None, 110.0, False),
            None,
            S.FAILED,
            Reason.EXIT,
            "exit 3 (the task's supervisor could not record its exit)",
        ),
        (Outcome(143, None, 110.0, True), None, S.FAILED, Reason.SIGNAL, "exit 143 (SIGTERM)"),
        (Outcome(137, 9, 110.0, False), None, S.FAILED, Reason.SIGNAL, "killed by SIGKILL"),
        (
            Outcome(None, None, 110.0, False),
            None,
            S.FAILED,
            Reason.SIGNAL,
            "the task's process ended without recording an exit status",
        ),
        (
            Outcome(143, None, 110.0, True),
            StopRequest(Reason.CANCELLED, None),
            S.CANCELLED,
            Reason.CANCELLED,
            None,
        ),
        (
            Outcome(143, None, 110.0, True),
            StopRequest(Reason.TIMEOUT, None),
            S.FAILED,
            Reason.TIMEOUT,
            "timed out",
        ),
        (
            Outcome(0, None, 110.0, True),
            StopRequest(Reason.LOG_LIMIT, "too much"),
            S.FAILED,
            Reason.LOG_LIMIT,
            "too much",
        ),
    ],
)
def test_settle(outcome, stop, status, reason, error) -> None:
    task = running()
    settle(task, outcome, stop)
    assert (task.status, task.reason, task.error) == (status, reason, error)
    assert task.exit_code == outcome.code and task.ended_at == 110.0


def test_settle_never_ends_before_the_start_and_never_twice() -> None:
    task = running(started=200.0)
    settle(task, Outcome(0, None, 150.0, True), None)  # a coarse file clock
    assert task.ended_at == 200.0
    with pytest.raises(IllegalTransition):
        settle(task, Outcome(1, None, 300.0, True), None)  # terminal stays terminal


async def test_the_queue_admits_first_in_first_out_within_the_limit() -> None:
    moved: list[list[str]] = []
    queue = TaskQueue(2, moved.append)
    assert queue.enter_now("a") and queue.enter_now("b")
    assert not queue.enter_now("c")
    turns = {t: queue.wait_turn(t) for t in ("c", "d", "e")}
    assert queue.tokens() == ["c", "d", "e"] and queue.position("d") == 1
    assert not queue.enter_now("f")  # others wait: no overtaking even with room
    queue.leave("a")
    assert turns["c"].result() is True and not turns["d"].done()
    assert moved == [["d", "e"]] and queue.running_count == 2
    assert queue.remove("d") and turns["d"].result() is False
    assert queue.position("e") == 0 and queue.position("zzz") is None
    queue.set_limit(5)  # a higher limit admits at once
    assert turns["e"].result() is True and moved[-1] == []
    queue.adopt("g")
    assert queue.running_count == 4  # b, c, e, g
    queue.closed = True
    late = queue.wait_turn("h")
    queue.leave("b")
    assert not late.done()  # a closed queue admits nothing
