"""The MCP server as a process, spoken to in raw JSON lines (no SDK on this side):
the protocol's shapes, a project whose modules shadow real ones, a Python
without the SDK, bad settings."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import live_members
from tests.forkserver import SERVERS
from tests.integration.mcp_helpers import PYTHONPATH, passed_env, server_args, write_config

pytestmark = pytest.mark.integration


def server_env(**extra: str) -> dict[str, str]:
    env = passed_env()
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    env["PYTHONPATH"] = PYTHONPATH
    env.update(extra)
    return env


class RawClient:
    """JSON-RPC over the server's stdin/stdout, one message per line."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env or server_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))

    def send(self, message: dict[str, Any]) -> None:
        self.write_line(json.dumps({"jsonrpc": "2.0", **message}))

    def write_line(self, line: str) -> None:
        """One line as it is (what no well-behaved client sends, say)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: int, method: str, params: dict[str, Any] | None = None) -> dict:
        self.send({"id": rid, "method": method, **({"params": params} if params else {})})
        return self.answer(rid)

    def answer(self, rid: int, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer to request {rid}; seen {self.seen}")
            try:
                message = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(message)
            if message.get("id") == rid and "method" not in message:
                return message

    def initialize(self) -> dict[str, Any]:
        result = self.request(
            1,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-client", "version": "0"},
            },
        )
        self.send({"method": "notifications/initialized"})
        return result

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def raw(tmp_path: Path):
    started: list[RawClient] = []

    def start(cwd: Path | None = None, argv: list[str] | None = None, **kw: Any) -> RawClient:
        work = cwd or tmp_path
        argv = argv or [SERVERS.python("MCP"), *server_args(tmp_path / "state")]
        client = RawClient(argv, work, **kw)
        started.append(client)
        return client

    yield start
    for client in started:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait()


def test_protocol_shapes_over_raw_json_lines(raw, tmp_path):
    write_config(tmp_path / "state", tasks={"hybrid_threshold": 0.3})
    client = raw()
    init = client.initialize()["result"]
    assert init["serverInfo"]["name"] == "sidekick-tools"
    assert init["capabilities"]["tools"] is not None
    assert init["protocolVersion"] == "2025-06-18"
    tools = client.request(2, "tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["run", "ask", "await", "halt", "status", "output", "list"]
    assert all(t["inputSchema"]["type"] == "object" for t in tools)

    marker = tmp_path / "go"
    command = f"echo '[PROGRESS:25] warming'; while [ ! -e {marker} ]; do sleep 0.05; done"
    run = client.request(
        3,
        "tools/call",
        {"name": "run", "arguments": {"command": command}, "_meta": {"progressToken": "tok-1"}},
    )["result"]
    assert run["isError"] is False and run["content"][0]["type"] == "text"
    token = json.loads(run["content"][0]["text"])["task"]
    progress = [m for m in client.seen if m.get("method") == "notifications/progress"]
    assert progress and all(m["params"]["progressToken"] == "tok-1" for m in progress)
    assert f"task {token}" in progress[0]["params"]["message"]
    marker.touch()

    unknown = client.request(4, "tools/call", {"name": "nope", "arguments": {}})
    assert unknown["error"]["code"] == -32602
    missing = client.request(5, "tools/call", {"name": "status", "arguments": {}})["result"]
    assert missing["isError"] is True and "task" in missing["content"][0]["text"]
    done = client.request(6, "tools/call", {"name": "await", "arguments": {"task": token}})
    assert json.loads(done["result"]["content"][0]["text"])["status"] == "completed"
    assert client.close() == 0


def test_a_message_the_sdk_cannot_read_is_answered_all_the_same(raw, tmp_path):
    """The SDK's transport drops, without an answer, a line it cannot read,
    and the client waits for one until its own time limit: a lone surrogate
    escape in an argument (Python's json reads it, the SDK's parser not), a
    request that is no valid JSON-RPC, a line that is no JSON. The first is
    read with U+FFFD in its place and answered as any call; the others get
    JSON-RPC's errors; the server goes on."""
    client = raw()
    client.initialize()
    args = {"name": "status", "arguments": {"task": "ab\ud800cd"}}
    status = client.request(2, "tools/call", args)["result"]
    assert status["isError"] is True
    assert "ab\ufffdcd" in status["content"][0]["text"]
    client.send({"id": 3, "method": 5})
    assert client.answer(3)["error"]["code"] == -32600
    client.write_line('{"id": 4, "method": "tools/list"')
    assert client.answer(None)["error"]["code"] == -32700
    tools = client.request(5, "tools/list")["result"]["tools"]
    assert len(tools) == 7
    assert client.close() == 0


