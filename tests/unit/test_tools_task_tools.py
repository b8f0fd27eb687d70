"""await_task, halt_task, task_status, task_output, list_tasks with a real
TaskManager and real processes (release files instead of sleeps)."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from sidekick_tools.tasks.groups import group_alive
from sidekick_tools.tasks.manager import TaskSpec
from sidekick_tools.tasks.store import MemoryStore
from sidekick_tools.tools import await_task, halt_task, list_tasks, task_output, task_status

from tests.conftest import until
from tests.unit.task_tools_support import (
    FAKE_AGENT,
    body_json,
    log_of,
    make_config,
    make_ctx,
    make_manager,
    output_part,
    shell_task,
)

AWAIT = await_task.TOOL
HALT = halt_task.TOOL
STATUS = task_status.TOOL
OUTPUT = task_output.TOOL
LIST = list_tasks.TOOL


@pytest.fixture
async def manager(tmp_path):
    m = make_manager(str(tmp_path / "state"))
    yield m
    await m.shutdown(kill=True)


@pytest.fixture
def ctx(tmp_path, manager):
    return make_ctx(tmp_path, manager, make_config(await_timeout=0.3))


def gate(tmp_path, name="release"):
    """(path, shell snippet waiting for it)."""
    path = tmp_path / name
    return path, f"while [ ! -e {path} ]; do sleep 0.02; done"


async def waiting_task(manager, ctx, tmp_path, before="echo started", after="echo released"):
    path, wait = gate(tmp_path)
    task = await shell_task(manager, f"{before}; {wait}; {after}", ctx.cwd)
    return task.id, path


BAD_TOKENS = ["zzz", "ABCDEFG", "12345", "a1b2c3d", "../etc", "g1b2c3"]


# ------------------------------------------------------------ await_task


async def test_await_running_task_times_out_at_the_cap(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    res = await AWAIT.run({"task": token, "timeout_seconds": 50}, ctx)
    assert res.status == "completed"
    data = json.loads(res.body)
    assert data["task"] == token
    assert data["status"] == "running"
    assert data["timed_out"] is True
    assert data["message"] == "Task still running. Call await_task again to continue waiting."
    assert data["waited_seconds"] < 50  # capped by tasks.await_timeout
    assert "summary" not in data
    release.write_text("")
    res = await AWAIT.run({"task": token}, make_ctx(tmp_path, manager, make_config()))
    data = json.loads(res.body)
    assert data["status"] == "completed"
    assert data["timed_out"] is False
    assert data["exit_code"] == 0
    assert data["summary"] == "started\nreleased"
    assert data["log_lines"] == 2
    assert "message" not in data and "error" not in data


async def test_await_failed_task_is_a_completed_call_saying_failed(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo [RESULT] broke; exit 3", ctx.cwd)
    res = await AWAIT.run(
        {"task": task.id, "timeout_seconds": 5},
        make_ctx(tmp_path, manager, make_config(await_timeout=10)),
    )
    assert res.status == "completed"
    data = json.loads(res.body)
    assert data["status"] == "failed"
    assert data["exit_code"] == 3
    assert data["summary"] == "broke"
    assert data["error"] == "exit 3"


async def test_await_zero_only_looks(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    waits = []
    real_wait = manager.wait

    async def spy(token, timeout):
        waits.append(timeout)
        return await real_wait(token, timeout)

    manager.wait = spy  # type: ignore[method-assign]
    res = await AWAIT.run({"task": token, "timeout_seconds": 0}, ctx)
    data = json.loads(res.body)
    assert data["status"] == "running" and data["timed_out"] is True
    assert waits == []
    await AWAIT.run({"task": token, "timeout_seconds": 99}, ctx)
    assert waits == [0.3]  # capped at tasks.await_timeout
    release.write_text("")


async def test_await_reports_progress_while_running(tmp_path, manager, ctx):
    path, wait = gate(tmp_path)
    task = await shell_task(manager, f"echo '[PROGRESS:40] compiling'; {wait}", ctx.cwd)
    await until(lambda: manager.get(task.id).progress == 40)
    data = json.loads((await AWAIT.run({"task": task.id}, ctx)).body)
    assert data["progress"] == {"percent": 40, "step": "compiling"}
    path.write_text("")


async def test_await_queued_task_says_running_and_queued(tmp_path):
    m = make_manager(str(tmp_path / "state"), max_concurrent=1)
    try:
        c = make_ctx(tmp_path, m, make_config(await_timeout=0.05))
        first, release = await waiting_task(m, c, tmp_path)
        second = await shell_task(m, "echo second", c.cwd)
        data = json.loads((await AWAIT.run({"task": second.id}, c)).body)
        assert data["status"] == "running" and data["queued"] is True
        assert data["queued_behind"] == 0
        st = json.loads((await STATUS.run({"task": second.id}, c)).body)
        assert st == {"status": "running", "elapsed_seconds": 0, "queued": True}
        release.write_text("")
        await m.wait(second.id, 10)
    finally:
        await m.shutdown(kill=True)


@pytest.mark.parametrize("tool", [AWAIT, HALT, STATUS, OUTPUT])
async def test_unknown_token_is_failed_not_found(tool, ctx):
    res = await tool.run({"task": "abcdef"}, ctx)
    assert res.status == "failed"
    assert "Task ID not found or expired." in res.body
    assert res.fields.get("reason") == "not_found"


@pytest.mark.parametrize("tool", [AWAIT, HALT, STATUS, OUTPUT])
@pytest.mark.parametrize("token", BAD_TOKENS)
async def test_malformed_token_is_failed(tool, token, ctx):
    res = await tool.run({"task": token}, ctx)
    assert res.status == "failed"
    assert "Task ID not found or expired." in res.body
    assert "6 lowercase hex" in res.body


async def test_a_malformed_token_is_quoted_once_as_written(ctx):
    res = await STATUS.run({"task": "ZZZZZZ"}, ctx)
    error = json.loads(res.body)["error"]
    assert ' "ZZZZZZ" is not a task token' in error  # was '"ZZZZZZ"', quoted twice
    res = await STATUS.run({"task": "\u0661\u0662\u0663"}, ctx)
    assert ' "\u0661\u0662\u0663" is not a task token' in json.loads(res.body)["error"]


async def test_tokens_are_normalised(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo hi", ctx.cwd)
    await manager.wait(task.id, 10)
    res = await STATUS.run({"task": f"  {task.id.upper()} "}, ctx)
    assert json.loads(res.body) == {"status": "completed", "result": "hi"}


@pytest.mark.parametrize(
    "tool, params, needle",
    [
        (AWAIT, {"task": "abcdef", "timeout_seconds": -1}, "must be >= 0"),
        (AWAIT, {"task": "abcdef", "timeout_seconds": "5"}, "expected number"),
        (AWAIT, {"task": 123456}, "expected string"),
        (AWAIT, {}, 'missing required parameter "task"'),
        (HALT, {"task": None}, "expected string"),
        (HALT, {"task": "abcdef", "force": True}, 'unknown parameter "force"'),
        (STATUS, {"task": ["abcdef"]}, "expected string"),
        (OUTPUT, {"task": "abcdef", "filter": 3}, "expected string"),
        (OUTPUT, {"task": "abcdef", "filter": ""}, "must not be empty"),
        (LIST, {"status": "bogus"}, "must be one of"),
        (LIST, {"status": 1}, "expected string"),
        (LIST, {"owner": "x"}, 'unknown parameter "owner"'),
    ],
)
async def test_schema_problems_are_failed_results(tool, params, needle, ctx):
    res = await tool.run(params, ctx)
    assert res.status == "failed"
    assert needle in res.body


async def test_await_task_purged_while_waiting(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)

    async def gone(token, timeout):
        from sidekick_tools.tasks.manager import TaskNotFound

        raise TaskNotFound(token)

    manager.wait = gone  # type: ignore[method-assign]
    res = await AWAIT.run({"task": token}, ctx)
    assert res.status == "failed" and "not found" in res.body
    release.write_text("")


# ------------------------------------------------------------ halt_task


async def test_halt_running_task(tmp_path, manager, ctx):
    token, _ = await waiting_task(manager, ctx, tmp_path, before="echo one; echo two")
    await until(lambda: "two" in log_of(manager, token))
    res = await HALT.run({"task": token}, ctx)
    assert res.status == "completed"
    data = json.loads(res.body)
    assert set(data) == {"task", "status", "output", "message"}
    assert data["task"] == token
    assert data["status"] == "cancelled"
    assert data["output"] == "one\ntwo"
    assert "halted" in data["message"]
    assert manager.get(token).status.value == "cancelled"


async def test_halt_sigterm_ignoring_process_is_killed(tmp_path, manager, ctx):
    task = await manager.submit(
        TaskSpec(
            tool="use_agent",
            command=f"{sys.executable} {FAKE_AGENT} --mode stubborn",
            cwd=ctx.cwd,
        )
    )
    await until(lambda: "ready" in log_of(manager, task.id))
    data = json.loads((await HALT.run({"task": task.id}, ctx)).body)
    assert data["status"] == "cancelled"
    assert data["output"] == "ready"
    # the supervisor shell dies of SIGTERM at once; the engine SIGKILLs the rest of
    # the group after halt_grace, in the background
    pgid = manager.get(task.id).pid
    await until(lambda: not group_alive(pgid))


async def test_halt_finished_task_says_it_already_ended(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo bye; exit 4", ctx.cwd)
    await manager.wait(task.id, 10)
    res = await HALT.run({"task": task.id}, ctx)
    assert res.status == "completed"
    data = json.loads(res.body)
    assert data["status"] == "failed"
    assert data["exit_code"] == 4
    assert "already ended (failed, exit 4)" in data["message"]
    assert "nothing to halt" in data["message"]
    assert "task_status" in data["message"]
    assert data["output"] == "bye"


async def test_halt_queued_task(tmp_path):
    m = make_manager(str(tmp_path / "state"), max_concurrent=1)
    try:
        c = make_ctx(tmp_path, m, make_config())
        first, release = await waiting_task(m, c, tmp_path)
        second = await shell_task(m, "echo never", c.cwd)
        data = json.loads((await HALT.run({"task": second.id}, c)).body)
        assert data["status"] == "cancelled"
        assert "before it started" in data["message"]
        assert data["output"] == ""
        release.write_text("")
    finally:
        await m.shutdown(kill=True)


async def test_halt_race_with_natural_end(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo quick", ctx.cwd)
    done = await manager.wait(task.id, 10)

    async def late_halt(token, reason="cancelled"):
        return done

    running = manager.get(task.id)
    running.status = type(running.status)("running")
    manager.get = lambda token: running  # type: ignore[method-assign]
    manager.halt = late_halt  # type: ignore[method-assign]
    data = json.loads((await HALT.run({"task": task.id}, ctx)).body)
    assert data["status"] == "completed"
    assert "already ended" in data["message"]


async def test_halt_engine_error_is_a_failed_result(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    original = manager.halt

    async def broken(token, reason="cancelled"):
        raise OSError("permission denied")

    manager.halt = broken  # type: ignore[method-assign]
    res = await HALT.run({"task": token}, ctx)
    assert res.status == "failed" and "permission denied" in res.body
    manager.halt = original  # type: ignore[method-assign]
    release.write_text("")


# ------------------------------------------------------------ task_status


async def test_status_shapes(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    data = json.loads((await STATUS.run({"task": token}, ctx)).body)
    assert set(data) == {"status", "elapsed_seconds"}
    assert data["status"] == "running" and data["elapsed_seconds"] >= 0
    release.write_text("")
    await manager.wait(token, 10)
    res = await STATUS.run({"task": token}, ctx)
    assert res.status == "completed"
    assert json.loads(res.body) == {"status": "completed", "result": "started\nreleased"}

    failed = await shell_task(manager, "echo '[RESULT] nope'; exit 2", ctx.cwd)
    await manager.wait(failed.id, 10)
    res = await STATUS.run({"task": failed.id}, ctx)
    assert res.status == "completed"
    assert json.loads(res.body) == {"status": "failed", "error": "exit 2: nope"}

    res = await STATUS.run({"task": "fedcba"}, ctx)
    assert res.status == "failed"
    assert json.loads(res.body) == {"status": "not_found", "error": "Task ID not found or expired."}


async def test_status_cancelled_maps_to_failed(tmp_path, manager, ctx):
    token, _ = await waiting_task(manager, ctx, tmp_path)
    await manager.halt(token)
    data = json.loads((await STATUS.run({"task": token}, ctx)).body)
    assert data["status"] == "failed"
    assert data["error"].startswith("cancelled")


async def test_status_timeout(tmp_path, manager, ctx):
    _, wait = gate(tmp_path)
    task = await shell_task(manager, wait, ctx.cwd, timeout=0.2)
    await manager.wait(task.id, 10)
    data = json.loads((await STATUS.run({"task": task.id}, ctx)).body)
    assert data["status"] == "failed"
    assert "timed out" in data["error"]


async def test_status_malformed_token_keeps_the_shape(ctx):
    res = await STATUS.run({"task": "nope"}, ctx)
    data = json.loads(res.body)
    assert data["status"] == "not_found"
    assert data["error"].startswith("Task ID not found or expired.")


# ------------------------------------------------------------ task_output


async def test_output_returns_only_new_lines_per_chat(tmp_path, manager, ctx):
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    task = await manager.submit(
        TaskSpec(
            tool="use_agent",
            command=f"{sys.executable} {FAKE_AGENT} --mode wait --release {r1} --release {r2} m",
            cwd=ctx.cwd,
        )
    )
    token = task.id
    await until(lambda: "error: problem in batch 0" in log_of(manager, token))
    first = await OUTPUT.run({"task": token}, ctx)
    assert first.status == "completed"
    meta = body_json(first)
    assert meta["status"] == "running" and meta["new_lines"] == 5
    assert meta["progress"]["percent"] == 10 and meta["progress"]["step"] == "batch 0"
    assert meta["progress"]["last_update"]
    out = output_part(first)
    assert "batch 0 line 0" in out and "\x1b" not in out

    again = await OUTPUT.run({"task": token}, ctx)
    assert body_json(again)["new_lines"] == 0
    assert body_json(again)["message"] == "No new output since the last read."
    assert output_part(again) == ""

    # another chat has its own position
    other = make_ctx(tmp_path, manager, ctx.config, chat="chat-b")
    assert body_json(await OUTPUT.run({"task": token}, other))["new_lines"] == 5

    r1.write_text("")
    await until(lambda: "problem in batch 1" in log_of(manager, token))
    # a filtered read shows matches only and consumes nothing
    filtered = await OUTPUT.run({"task": token, "filter": "^error"}, ctx)
    meta = body_json(filtered)
    assert meta["filter"] == "^error" and meta["matching_lines"] == 1
    assert output_part(filtered) == "error: problem in batch 1"
    assert "nothing was marked as read" in meta["message"]
    none = await OUTPUT.run({"task": token, "filter": "/no such line/"}, ctx)
    assert body_json(none)["matching_lines"] == 0
    unfiltered = await OUTPUT.run({"task": token}, ctx)
    text = output_part(unfiltered)
    assert text.splitlines() == [
        "[PROGRESS:40] batch 1",
        "batch 1 line 0",
        "batch 1 line 1",
        "batch 1 line 2",
        "error: problem in batch 1",
    ]
    assert body_json(unfiltered)["progress"]["percent"] == 40

    r2.write_text("")
    await manager.wait(token, 10)
    last = await OUTPUT.run({"task": token}, ctx)
    meta = body_json(last)
    assert meta["status"] == "completed" and meta["exit_code"] == 0
    assert "rest of its output" in meta["message"]
    assert output_part(last).endswith("[RESULT] finished m")
    end = await OUTPUT.run({"task": token}, ctx)
    assert "all its output was read" in body_json(end)["message"]


async def test_output_reads_stderr_on_its_own(tmp_path, manager, ctx):
    """A build's progress and errors are on stderr: an agent following it saw
    nothing but stdout; stream=stderr reads it, from its own position."""
    command = "echo out1; echo ERR1 >&2; echo ERR2 >&2"
    task = await shell_task(manager, command, ctx.cwd, chat=ctx.chat)
    await manager.wait(task.id, 10)
    out = await OUTPUT.run({"task": task.id}, ctx)
    assert output_part(out) == "out1" and "stream" not in body_json(out)
    err = await OUTPUT.run({"task": task.id, "stream": "stderr"}, ctx)
    assert output_part(err) == "ERR1\nERR2" and body_json(err)["stream"] == "stderr"
    # stdout's line count is not given as stderr's
    assert body_json(out)["log_lines"] == 1 and "log_lines" not in body_json(err)
    again = await OUTPUT.run({"task": task.id, "stream": "stderr"}, ctx)
    assert output_part(again) == "" and body_json(again)["new_lines"] == 0
    matched = await OUTPUT.run({"task": task.id, "stream": "stderr", "filter": "2$"}, ctx)
    assert body_json(matched)["matching_lines"] == 0  # read already: nothing new matches
    bad = await OUTPUT.run({"task": task.id, "stream": "both"}, ctx)
    assert bad.status == "failed" and "stream" in bad.body


async def test_output_bad_regex_is_failed(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo x", ctx.cwd)
    res = await OUTPUT.run({"task": task.id, "filter": "(unclosed"}, ctx)
    assert res.status == "failed"
    assert "invalid filter regex" in res.body and "missing )" in res.body


async def test_output_bad_regex_checked_before_the_token(ctx):
    res = await OUTPUT.run({"task": "abcdef", "filter": "[z-a]"}, ctx)
    assert res.status == "failed" and "bad character range" in res.body


async def test_output_long_output_keeps_head_and_tail(tmp_path, manager, ctx):
    task = await shell_task(manager, "seq 1 5000", ctx.cwd)
    await manager.wait(task.id, 10)
    res = await OUTPUT.run({"task": task.id}, ctx)
    meta = body_json(res)
    out = output_part(res).splitlines()
    assert out[0] == "1" and out[task_output.HEAD_LINES - 1] == str(task_output.HEAD_LINES)
    assert out[-1] == "5000"
    assert len(out) == task_output.HEAD_LINES + task_output.TAIL_LINES + 1
    elided = 5000 - task_output.HEAD_LINES - task_output.TAIL_LINES
    assert meta["elided"]["lines"] == elided
    assert f"[... {elided} lines (" in out[task_output.HEAD_LINES]
    assert "full log:" in out[task_output.HEAD_LINES]
    assert meta["new_lines"] == 5000
    # it was all consumed: nothing new next time
    assert body_json(await OUTPUT.run({"task": task.id}, ctx))["new_lines"] == 0


async def test_output_more_than_one_read_says_more(tmp_path, manager, ctx):
    # ~600 KB of output: more than READ_BYTES per call
    task = await shell_task(manager, "yes 0123456789012345678901234567890 | head -n 20000", ctx.cwd)
    await manager.wait(task.id, 10)
    first = body_json(await OUTPUT.run({"task": task.id}, ctx))
    assert first["more"] is True
    assert "call task_output again" in first["message"]
    total = first["new_lines"]
    for _ in range(10):
        meta = body_json(await OUTPUT.run({"task": task.id}, ctx))
        total += meta["new_lines"]
        if not meta["more"]:
            break
    assert total == 20000


def test_bound_cuts_one_huge_line():
    text = "x" * 100_000
    shown, lines, size = task_output.bound(text)
    assert lines == 0 and size > 80_000
    assert len(shown.encode()) < task_output.HEAD_BYTES + 100
    short, n, b = task_output.bound("a\nb")
    assert (short, n, b) == ("a\nb", 0, 0)


def test_bound_never_shows_a_word_it_cut_through():
    """A key across the head's or the tail's cut showed the part masking cannot
    recognise (its end, or a start shorter than a key): the cut word goes."""
    key = "sk-ant-api03-" + "Q7wERtyUIopASdfGHjkLZxcVBnm1234567890abcd"
    head = "a " * (task_output.HEAD_BYTES // 2 - 10) + key + " tail"  # cut in the key
    tail = "c " * 10 + key + " d" * (task_output.TAIL_BYTES // 2 - 10)  # cut in the key
    shown, _, _ = task_output.bound(head + "\n" + "b\n" * 200 + tail)
    for part in ("sk-ant", "Q7wER", "0abcd"):
        assert part not in shown
    assert shown.startswith("a a ") and shown.endswith(" d d")


def test_bound_by_bytes_with_few_lines():
    text = "\n".join("y" * 5000 for _ in range(10))
    shown, lines, size = task_output.bound(text)
    assert lines > 0 and size > 0
    assert len(shown.encode()) <= task_output.HEAD_BYTES + task_output.TAIL_BYTES + 100


async def test_output_without_progress_is_null(tmp_path, manager, ctx):
    task = await shell_task(manager, "echo plain", ctx.cwd)
    await manager.wait(task.id, 10)
    meta = body_json(await OUTPUT.run({"task": task.id}, ctx))
    assert meta["progress"] is None
    assert meta["new_lines"] == 1


# ------------------------------------------------------------ list_tasks


async def test_list_groups_and_closing_line(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    ok = await shell_task(manager, "true", ctx.cwd)
    bad = await shell_task(manager, "exit 5", ctx.cwd)
    agent = await manager.submit(
        TaskSpec(
            tool="use_agent",
            command="exit 0",
            label="fake: review",
            cwd=ctx.cwd,
            env={"SIDEKICK_AGENT": "fake"},
            chat=ctx.chat,
        )
    )
    for t in (ok, bad, agent):
        await manager.wait(t.id, 10)
    res = await LIST.run({}, ctx)
    assert res.status == "completed"
    text = res.body
    lines = text.splitlines()
    assert lines[0] == "Running (1):"
    assert lines[1].startswith(f"  {token}  run_terminal_command  ")
    assert "running " in lines[1]
    assert lines[2].startswith("Completed, newest first (2):")
    assert f'{agent.id}  use_agent(fake)  "fake: review"  completed ' in text
    assert "exit 0" in text
    assert "Failed or cancelled (1):" in text
    assert f'{bad.id}  run_terminal_command  "exit 5"  failed ' in text and "exit 5" in text
    assert lines[-1] == list_tasks.CLOSING
    assert "task_output" in lines[-1] and "halt_task" in lines[-1]

    only = (await LIST.run({"status": "failed"}, ctx)).body.splitlines()
    assert only[0] == "Failed or cancelled (1):" and len(only) == 3
    running = (await LIST.run({"status": "running"}, ctx)).body
    assert token in running and ok.id not in running
    await manager.halt(token)
    cancelled = (await LIST.run({"status": "cancelled"}, ctx)).body
    assert token in cancelled and bad.id not in cancelled
    assert "(0): none" in (await LIST.run({"status": "queued"}, ctx)).body
    assert (
        "(0): none"
        in (
            await LIST.run(
                {"status": "completed"},
                make_ctx(tmp_path, make_manager(str(tmp_path / "other")), ctx.config),
            )
        ).body
    )
    del release


async def test_list_is_scoped_to_this_chat(tmp_path, ctx):
    """This chat's tasks, whichever Neovim ran them; no other chat's."""
    store = MemoryStore()  # one store, two Neovims
    mine = make_manager(str(tmp_path / "s"), owner="1:a", store=store)
    theirs = make_manager(str(tmp_path / "s"), owner="2:b", store=store)
    try:
        a = await shell_task(mine, "echo mine", ctx.cwd)
        b = await shell_task(theirs, "echo theirs", ctx.cwd, chat="chat-b")
        c = await shell_task(theirs, "echo earlier", ctx.cwd)  # chat-a, another Neovim
        for manager, task in ((mine, a), (theirs, b), (theirs, c)):
            await manager.wait(task.id, 10)
        body = (await LIST.run({}, make_ctx(tmp_path, mine, ctx.config))).body
        assert a.id in body and c.id in body and b.id not in body
    finally:
        await mine.shutdown(kill=True)
        await theirs.shutdown(kill=True)


async def test_list_shows_queue_progress_and_more(tmp_path):
    m = make_manager(str(tmp_path / "state"), max_concurrent=1)
    try:
        c = make_ctx(tmp_path, m, make_config())
        path, wait = gate(tmp_path)
        first = await shell_task(m, f"echo '[PROGRESS:30] warming'; {wait}", c.cwd)
        await until(lambda: m.get(first.id).progress == 30)
        queued = [await shell_task(m, f"echo q{i}", c.cwd) for i in range(2)]
        body = (await LIST.run({"status": "running"}, c)).body
        assert "30% warming" in body
        assert f"{queued[1].id}  run_terminal_command" in body and "(1 ahead)" in body
        path.write_text("")
        for t in queued:
            await m.wait(t.id, 10)
        for _ in range(list_tasks.PER_GROUP + 2):
            await m.wait((await shell_task(m, "true", c.cwd)).id, 10)
        body = (await LIST.run({"status": "completed"}, c)).body
        assert "... 5 older not shown" in body
    finally:
        await m.shutdown(kill=True)


async def test_list_store_error_is_failed(tmp_path, manager, ctx):
    def broken(*a, **k):
        raise RuntimeError("database is locked")

    manager.list = broken  # type: ignore[method-assign]
    res = await LIST.run({}, ctx)
    assert res.status == "failed" and "database is locked" in res.body


async def test_concurrent_awaits_of_one_task(tmp_path, manager, ctx):
    token, release = await waiting_task(manager, ctx, tmp_path)
    long = make_ctx(tmp_path, manager, make_config(await_timeout=20))
    waits = [asyncio.ensure_future(AWAIT.run({"task": token}, long)) for _ in range(3)]
    await asyncio.sleep(0)
    release.write_text("")
    results = await asyncio.gather(*waits)
    assert all(json.loads(r.body)["status"] == "completed" for r in results)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (None, "cancelled before it finished (halted)"),
        (
            "halted because the MCP server exited",
            "cancelled before it finished (halted because the MCP server exited)",
        ),
    ],
)
def test_a_cancelled_tasks_status_says_who_halted_it_once(error, said):
    """It read "cancelled (halted because the MCP server exited) before it
    finished (halted)": halted twice, the second time without a reason."""
    from sidekick_tools.tasks.model import Task, TaskStatus

    task = Task(id="abc123", status=TaskStatus.CANCELLED, reason="cancelled", error=error)
    task.summary = "Terminated"
    shaped = task_status.shape(None, "abc123", task)
    assert shaped == {"status": "failed", "error": f"{said}: Terminated"}


