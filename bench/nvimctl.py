"""A headless Neovim with this checkout's plugin, driven over RPC, for the benchmarks."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pynvim

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import nvims  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
INIT = BENCH / "init.lua"
PROFILE_DIR = ""  # set by run.py --profile-host: cProfile every host into this folder


def nvim_binary() -> str:
    """The released Neovim of the venv (or $NVIM; see tests/nvims.py)."""
    return nvims.default()


def base_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var, sub in (
        ("XDG_STATE_HOME", "xstate"),
        ("XDG_DATA_HOME", "xdata"),
        ("XDG_CONFIG_HOME", "xconfig"),
        ("XDG_CACHE_HOME", "xcache"),
    ):
        env[var] = str(tmp / sub)
    env["SIDEKICK_ROOT"] = str(ROOT)
    return env


def wait_until(pred: Any, timeout: float, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"bench: timed out after {timeout}s waiting for {what or pred}: {last!r}")


class Editor:
    """One headless Neovim (--embed for the controller, --listen for the prober)."""

    count = 0

    def __init__(self, tmp: Path, plugin: bool = True) -> None:
        Editor.count += 1
        self.dir = tmp / f"nvim{Editor.count}"
        self.dir.mkdir(parents=True)
        self.workdir = self.dir / "work"
        self.workdir.mkdir()
        self.state_dir = self.dir / "state"
        self.sock = str(self.dir / "nvim.sock")
        env = base_env(self.dir)
        if not plugin:
            env["SIDEKICK_BENCH_PLUGIN"] = "0"
        if PROFILE_DIR:
            env["SIDEKICK_TOOLS_PROFILE"] = PROFILE_DIR
        argv = [nvim_binary(), "--embed", "--headless", "--clean", "-n", "-u", str(INIT)]
        argv += ["--listen", self.sock]
        old = os.getcwd()
        os.chdir(self.workdir)
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            self.nvim = pynvim.attach("child", argv=argv)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(old)
        self.pid = int(self.nvim.funcs.getpid())
        self.host_pids: set[int] = set()
        self.lua(
            "vim.notify = function(msg) _G.__bench_notes = _G.__bench_notes or {}; "
            "table.insert(_G.__bench_notes, msg) end"
        )

    # -- RPC helpers -----------------------------------------------------------------
    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def bench(self, fn: str, *args: Any) -> Any:
        return self.lua(f"return require('sidekick_bench').{fn}(...)", *args)

    def time_run_tool(self, call_id: str, timeout: float, interval: float) -> tuple[float, float]:
        """`:SidekickRunTool` on the run_terminal_command call `call_id`: how long
        the command took and how long until its running diagnostic showed (ms)."""
        lnum = self.find_line(f"```tool run_terminal_command id={call_id}")
        cmd_ms = self.bench("time_command", lnum, "SidekickRunTool", "⟳")
        result = wait_until(
            lambda: (lambda r: r if r["diag_ms"] is not None else None)(self.bench("diag_result")),
            timeout,
            interval,
            "running diagnostic",
        )
        return cmd_ms, result["diag_ms"]

    def setup(self, **opts: Any) -> None:
        opts.setdefault("python", sys.executable)
        opts.setdefault("state_dir", str(self.state_dir))
        self.lua("require('sidekick_tools').setup(...)", opts)

    def start_host(self) -> int:
        self.lua("require('sidekick_tools').list_tasks({ limit = 1 })")
        return self.host_pid()

    def host_pid(self) -> int:
        pid = int(self.lua("return vim.fn.jobpid(require('sidekick_tools.host').channel())"))
        self.host_pids.add(pid)
        return pid

    def open_chat(self, text: str, name: str = "chat.sidekick.md") -> int:
        path = self.workdir / name
        path.write_text(text)
        self.nvim.command(f"cd {self.workdir}")
        self.nvim.command(f"edit {path}")
        return int(self.nvim.current.buffer.number)

    def find_line(self, needle: str) -> int:
        """1-based number of the first line equal to `needle` (0: none)."""
        return int(
            self.lua(
                "local want = ...\n"
                "for i, l in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do\n"
                "  if l == want then return i end\n"
                "end\n"
                "return 0",
                needle,
            )
        )

    def state(self) -> dict[str, Any]:
        return self.lua("return require('sidekick_bench').state")

    def wait_done(self, n: int, timeout: float, what: str, poll: float) -> dict[str, Any]:
        """Wait until `n` runs counted in the bench state have ended; that state."""
        wait_until(lambda: self.state()["done"] >= n, timeout, poll, what)
        return self.state()

    def notes(self) -> list[str]:
        return self.lua("return _G.__bench_notes or {}")

    # -- the end -----------------------------------------------------------------------
    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvim.command("qall!")
        with contextlib.suppress(Exception):
            self.nvim.close()
        # kill_on_exit halts the tasks; the host then exits. Make sure of both.
        deadline = time.monotonic() + 5
        for pid in [self.pid, *self.host_pids]:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if _alive(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        kill_task_groups(self.state_dir)


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or
    None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    fields = proc_stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def kill_task_groups(state_dir: Path) -> None:
    """Last resort: SIGKILL the process group of every task still running in
    the store under `state_dir` (a benchmark must leave nothing behind)."""
    db = state_dir / "tasks.db"
    if not db.exists():
        return
    import sqlite3

    try:
        conn = sqlite3.connect(str(db), timeout=5)
        rows = conn.execute("SELECT pid FROM tasks WHERE pid IS NOT NULL").fetchall()
        conn.close()
    except sqlite3.Error:
        return
    for (pid,) in rows:
        if pid and pid > 1 and _is_supervisor(int(pid)):
            with contextlib.suppress(OSError):
                os.killpg(int(pid), signal.SIGKILL)


def _is_supervisor(pid: int) -> bool:
    """Is `pid` still a task supervisor (never signal a recycled pid)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"sidekick-task" in f.read()
    except OSError:
        return False


def run_quiet(argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
