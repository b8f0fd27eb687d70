"""use_agent with a real TaskManager and the fake agent CLI (real processes)."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys

import pytest
from sidekick_tools import tools
from sidekick_tools.config import AgentConfig
from sidekick_tools.tools import run_terminal_command as rtc
from sidekick_tools.tools import use_agent as ua
from sidekick_tools.tools.policy import decide

from tests.conftest import until
from tests.unit.task_tools_support import (
    FAKE_AGENT,
    agent,
    log_of,
    make_config,
    make_ctx,
    make_manager,
    mcp_output_lines,
    shell_task,
)

TOOL = ua.TOOL


@pytest.fixture
async def manager(tmp_path):
    m = make_manager(str(tmp_path / "state"))
    yield m
    await m.shutdown(kill=True)


def ctx_with(tmp_path, manager, **agents):
    return make_ctx(tmp_path, manager, make_config(agents, hybrid_threshold=10.0))


# ------------------------------------------------------------ command building


def test_build_command_substitutes_and_quotes_every_item():
    message = 'it\'s $(rm -rf /) `x` ; echo pwned "q" \n new line'
    cmd = ua.build_command(["agent cli", "-p", "{message}", "--x={message}!"], message)
    argv = shlex.split(cmd)
    assert argv == ["agent cli", "-p", message, f"--x={message}!"]


def test_build_command_appends_the_message_after_the_end_of_options():
    # DESIGN §12: the message stays an argument, so options end before it
    assert shlex.split(ua.build_command(["bot", "--ask"], "hi there")) == [
        "bot",
        "--ask",
        "--",
        "hi there",
    ]
    argv = shlex.split(ua.build_command(["bot"], "--dangerously-skip-permissions do it"))
    assert argv == ["bot", "--", "--dangerously-skip-permissions do it"]


def test_a_message_that_looks_like_an_option_is_refused_without_an_end_of_options():
    with pytest.raises(ValueError, match='put "--"'):
        ua.build_command(["bot", "-p", "{message}"], "--yolo")
    with pytest.raises(ValueError):
        ua.build_command(["bot", "{message}"], "-rf")
    # with "--" before it, or inside a larger item, it stays an argument
    assert shlex.split(ua.build_command(["bot", "-p", "--", "{message}"], "--yolo")) == [
        "bot",
        "-p",
        "--",
        "--yolo",
    ]
    assert shlex.split(ua.build_command(["bot", "--prompt={message}"], "--yolo")) == [
        "bot",
        "--prompt=--yolo",
    ]
    assert shlex.split(ua.build_command(["bot", "{message}"], "fine")) == ["bot", "fine"]


async def test_use_agent_refuses_an_option_like_message(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("echo"))
    ctx.config.agents["bare"] = type(ctx.config.agents["fake"])(cmd=["true", "{message}"])
    res = await TOOL.run({"agent": "bare", "message": "--help me", "async": False}, ctx)
    assert res.status == "failed"
    assert 'put "--"' in res.body and res.fields.get("reason") == "bad_message"


def test_label_is_one_short_line():
    label = ua.label_for("fake", "line one\nline two " + "x" * 200)
    assert label.startswith("fake: line one line two")
    assert "\n" not in label and len(label) <= len("fake: ") + ua.LABEL_CHARS


# ------------------------------------------------------------ runs


async def test_summary_is_the_last_result_section_ansi_stripped(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("summary"))
    res = await TOOL.run({"agent": "fake", "message": "fix the bug"}, ctx)
    assert res.status == "completed", res.body
    assert res.fields["exit"] == 0
    assert res.fields["task"]
    assert res.body == "Done: handled 'fix the bug'\nall good"
    assert "\x1b" not in res.body
    assert "transcript" not in res.body


async def test_summary_after_the_last_prompt_when_no_result_marker(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("prompt"))
    res = await TOOL.run({"agent": "fake", "message": "why?", "async": False}, ctx)
    assert res.status == "completed"
    # the response starts on the last prompt's own line (DESIGN §8)
    assert res.body == "why?\nfinal answer for why?"


async def test_summary_of_a_one_line_answer_on_the_prompt_line(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("kiro"))
    res = await TOOL.run({"agent": "fake", "message": "why?", "async": False}, ctx)
    assert res.status == "completed"
    assert res.body == "the answer to why? on the prompt's own line"


async def test_summary_is_the_tail_without_markers(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("plain"))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.body.splitlines()[-1] == "plain line 4"


async def test_silent_agent_says_so(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("silent"))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "completed"
    assert res.body == "(the agent printed nothing)"


async def test_message_reaches_the_agent_as_one_argument(tmp_path, manager):
    extra = AgentConfig(
        cmd=[sys.executable, FAKE_AGENT, "--mode", "echo", "{message}"], env={"X": "42"}
    )
    ctx = ctx_with(tmp_path, manager, fake=extra)
    message = "a 'quoted' \"msg\"; $(touch pwned) `id` && echo no\nsecond line"
    res = await TOOL.run({"agent": "fake", "message": message}, ctx)
    assert res.status == "completed", res.body
    log = log_of(manager, res.fields["task"])
    assert "<<" + message + ">>" in log
    assert "agent=fake extra=42" in log
    assert f"cwd={ctx.cwd}" in log
    assert not (tmp_path / "work" / "pwned").exists()


async def test_agent_cwd_relative_to_the_chat(tmp_path, manager):
    (tmp_path / "work" / "sub").mkdir(parents=True)
    ctx = ctx_with(tmp_path, manager, fake=agent("echo", cwd="sub"))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    log = log_of(manager, res.fields["task"])
    assert f"cwd={tmp_path / 'work' / 'sub'}" in log


async def test_missing_agent_cwd_fails_clearly(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("echo", cwd="nope"))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "failed"
    assert "does not exist" in res.body and "fake" in res.body
    assert manager.list() == []


async def test_non_zero_exit_is_failed_with_exit_code(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("fail"))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "failed"
    assert res.fields["exit"] == 2
    assert "could not do it" in res.body
    assert "fatal: the fake agent failed" in res.body  # stderr joins a failed summary


async def test_async_true_returns_the_token_at_once(tmp_path, manager):
    release = tmp_path / "release"
    ctx = ctx_with(tmp_path, manager, fake=agent("wait", "--release", str(release)))
    res = await TOOL.run({"agent": "fake", "message": "go", "async": True}, ctx)
    assert res.status == "running"
    token = res.fields["task"]
    assert "await_task" in res.body and token in res.body
    task = manager.get(token)
    assert task.tool == "use_agent"
    assert task.label == "fake: go"
    assert task.chat == "chat-a" and task.call_id == "c1"
    release.write_text("")
    done = await manager.wait(token, 10)
    final = TOOL.result_from_task(done)
    assert final.status == "completed"
    assert final.body == "finished go"
    assert final.fields["exit"] == 0
    # the host's default dispatch finds the agent's own result_from_task
    assert tools.result_from_task("use_agent", done).body == "finished go"


async def test_hybrid_threshold_moves_it_to_the_background(tmp_path, manager):
    release = tmp_path / "release"
    ctx = make_ctx(
        tmp_path,
        manager,
        make_config({"fake": agent("wait", "--release", str(release))}, hybrid_threshold=0.2),
    )
    res = await TOOL.run({"agent": "fake", "message": "slow"}, ctx)
    assert res.status == "running"
    assert "Still running after 0.2s" in res.body
    release.write_text("")
    await manager.wait(res.fields["task"], 10)


async def test_async_false_waits_past_the_threshold(tmp_path, manager):
    release = tmp_path / "release"
    ctx = make_ctx(
        tmp_path,
        manager,
        make_config({"fake": agent("wait", "--release", str(release))}, hybrid_threshold=0.05),
    )
    run = asyncio.ensure_future(TOOL.run({"agent": "fake", "message": "m", "async": False}, ctx))
    await until(lambda: manager.list() and manager.list()[0].lines >= 1 or run.done())
    assert not run.done()
    release.write_text("")
    res = await asyncio.wait_for(run, 20)
    assert res.status == "completed"


async def test_timeout_fails_with_reason(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("stubborn"))
    res = await TOOL.run({"agent": "fake", "message": "m", "timeout_seconds": 0.3}, ctx)
    assert res.status == "failed"
    assert res.fields["reason"] == "timeout"


async def test_halted_agent_result_is_cancelled(tmp_path, manager):
    release = tmp_path / "never"
    ctx = ctx_with(tmp_path, manager, fake=agent("wait", "--release", str(release)))
    res = await TOOL.run({"agent": "fake", "message": "m", "async": True}, ctx)
    task = await manager.halt(res.fields["task"])
    final = ua.result_from_task(task)
    assert final.status == "cancelled"
    assert final.fields["task"] == res.fields["task"]


# ------------------------------------------------------------ bad input


async def test_unknown_agent_lists_the_configured_ones(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, beta=agent("plain"), alpha=agent("plain"))
    res = await TOOL.run({"agent": "gamma", "message": "m"}, ctx)
    assert res.status == "failed"
    assert 'Unknown agent "gamma"' in res.body
    assert "alpha, beta" in res.body
    assert manager.list() == []


def test_a_call_that_can_only_fail_says_so_before_it_is_run():
    """The consent question lists a call its setup cannot run apart ("Cannot
    run"): an agent not configured, and a message its cmd would take for an
    option (it counted among the calls that run without asking, then failed)."""
    config = make_config({"auto": agent("plain", auto_accept=True)})
    option = {"agent": "auto", "message": "--dangerously-skip-permissions do it"}
    assert 'the message starts with "-"' in tools.setup_problem("use_agent", option, config)
    unknown = tools.setup_problem("use_agent", {"agent": "gone", "message": "m"}, config)
    assert 'Unknown agent "gone"' in unknown
    fine = {"agent": "auto", "message": "do it -- carefully"}
    assert tools.setup_problem("use_agent", fine, config) is None


async def test_unknown_agent_without_any_configured_says_how(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager)
    res = await TOOL.run({"agent": "claude", "message": "m"}, ctx)
    assert res.status == "failed"
    assert "no agents are configured" in res.body
    assert "setup({ agents = {" in res.body and "{message}" in res.body


@pytest.mark.parametrize(
    "params, needle",
    [
        ({"message": "m"}, 'missing required parameter "agent"'),
        ({"agent": "fake"}, 'missing required parameter "message"'),
        ({"agent": "fake", "message": ""}, "must not be empty"),
        ({"agent": "fake", "message": "   "}, "must not be blank"),
        ({"agent": "fake", "message": "a\x00b"}, "NUL"),
        ({"agent": 3, "message": "m"}, "expected string"),
        ({"agent": "fake", "message": "m", "async": "yes"}, "expected boolean"),
        ({"agent": "fake", "message": "m", "timeout_seconds": -1}, "must be > 0"),
        ({"agent": "fake", "message": "m", "timeout_seconds": 0}, "must be > 0"),
        ({"agent": "fake", "message": "m", "extra": 1}, 'unknown parameter "extra"'),
    ],
)
async def test_malformed_input_is_a_failed_result(tmp_path, manager, params, needle):
    ctx = ctx_with(tmp_path, manager, fake=agent("plain"))
    res = await TOOL.run(params, ctx)
    assert res.status == "failed"
    assert needle in res.body
    assert manager.list() == []


async def test_empty_cmd_is_a_config_error(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=AgentConfig(cmd=[]))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "failed" and "empty cmd" in res.body


async def test_submit_failure_is_reported(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=agent("plain"))
    await manager.shutdown(kill=True)
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "failed"
    assert "could not start agent" in res.body


async def test_missing_executable_fails_with_exit_code(tmp_path, manager):
    ctx = ctx_with(tmp_path, manager, fake=AgentConfig(cmd=["/nonexistent/agent", "{message}"]))
    res = await TOOL.run({"agent": "fake", "message": "m"}, ctx)
    assert res.status == "failed"
    assert res.fields["exit"] == 127


async def test_an_agent_program_is_never_one_the_project_holds(tmp_path, manager, monkeypatch):
    """A bare program name is looked up on PATH's absolute entries only: an
    empty or relative entry names the working directory, where a cloned
    repository may hold a `myagent` of its own (the host's Python is found
    the same way). The real one runs; with none outside, the call fails."""
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for where, who in ((work, "project"), (bin_dir, "user")):
        script = where / "myagent"
        script.write_text(f"#!/bin/sh\necho ran-{who} > {tmp_path}/ran-{who}\necho '> done'\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f":.:{bin_dir}:{os.environ['PATH']}")
    ctx = ctx_with(tmp_path, manager, mine=AgentConfig(cmd=["myagent", "--", "{message}"]))
    res = await TOOL.run({"agent": "mine", "message": "hi"}, ctx)
    assert res.status == "completed", res.body
    assert (tmp_path / "ran-user").exists()
    assert not (tmp_path / "ran-project").exists()
    (bin_dir / "myagent").unlink()
    res = await TOOL.run({"agent": "mine", "message": "hi"}, ctx)
    assert res.status == "failed"
    assert "myagent" in res.body and "PATH" in res.body
    assert not (tmp_path / "ran-project").exists()


# ------------------------------------------------------------ auto-accept


def test_auto_accept_follows_the_agent_setting(tmp_path):
    config = make_config({"trusted": agent("plain", auto_accept=True), "other": agent("plain")})
    ctx = make_ctx(tmp_path, None, config)
    assert TOOL.auto_accept({"agent": "trusted", "message": "m"}, ctx) is True
    assert TOOL.auto_accept({"agent": "other", "message": "m"}, ctx) is False
    assert TOOL.auto_accept({"agent": "missing", "message": "m"}, ctx) is False
    assert decide("use_agent", {"agent": "trusted", "message": "m"}, ctx) == "approve"
    assert decide("use_agent", {"agent": "other", "message": "m"}, ctx) == "ask"
    assert decide("use_agent", {"agent": "missing", "message": "m"}, ctx) == "ask"
    assert decide("use_agent", {"agent": "trusted"}, ctx) == "ask"  # schema fails
    assert decide("use_agent", {"agent": "other", "message": "m"}, ctx, "approve") == "approve"


async def test_task_tools_run_by_themselves_only_on_this_chats_tasks(tmp_path, manager):
    """DESIGN §7/§12: another chat's (or Neovim's, or agent's) task is reached
    only through a call the user runs by hand."""
    ctx = make_ctx(tmp_path, manager, make_config())
    own = await shell_task(manager, "true", ctx.cwd)
    other = await shell_task(manager, "true", ctx.cwd, chat="chat-b")
    for token, verdict in ((own.id, "approve"), ("abc123", "approve"), (other.id, "ask")):
        for name, params in [
            ("await_task", {"task": token}),
            ("halt_task", {"task": token}),
            ("task_status", {"task": token}),
            ("task_output", {"task": token, "filter": "x"}),
        ]:
            assert decide(name, params, ctx) == verdict, (name, token)
            assert tools.get_tool(name).auto_accept(params, ctx) is (verdict == "approve")
    assert decide("list_tasks", {}, ctx) == "approve"  # lists this chat's tasks only
    # the same token from the other chat's side
    theirs = make_ctx(tmp_path, manager, make_config(), chat="chat-b")
    assert decide("halt_task", {"task": other.id}, theirs) == "approve"
    assert decide("halt_task", {"task": own.id}, theirs) == "ask"


async def test_list_tasks_asks_in_a_chat_without_a_name(tmp_path, manager):
    """Every buffer without a name is the chat "" in the store: what it would
    list is every such buffer's tasks, of any Neovim sharing the state dir,
    not this chat's. It lists them only when the user runs it."""
    unnamed = make_ctx(tmp_path, manager, make_config(), chat="")
    await shell_task(manager, "echo another unnamed buffer's", unnamed.cwd, chat="")
    assert decide("list_tasks", {}, unnamed) == "ask"
    assert tools.get_tool("list_tasks").auto_accept({}, unnamed) is False


def test_a_summary_line_reading_stderr_stays_the_agents_answer_when_cut(tmp_path):
    """A failed agent's summary ends with its stderr's tail under `[stderr]`;
    a `[stderr]` line the agent printed itself was taken for that label, and
    the answer after it was cut and shown as stderr."""
    from sidekick_tools.tasks.model import Task, TaskStatus
    from sidekick_tools.tasks.on_exit_summarize import combine_summary

    log_dir = tmp_path / "log"
    log_dir.mkdir()
    answer = "\n".join(["answer1", "[stderr]", *(f"answer{i}" for i in range(3, 31))])
    (log_dir / "stdout").write_text(answer + "\n")
    (log_dir / "stderr").write_text("boom1\nboom2\n")
    task = Task(id="abc123", tool="use_agent", status=TaskStatus.FAILED, exit_code=2)
    task.reason, task.started_at, task.ended_at, task.log_dir = "exit", 1.0, 2.0, str(log_dir)
    task.summary = combine_summary(task.status, answer, "boom1\nboom2")
    res = ua.result_from_task(task)
    assert res.body == task.summary  # the body itself is unchanged
    shown = mcp_output_lines(res, task)
    assert shown == [
        f"[... 23 earlier lines truncated; full output: {task.log_path}]",
        *(f"answer{i}" for i in range(24, 31)),
        "",
        "[stderr]",
        "boom1",
        "boom2",
    ]


def test_an_agent_cancelled_before_it_started_is_said_as_a_command_would_be(tmp_path):
    """Queued when Neovim exited, an agent's task never ran: its result said
    "(the agent printed nothing)" above the reason, and in other words than a
    command's ("[cancelled: ...]"); now only why, the way a command's does."""
    from sidekick_tools.tasks.model import Task, TaskStatus

    error = "Neovim exited before the task started"
    agent = Task(id="abc123", tool="use_agent", status=TaskStatus.CANCELLED, reason="cancelled")
    command = Task(id="def456", tool="run_terminal_command", status=TaskStatus.CANCELLED)
    for task in (agent, command):
        task.reason, task.error, task.log_dir = "cancelled", error, str(tmp_path / "gone")
    said = ua.result_from_task(agent)
    assert (said.status, said.body) == ("cancelled", f"[cancelled: {error}]")
    assert said.body == rtc.result_from_task(command).body
    assert "duration" not in said.fields  # it never ran


def test_an_agent_tasks_label_never_holds_a_piece_of_a_key():
    """The label (the message's first 80 characters) is masked before it is cut."""
    key = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    # cut after the key's 19th character: too short a tail to be known as one
    label = ua.label_for(
        "claude", "Review the branch, then push it with this token: " + "x" * 10 + " " + key
    )
    assert label.startswith("claude: Review") and key[:12] not in label