def test_a_line_nested_past_any_bound_is_answered_and_the_session_goes_on(raw, tmp_path):
    """A request nested a thousand levels deep: reading it again to answer it
    raised a RecursionError that ended the session (stdout closed, no answer),
    and when stdin closed the process exited 1 leaving the client's running
    task behind (mcp.kill_on_exit). It is answered "invalid request", with
    its id, and the session goes on; so are a batch and a bad id."""
    client = raw()
    client.initialize()
    marker = tmp_path / "go"
    args = {"command": f"while [ ! -e {marker} ]; do sleep 0.05; done", "async": True}
    try:
        deep_line_session(client, args, tmp_path)
    finally:
        marker.touch()  # whatever happened, the task ends


def deep_line_session(client: RawClient, args: dict[str, Any], tmp_path: Path) -> None:
    run = client.request(2, "tools/call", {"name": "run", "arguments": args})["result"]
    token = json.loads(run["content"][0]["text"])["task"]
    deep = "[" * 1000 + "]" * 1000
    client.write_line(
        '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "status", '
        f'"arguments": {{"task": "abcdef", "x": {deep}}}}}}}',
    )
    assert client.answer(3)["error"]["code"] == -32600
    # past 64 levels, within what the SDK's own parser reads (about 250)
    within = '{"a": ' * 100 + "1" + "}" * 100
    client.write_line(
        '{"jsonrpc": "2.0", "id": 33, "method": "tools/call", "params": {"name": "status", '
        f'"arguments": {{"task": "abcdef", "x": {within}}}}}}}',
    )
    assert client.answer(33)["error"]["code"] == -32600
    client.write_line('[{"jsonrpc": "2.0", "id": 4, "method": "ping"}]')
    assert client.answer(None)["error"]["code"] == -32600
    client.send({"id": True, "method": "ping", "params": 5})
    assert client.answer(None)["error"]["code"] == -32600
    assert client.request(5, "ping")["result"] == {}
    # the client leaves: its task is halted, as ever
    assert client.close() == 0
    from sidekick_tools.tasks.store import SqliteStore

    store = SqliteStore(str(tmp_path / "state" / "tasks.db"))
    try:
        assert store.get(token).status.value == "cancelled"
    finally:
        store.close()


def test_a_last_request_without_a_line_break_is_answered(raw, tmp_path):
    """A client that writes its last request without a line break and closes
    stdin: the SDK's reader answered it; the bounded reader ended the session
    at once, and the request being answered went unanswered."""
    client = raw()
    client.initialize()
    assert client.proc.stdin is not None
    client.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}')
    client.proc.stdin.flush()
    assert client.close() == 0
    assert client.answer(2, timeout=10)["result"] == {}


