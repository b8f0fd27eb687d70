"""The MCP face beside a real headless Neovim sharing its store: the agent's tasks
listed and halted in the editor, recovered by it, the editor's tasks shared or
not, the settings file setup() writes, and the command :SidekickMcp prints."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys

import pytest
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import live_members, wait_for
from tests.integration.conftest import quit_nvim
from tests.integration.mcp_helpers import (
    SyncClient,
    agent_cmd,
    head,
    output_of,
    passed_env,
    server_params,
    wait_cmd,
)
from tests.integration.test_background_tasks import HEAD, call, task_of
from tests.integration.test_crash_faults import kill_host
from tests.integration.test_ui_startup import record_notes_to
from tests.integration.ui_helpers import current_buf, wait_lines

pytestmark = pytest.mark.integration


def all_tasks(editor) -> list[dict]:
    """Every instance's tasks, MCP clients' included (DESIGN §6: owner = "any")."""
    return editor.lua("return require('sidekick_tools').list_tasks({ owner = 'any' })")


def stored(editor, token: str):
    return SqliteStore(str(editor.state_dir / "tasks.db")).get(token)


@pytest.fixture
def agent(editor):
    """`agent()` connects an MCP client to a server sharing ``editor``'s state dir."""
    clients: list[SyncClient] = []

    def start(**kw) -> SyncClient:
        client = SyncClient(server_params(editor.state_dir, editor.workdir), **kw)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.close()


def test_setup_writes_the_settings_the_server_reads(editor):
    editor.setup(
        agents={"rev": {"cmd": ["rev-cli", "{message}"], "env": {"NO_COLOR": "1"}}},
        tasks={"max_concurrent": 3},
        mcp={"share_editor_tasks": True, "await_timeout": 20},
        auto_accept={"safe_commands": ["ls"]},
    )
    path = editor.state_dir / "mcp.json"
    data = json.loads(path.read_text())
    assert data["agents"] == {"rev": {"cmd": ["rev-cli", "{message}"], "env": {"NO_COLOR": "1"}}}
    assert data["tasks"]["max_concurrent"] == 3 and data["tasks"]["hybrid_threshold"] == 10
    assert data["mcp"] == {"share_editor_tasks": True, "await_timeout": 20, "kill_on_exit": True}
    assert data["state_dir"] == str(editor.state_dir)
    assert not {"python", "auto_accept", "keymaps", "chat"} & set(data)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(editor.state_dir.stat().st_mode) == 0o700
    before = path.stat().st_mtime_ns
    editor.setup(
        agents={"rev": {"cmd": ["rev-cli", "{message}"], "env": {"NO_COLOR": "1"}}},
        tasks={"max_concurrent": 3},
        mcp={"share_editor_tasks": True, "await_timeout": 20},
    )
    assert path.stat().st_mtime_ns == before  # unchanged settings: not written again


def test_sidekick_mcp_prints_a_command_line_that_starts_the_server(editor):
    editor.setup(python=sys.executable)  # the interpreter the line names
    printed = editor.nvim.exec_lua("return vim.api.nvim_exec2('SidekickMcp', { output = true })")
    text = printed["output"]
    claude = next(line.strip() for line in text.splitlines() if line.strip().startswith("claude"))
    assert claude.startswith(
        f"claude mcp add --scope user sidekick-tools -- {sys.executable} -E -c "
    )
    assert claude.endswith(f"rplugin/python3 --state-dir {editor.state_dir}")
    assert "Warning" not in text
    snippet = json.loads(next(line for line in text.splitlines() if "mcpServers" in line))
    entry = snippet["mcpServers"]["sidekick-tools"]
    assert entry["command"] == sys.executable and "env" not in entry
    assert entry["args"][-2:] == ["--state-dir", str(editor.state_dir)]
    # the printed entry, started as a generic client would, in a project whose
    # modules shadow real ones (and with PYTHONPATH pointing at them), serves calls
    project = editor.workdir / "project"
    marker = editor.workdir / "imported"
    for name in ("sidekick_tools/__init__", "mcp/__init__", "logging", "json", "runpy"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name}')\n")
    from mcp import StdioServerParameters

    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**passed_env(), "PYTHONPATH": str(project)},
        cwd=str(project),
    )
    client = SyncClient(params)
    try:
        text, is_error = client.call("run", {"command": "echo from-the-printed-command"})
    finally:
        client.close()
    assert not is_error and output_of(text) == "from-the-printed-command"
    assert not marker.exists(), marker.read_text()
    token = head(text)["task"]
    assert any(t["id"] == token and t["chat"] == "mcp:pytest-agent" for t in all_tasks(editor))


