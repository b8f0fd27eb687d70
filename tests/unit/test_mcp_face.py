"""The MCP face in-process (no SDK): masking, settings, who may reach which task,
progress reports."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from sidekick_tools.mcp import face as face_mod
from sidekick_tools.mcp.face import Face, UnknownTool, client_chat
from sidekick_tools.mcp.progress import ProgressReporter
from sidekick_tools.mcp.settings import (
    CONFIG_NAME,
    ConfigSource,
    SettingsError,
    load,
    parse_args,
)
from sidekick_tools.secrets_mask import REPLACEMENT, mask
from sidekick_tools.tasks.manager import TaskSpec
from sidekick_tools.tasks.model import Task, TaskStatus

from tests.conftest import until
from tests.unit.task_tools_support import make_manager


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-abcdefghijklmnopqrst",
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "github_pat_11AAAAAAA0aaaaaaaaaaaaaaaaaaaa",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-123456789-abcdefgh",
    ],
)
def test_key_formats_are_masked(secret):
    """The MCP face answers through the plugin's one masker (secrets_mask.py)."""
    masked = mask(f"before {secret} after")
    assert secret not in masked and REPLACEMENT in masked
    assert masked.startswith("before ") and masked.endswith(" after")


def test_assignments_and_private_keys_are_masked_and_json_stays_json():
    text = json.dumps(
        {
            "out": "DB_PASSWORD=hunter2 x\ntoken = abc123\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
            "b3BlbnNzaA\n-----END OPENSSH PRIVATE KEY-----\nend"
        }
    )
    masked = mask(text)
    out = json.loads(masked)["out"]
    assert "hunter2" not in out and "abc123" not in out and "b3BlbnNzaA" not in out
    assert out == (
        f"DB_PASSWORD={REPLACEMENT} x\ntoken = {REPLACEMENT}\n"
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{REPLACEMENT}\n"
        "-----END OPENSSH PRIVATE KEY-----\nend"
    )
    # an escaped quote after a secret value stays escaped
    quoted = json.dumps({"cmd": 'curl -d "password=abc" x'})
    assert json.loads(mask(quoted))["cmd"] == f'curl -d "password={REPLACEMENT}" x'


@pytest.mark.parametrize(
    "text", ["disk-usage-report-for-today", "task=abc123 exit=0", "a risk-free sk- prefix", ""]
)
def test_ordinary_text_is_left_alone(text):
    assert mask(text) == text


def test_state_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    default = parse_args([], {})
    assert default.state_dir == str(tmp_path / "xdg" / "nvim" / "sidekick_tools")
    assert default.config_path == os.path.join(default.state_dir, CONFIG_NAME)
    assert not default.config_required
    env = parse_args([], {"SIDEKICK_TOOLS_STATE_DIR": str(tmp_path / "env")})
    assert env.state_dir == str(tmp_path / "env")
    flag = parse_args(["--state-dir", str(tmp_path / "flag")], {"SIDEKICK_TOOLS_STATE_DIR": "x"})
    assert flag.state_dir == str(tmp_path / "flag")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"state_dir": str(tmp_path / "file")}))
    from_file = parse_args(["--config", str(config)], {})
    assert from_file.state_dir == str(tmp_path / "file") and from_file.config_required
    assert from_file.config_path == str(config)


def test_waits_are_bounded_for_mcp_clients(tmp_path):
    path = tmp_path / CONFIG_NAME
    path.write_text(json.dumps({"tasks": {"hybrid_threshold": 120, "await_timeout": 55}}))
    config = load(str(path), str(tmp_path))
    assert config.tasks.await_timeout == 50 and config.tasks.hybrid_threshold == 50
    path.write_text(json.dumps({"tasks": {"hybrid_threshold": 3}, "mcp": {"await_timeout": 20}}))
    config = load(str(path), str(tmp_path))
    assert config.tasks.await_timeout == 20 and config.tasks.hybrid_threshold == 3
    assert config.state_dir == str(tmp_path)


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", "{bad", '{"agents": "x"}', "\xff", '{"mcp": {"await_timeout": "abc"}}'],
)
def test_unusable_settings_are_refused(tmp_path, content):
    path = tmp_path / CONFIG_NAME
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(SettingsError):
        load(str(path), str(tmp_path))


def test_settings_are_read_again_when_the_file_changes(tmp_path):
    path = tmp_path / CONFIG_NAME
    path.write_text(json.dumps({"agents": {"a": {"cmd": ["echo"]}}}))
    source = ConfigSource(parse_args(["--state-dir", str(tmp_path)], {}))
    assert list(source.current().agents) == ["a"]
    path.write_text(json.dumps({"agents": {"a": {"cmd": ["echo"]}, "bb": {"cmd": ["true"]}}}))
    os.utime(path, (1, 1))  # a different stamp even within the clock's resolution
    assert sorted(source.current().agents) == ["a", "bb"]
    path.write_text("{broken")
    os.utime(path, (2, 2))
    assert sorted(source.current().agents) == ["a", "bb"]  # kept
    path.write_text(json.dumps({"mcp": {"await_timeout": "50s"}}))
    os.utime(path, (3, 3))
    assert sorted(source.current().agents) == ["a", "bb"]  # kept, not an internal error


