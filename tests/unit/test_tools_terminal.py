"""run_terminal_command: the safe-command predicate, and hybrid runs of real processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from typing import Any

import pytest
from sidekick_tools.config import Config
from sidekick_tools.defaults import default
from sidekick_tools.tasks.model import Task
from sidekick_tools.tasks.model import TaskStatus as Status
from sidekick_tools.tools import command_policy
from sidekick_tools.tools import run_terminal_command as rtc
from sidekick_tools.tools.base import ToolContext
from sidekick_tools.tools.command_table import table_for

from tests.unit.task_tools_support import mcp_output_lines

DEFAULT_SAFE_COMMANDS = tuple(default("auto_accept.safe_commands"))

TOOL = rtc.TOOL


# ------------------------------------------------------------ fake manager


class FakeManager:
    """Runs each spec for real (own session, output to files), like the real manager,
    and answers with real `Task` objects."""

    def __init__(self, root, default_timeout: float = 30.0):
        self.root = root
        self.default_timeout = default_timeout
        self.specs: list[Any] = []
        self.waits: list[tuple[str, float | None]] = []
        self.tasks: dict[str, Task] = {}
        self._ends: dict[str, asyncio.Future] = {}
        self._procs: dict[str, Any] = {}
        self.fail_submit: Exception | None = None
        self.read: set[str] = set()

    def mark_read(self, token):
        self.read.add(token)
        return token in self.tasks

    async def submit(self, spec):
        if self.fail_submit:
            raise self.fail_submit
        self.specs.append(spec)
        token = f"{0xA1B2C0 + len(self.specs):06x}"
        log_dir = self.root / token
        log_dir.mkdir(parents=True)
        task = Task(
            id=token,
            command=spec.command,
            cwd=spec.cwd,
            status=Status.RUNNING,
            log_dir=str(log_dir),
            started_at=time.time(),
        )
        self.tasks[token] = task
        with open(log_dir / "stdout", "wb") as out, open(log_dir / "stderr", "wb") as err:
            proc = await asyncio.create_subprocess_shell(
                spec.command, cwd=spec.cwd, stdout=out, stderr=err, start_new_session=True
            )
        self._procs[token] = proc
        timeout = spec.timeout or self.default_timeout
        self._ends[token] = asyncio.ensure_future(self._supervise(task, proc, timeout))
        return task

    async def _supervise(self, task, proc, timeout):
        try:
            rc = await asyncio.wait_for(proc.wait(), timeout)
            task.status = Status.COMPLETED if rc == 0 else Status.FAILED
            task.reason = "exit"
        except asyncio.TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = await proc.wait()
            task.status, task.reason = Status.FAILED, "timeout"
        task.exit_code = rc
        task.ended_at = time.time()

    async def wait(self, token, timeout):
        self.waits.append((token, timeout))
        try:
            await asyncio.wait_for(asyncio.shield(self._ends[token]), timeout)
        except asyncio.TimeoutError:
            pass
        return self.tasks[token]

    def get(self, token):
        return self.tasks.get(token)

    async def close(self):
        for token, proc in self._procs.items():
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await self._ends[token]


@pytest.fixture
async def manager(tmp_path):
    m = FakeManager(tmp_path / "state")
    yield m
    await m.close()


def make_ctx(tmp_path, manager, threshold=5.0, safe=DEFAULT_SAFE_COMMANDS):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    config = Config.from_dict(
        {"tasks": {"hybrid_threshold": threshold}, "auto_accept": {"safe_commands": list(safe)}}
    )
    return ToolContext(
        cwd=str(work), tasks=manager, config=config, chat="a.sidekick.md", call_id="call_0abc12"
    )


# ------------------------------------------------ the auto-accept predicate
# (the full table of forms is tests/unit/test_command_policy.py)


@pytest.fixture
def fake_bin(tmp_path):
    """A PATH directory with stand-ins for programs this machine may lack."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("make", "npm", "pytest", "anything"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def is_safe(command, safe=DEFAULT_SAFE_COMMANDS, root=None, path=None):
    root = root or os.getcwd()
    environ = {"PATH": os.pathsep.join(filter(None, [path, os.environ.get("PATH", "")]))}
    table = table_for(safe, {})
    return command_policy.check(command, None, str(root), table, environ).approved


