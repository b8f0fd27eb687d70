"""The MCP face over real stdio, driven by the official SDK's client: hybrid
run/ask, await across its cap, halt of a stubborn tree, the status shapes,
non-destructive output filters, progress notifications, bad input."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import live_members, until
from tests.integration.mcp_helpers import (
    Progress,
    agent_cmd,
    call,
    connect,
    head,
    output_of,
    server_params,
    wait_cmd,
    write_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path):
    """(state dir, work dir) of one test; the server runs in the work dir."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    return state, work


def stored(state: Path, token: str):
    return SqliteStore(str(state / "tasks.db")).get(token)


async def test_tools_list_names_the_seven_tools_with_object_schemas(env):
    state, work = env
    async with connect(server_params(state, work)) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert list(tools) == ["run", "ask", "await", "halt", "status", "output", "list"]
    for tool in tools.values():
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
        assert tool.description
    assert tools["run"].input_schema["required"] == ["command"]
    assert set(tools["run"].input_schema["properties"]) == {
        "command",
        "cwd",
        "async",
        "timeout_seconds",
    }
    assert set(tools["ask"].input_schema["required"]) == {"agent", "message"}
    assert "50s" in tools["await"].description  # the default cap


async def test_a_command_that_cannot_start_is_an_error(env):
    """Nothing ran (a NUL byte in the command, an argument list too long): the
    docs promise isError, and the answer said only "failed"."""
    state, work = env
    async with connect(server_params(state, work)) as session:
        text, is_error = await call(session, "run", {"command": "echo a\u0000b"})
    assert is_error
    assert "could not start the command" in text and "null byte" in text


async def test_run_within_the_threshold_answers_with_the_result(env):
    state, work = env
    (work / "sub").mkdir()
    async with connect(server_params(state, work)) as session:
        text, is_error = await call(session, "run", {"command": "pwd; echo out; exit 3"})
        ok_text, ok_error = await call(session, "run", {"command": "pwd", "cwd": "sub"})
    assert not is_error  # the command ran; its failure is the answer
    data = head(text)
    assert data["status"] == "failed" and data["exit_code"] == 3
    assert output_of(text).splitlines() == [str(work), "out"]
    assert not ok_error and head(ok_text)["status"] == "completed"
    assert output_of(ok_text) == str(work / "sub")
    task = stored(state, data["task"])
    assert task.chat == "mcp:pytest-agent" and task.call_id.startswith("mcp-")
    assert task.tool == "run_terminal_command" and task.exit_code == 3


async def test_run_past_the_threshold_answers_a_token_and_reports_progress(env):
    state, work = env
    write_config(state, tasks={"hybrid_threshold": 0.5})
    marker = work / "release"
    command = "echo '[PROGRESS:40] compiling'; " + wait_cmd(marker, "echo '[RESULT] built'")
    progress = Progress()
    async with connect(server_params(state, work)) as session:
        text, is_error = await call(
            session, "run", {"command": command}, progress_callback=progress
        )
        data = head(text)
        token = data["task"]
        assert not is_error and data["status"] == "running"
        assert f'await {{"task": "{token}"}}' in data["message"]
        assert stored(state, token).status.value == "running"
        # the progress callback heard the task start, with its token
        assert progress.events and f"task {token}" in (progress.events[0][2] or "")
        marker.touch()
        done, _ = await call(session, "await", {"task": token})
    final = head(done)
    assert final["status"] == "completed" and final["summary"] == "built"


async def test_an_async_run_or_ask_with_a_progress_token_answers_at_once(env):
    """A client that sends a progress token (the SDK does whenever a progress
    callback is given) got no answer to an `async` run or ask until the task
    ended: the task's start is reported while the call returns, and the
    cancellation of that report was lost, so the reports went on every 5 s."""
    state, work = env
    marker = work / "release"
    write_config(state, agents={"waiter": {"cmd": agent_cmd("wait", "--release", str(marker))}})
    async with connect(server_params(state, work)) as session:
        for tool, args in (
            ("run", {"command": wait_cmd(marker), "async": True}),
            ("ask", {"agent": "waiter", "message": "hi", "async": True}),
        ):
            text, is_error = await asyncio.wait_for(
                call(session, tool, args, progress_callback=Progress()), timeout=4
            )
            data = head(text)
            assert not is_error and data["status"] == "running", text
        marker.touch()