def test_a_finished_call_whose_task_is_gone_is_still_answered():
    """The task of a finished run can be purged before the answer is made."""
    from sidekick_tools.mcp import answers
    from sidekick_tools.tools.base import ToolResult

    result = ToolResult("failed", "boom\n", {"exit": 2, "task": "abc123"})
    got = answers.from_task_call(result, None, face_mod.NAMES, 50, 10.0)
    assert not got.is_error
    assert json.loads(got.text.split("\n" + answers.SEPARATOR)[0])["exit_code"] == 2
    assert got.text.endswith("boom")


def test_client_names_become_chat_identities():
    assert client_chat("Claude Code") == "mcp:Claude-Code"
    assert client_chat(None) == "mcp:client"
    assert client_chat("../../etc") == "mcp:..-..-etc"
    assert len(client_chat("x" * 500)) == len("mcp:") + 40


@pytest.fixture
async def setup(tmp_path):
    manager = make_manager(str(tmp_path / "state"))
    (tmp_path / "state").mkdir(exist_ok=True)
    yield manager, tmp_path
    await manager.shutdown(kill=True)


def source_with(tmp_path: Path, **settings) -> ConfigSource:
    state = tmp_path / "state"
    (state / CONFIG_NAME).write_text(json.dumps(settings))
    return ConfigSource(parse_args(["--state-dir", str(state)], {}))


async def test_neovim_tasks_are_refused_unless_shared(setup):
    manager, tmp_path = setup
    editor = await manager.submit(
        TaskSpec(tool="run_terminal_command", command="echo hi", chat="/w/a.sidekick.md")
    )
    await manager.wait(editor.id, 10)
    closed = Face(manager, source_with(tmp_path), str(tmp_path))
    for tool, args in (
        ("await", {"task": editor.id}),
        ("halt", {"task": editor.id}),
        ("status", {"task": editor.id}),
        ("output", {"task": editor.id}),
    ):
        answer = await closed.call(tool, args, "agent")
        assert answer.is_error and '"status": "refused"' in answer.text, tool
        assert "share_editor_tasks = true" in answer.text
    listed = await closed.call("list", {}, "agent")
    assert editor.id not in listed.text

    shared = Face(manager, source_with(tmp_path, mcp={"share_editor_tasks": True}), str(tmp_path))
    status = await shared.call("status", {"task": editor.id}, "agent")
    assert not status.is_error and json.loads(status.text)["status"] == "completed"
    listed = await shared.call("list", {}, "agent")
    assert editor.id in listed.text
    tools = dict((name, text) for name, text, _ in shared.tools())
    assert "and by Neovim" in tools["list"]


async def test_a_secret_on_any_line_of_a_tasks_output_is_masked_in_every_answer(setup):
    """status, await and halt hold the output as JSON strings, lines joined by
    escaped breaks: a key on the second line was answered as it is."""
    manager, tmp_path = setup
    face = Face(manager, source_with(tmp_path), str(tmp_path))
    key = "sk-ant-api03-" + "Ab0" * 12
    started = await face.call("run", {"command": f"echo hi; echo {key}"}, "agent")
    token = json.loads(started.text.split("\n---")[0])["task"]
    for tool in ("status", "await", "halt"):
        answer = await face.call(tool, {"task": token}, "agent")
        assert "hi" in answer.text and key not in answer.text, (tool, answer.text)


async def test_run_and_ask_say_that_waiting_for_the_end_can_outlast_the_client(setup):
    """`async: false` waits for the end however long it takes: past the client's
    time limit for one call the call fails and the agent never learns the
    task's token. The schema said only "false: wait for the end"."""
    manager, tmp_path = setup
    face = Face(manager, source_with(tmp_path, mcp={"await_timeout": 30}), str(tmp_path))
    schemas = {name: schema for name, _, schema in face.tools()}
    for name in ("run", "ask"):
        said = schemas[name]["properties"]["async"]["description"]
        assert "absent: wait up to 10 s" in said, said
        assert "time limit" in said and "list" in said, said


async def test_unknown_tool_and_bad_arguments(setup):
    manager, tmp_path = setup
    face = Face(manager, source_with(tmp_path), str(tmp_path))
    with pytest.raises(UnknownTool, match="This server's tools: run, ask"):
        await face.call("rm", {}, None)
    answer = await face.call("run", None, None)
    assert answer.is_error and answer.text.startswith("run: ")
    answer = await face.call("list", ["status"], None)
    assert answer.is_error and "must be a JSON object" in answer.text