def peak_rss(pid: int) -> int:
    """The most memory process `pid` has held (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_line_past_the_size_bound_is_answered_without_being_held(raw, tmp_path):
    """A 64 MiB message: the SDK's transport held it whole, and more than
    once (a 500 MB line grew the server to 950 MB before it answered). It is
    read in pieces and let go, answered "invalid request" with its id, and the
    session goes on, the next message on the same pipe read as ever."""
    client = raw()
    client.initialize()
    assert client.request(2, "ping")["result"] == {}
    server = SERVERS.host_of(client.proc.pid)
    before = peak_rss(server)
    huge = "x" * (64 << 20)
    head = '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": '
    client.write_line(head + f'{{"name": "run", "arguments": {{"command": "echo {huge}"}}}}}}')
    refused = client.answer(3)["error"]
    assert refused["code"] == -32600 and "longer than 8388608 bytes" in refused["message"]
    assert client.request(4, "ping")["result"] == {}
    # what the line cost: a few pieces, not the line (with slack for the allocator)
    assert peak_rss(server) - before < 32 << 20
    assert client.close() == 0


@pytest.mark.parametrize("after", [False, True], ids=["id first", "id last"])
@pytest.mark.parametrize("rid", ["null", "1.5", "2e3", "true", '{"x": 1}'])
def test_a_request_with_an_id_mcp_does_not_allow_is_answered(raw, tmp_path, rid, after):
    """The SDK took a request whose id is null or not an integer for a
    notification: nobody answered, and the client waited until its own time
    limit. MCP allows a string or an integer: it is answered "invalid request"
    (with id null, as JSON-RPC says when the id cannot be used), and not run."""
    client = raw()
    client.initialize()
    marker = tmp_path / "ran"
    call = {"name": "run", "arguments": {"command": f"touch {marker}", "async": False}}
    params = json.dumps(call)
    if after:
        line = f'{{"jsonrpc": "2.0", "method": "tools/call", "params": {params}, "id": {rid}}}'
    else:
        line = f'{{"jsonrpc": "2.0", "id": {rid}, "method": "tools/call", "params": {params}}}'
    client.write_line(line)
    refused = client.answer(None)["error"]
    assert refused["code"] == -32600 and "string or an integer" in refused["message"]
    assert client.request(5, "ping")["result"] == {}
    assert not marker.exists()
    assert client.close() == 0


HOSTILE = "open({marker!r}, 'a').write(__name__ + '\\n'); raise SystemExit('hostile {name}')\n"


def test_modules_in_the_working_directory_are_never_imported(raw, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "imported"
    for name in ("mcp", "logging", "anyio", "pydantic", "json", "asyncio", "sqlite3"):
        (project / f"{name}.py").write_text(HOSTILE.format(marker=str(marker), name=name))
    # as :SidekickMcp prints it (-P), and even without -P (see the next test for why -P)
    plain = [sys.executable, "-m", "sidekick_tools.mcp", "--state-dir", str(tmp_path / "s2")]
    for argv in (None, plain):
        client = raw(cwd=project, argv=argv)
        client.initialize()
        answer = client.request(
            2, "tools/call", {"name": "run", "arguments": {"command": "pwd", "async": False}}
        )["result"]
        assert answer["isError"] is False and str(project) in answer["content"][0]["text"]
        assert client.close() == 0
    assert not marker.exists(), marker.read_text()


def test_with_P_even_a_sidekick_tools_folder_in_the_project_is_ignored(raw, tmp_path):
    project = tmp_path / "project"
    (project / "sidekick_tools").mkdir(parents=True)
    marker = tmp_path / "imported"
    (project / "sidekick_tools" / "__init__.py").write_text(
        HOSTILE.format(marker=str(marker), name="sidekick_tools")
    )
    client = raw(cwd=project)
    assert client.initialize()["result"]["serverInfo"]["name"] == "sidekick-tools"
    assert client.close() == 0
    assert not marker.exists()


def test_a_python_without_the_sdk_says_how_to_install_it(tmp_path):
    # `import mcp` fails as it would where the package is missing
    code = (
        "import sys, runpy; sys.modules['mcp'] = None; "
        "runpy.run_module('sidekick_tools.mcp', run_name='__main__', alter_sys=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=server_env(), capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert ":SidekickInstall" in done.stderr
    assert "pip install 'sidekick-tools-nvim[mcp]'" in done.stderr


def test_bad_settings_stop_the_server_with_a_message(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "mcp.json").write_text("{not json")
    bad = subprocess.run(
        [sys.executable, *server_args(state)],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    missing = subprocess.run(
        [sys.executable, *server_args(state, tmp_path / "nowhere.json")],
        cwd=tmp_path,
        env=server_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "is not valid JSON" in bad.stderr
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_the_state_dir_comes_from_the_environment(raw, tmp_path):
    state = tmp_path / "from-env"
    argv = [sys.executable, "-P", "-m", "sidekick_tools.mcp"]
    client = raw(argv=argv, env=server_env(SIDEKICK_TOOLS_STATE_DIR=str(state)))
    client.initialize()
    client.request(2, "tools/call", {"name": "run", "arguments": {"command": "true"}})
    assert client.close() == 0
    assert (state / "tasks.db").exists() and (state / "mcp.log").exists()
    assert oct(state.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("then", ["nothing", "a message"])
def test_sigterm_halts_the_servers_tasks_and_ends_it_with_stdin_still_open(raw, tmp_path, then):
    """A client that stops its server with SIGTERM (and may write once more, or
    never close stdin): the server stopped answering but waited for stdin to
    close, and a message in between crashed it with its tasks left running."""
    client = raw()
    client.initialize()
    run = client.request(
        2, "tools/call", {"name": "run", "arguments": {"command": "sleep 300", "async": True}}
    )["result"]
    token = json.loads(run["content"][0]["text"])["task"]
    pgid = SqliteStore(str(tmp_path / "state" / "tasks.db")).get(token).pid
    assert live_members(pgid)
    client.proc.send_signal(signal.SIGTERM)
    if then == "a message":
        try:
            client.send({"id": 3, "method": "tools/list"})
        except BrokenPipeError:  # it may be gone already
            pass
    assert client.proc.wait(timeout=30) == 0  # stdin is still open
    task = SqliteStore(str(tmp_path / "state" / "tasks.db")).get(token)
    assert task.status.value == "cancelled" and task.error == "halted because the MCP server exited"
    assert live_members(pgid) == []
