from __future__ import annotations

import itertools

import pytest
from sidekick_tools.tasks.model import (
    TERMINAL,
    IllegalTransition,
    Reason,
    Task,
    TaskStatus,
    can_transition,
    is_token,
    new_token,
    transition,
)

S = TaskStatus
LEGAL = {
    (S.QUEUED, S.RUNNING),
    (S.QUEUED, S.CANCELLED),
    (S.QUEUED, S.FAILED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
}


@pytest.mark.parametrize("old,new", list(itertools.product(TaskStatus, TaskStatus)))
def test_transition_pairs(old: TaskStatus, new: TaskStatus) -> None:
    task = Task(id="abc123", status=old)
    assert can_transition(old, new) == ((old, new) in LEGAL)
    if (old, new) in LEGAL:
        assert transition(task, new, now=10.0) is task
        assert task.status is new
    else:
        with pytest.raises(IllegalTransition):
            transition(task, new)
        assert task.status is old


def test_terminal_statuses_never_change() -> None:
    assert {S.COMPLETED, S.FAILED, S.CANCELLED} == TERMINAL
    for status in TERMINAL:
        for new in TaskStatus:
            with pytest.raises(IllegalTransition):
                transition(Task(status=status), new)


def test_transition_stamps_times_and_reason() -> None:
    task = Task(id="abc123")
    transition(task, "running", now=5.0)
    assert task.started_at == 5.0 and task.ended_at is None
    transition(task, S.FAILED, reason=Reason.TIMEOUT, now=7.5)
    assert task.ended_at == 7.5
    assert task.reason == "timeout"
    assert task.duration() == 2.5


def test_status_is_a_string_enum() -> None:
    assert S.RUNNING == "running"
    assert str(S.QUEUED) == "queued"
    assert Task(status="completed").status is S.COMPLETED
    assert Reason.HOST_RESTARTED == "host restarted"
    assert set(Reason.ALL) == {
        "exit",
        "signal",
        "timeout",
        "cancelled",
        "spawn_error",
        "host restarted",
        "log_limit",
    }


def test_token_format() -> None:
    tokens = [new_token() for _ in range(2000)]
    assert all(is_token(t) for t in tokens)
    assert all(len(t) == 6 and t == t.lower() for t in tokens)
    assert len(set(tokens)) > 1900  # random; uniqueness is enforced by the store
    assert not is_token("ABC123")
    assert not is_token("abc12")
    assert not is_token("abc1234")
    assert not is_token(None)


def test_to_dict_has_the_lua_api_fields() -> None:
    task = Task(
        id="0a1b2c",
        tool="run_terminal_command",
        label="pytest -q",
        command="pytest -q",
        status=S.COMPLETED,
        reason="exit",
        exit_code=0,
        pid=42,
        owner="1:x",
        created_at=1.0,
        started_at=2.0,
        ended_at=5.0,
        progress=100,
        progress_text="done",
        log_dir="/state/tasks/0a1b2c",
    )
    d = task.to_dict()
    for key in (
        "id",
        "status",
        "tool",
        "exit_code",
        "pid",
        "started_at",
        "ended_at",
        "progress",
        "log_path",
        "label",
        "reason",
        "owner",
        "progress_text",
        "created_at",
        "duration",
    ):
        assert key in d
    assert d["status"] == "completed" and isinstance(d["status"], str)
    assert d["log_path"] == "/state/tasks/0a1b2c/stdout"
    assert d["duration"] == 3.0
    assert Task().to_dict()["log_path"] is None


def test_copy_is_deep_for_containers() -> None:
    task = Task(id="abc123", env={"A": "1"}, read_offsets={"chat": 3})
    twin = task.copy()
    twin.env["B"] = "2"
    twin.read_offsets["chat"] = 9
    assert task.env == {"A": "1"} and task.read_offsets == {"chat": 3}