async def test_list_finds_mcp_tasks_among_any_number_of_neovims(setup):
    """`list` read the store's newest rows looking for the MCP clients' tasks,
    20,000 at most per group: behind more tasks of Neovims it said "(0)" and
    held the server seconds. The store selects them by their chat's prefix."""
    manager, tmp_path = setup
    face = Face(manager, source_with(tmp_path), str(tmp_path))
    tokens = []
    for i in range(5):
        answer = await face.call("run", {"command": f"echo {i}", "async": False}, "agent")
        tokens.append(json.loads(answer.text.split("\n--- output ---")[0])["task"])
    await manager.submit(TaskSpec(tool="run_terminal_command", command="true", chat="/w/c.md"))
    now = time.time() + 10  # newer than the clients' tasks
    manager.store.insert_many(
        Task(
            id=f"{i:06x}",
            tool="run_terminal_command",
            command="true",
            chat="/w/other.sidekick.md",
            status=TaskStatus.COMPLETED,
            created_at=now + i / 1000,
        )
        for i in range(0xA00000, 0xA00000 + 20_100)
    )
    listed = (await face.call("list", {"status": "completed"}, "agent")).text
    assert "Completed, newest first (5):" in listed
    assert all(t in listed for t in tokens)


async def test_list_names_each_task_by_the_tool_the_client_has(setup):
    """`list` showed the chat's tool names (run_terminal_command,
    use_agent(name)), tools an MCP client does not have."""
    manager, tmp_path = setup
    source = source_with(tmp_path, agents={"rev": {"cmd": ["echo", "--", "{message}"]}})
    face = Face(manager, source, str(tmp_path))
    await face.call("run", {"command": "echo one", "async": False}, "agent")
    await face.call("ask", {"agent": "rev", "message": "two", "async": False}, "agent")
    listed = (await face.call("list", {}, "agent")).text
    assert "run_terminal_command" not in listed and "use_agent" not in listed, listed
    rows = [line.split("  ")[2:4] for line in listed.splitlines() if line.startswith("  ")]
    assert ["run", '"echo one"'] in rows and ["ask(rev)", '"rev: two"'] in rows, rows


class FakeTasks:
    """Just enough of a TaskManager for the reporter."""

    def __init__(self, task):
        self.task = task
        self.callbacks = []

    def subscribe(self, callback):
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    def get(self, token):
        return self.task if token == self.task.id else None


async def test_progress_reports_grow_and_stop_when_the_client_is_gone(setup):
    manager, tmp_path = setup
    task = await manager.submit(
        TaskSpec(tool="run_terminal_command", command="sleep 5", chat="mcp:x", call_id="c9")
    )
    sent = []

    async def report(progress, total, message):
        sent.append((progress, message))
        if len(sent) == 3:
            raise ConnectionError("client gone")

    fake = FakeTasks(manager.get(task.id))
    async with ProgressReporter(fake, report, chat="mcp:x", call_id="c9", heartbeat=0.05):
        assert fake.callbacks
        for cb in list(fake.callbacks):
            cb(type("E", (), {"kind": "started", "task": fake.task})())
        await until(lambda: len(sent) == 3)
    assert fake.callbacks == []
    values = [v for v, _ in sent]
    assert values == sorted(values) and len(set(values)) == 3
    assert sent[0][1].startswith(f"task {task.id} running")
    await manager.halt(task.id)


def test_a_progress_message_masks_what_the_task_printed():
    """A progress marker's text is the task's output: a key in it is masked, as in answers."""
    from sidekick_tools.mcp.progress import describe

    key = "ghp_" + "A1b2C3d4" * 5
    task = Task(id="58174a", status=TaskStatus.RUNNING, progress=10, progress_text=f"push {key}")
    message = describe(task)
    assert key not in message and "push ghp_***" in message


def test_a_client_that_went_away_is_no_error_of_the_servers():
    """A client killed during an await closed its pipe: the server's log said
    "the session ended on an error" with a BrokenPipeError traceback."""
    from sidekick_tools.mcp.server import client_gone

    class Group(Exception):  # an exception group (anyio's task groups raise them)
        def __init__(self, *errors: BaseException) -> None:
            super().__init__("group")
            self.exceptions = errors

    assert client_gone(BrokenPipeError())
    assert client_gone(Group(BrokenPipeError(), ConnectionResetError()))
    assert client_gone(Group(Group(BrokenPipeError())))
    assert not client_gone(Group(BrokenPipeError(), ValueError()))
    assert not client_gone(Group())
    assert not client_gone(RuntimeError("a bug"))
