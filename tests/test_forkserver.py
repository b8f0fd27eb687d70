"""The tests' fork server (tests/forkserver.py) stands for the interpreter: a
process started through its shim must see what `python` itself would give it,
and the caller must see the process end as it would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.forkserver import PLUGIN_PATH, ForkServers

pytestmark = pytest.mark.skipif(not ForkServers.enabled(), reason="the fork server is off")

# what a process can tell about how it was started
REPORT = """
import json, os, sys
line = sys.stdin.readline()
print(json.dumps({
    "argv": sys.argv, "path": sys.path, "cwd": os.getcwd(), "umask": os.umask(0),
    "env": os.environ.get("PROBE"), "stdin": line, "safe_path": sys.flags.safe_path,
    "session_leader": os.getsid(0) == os.getpid(), "pid": os.getpid(),
}), flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture
def servers():
    saved = {k: v for k, v in os.environ.items() if k.startswith("SIDEKICK_TEST_FORKSERVER_")}
    own = ForkServers()
    try:
        yield own
    finally:
        own.close()
        os.environ.update(saved)


def start(python: str, argv: list[str], cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PROBE": "probe-value"}
    return subprocess.Popen(
        [python, *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a session of its own, as Neovim gives a job (the shim's child takes one too)
        start_new_session=True,
        **kw,
    )


def report(python: str, cwd: Path) -> tuple[dict, str, int]:
    proc = start(python, ["-E", "-c", REPORT, PLUGIN_PATH, "a b", "3"], cwd, umask=0o027)
    out, err = proc.communicate("hello\n", timeout=30)
    return json.loads(out), err, proc.returncode


def test_a_forked_process_sees_what_the_interpreter_gives_it(servers, tmp_path):
    real, real_err, real_code = report(sys.executable, tmp_path)
    shim = servers.python()
    forked, forked_err, forked_code = report(shim, tmp_path)
    assert shim != sys.executable and real["pid"] != forked["pid"]
    pids = {real.pop("pid"), forked.pop("pid")}
    assert forked == real and forked_err == real_err and forked_code == real_code == 3
    assert real["umask"] == 0o027 and real["stdin"] == "hello\n" and real["session_leader"]
    # and it was forked: its parent is the server, not the shim
    server = servers.procs["HOST", any(k.startswith("COVERAGE_") for k in os.environ)]
    assert server.pid not in pids


def test_the_shim_passes_signals_on_and_dies_as_its_process_does(servers, tmp_path):
    shim = servers.python()
    # short sleeps: a signal that comes between the interpreter's last check and
    # the sleep's system call is handled only when the sleep ends
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    proc = start(shim, ["-E", "-c", code, PLUGIN_PATH], tmp_path)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7
    # a process killed by a signal: its shim dies of the same signal
    proc = start(shim, ["-E", "-c", code, PLUGIN_PATH], tmp_path)
    assert proc.stdout.readline() == "ready\n"
    os.kill(servers.host_of(proc.pid), signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_killing_the_shim_kills_its_process(servers, tmp_path):
    code = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = start(servers.python(), ["-E", "-c", code, PLUGIN_PATH], tmp_path)
    assert proc.stdout.readline() == "ready\n"
    child = servers.host_of(proc.pid)
    assert child != proc.pid
    proc.kill()
    proc.wait(timeout=30)
    wait_for(lambda: not os.path.exists(f"/proc/{child}"), 10)


def test_other_commands_and_other_copies_run_the_interpreter_itself(servers, tmp_path):
    shim = servers.python()
    plain = start(shim, ["-c", "import os; print(os.getpid())"], tmp_path)
    out, _ = plain.communicate(timeout=30)
    assert plain.returncode == 0 and int(out) == plain.pid  # the shim exec'd the interpreter
    copy = tmp_path / "copy"
    copy.mkdir()
    elsewhere = start(shim, ["-E", "-c", "import os; print(os.getpid())", str(copy)], tmp_path)
    out, _ = elsewhere.communicate(timeout=30)
    assert int(out) == elsewhere.pid


def test_an_mcp_server_started_through_the_shim_answers_as_the_real_one(servers, tmp_path):
    """The MCP flavour (`-P -m sidekick_tools.mcp`, the package on PYTHONPATH):
    a settings error is reported in the same words with the same status."""
    argv = ["-P", "-m", "sidekick_tools.mcp", "--config", str(tmp_path / "nowhere.json")]
    env = {**os.environ, "PYTHONPATH": PLUGIN_PATH}
    results = []
    for python in (sys.executable, servers.python("MCP")):
        done = subprocess.run(
            [python, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        results.append((done.returncode, done.stdout, done.stderr))
    assert results[0] == results[1] and results[0][0] == 2 and "does not exist" in results[0][2]
    assert any(k.startswith("MCP") for k, _ in servers.procs)


def test_a_process_failing_after_its_stderr_closed_still_ends_as_the_server_ends_it(
    servers, tmp_path
):
    """A host whose Neovim is gone fails, and its traceback cannot be printed:
    its exit functions (where coverage saves) still run in the server's own end
    of the process, with SIGTERM ignored, and it exits 1 as the interpreter
    would. The failed print used to leave that end, and a SIGTERM then cut
    coverage's save short: a data file without its tables."""
    code = (
        "import atexit, os, signal, sys\n"
        "def record():\n"
        "    with open(sys.argv[-1], 'w') as f:\n"
        "        f.write(str(signal.getsignal(signal.SIGTERM)))\n"
        "atexit.register(record)\n"
        "os.close(2)\n"
        "raise RuntimeError('Neovim is gone')\n"
    )
    marker = tmp_path / "exit-functions"
    proc = start(servers.python(), ["-E", "-c", code, PLUGIN_PATH, str(marker)], tmp_path)
    proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert marker.read_text() == str(signal.SIG_IGN)