# Every operator DESIGN §7 names, plus the other spellings they cover.
OPERATORS = [
    ";",
    "&",
    "&&",
    "|",
    "||",
    ">",
    ">>",
    "<",
    "<<",
    "`",
    "$(",
    "${",
    "\n",
    "\r",
    "$",
    "2>&1",
    "|&",
    ">|",
    "<(",
    ">(",
]
POSITIONS = [
    "{op}",
    "{op}ls",
    "{op} ls",
    "ls{op}",
    "ls {op}",
    "ls{op}rm -rf x",
    "ls {op} rm -rf x",
    "ls -la{op}",
    "ls -la {op}whoami",
    "ls 'quoted {op} arg'",
    'ls "quoted{op}arg"',
    "ls \\{op}",
    "git status{op}",
    "git status {op} git push",
    "echo a b c d e f g{op}",
    "cat README.md{op}{op}",
]


@pytest.mark.parametrize("op", OPERATORS, ids=repr)
@pytest.mark.parametrize("position", POSITIONS)
def test_shell_control_anywhere_is_never_safe(tmp_path, op, position):
    command = position.replace("{op}", op)
    assert is_safe(command, root=tmp_path) is False
    # even with a trailing/leading space or a permissive list
    assert is_safe(" " + command + " ", ["ls", "git", "echo", "cat"], root=tmp_path) is False


@pytest.mark.parametrize(
    "command",
    [
        "ls $HOME",
        "echo $PATH",
        "echo ${HOME}",
        "echo $(id)",
        "echo $'\\x41'",
        "ls $1",
        "echo $",
        "echo `id`",
        "ls\n",
        "ls\r\n",
        "\nls",
        "ls\x00",
        "ls\x1b[31m",
        "ls\x7f",
        "ls\x0b",
        "ls\x0c",
    ],
    ids=repr,
)
def test_expansions_and_control_characters_are_never_safe(tmp_path, command):
    assert is_safe(command, root=tmp_path) is False


@pytest.mark.parametrize(
    "command",
    [
        "ls",
        "ls -la",
        "  ls -la  ",
        "ls\t-la",
        "pwd",
        "cat README.md",
        "echo hi",
        "echo 'hello world'",
        "head -n 5 f",
        "tail -f log",
        "wc -l f",
        "which python",
        "date",
        "whoami",
        "git status",
        "git status --short",
        "git  status",
        "git\tstatus",
        "git diff HEAD~1",
        "git log --oneline -n 3",
        "git show HEAD",  # git show became a default safe form
    ],
)
def test_default_safe_commands(tmp_path, command):
    assert is_safe(command, root=tmp_path) is True


@pytest.mark.parametrize(
    "command",
    [
        "lsblk",
        "git branch -D main",
        "ls-files",
        "lsof -i",
        "pwdx 1",
        "cat2",
        "echos",
        "git",
        "gitstatus",
        "git statusx",
        "git push",
        "git -C /tmp status",
        "git commit -m x",
        "git stash",
        "rm -rf /",
        "",
        "   ",
        "LS",
        "Ls",
        "sudo ls",
        "FOO=1 ls",
        "env ls",
        "command ls",
        "\\ls",
        "'ls'",
        '"ls"',
        "./ls",
        "/bin/ls",
        "ls\u00a0-la",
        "git\u00a0status",
        "(ls)",
        "{ ls; }",
        "!ls",
        # refused since the allow-list of forms: a glob, ~ and a comment are expansions
        "ls src/*.py",
        "ls ~",
        "echo a=b # comment",
    ],
)
def test_not_a_safe_command(tmp_path, command):
    assert is_safe(command, root=tmp_path) is False


@pytest.mark.parametrize(
    "command, safe",
    [
        ("make test", True),
        ("make test -j4", False),  # an exact entry takes nothing more
        ("make", False),
        ("make testing", False),
        ("make install", False),
        ("npm run lint", True),
        ("npm run lint:fix", False),
        ("npm run", False),
        ("anything", False),
    ],
)
def test_configured_exact_commands(tmp_path, fake_bin, command, safe):
    entries = ["make test", "  npm   run  lint ", "", "   ", "ok; rm"]
    assert is_safe(command, entries, root=tmp_path, path=fake_bin) is safe