async def test_await_twice_across_its_cap(env):
    state, work = env
    write_config(state, tasks={"hybrid_threshold": 0.2}, mcp={"await_timeout": 0.5})
    marker = work / "release"
    progress = Progress()
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": wait_cmd(marker, "echo finished")})
        token = head(text)["task"]
        # asks for far more than the cap: answered "still running" once the cap is reached
        first, is_error = await call(
            session,
            "await",
            {"task": token, "timeout_seconds": 3600},
            progress_callback=progress,
        )
        assert not is_error
        data = head(first)
        assert data["status"] == "running" and data["timed_out"] is True
        assert data["message"] == "Task still running. Call await again to continue waiting."
        marker.touch()
        second, _ = await call(session, "await", {"task": token, "timeout_seconds": 3600})
    data = head(second)
    assert data["status"] == "completed" and data["exit_code"] == 0
    assert "finished" in data["summary"]


async def test_ask_within_and_past_the_threshold(env):
    state, work = env
    marker = work / "release"
    agents = {
        "quick": {"cmd": agent_cmd("summary")},
        "slow": {"cmd": agent_cmd("wait", "--release", str(marker))},
    }
    # the quick agent is a Python process: within a threshold no loaded machine
    # outlasts (it answers when it ends, long before)
    write_config(state, tasks={"hybrid_threshold": 120}, agents=agents)
    async with connect(server_params(state, work)) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "quick, slow" in (tools["ask"].description or "")
        text, is_error = await call(session, "ask", {"agent": "quick", "message": "check it"})
        assert not is_error and head(text)["status"] == "completed"
        assert "check it" in output_of(text) and "\x1b[" not in output_of(text)
        # the server reads its settings again when they change: past a short one
        write_config(state, tasks={"hybrid_threshold": 0.5}, agents=agents)
        slow, _ = await call(session, "ask", {"agent": "slow", "message": "take time"})
        data = head(slow)
        assert data["status"] == "running"
        assert stored(state, data["task"]).tool == "use_agent"
        marker.touch()
        done, _ = await call(session, "await", {"task": data["task"]})
        missing, missing_error = await call(session, "ask", {"agent": "nobody", "message": "hi"})
    assert head(done)["status"] == "completed"
    assert missing_error and 'Unknown agent "nobody"' in missing


async def test_halt_stops_a_sigterm_ignoring_tree(env):
    state, work = env
    write_config(state, tasks={"halt_grace": 0.5})
    ready = work / "ready"
    # a shell ignoring SIGTERM, with a child ignoring it too, both looping forever
    command = (
        "trap '' TERM; "
        "sh -c \"trap '' TERM; while :; do sleep 0.05; done\" & "
        f"touch {ready}; while :; do sleep 0.05; done"
    )
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": command, "async": True})
        token = head(text)["task"]
        await until(ready.exists)
        pgid = stored(state, token).pid
        assert len(live_members(pgid)) >= 3
        halted, is_error = await call(session, "halt", {"task": token})
        again, _ = await call(session, "halt", {"task": token})
        await until(lambda: live_members(pgid) == [], timeout=10)  # no survivor
    assert not is_error and head(halted)["status"] == "cancelled"
    assert "had already ended" in head(again)["message"]
    assert stored(state, token).status.value == "cancelled"