async def test_a_secret_on_any_line_of_a_tasks_output_is_masked_in_every_answer(
    tmp_path, manager, ctx
):
    """The answers hold a task's output as JSON strings, its lines joined by
    escaped breaks: keys on the second line (or a YAML `password:` line) were
    shown as they are."""
    key = "ghp_" + "Ab0" * 12
    lines = ["first", key, "password: hunter2secret", "Authorization: Bearer eyJ0b2tlbiJ9.e30"]
    command = "; ".join(f"echo '{line}'" for line in lines)
    done = await shell_task(manager, command, ctx.cwd)
    await manager.wait(done.id, 10)
    token, release = await waiting_task(manager, ctx, tmp_path, before=command)
    await until(lambda: "Authorization" in log_of(manager, token))
    bodies = [
        (await STATUS.run({"task": done.id}, ctx)).body,
        (await AWAIT.run({"task": done.id, "timeout_seconds": 0}, ctx)).body,
        (await HALT.run({"task": token}, ctx)).body,
    ]
    for body in bodies:
        text = json.dumps(json.loads(body))  # every string of the answer
        assert "first" in text and "ghp_***" in text
        for secret in (key, "hunter2secret", "eyJ0b2tlbiJ9"):
            assert secret not in text, body
    release.write_text("")