def test_empty_list_accepts_nothing(tmp_path):
    assert is_safe("ls", [], root=tmp_path) is False
    assert is_safe("ls", None, root=tmp_path) is False


def test_auto_accept_uses_configured_entries(tmp_path, fake_bin, monkeypatch):
    monkeypatch.setenv("PATH", fake_bin + os.pathsep + os.environ["PATH"])
    ctx = make_ctx(tmp_path, None, safe=["pytest -q"])
    assert TOOL.auto_accept({"command": "pytest -q"}, ctx) is True
    assert TOOL.auto_accept({"command": "pytest -q tests"}, ctx) is False
    assert TOOL.auto_accept({"command": "ls"}, ctx) is False
    assert TOOL.auto_accept({"command": "pytest -q; rm x"}, ctx) is False
    assert TOOL.auto_accept({"command": 3}, ctx) is False
    assert TOOL.auto_accept({}, ctx) is False


# ------------------------------------------------------------ runs (real processes)


async def test_echo_completes_with_exit_zero(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager)
    res = await TOOL.run({"command": "echo hi"}, ctx)
    token = next(iter(manager.tasks))
    assert res.status == "completed"
    assert res.body == "hi"
    assert list(res.fields) == ["exit", "duration", "task"]
    assert res.fields["exit"] == 0 and res.fields["task"] == token
    assert isinstance(res.fields["duration"], float) and 0 <= res.fields["duration"] < 5
    assert manager.waits == [(token, 5.0)]  # async absent: the hybrid threshold
    assert manager.read == {token}  # the result reached the LLM inline


async def test_nonzero_exit_fails_with_exit_code(tmp_path, manager):
    res = await TOOL.run({"command": "echo before; exit 3"}, make_ctx(tmp_path, manager))
    assert res.status == "failed"
    assert res.fields["exit"] == 3
    assert "reason" not in res.fields
    assert res.body == "before"


async def test_stderr_is_appended_under_a_marker(tmp_path, manager):
    res = await TOOL.run(
        {"command": "echo out; echo err >&2; echo out2"}, make_ctx(tmp_path, manager)
    )
    assert res.body == "out\nout2\n[stderr]\nerr"


async def test_only_stderr(tmp_path, manager):
    res = await TOOL.run({"command": "echo oops >&2; exit 1"}, make_ctx(tmp_path, manager))
    assert (res.status, res.body) == ("failed", "[stderr]\noops")


async def test_no_output(tmp_path, manager):
    res = await TOOL.run({"command": "true"}, make_ctx(tmp_path, manager))
    assert (res.status, res.body) == ("completed", "(no output)")


async def test_invalid_utf8_output_is_replaced(tmp_path, manager):
    res = await TOOL.run({"command": "printf 'a\\377b\\n'"}, make_ctx(tmp_path, manager))
    assert res.body == "a\ufffdb"


async def test_hybrid_threshold_returns_running_with_token(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager, threshold=0.2)
    res = await TOOL.run({"command": "sleep 5"}, ctx)
    token = next(iter(manager.tasks))
    assert res.status == "running"
    assert res.fields == {"task": token}
    assert res.body == (
        f"Still running after 0.2s as task {token}. It continues in the background; its result "
        f'will replace this block when it ends. Await it with await_task {{"task": "{token}"}} '
        f"or stop it with halt_task (or :SidekickHalt {token})."
    )
    assert manager.waits == [(token, 0.2)]
    assert manager.tasks[token].status is Status.RUNNING
    assert manager.read == set()  # nothing final reached the LLM yet


async def test_default_threshold_wording(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager, threshold=10)
    res = rtc.running_result(Task(id="abc123", status="running"), waited=10.0)
    assert res.body.startswith("Still running after 10s as task abc123. It continues")
    assert ctx.config.tasks.hybrid_threshold == 10


async def test_async_true_returns_at_once(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager, threshold=30)
    res = await TOOL.run({"command": "sleep 5", "async": True}, ctx)
    token = next(iter(manager.tasks))
    assert res.status == "running"
    assert res.fields == {"task": token}
    assert res.body.startswith(f"Started in the background as task {token}, running.")
    assert f'await_task {{"task": "{token}"}}' in res.body
    assert manager.waits == []