async def test_status_shapes(env):
    state, work = env
    write_config(state, tasks={"hybrid_threshold": 0.2})
    marker = work / "release"
    async with connect(server_params(state, work)) as session:
        ok, _ = await call(session, "run", {"command": "echo '[RESULT] fine'"})
        bad, _ = await call(session, "run", {"command": "echo broken >&2; exit 4"})
        slow, _ = await call(session, "run", {"command": wait_cmd(marker)})
        stopped, _ = await call(session, "run", {"command": "sleep 30", "async": True})
        await call(session, "halt", {"task": head(stopped)["task"]})
        shapes = {}
        for name, text in (("ok", ok), ("bad", bad), ("slow", slow), ("stopped", stopped)):
            answer, is_error = await call(session, "status", {"task": head(text)["task"]})
            assert not is_error
            shapes[name] = head(answer)
        unknown, unknown_error = await call(session, "status", {"task": "000000"})
        malformed, malformed_error = await call(session, "status", {"task": "not a token"})
        marker.touch()
    assert shapes["ok"]["status"] == "completed" and shapes["ok"]["result"] == "fine"
    assert shapes["bad"]["status"] == "failed" and "exit 4" in shapes["bad"]["error"]
    assert shapes["slow"]["status"] == "running" and shapes["slow"]["elapsed_seconds"] >= 0
    assert shapes["stopped"]["status"] == "cancelled"
    assert unknown_error and head(unknown) == {
        "status": "not_found",
        "error": "Task ID not found or expired.",
    }
    assert malformed_error and head(malformed)["status"] == "not_found"
    assert "as given by run, ask or list" in head(malformed)["error"]


async def test_output_filter_consumes_nothing(env):
    state, work = env
    marker = work / "release"
    command = "printf 'apple 1\\nberry 1\\napple 2\\nberry 2\\n'; " + wait_cmd(marker)
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": command, "async": True})
        token = head(text)["task"]
        log = Path(stored(state, token).log_path)
        await until(lambda: log.exists() and log.read_text().count("\n") >= 4)
        filtered, _ = await call(session, "output", {"task": token, "filter": "^apple"})
        whole, _ = await call(session, "output", {"task": token})
        nothing, _ = await call(session, "output", {"task": token})
        marker.touch()
        await call(session, "await", {"task": token})
        rest, _ = await call(session, "output", {"task": token})
    assert head(filtered)["matching_lines"] == 2
    assert output_of(filtered).splitlines() == ["apple 1", "apple 2"]
    assert output_of(whole).splitlines() == ["apple 1", "berry 1", "apple 2", "berry 2"]
    assert head(nothing)["new_lines"] == 0
    assert output_of(rest) == "done" and "has ended" in head(rest)["message"]


async def test_bad_input_gets_errors_and_the_server_keeps_serving(env):
    from mcp.shared.exceptions import MCPError

    state, work = env
    async with connect(server_params(state, work)) as session:
        with pytest.raises(MCPError) as unknown_tool:
            await session.call_tool("explode", {})
        assert unknown_tool.value.code == -32602 and "run, ask" in unknown_tool.value.message
        cases = [
            ("run", {"command": 5}),
            ("run", {}),
            ("run", {"command": "echo", "shell": "bash"}),
            ("run", {"command": "x" * (2 << 20)}),  # a huge payload
            ("run", {"command": "echo", "timeout_seconds": -1}),
            ("run", {"command": "echo", "cwd": "does/not/exist"}),
            ("await", {"task": "zz"}),
            ("await", {"task": "abcdef", "timeout_seconds": "soon"}),
            ("halt", {"task": "000000"}),
            ("output", {"task": "000000"}),
            ("output", {"task": "000000", "filter": "("}),
            ("list", {"status": "sleeping"}),
            ("ask", {"agent": "a", "message": 7}),
        ]
        for tool, args in cases:
            text, is_error = await call(session, tool, args)
            assert is_error, (tool, args, text)
            assert len(text) < 4096, (tool, text[:200])
            listed, listed_error = await call(session, "list")
            assert not listed_error and "Running (0): none" in listed


async def test_secrets_are_masked_in_answers(env):
    state, work = env
    key = "sk-ant-api03-" + "a" * 30
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": f"echo key={key}; echo password=hunter2"})
        token = head(text)["task"]
        read, _ = await call(session, "output", {"task": token})
    for answer in (text, read):
        assert key not in answer and "hunter2" not in answer
        assert "sk-ant-***" in answer and "password=***" in answer
    assert key in Path(stored(state, token).log_path).read_text()  # the log keeps it (0600)


