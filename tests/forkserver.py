"""A fork server for the tests' hosts and MCP servers: each test still gets
fresh processes, but forked from an interpreter that has already imported
their modules, instead of a new interpreter paying the imports again (about
0.2 CPU-s a host, twice that traced by coverage, about 1 CPU-s an MCP server:
most of what an integration test cost; see bench/ANALYSIS.md).

How a process starts through it:

- `ForkServers.python(kind)` is a small script, the shim, that takes the place
  of the interpreter (`Editor.setup()` gives it to the plugin as `python`; the
  MCP helpers start servers with it). It runs with `-I -S`: no site, so no
  coverage start of its own. Given the argv the plugin starts its entry points
  with (`-E -c CODE PLUGIN_PATH ARGS`, lua/sidekick_tools/host.lua `command`)
  or the one agents start the MCP server with (`-P -m sidekick_tools.mcp ARGS`,
  the package on PYTHONPATH), it connects to that kind's server (the one
  measured by coverage when the COVERAGE_ variables are set) and hands it its
  stdin, stdout and stderr, argv, environment, working directory and umask.
  Any other argv, a copy of the package elsewhere, or no server: it `exec`s
  the real interpreter.
- The server forks. The child takes the fds, the environment, the folder and
  the umask, starts a session of its own (as Neovim gives each job), sets
  sys.argv and sys.path as the interpreter would, runs the code, and exits the
  way the interpreter does (non-daemon threads joined, then atexit: coverage
  saves the child's data, with the server's import-time lines, under the
  child's pid). Its name (ps, process accounting) is fork-host or fork-mcp.
- The shim stays the process its caller knows: the signals it gets go to the
  child, it exits with the child's status or dies of the same signal, and when
  it is killed the server SIGKILLs the child, so `jobstop` ends the host as
  before. `host_of(pid)` is the child of a shim: `Editor.host_pid()` returns
  it, so a test that kills the host kills the host itself.

What a test could tell apart: the host's parent is the server, not Neovim
(the host is told Neovim's pid in `init`), its /proc cmdline is the server's,
and `sys.executable` names the interpreter, not the shim. Tests about the
interpreter itself set `python` themselves. SIDEKICK_TEST_FORKSERVER=off
starts every process for real.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_PATH = str(ROOT / "rplugin" / "python3")
# what each kind of process imports before it reads its first message: a host
# (and the reap Lua starts the same way), with what the chat loop imports at its
# first send (httpx2 among them: a third of the test suite sends), and an MCP
# server (the SDK is about 1 CPU-s: a server of its own, started only where a
# test starts MCP servers)
PRELOAD = {
    "HOST": (
        "pynvim",
        "sidekick_tools.host",
        "sidekick_tools.reap",
        "sidekick_tools.calls.outbound",
        "sidekick_tools.calls.reply_stream",
        "sidekick_tools.llm.stream",
        "httpx2",
    ),
    "MCP": ("mcp.server.lowlevel", "mcp.server.stdio", "sidekick_tools.mcp.server"),
}
# how each is started: `python -E -c` for a host; `-P` for an MCP server (no
# working directory on sys.path, sys.flags.safe_path set as with `python -P`)
FLAGS = {"HOST": ["-E"], "MCP": ["-E", "-P"]}
MAX_MESSAGE = 1 << 20
# coverage's variables: with them, every Python process a test starts is measured
COVERAGE_VARS = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")

# ---------------------------------------------------------------- the shim

SHIM = r"""
import os, signal, socket, sys, json

REAL = {real!r}
PLUGIN = {plugin!r}
argv = sys.argv[1:]


def real():
    os.execv(REAL, [REAL, *argv])


# Which server can stand for `python ARGV`: HOST for the plugin's entry points
# as Lua starts them (`-E -c CODE PLUGIN ARGS`), MCP for the MCP server as agents
# start it (`-P -m sidekick_tools.mcp ARGS`, the package on PYTHONPATH). The
# servers preloaded this checkout's package: a copy elsewhere starts for real.
def flavour():
    if len(argv) >= 4 and argv[:2] == ["-E", "-c"] and os.path.realpath(argv[3]) == PLUGIN:
        return "HOST"
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
    if argv[:3] == ["-P", "-m", "sidekick_tools.mcp"] and os.path.realpath(path) == PLUGIN:
        return "MCP"
    return None


kind = flavour()
coverage = any(v in os.environ for v in {cov_vars!r})
path = kind and os.environ.get(f"SIDEKICK_TEST_FORKSERVER_{{kind}}" + ("_COV" if coverage else ""))
if not path:
    real()
try:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.connect(path)
except OSError:
    real()
child = None
pending = []


def forward(sig, _frame):
    if child is None:
        pending.append(sig)
        return
    try:
        os.kill(child, sig)
    except ProcessLookupError:
        pass  # it has just ended: its status is on its way


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2):
    signal.signal(sig, forward)
mask = os.umask(0)
os.umask(mask)
head = {{"kind": kind, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": mask}}
head = json.dumps(head)
socket.send_fds(sock, [head.encode()], [0, 1, 2])
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)  # the child alone holds the caller's pipes: their EOF is its exit
os.close(null)
while True:
    try:
        data = sock.recv(4096)
    except InterruptedError:
        continue
    if not data:
        os._exit(1)  # the server went away
    kind, _, value = data.decode().partition(" ")
    if kind == "pid":
        child = int(value)
        for sig in pending:
            forward(sig, None)
    elif kind == "exit":
        code = int(value)
        if code < 0:  # it died of a signal: so does the shim
            if -code not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(-code, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)
"""


def write_shim(folder: Path) -> Path:
    path = folder / "python"
    text = f"#!{sys.executable} -IS\n" + SHIM.format(
        real=sys.executable, plugin=os.path.realpath(PLUGIN_PATH), cov_vars=COVERAGE_VARS
    )
    path.write_text(text)
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------- the server


def _exit_code(code: object) -> int:
    """The status `python -c` exits with for a SystemExit of `code`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(conn: socket.socket, listener: socket.socket, head: dict, fds: list[int]) -> None:
    """In the forked child: become the process `python ARGV` would be; never returns."""
    listener.close()
    conn.close()
    os.setsid()  # Neovim starts each job in a session of its own
    with open("/proc/self/comm", "w") as comm:  # named for ps and process accounting
        comm.write(f"fork-{head['kind'].lower()}")
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)  # the server's sockets and pidfds: a fresh process has none
    os.environ.clear()
    os.environ.update(head["env"])
    os.chdir(head["cwd"])
    os.umask(head["umask"])
    argv = head["argv"]
    try:
        if argv[1] == "-c":
            sys.argv = ["-c", *argv[3:]]
            sys.path[:] = BASE_PATH
            main = types.ModuleType("__main__")  # the namespace `-c` code runs in
            sys.modules["__main__"] = main
            exec(compile(argv[2], "<string>", "exec"), main.__dict__)
        else:  # -m MODULE: PYTHONPATH first, then the interpreter's own
            sys.argv = [argv[2], *argv[3:]]
            extra = [p for p in head["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[:] = [*extra, *BASE_PATH]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as e:
        status = _exit_code(e.code)
    except BaseException:
        try:  # as the interpreter prints it; a closed stderr (Neovim gone) stops nothing
            traceback.print_exc()
        except Exception:
            pass
        status = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's exit does
        # coverage saves here: a SIGTERM now (Neovim stops its jobs as it quits)
        # would run coverage's handler inside the save and end the process in it,
        # leaving a data file without its tables. Ignored, not blocked: another
        # thread would take it
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(status)


BASE_PATH: list[str] = []


def serve(kind: str, sock_path: str, base_path: list[str]) -> None:
    """The server's loop: one fork per connection, each child watched until it
    exits. `base_path` is sys.path as the interpreter set it."""
    BASE_PATH[:] = base_path
    sys.path.insert(0, PLUGIN_PATH)
    for name in PRELOAD[kind]:
        __import__(name)
    sys.path[:] = BASE_PATH
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept", None))
    # told to stop (stdin closed) or left alone (the pytest process that started
    # it is gone): no more forks, and it ends once its children have, so that
    # coverage has every child's data before pytest combines it
    sel.register(sys.stdin, selectors.EVENT_READ, ("stop", None))
    sel.register(os.pidfd_open(os.getppid()), selectors.EVENT_READ, ("stop", None))
    children = 0
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in sel.select():
            kind, info = key.data
            if kind == "stop":
                sel.unregister(key.fileobj)
                if listener.fileno() >= 0:
                    sel.unregister(listener)
                    listener.close()
                    os.unlink(sock_path)
                if not children:
                    os._exit(0)
            elif kind == "accept":
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
                head = json.loads(msg)
                shim_pid = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                shim_pid = int.from_bytes(shim_pid[:4], sys.byteorder)
                pid = os.fork()
                if pid == 0:
                    _child(conn, listener, head, fds)
                for fd in fds:
                    os.close(fd)
                # for ForkServers.host_of: whole (renamed into place) before the child can be seen
                note = Path(f"{sock_path}.{shim_pid}")
                note.with_name(note.name + ".part").write_text(str(pid))
                os.replace(note.with_name(note.name + ".part"), note)
                conn.send(f"pid {pid}".encode())
                child_fd = os.pidfd_open(pid)
                try:
                    shim_fd = os.pidfd_open(shim_pid)
                except OSError:  # the shim is gone already
                    shim_fd = None
                    os.kill(pid, signal.SIGKILL)
                watch = {"pid": pid, "conn": conn, "child_fd": child_fd, "shim_fd": shim_fd}
                watch["note"] = f"{sock_path}.{shim_pid}"
                sel.register(child_fd, selectors.EVENT_READ, ("child", watch))
                children += 1
                if shim_fd is not None:
                    sel.register(shim_fd, selectors.EVENT_READ, ("shim", watch))
            elif kind == "shim":
                sel.unregister(info["shim_fd"])
                os.close(info["shim_fd"])
                info["shim_fd"] = None
                try:
                    os.kill(info["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass
            else:
                _, status = os.waitpid(info["pid"], 0)
                sel.unregister(info["child_fd"])
                os.close(info["child_fd"])
                if info["shim_fd"] is not None:
                    sel.unregister(info["shim_fd"])
                    os.close(info["shim_fd"])
                try:
                    info["conn"].send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
                except OSError:
                    pass
                info["conn"].close()
                os.unlink(info["note"])
                children -= 1
                if not children and listener.fileno() < 0:
                    os._exit(0)


# ---------------------------------------------------------------- the tests' side


class ForkServers:
    """The servers of one pytest process, each started when first needed."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.procs: dict[tuple[str, bool], subprocess.Popen] = {}

    @staticmethod
    def enabled() -> bool:
        """Off with SIDEKICK_TEST_FORKSERVER=off (every process then starts for
        real), and where a child's exit cannot be watched (no pidfd)."""
        if os.environ.get("SIDEKICK_TEST_FORKSERVER") == "off":
            return False
        return sys.platform.startswith("linux") and hasattr(os, "pidfd_open")

    def python(self, kind: str = "HOST") -> str:
        """The interpreter to start `kind` processes with: the shim, with the
        server for `kind` in the current environment (measured by coverage or
        not) running; the interpreter itself when the servers are off."""
        if not self.enabled():
            return sys.executable
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="sidekick-fork-"))
            write_shim(self.dir)
            atexit.register(self.close)
        coverage = any(v in os.environ for v in COVERAGE_VARS)
        if (kind, coverage) not in self.procs:
            self._start(kind, coverage)
        return str(self.dir / "python")

    def _start(self, kind: str, coverage: bool) -> None:
        assert self.dir is not None
        var = f"SIDEKICK_TEST_FORKSERVER_{kind}" + ("_COV" if coverage else "")
        sock = self.dir / var
        env = dict(os.environ)
        if not coverage:
            for name in COVERAGE_VARS:
                env.pop(name, None)
        code = (
            f"import sys; base = list(sys.path); sys.path.insert(0, {str(ROOT)!r}); "
            f"from tests import forkserver; forkserver.serve({kind!r}, {str(sock)!r}, base)"
        )
        proc = subprocess.Popen(
            [sys.executable, *FLAGS[kind], "-c", code],
            env=env,
            stdin=subprocess.PIPE,  # closed: stop once the children have ended
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.stdout.close()
        if line.strip() != b"ready":
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the {kind} fork server did not start: {line!r}")
        self.procs[kind, coverage] = proc
        os.environ[var] = str(sock)

    def host_of(self, pid: int) -> int:
        """The process a shim of pid `pid` stands for (`pid` itself when it is
        no shim, or one that exec'd the interpreter)."""
        if self.dir is None or not pid:
            return pid
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return pid
        if str(self.dir / "python").encode() not in cmdline.split(b"\0"):
            return pid
        from tests.conftest import wait_for  # not at the top: the servers import this module

        note = wait_for(lambda: next(self.dir.glob(f"*.{pid}"), None), 10)
        return int(note.read_text())

    def close(self) -> None:
        for proc in self.procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.dir is not None:
            for var, value in list(os.environ.items()):
                if var.startswith("SIDEKICK_TEST_FORKSERVER_") and value.startswith(str(self.dir)):
                    del os.environ[var]
            for child in self.dir.iterdir():
                child.unlink()
            self.dir.rmdir()
            self.dir = None


SERVERS = ForkServers()