async def test_async_false_waits_to_the_end(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager, threshold=0.05)
    res = await TOOL.run({"command": "sleep 0.4; echo done", "async": False}, ctx)
    token = next(iter(manager.tasks))
    assert (res.status, res.body) == ("completed", "done")
    assert manager.waits == [(token, None)]
    assert res.fields["duration"] >= 0.3


async def test_timeout_fails_with_reason(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager)
    res = await TOOL.run(
        {"command": "echo partial; sleep 5", "timeout_seconds": 0.3, "async": False}, ctx
    )
    assert res.status == "failed"
    assert res.fields["reason"] == "timeout"
    assert res.fields["exit"] == -signal.SIGKILL
    assert res.body == "partial\n[timed out; the process group was killed]"
    assert manager.specs[0].timeout == 0.3


async def test_spec_carries_everything_the_manager_needs(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager)
    (tmp_path / "work" / "sub").mkdir()
    await TOOL.run({"command": "pwd", "purpose": "  Where am I  ", "cwd": "sub"}, ctx)
    await TOOL.run({"command": "echo x", "timeout_seconds": 7}, ctx)
    first, second = manager.specs
    assert first.tool == "run_terminal_command"
    assert first.label == "Where am I"
    assert first.command == "pwd"
    assert first.cwd == str(tmp_path / "work" / "sub")
    assert first.env == {}
    assert first.timeout is None  # the manager applies its default
    assert (first.chat, first.call_id) == ("a.sidekick.md", "call_0abc12")
    assert second.label == "echo x"  # no purpose: the command
    assert second.timeout == 7.0
    assert second.cwd == str(tmp_path / "work")


async def test_relative_cwd_is_where_it_runs(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager)
    (tmp_path / "work" / "sub").mkdir()
    res = await TOOL.run({"command": "pwd -P", "cwd": "sub"}, ctx)
    assert res.body == os.path.realpath(tmp_path / "work" / "sub")


@pytest.mark.parametrize(
    "cwd, message",
    [
        ("nope", "working directory nope does not exist"),
        ("file.txt", "working directory file.txt is not a directory"),
        ("../nowhere/deeper", "working directory ../nowhere/deeper does not exist"),
    ],
)
async def test_bad_cwd_fails_without_starting(tmp_path, manager, cwd, message):
    ctx = make_ctx(tmp_path, manager)
    (tmp_path / "work" / "file.txt").write_text("")
    res = await TOOL.run({"command": "ls", "cwd": cwd}, ctx)
    assert (res.status, res.body) == ("failed", message)
    assert manager.specs == []


TIMEOUT_ERR = 'parameter "timeout_seconds": must be > 0, got '


@pytest.mark.parametrize(
    "params, message",
    [
        ({"command": "ls", "timeout_seconds": 0}, f"{TIMEOUT_ERR}0"),
        ({"command": "ls", "timeout_seconds": -5}, f"{TIMEOUT_ERR}-5"),
        (
            {"command": "ls", "timeout_seconds": "10"},
            'parameter "timeout_seconds": expected number, got string',
        ),
        ({"command": "ls", "async": "yes"}, 'parameter "async": expected boolean, got string'),
        ({"command": ""}, 'parameter "command": must not be empty'),
        ({"command": ["ls"]}, 'parameter "command": expected string, got array'),
        (
            {"cmd": "ls"},
            'unknown parameter "cmd" (did you mean "command"? expected: command, '
            "purpose, cwd, timeout_seconds, async)",
        ),
        ({}, 'missing required parameter "command"'),
        ({"command": "ls", "purpose": 1}, 'parameter "purpose": expected string, got integer'),
    ],
)
async def test_invalid_params_fail_without_starting(tmp_path, manager, params, message):
    res = await TOOL.run(params, make_ctx(tmp_path, manager))
    assert (res.status, res.body) == ("failed", message)
    assert manager.specs == []


async def test_submit_error_is_a_failed_result(tmp_path, manager):
    manager.fail_submit = RuntimeError("store is locked")
    res = await TOOL.run({"command": "ls"}, make_ctx(tmp_path, manager))
    assert res.status == "failed"
    assert res.body == "could not start the command: store is locked"
    assert res.fields == {"reason": "spawn_error"}