@pytest.mark.slow
async def test_kill_9_mid_task_then_a_new_server_recovers_it(env):
    state, work = env
    marker = work / "release"
    async with connect(server_params(state, work)) as first:
        text, _ = await call(first, "run", {"command": wait_cmd(marker, "echo survived")})
        assert head(text)["status"] == "running", text
        token = head(text)["task"]
        old = stored(state, token)
        server_pid = int(old.owner.split(":")[0])
        os.kill(server_pid, signal.SIGKILL)
        await until(lambda: not os.path.exists(f"/proc/{server_pid}"), timeout=10)
    assert stored(state, token).status.value == "running"  # nobody watches it now
    async with connect(server_params(state, work)) as second:
        adopted = stored(state, token)
        assert adopted.owner != old.owner and adopted.pid == old.pid  # same process, new owner
        marker.touch()
        done, _ = await call(second, "await", {"task": token})
    assert head(done)["status"] == "completed" and head(done)["summary"] == "survived"


async def test_a_live_server_takes_over_the_task_of_one_killed_with_9(env):
    """A server already running when another was killed outright awaited the
    dead one's task as `running` for ever (only a new server took stock); it
    now takes stock itself when the owner is gone."""
    state, work = env
    marker = work / "release"
    async with connect(server_params(state, work)) as live:
        async with connect(server_params(state, work)) as doomed:
            command = wait_cmd(marker, "echo finished-ok")
            text, _ = await call(doomed, "run", {"command": command, "async": True})
            token = head(text)["task"]
            server_pid = int(stored(state, token).owner.split(":")[0])
            os.kill(server_pid, signal.SIGKILL)
            await until(lambda: not os.path.exists(f"/proc/{server_pid}"), timeout=10)
        marker.touch()
        done, _ = await call(live, "await", {"task": token})
    assert head(done)["status"] == "completed" and head(done)["summary"] == "finished-ok"
    assert stored(state, token).status.value == "completed"


@pytest.mark.slow
async def test_exit_halts_the_servers_tasks_unless_told_to_keep_them(env):
    state, work = env
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": "sleep 60", "async": True})
        halted = head(text)["task"]
        pgid = stored(state, halted).pid
    assert stored(state, halted).status.value == "cancelled"
    await until(lambda: live_members(pgid) == [], timeout=10)

    write_config(state, mcp={"kill_on_exit": False})
    marker = work / "release"
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": wait_cmd(marker), "async": True})
        kept = head(text)["task"]
    assert live_members(stored(state, kept).pid)  # still running, nobody's
    marker.touch()
    async with connect(server_params(state, work)) as session:
        done, _ = await call(session, "await", {"task": kept})
    assert head(done)["status"] == "completed"


async def test_list_shows_mcp_tasks_only(env):
    state, work = env
    async with connect(server_params(state, work), name="agent one") as one:
        text, _ = await call(one, "run", {"command": "echo one", "async": False})
    async with connect(server_params(state, work), name="agent two") as two:
        listed, _ = await call(two, "list")
        narrowed, _ = await call(two, "list", {"status": "failed"})
        # "new since the last read" is kept per client
        read, _ = await call(two, "output", {"task": head(text)["task"]})
    assert head(text)["task"] in listed and "Completed, newest first (1)" in listed
    assert "Failed or cancelled (0): none" in narrowed and "Completed" not in narrowed
    assert 'read its output with output {"task"' not in listed
    assert listed.splitlines()[-1].startswith("Read a task's new output with output")
    assert output_of(read) == "one"
    assert stored(state, head(text)["task"]).chat == "mcp:agent-one"


async def test_a_progress_marker_change_is_reported_while_waiting(env):
    state, work = env
    write_config(state, tasks={"hybrid_threshold": 0.2})
    step = work / "step"
    marker = work / "release"
    command = (
        "echo '[PROGRESS:10] start'; "
        + wait_cmd(step, "echo '[PROGRESS:70] almost'")
        + "; "
        + wait_cmd(marker)
    )
    progress = Progress()
    async with connect(server_params(state, work)) as session:
        text, _ = await call(session, "run", {"command": command})
        token = head(text)["task"]
        waiting = asyncio.ensure_future(
            call(session, "await", {"task": token}, progress_callback=progress)
        )
        await until(lambda: any("10%" in (m or "") for _, _, m in progress.events), timeout=15)
        step.touch()
        await until(lambda: any("70% almost" in (m or "") for _, _, m in progress.events), 15)
        marker.touch()
        done, _ = await waiting
    values = [p for p, _, _ in progress.events]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert head(done)["status"] == "completed"