def test_an_agents_task_is_listed_live_and_halted_from_neovim(editor, agent):
    editor.setup(tasks={"halt_grace": 0.5})
    ready = editor.workdir / "ready"
    client = agent()
    stubborn = f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done"
    text, _ = client.call("run", {"command": stubborn, "async": True})
    token = head(text)["task"]
    wait_for(ready.exists)
    pgid = stored(editor, token).pid
    waiting = client.start("await", {"task": token})  # the agent waits on it

    row = next(t for t in all_tasks(editor) if t["id"] == token)
    assert row["status"] == "running" and row["chat"] == "mcp:pytest-agent"
    editor.nvim.command("SidekickTasks!")
    line = wait_for(lambda: next((x for x in editor.lines() if token in x), None))
    assert "mcp:pytest-agent" in line and "run_terminal_command" in line

    editor.nvim.command(f"SidekickHalt {token}")
    answer, is_error = waiting.result(timeout=30)
    assert not is_error and head(answer)["status"] == "cancelled"
    wait_for(lambda: live_members(pgid) == [], timeout=10)
    # the tasks window follows the end of a task that is not this Neovim's
    wait_for(lambda: any(token in x and x.startswith("⊘") for x in editor.lines()), timeout=10)


def orphaned_task(editor, agent, marker) -> str:
    """A task waiting for `marker`, whose MCP server was then killed with -9."""
    text, _ = agent().call("run", {"command": wait_cmd(marker, "echo recovered"), "async": True})
    token = head(text)["task"]
    server_pid = int(stored(editor, token).owner.split(":")[0])
    os.kill(server_pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{server_pid}"), timeout=10)
    return token


def test_a_task_whose_server_was_killed_is_recovered_by_neovim(editor, agent):
    marker = editor.workdir / "release"
    token = orphaned_task(editor, agent, marker)
    editor.setup()
    row = next(t for t in all_tasks(editor) if t["id"] == token)  # starts the host: recovery
    assert row["status"] == "running"
    host_owner = editor.lua("return require('sidekick_tools').list_tasks({})")
    assert token in [t["id"] for t in host_owner]  # now this Neovim's task
    marker.touch()

    def completed():
        task = editor.lua("return require('sidekick_tools').get_task(...)", token) or {}
        return task if task.get("status") == "completed" else None

    done = wait_for(completed, timeout=20)
    assert done["exit_code"] == 0 and done["chat"] == "mcp:pytest-agent"


def test_a_running_neovim_takes_over_the_task_of_a_server_killed_meanwhile(editor, agent):
    """A server killed with -9 while the task list is open: its task showed ⟳
    for ever (only a host that started later took stock)."""
    editor.setup()
    editor.lua("require('sidekick_tools').list_tasks()")  # the host runs
    marker = editor.workdir / "release"
    token = orphaned_task(editor, agent, marker)
    marker.touch()

    def ended():
        row = next((t for t in all_tasks(editor) if t["id"] == token), {})  # lists: takes stock
        return row if row.get("status") == "completed" else None

    assert wait_for(ended, timeout=20)["exit_code"] == 0


@pytest.mark.parametrize("host", ["alive", "dead"])
def test_an_agents_task_kept_past_its_server_survives_the_neovim_that_took_it_over(
    editor, agent, host
):
    """mcp.kill_on_exit = false: the agent's task outlives its server, and a
    Neovim that took it over (by listing it) halted it when it quit, by
    tasks.kill_on_exit, which is about the editor's own tasks; so did the reap
    of a Neovim whose host had died first."""
    editor.setup(mcp={"kill_on_exit": False})
    marker = editor.workdir / "release"
    notes = editor.workdir / "notes.txt"
    try:  # the task ends (the marker), whatever happens here
        client = agent()
        text, _ = client.call("run", {"command": wait_cmd(marker, "echo kept"), "async": True})
        token = head(text)["task"]
        client.close()  # the client leaves: its server exits and leaves the task running

        def taken_over():
            all_tasks(editor)  # a listing takes stock of the tasks of owners gone
            own = editor.lua("return require('sidekick_tools').list_tasks({})")
            return token in [t["id"] for t in own]

        wait_for(taken_over, timeout=20)
        if host == "dead":
            kill_host(editor)
        record_notes_to(editor, notes)
        nvim_pid = editor.lua("return vim.fn.getpid()")
        quit_nvim(editor)
        wait_for(lambda: not os.path.exists(f"/proc/{nvim_pid}"), timeout=20)
    finally:
        marker.touch()
    done, _ = agent().call("await", {"task": token})
    assert head(done)["status"] == "completed" and head(done)["summary"] == "kept", done
    if host == "alive":  # what quitting said of it (it said "halting 1 running task")
        assert notes.read_text() == (
            "sidekick_tools: Neovim is exiting: 1 running MCP client task goes on "
            "(mcp.kill_on_exit = false)\n"
        )


def test_a_neovim_task_kept_past_neovim_survives_the_server_that_took_it_over(editors, agent):
    """tasks.kill_on_exit = false: the editor's task outlives Neovim, and an MCP
    server started next took it over at start-up and halted it when it exited,
    by mcp.kill_on_exit, which is about the agents' tasks."""
    first = editors()
    first.setup(tasks={"kill_on_exit": False, "hybrid_threshold": 0.2})
    marker = first.workdir / "release"
    try:  # the task ends (the marker), whatever happens here
        first.open_chat(HEAD + call("k", wait_cmd(marker, "echo kept")))
        first.run_tool(5)
        first.wait_text("```result id=k status=running task=")
        token = task_of(first, "k")["id"]
        nvim_pid = first.lua("return vim.fn.getpid()")
        quit_nvim(first)
        wait_for(lambda: not os.path.exists(f"/proc/{nvim_pid}"), timeout=20)
        client = agent()
        wait_for(lambda: stored(first, token).owner.split(":")[0] != str(nvim_pid), timeout=20)
        client.close()  # the server exits (mcp.kill_on_exit = true)
    finally:
        marker.touch()
    second = editors()
    second.setup()

    def ended():
        task = second.lua("return require('sidekick_tools').get_task(...)", token) or {}
        return task if task.get("status") in ("completed", "cancelled", "failed") else None

    assert wait_for(ended, timeout=20)["status"] == "completed"


def test_neovims_own_tasks_reach_mcp_only_when_shared(editor, agent):
    marker = editor.workdir / "release"
    editor.setup(tasks={"hybrid_threshold": 0.2})
    editor.open_chat(HEAD + call("ed", wait_cmd(marker, "echo editor-done")))
    editor.run_tool(5)
    editor.wait_text("status=running task=")
    token = task_of(editor, "ed")["id"]

    client = agent()
    refused, is_error = client.call("status", {"task": token})
    assert is_error and head(refused)["status"] == "refused"
    listed, _ = client.call("list")
    assert token not in listed

    # the user shares them: setup() rewrites mcp.json, the running server reads it again
    editor.setup(tasks={"hybrid_threshold": 0.2}, mcp={"share_editor_tasks": True})
    status, is_error = client.call("status", {"task": token})
    assert not is_error and head(status)["status"] == "running"
    waiting = client.start("await", {"task": token})
    marker.touch()
    done, _ = waiting.result(timeout=30)
    assert head(done)["status"] == "completed" and head(done)["summary"] == "editor-done"
    listed, _ = client.call("list")
    assert token in listed


def test_ask_uses_the_agents_configured_in_neovim(editor, agent):
    editor.setup(agents={"helper": {"cmd": agent_cmd("summary")}})
    client = agent()
    text, is_error = client.call("ask", {"agent": "helper", "message": "fix the build"})
    assert not is_error and head(text)["status"] == "completed"
    assert "fix the build" in output_of(text)
    task = stored(editor, head(text)["task"])
    tool, chat = task.tool, task.chat
    assert (tool, chat) == ("use_agent", "mcp:pytest-agent")


def test_the_editor_follows_an_agents_task_live(editor, agent):
    """Nothing from the MCP server reaches Neovim as an event: the task list and
    the output view follow it through the store and the log files."""
    editor.setup()
    step = editor.workdir / "step"
    marker = editor.workdir / "release"
    editor.nvim.command("SidekickTasks!")
    tasks_buf = current_buf(editor)
    client = agent()
    command = "echo first-line; " + wait_cmd(step, "echo second-line") + "; " + wait_cmd(marker)
    text, _ = client.call("run", {"command": command, "async": True})
    token = head(text)["task"]
    # the new task appears in the open window, with who started it (it may be
    # seen queued first, for the moment between the server's two writes)
    line = wait_lines(editor, tasks_buf, lambda ls: any(token in x and x[0] == "⟳" for x in ls))
    row = next(x for x in line if token in x)
    assert "mcp:pytest-agent" in row

    editor.nvim.command(f"SidekickOutput {token}")
    out_buf = current_buf(editor)
    wait_lines(editor, out_buf, lambda ls: "first-line" in ls)
    step.touch()
    wait_lines(editor, out_buf, lambda ls: "second-line" in ls)
    marker.touch()
    client.call("await", {"task": token})
    # the end reaches the output view and the task list without an event
    wait_lines(editor, out_buf, lambda ls: any("completed" in x for x in ls[-3:]))
    wait_lines(editor, tasks_buf, lambda ls: any(token in x and x.startswith("✓") for x in ls))


def test_rerun_of_an_agents_task_says_an_mcp_client_started_it(editor, agent):
    """`r` in the tasks window on an MCP task said "chat mcp:pytest-agent no
    longer exists" (its client's name was read as a chat file); the help says
    such a task cannot be rerun, and `gd` says who started it."""
    editor.setup()
    text, _ = agent().call("run", {"command": "echo hi"})
    token = head(text)["task"]
    ok, msg = editor.lua(f"return {{ require('sidekick_tools').rerun('{token}') }}")
    assert ok is None
    assert "MCP client mcp:pytest-agent" in msg and "cannot be rerun" in msg
    assert "no longer exists" not in msg