async def test_submit_returning_a_terminal_task_is_reported_at_once(tmp_path):
    done = Task(id="dead01", status="failed", reason="spawn_error")

    class Refusing:
        async def submit(self, spec):
            return done

        async def wait(self, token, timeout):  # pragma: no cover - must not be called
            raise AssertionError("no wait for a finished task")

    res = await TOOL.run({"command": "ls", "async": True}, make_ctx(tmp_path, Refusing()))
    assert res.status == "failed"
    assert res.fields == {"reason": "spawn_error", "task": "dead01"}
    assert res.body == "[could not start the command]"


async def test_queued_task_wording(tmp_path):
    queued = Task(id="q00001", status=Status.QUEUED)

    class Busy:
        async def submit(self, spec):
            return queued

        async def wait(self, token, timeout):
            return queued

    ctx = make_ctx(tmp_path, Busy(), threshold=1)
    res = await TOOL.run({"command": "make"}, ctx)
    assert res.status == "running" and res.fields == {"task": "q00001"}
    assert res.body.startswith("Still queued after 1s as task q00001 (the concurrency limit")
    res = await TOOL.run({"command": "make", "async": True}, ctx)
    assert res.body.startswith("Started in the background as task q00001, queued")


# ------------------------------------------------- calls the policy approved


def auto_ctx(tmp_path, manager, timeout=120.0, has_policy=False, **kw):
    ctx = make_ctx(tmp_path, manager, **kw)
    ctx.config.auto_accept.timeout = timeout
    ctx.config.auto_accept.has_policy = has_policy
    ctx.auto = True
    return ctx


async def test_an_auto_run_command_runs_as_checked(tmp_path, manager):
    ctx = auto_ctx(tmp_path, manager)
    (tmp_path / "work" / "a b.txt").write_text("inside\n")
    res = await TOOL.run({"command": "cat 'a b.txt'", "purpose": "show"}, ctx)
    assert (res.status, res.body) == ("completed", "inside")
    spec = manager.specs[0]
    assert spec.command.startswith("exec /") and spec.command.endswith("/cat 'a b.txt'")
    assert spec.label == "show"
    assert spec.timeout == 120.0


async def test_an_auto_run_command_gets_the_auto_timeout(tmp_path, manager):
    """tail -f never ends by itself: approved unasked, it stops at auto_accept.timeout."""
    ctx = auto_ctx(tmp_path, manager, timeout=0.3)
    (tmp_path / "work" / "log").write_text("line\n")
    res = await TOOL.run({"command": "tail -f log", "async": False}, ctx)
    assert res.status == "failed" and res.fields["reason"] == "timeout"
    assert res.body.startswith("line")
    assert manager.specs[0].timeout == 0.3


@pytest.mark.parametrize("asked, limit, expected", [(5, 120, 5), (500, 120, 120), (5, 0, 5)])
async def test_the_smaller_timeout_wins(tmp_path, manager, asked, limit, expected):
    ctx = auto_ctx(tmp_path, manager, timeout=limit)
    await TOOL.run({"command": "echo hi", "timeout_seconds": asked}, ctx)
    assert manager.specs[0].timeout == expected


async def test_a_command_run_by_hand_runs_as_written_without_the_auto_timeout(tmp_path, manager):
    ctx = make_ctx(tmp_path, manager)
    ctx.config.auto_accept.timeout = 0.1
    res = await TOOL.run({"command": "echo a; echo b"}, ctx)
    assert (res.status, res.body) == ("completed", "a\nb")
    assert manager.specs[0].command == "echo a; echo b"
    assert manager.specs[0].timeout is None


async def test_an_auto_run_call_that_no_longer_passes_is_not_run(tmp_path, manager):
    """The text changed between the decision and the run: nothing starts."""
    ctx = auto_ctx(tmp_path, manager)
    res = await TOOL.run({"command": "echo hi > x"}, ctx)
    assert res.status == "failed" and res.body.startswith("Not run:")
    assert "redirection" in res.body
    assert manager.specs == []
    assert not (tmp_path / "work" / "x").exists()