async def test_a_label_cut_short_never_shows_a_piece_of_a_key(tmp_path, manager, ctx):
    """list_tasks cuts a label to 60 characters: cut before masking, the piece
    of a key left was too short to be known by its form."""
    key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    task = await shell_task(
        manager, f"git push https://github.com/me/r --token {key}; true", ctx.cwd
    )
    await manager.wait(task.id, 10)
    body = (await LIST.run({}, ctx)).body
    assert task.id in body and key[:12] not in body


def test_progress_is_the_latest_marker_whichever_stream_is_read(tmp_path):
    """The engine records progress each tick; a read of stdout found a newer
    marker and said 50 %, and a read of stderr right after said the recorded
    41 %. Each read says the last marker the log holds."""
    from types import SimpleNamespace

    log = tmp_path / "stdout"
    log.write_text("[PROGRESS:41] step 5\nline\n[PROGRESS:50] step 6\nmore\n")
    task = SimpleNamespace(progress=41, progress_text="step 5")
    for text in ("", "line\n[PROGRESS:50] step 6\nmore"):  # stderr's read, stdout's
        got = task_output.progress_of(task, text, str(log))
        assert (got["percent"], got["step"]) == (50, "step 6")
    log.write_text("no marker in the log's tail\n")  # then the record
    got = task_output.progress_of(task, "", str(log))
    assert (got["percent"], got["step"]) == (41, "step 5")
    # a reader far behind has an older marker in what it read: the record wins
    got = task_output.progress_of(task, "[PROGRESS:10] fetching", str(log))
    assert (got["percent"], got["step"]) == (41, "step 5")
    none = SimpleNamespace(progress=None, progress_text=None)  # no record yet
    got = task_output.progress_of(none, "[PROGRESS:10] fetching", str(log))
    assert (got["percent"], got["step"]) == (10, "fetching")