async def test_a_user_policy_function_may_approve_any_command(tmp_path, manager):
    """Approved by the user's Lua policy: runs as written, still under the auto timeout."""
    ctx = auto_ctx(tmp_path, manager, timeout=60, has_policy=True)
    res = await TOOL.run({"command": "echo a && echo b"}, ctx)
    assert (res.status, res.body) == ("completed", "a\nb")
    assert manager.specs[0].command == "echo a && echo b"
    assert manager.specs[0].timeout == 60


# ------------------------------------------------------------ result_from_task


def _task(tmp_path, stdout=b"", stderr=b"", **kw):
    log_dir = tmp_path / "log"
    log_dir.mkdir(exist_ok=True)
    (log_dir / "stdout").write_bytes(stdout)
    (log_dir / "stderr").write_bytes(stderr)
    base = dict(
        id="abc123",
        status="completed",
        exit_code=0,
        reason="exit",
        started_at=100.0,
        ended_at=102.314,
        log_dir=str(log_dir),
    )
    base.update(kw)
    return Task(**base)


@pytest.mark.parametrize(
    "status, exit_code, reason, want_status, want_fields",
    [
        ("completed", 0, "exit", "completed", {"exit": 0}),
        (Status.COMPLETED, 0, "exit", "completed", {"exit": 0}),
        ("failed", 2, "exit", "failed", {"exit": 2}),
        ("completed", 1, "exit", "failed", {"exit": 1}),  # exit decides
        ("failed", 124, "timeout", "failed", {"exit": 124, "reason": "timeout"}),
        ("failed", -15, "signal", "failed", {"exit": -15, "reason": "signal"}),
        ("cancelled", -15, "cancelled", "cancelled", {"exit": -15, "reason": "cancelled"}),
        ("failed", None, "host restarted", "failed", {"reason": "host_restarted"}),
        (Status.FAILED, None, None, "failed", {}),
    ],
)
def test_result_from_task_status_and_fields(
    tmp_path, status, exit_code, reason, want_status, want_fields
):
    res = rtc.result_from_task(
        _task(tmp_path, b"x\n", status=status, exit_code=exit_code, reason=reason)
    )
    assert res.status == want_status
    assert res.fields == {**want_fields, "duration": 2.31, "task": "abc123"}


def test_result_from_task_field_order(tmp_path):
    res = rtc.result_from_task(_task(tmp_path, status="failed", exit_code=9, reason="timeout"))
    assert list(res.fields) == ["exit", "duration", "reason", "task"]


def test_result_from_task_without_times_or_logs(tmp_path):
    res = rtc.result_from_task(Task(id="t1", status="completed", exit_code=0))
    assert (res.status, res.body, res.fields) == (
        "completed",
        "(no output)",
        {"exit": 0, "task": "t1"},
    )


def test_result_from_task_missing_log_files(tmp_path):
    res = rtc.result_from_task(_task(tmp_path, log_dir=str(tmp_path / "gone")))
    assert res.body == "(no output)"


def test_result_from_task_tails_large_output(tmp_path):
    out = b"".join(b"line %05d\n" % i for i in range(20000))  # 220,000 bytes
    res = rtc.result_from_task(_task(tmp_path, out, b"E" * 10 + b"\n"), tail_bytes=1000)
    lines = res.body.split("\n")
    path = os.path.join(tmp_path, "log", "stdout")
    note = re.fullmatch(
        rf"\[\.\.\. (\d+) earlier lines \((\d+) bytes\) not shown; full log: {re.escape(path)}\]",
        lines[0],
    )
    assert note
    shown = int(note.group(2))
    assert lines[1].startswith("line ") and len(lines[1]) == 10  # a whole line, not a fragment
    assert lines[-3] == "line 19999"
    assert lines[-2:] == ["[stderr]", "EEEEEEEEEE"]
    assert shown + sum(len(x) + 1 for x in lines[1:-2]) == len(out)
    assert int(note.group(1)) + len(lines[1:-2]) == 20000  # every line is counted once


def test_a_tail_of_a_log_too_big_to_count_gives_the_bytes_it_leaves_out(tmp_path, monkeypatch):
    monkeypatch.setattr(rtc, "COUNT_LINES_BYTES", 1000)
    out = b"".join(b"line %05d\n" % i for i in range(20000))
    res = rtc.result_from_task(_task(tmp_path, out), tail_bytes=1000)
    first, *rest = res.body.split("\n")
    shown = re.fullmatch(r"\[\.\.\. (\d+) earlier bytes not shown; full log: \S+/stdout\]", first)
    assert shown and int(shown.group(1)) + sum(len(x) + 1 for x in rest) == len(out)


def test_result_from_task_tail_cut_inside_a_long_multibyte_line(tmp_path):
    out = ("é" * 10000).encode()  # one long line; a cut may land mid-character
    # (the cut word goes with the cut, up to 4 KiB of it: the tail is longer)
    res = rtc.result_from_task(_task(tmp_path, out), tail_bytes=5001)
    first, text = res.body.split("\n", 1)
    assert first.startswith("[... ")
    assert set(text) == {"é"}


def test_result_from_task_reads_bytes_it_never_holds_all_of(tmp_path):
    # a 20 MB log is read through its tail only
    log = tmp_path / "log"
    log.mkdir()
    with open(log / "stdout", "wb") as f:
        f.truncate(20 << 20)  # a hole: it reads as NULs, but for the text at its end
        f.seek(-2 * rtc.TAIL_BYTES, os.SEEK_END)
        f.write(b"text\n" * (2 * rtc.TAIL_BYTES // 5) + b"\nlast line\n")
    (log / "stderr").write_bytes(b"")
    task = Task(
        id="big",
        status="completed",
        exit_code=0,
        reason="exit",
        started_at=1,
        ended_at=2,
        log_dir=str(log),
    )
    res = rtc.result_from_task(task)
    assert res.body.endswith("\nlast line")
    assert len(res.body) < rtc.TAIL_BYTES + 200


def test_result_from_task_for_a_running_task(tmp_path):
    res = rtc.result_from_task(Task(id="r1", status=Status.RUNNING))
    assert res.status == "running" and res.fields == {"task": "r1"}


def test_binary_output_is_named_by_the_logs_own_size(tmp_path):
    """Invalid UTF-8 grew into three bytes a character once decoded: 10 bytes of
    output were named "26 bytes"; a long binary log was named by its tail only."""
    odd = b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\x00\x00"
    res = rtc.result_from_task(_task(tmp_path, odd, b"warning: odd\n"))
    path = os.path.join(tmp_path, "log", "stdout")
    assert res.body == (
        f"[binary output: 10 bytes not shown; full log: {path}]\n[stderr]\nwarning: odd"
    )
    big = os.urandom(5000).replace(b"\n", b"\x00")
    res = rtc.result_from_task(_task(tmp_path, big), tail_bytes=1000)
    assert res.body == f"[binary output: 5000 bytes not shown; full log: {path}]"


def test_a_cut_never_shows_the_end_of_the_word_it_cut(tmp_path):
    """A secret that a tail cut through showed its end (`03-Q7wER…`), which
    masking could not know without its start: the cut word goes with the cut."""
    key = "sk-ant-api03-" + "Q7wERtyUIopASdfGHjkLZxcVBnm1234567890abcd"
    line = "x" * 5000 + " " + key + " then the rest of the line"
    res = rtc.result_from_task(_task(tmp_path, line.encode()), tail_bytes=len(line) - 5010)
    first, text = res.body.split("\n", 1)
    assert first.startswith("[... ") and text == " then the rest of the line"


def test_a_stdout_line_reading_stderr_stays_stdout_when_the_result_is_cut(tmp_path):
    """The streams of a cut result were told apart by the first `[stderr]` line,
    which the command's own stdout can print: stdout after it was cut and
    labelled as stderr, under a note naming the stderr log."""
    stdout = "\n".join(["out1", "[stderr]", *(f"out{i}" for i in range(3, 41))]) + "\n"
    task = _task(tmp_path, stdout.encode(), b"err1\nerr2\nerr3\n", status="failed", exit_code=1)
    res = rtc.result_from_task(task)
    assert res.body == stdout + "[stderr]\nerr1\nerr2\nerr3"  # the body itself is unchanged
    shown = mcp_output_lines(res, task)
    assert shown == [
        f"[... 34 earlier lines truncated; full output: {task.log_path}]",
        *(f"out{i}" for i in range(35, 41)),
        "[stderr]",
        "err1",
        "err2",
        "err3",
    ]


def test_output_imitating_the_tail_reads_note_is_counted_as_output(tmp_path):
    """A command printing a line like the tail read's note ("[... 999999
    earlier lines ...]") first does not make the cut note claim those lines;
    a log really read from its tail still adds up what the read left out."""
    forged = "[... 999999 earlier lines (5 bytes) not shown; full log: /elsewhere]"
    stdout = "\n".join([forged, *(f"out{i}" for i in range(1, 40))]) + "\n"
    task = _task(tmp_path, stdout.encode())
    res = rtc.result_from_task(task)
    assert res.streams is not None and not res.streams.out_cut
    shown = mcp_output_lines(res, task)
    assert shown[0] == f"[... 30 earlier lines truncated; full output: {task.log_path}]"
    # the same lines behind a real tail read: its note is counted
    long = "".join(f"early{i}\n" for i in range(1000)) + stdout
    (tmp_path / "long").mkdir()
    task = _task(tmp_path / "long", long.encode())
    res = rtc.result_from_task(task, tail_bytes=len(stdout.encode()) + 3)
    assert res.streams is not None and res.streams.out_cut
    shown = mcp_output_lines(res, task)
    assert shown[0] == f"[... 1030 earlier lines truncated; full output: {task.log_path}]"


@pytest.mark.parametrize(
    "status, reason, error, note",
    [
        # halted by hand: nothing more to say
        ("cancelled", "cancelled", None, "[cancelled]"),
        # halted by the plugin: who and why (a reopened chat read only "[cancelled]")
        (
            "cancelled",
            "cancelled",
            "halted because Neovim exited",
            "[cancelled: halted because Neovim exited]",
        ),
        (
            "failed",
            "log_limit",
            "its output passed tasks.max_log_bytes (100 bytes): stopped",
            "[its output passed tasks.max_log_bytes (100 bytes): stopped]",
        ),
        ("failed", "timeout", "timed out after 5s", "[timed out; the process group was killed]"),
        ("failed", "exit", "exit 1", None),
    ],
)
def test_the_end_note_says_why_the_plugin_stopped_a_task(tmp_path, status, reason, error, note):
    task = _task(tmp_path, b"partial\n", status=status, exit_code=143, reason=reason, error=error)
    body = rtc.result_from_task(task).body
    assert body == (f"partial\n{note}" if note else "partial")


def test_a_task_that_never_started_is_not_said_to_have_run(tmp_path):
    """A queued task whose host died before starting it: its result says it
    never ran, not that its outcome is unknown (the model would think it may
    have had effects)."""
    error = "the task never started: its Neovim or host exited first"
    task = _task(
        tmp_path,
        status="failed",
        exit_code=None,
        reason="host restarted",
        started_at=None,
        error=error,
    )
    res = rtc.result_from_task(task)
    assert res.status == "failed"
    assert res.body == f"[{error}]"
    ran = rtc.result_from_task(_task(tmp_path, b"x\n", status="failed", reason="host restarted"))
    assert ran.body.endswith("[the host restarted while it ran; its outcome is unknown]")


def test_the_tail_of_one_long_line_says_what_was_left_out_of_it(tmp_path):
    """`head -c 5000000 /dev/zero | tr '\\0' x` (one line, no newline): the note
    said "0 earlier lines (4741952 bytes) not shown", which reads as nothing cut."""
    (tmp_path / "stdout").write_bytes(b"x" * 300_000)
    text, noted = rtc._tail(str(tmp_path), "stdout", 100_000)
    note, _, rest = text.partition("\n")
    left = re.fullmatch(
        rf"\[\.\.\. (\d+) earlier bytes not shown; full log: {tmp_path}/stdout\]", note
    )
    assert noted and left, note
    assert int(left.group(1)) + len(rest) == 300_000 and set(rest) == {"x"}
    (tmp_path / "stdout").write_bytes(b"a\nb\n" + b"x" * 300_000)  # lines before it
    note = rtc._tail(str(tmp_path), "stdout", 100_000)[0].partition("\n")[0]
    assert note.startswith("[... 2 earlier lines (")
