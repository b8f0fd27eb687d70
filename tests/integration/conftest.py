"""A real headless Neovim with the plugin loaded, driven over RPC."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pynvim
import pytest

from tests import nvims
from tests.conftest import wait_for
from tests.forkserver import COVERAGE_VARS, SERVERS

ROOT = Path(__file__).resolve().parents[2]


NVIMS = nvims.selected()


def nvim_binary() -> str:
    """The first Neovim under test (for tests that start one by hand)."""
    if not NVIMS:
        pytest.skip("no nvim binary")
    return NVIMS[0][1]


class Editor:
    """A headless Neovim plus helpers to read back what a user would see."""

    def __init__(self, nvim: Any, workdir: Path, state_dir: Path) -> None:
        self.nvim = nvim
        self.workdir = workdir
        self.state_dir = state_dir

    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def setup(self, **opts: Any) -> None:
        # hosts forked from a server that has their imports done (tests/forkserver.py)
        opts.setdefault("python", SERVERS.python())
        opts.setdefault("state_dir", str(self.state_dir))
        self.lua("require('sidekick_tools').setup(...)", opts)

    def open_chat(self, text: str, name: str = "chat.sidekick.md") -> int:
        path = self.workdir / name
        path.write_text(text)
        self.nvim.command(f"edit {path}")
        return self.nvim.current.buffer.number

    def lines(self, buf: int = 0) -> list[str]:
        return self.lua("return vim.api.nvim_buf_get_lines(...)", buf, 0, -1, False)

    def text(self, buf: int = 0) -> str:
        return "\n".join(self.lines(buf))

    def diagnostics(self, buf: int = 0) -> list[dict[str, Any]]:
        return self.lua(
            "local ns = vim.api.nvim_create_namespace('sidekick_tools')\n"
            "return vim.diagnostic.get(..., { namespace = ns })",
            buf,
        )

    def diag_at(self, row: int, buf: int = 0) -> dict[str, Any] | None:
        for d in self.diagnostics(buf):
            if d["lnum"] == row:
                return d
        return None

    def wait_diag(self, row: int, prefix: str, buf: int = 0, timeout: float = 20) -> dict:
        def check() -> Any:
            d = self.diag_at(row, buf)
            return d if d and d["message"].startswith(prefix) else None

        try:
            return wait_for(check, timeout)
        except AssertionError:
            raise AssertionError(
                f"no diagnostic {prefix!r} at row {row}; have {self.diagnostics(buf)}"
            ) from None

    def wait_text(self, needle: str, buf: int = 0, timeout: float = 20) -> str:
        try:
            return wait_for(lambda: needle in self.text(buf) and self.text(buf), timeout)
        except AssertionError:
            raise AssertionError(f"{needle!r} never appeared in:\n{self.text(buf)}") from None

    def run_tool(self, lnum: int) -> Any:
        self.nvim.command(f"call cursor({lnum}, 1)")
        return self.lua("return require('sidekick_tools').run_tool()")

    def host_pid(self) -> int:
        """The pid of this editor's host; 0 when none runs."""
        job = self.lua(
            "local chan = require('sidekick_tools.host').channel()\n"
            "return chan and vim.fn.jobpid(chan) or 0"
        )
        return SERVERS.host_of(job)

    def kill_host(self) -> None:
        """SIGKILL this editor's host, if one runs (whatever held it is let go)."""
        pid = self.host_pid()
        if pid:
            os.kill(pid, signal.SIGKILL)

    def messages(self) -> str:
        return self.nvim.exec("messages", True) if hasattr(self.nvim, "exec") else ""

    def notifications(self) -> list[str]:
        return self.lua("return _G.__notes or {}")


# setup() with options, recording what it told the user: { ok, error, { {msg, level}, ... } }
SETUP_SAID = (
    "local said, notify = {}, vim.notify\n"
    "vim.notify = function(msg, level) table.insert(said, { msg, level }) end\n"
    "local ok, e = pcall(require('sidekick_tools').setup, ...)\n"
    "vim.notify = notify\n"
    "return { ok, ok and '' or e, said }"
)


def setup_errors(editor, opts) -> list[str]:
    """setup(opts) must not raise (a user's init.lua goes on after it); the
    lines of the ERROR notifications it gave, the prefix checked."""
    ok, err, said = editor.lua(SETUP_SAID, opts)
    assert ok is True, err
    errors = [msg for msg, level in said if level == 4]  # vim.log.levels.ERROR
    assert len(errors) <= 1, errors  # every problem in one message
    for msg in errors:
        assert msg.startswith("sidekick_tools: "), msg
    return [line for msg in errors for line in msg.split("\n")]


def start_nvim(workdir: Path, state_dir: Path, binary: str | None = None) -> Editor:
    # the shim finds its server by the environment Neovim starts with: the
    # server is up before, or the hosts of this Neovim would start for real
    SERVERS.python()
    argv = [
        binary or nvim_binary(),
        "--embed",
        "--headless",
        "--clean",
        "-n",
        "-u",
        str(ROOT / "tests" / "integration" / "init.lua"),
    ]
    nvim = pynvim.attach("child", argv=argv)
    ed = Editor(nvim, workdir, state_dir)
    # record vim.notify calls so tests can assert on what the user was told
    ed.lua("_G.__notes = {}\nvim.notify = function(msg, level) table.insert(_G.__notes, msg) end")
    return ed


def quit_nvim(ed: Editor) -> None:
    try:
        ed.nvim.command("qall!")
    except Exception:
        pass
    try:
        ed.nvim.close()
    except Exception:
        pass


@pytest.fixture(params=[b for _, b in NVIMS] or [None], ids=[lbl for lbl, _ in NVIMS] or ["none"])
def nvim_under_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each integration test runs on every selected Neovim (tests/nvims.py).
    The hosts run the same Python on each: coverage measures them on the first
    Neovim only (measuring the same lines again would add coverage's own start-up
    and tracing to every host of the other)."""
    if request.param is None:
        pytest.skip("no nvim binary")
    if request.param != NVIMS[0][1]:
        for var in COVERAGE_VARS:
            monkeypatch.delenv(var, raising=False)
    return request.param


@pytest.fixture
def editors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvim_under_test: str) -> Any:
    """Start Neovims sharing one work dir and state dir: `editors()` → Editor."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    state_dir = tmp_path / "state"
    for var, sub in (("XDG_STATE_HOME", "xstate"), ("XDG_DATA_HOME", "xdata")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xconfig"))
    monkeypatch.setenv("SIDEKICK_ROOT", str(ROOT))
    monkeypatch.chdir(workdir)
    started: list[Editor] = []

    def start() -> Editor:
        ed = start_nvim(workdir, state_dir, nvim_under_test)
        started.append(ed)
        return ed

    try:
        yield start
    finally:
        for ed in started:
            quit_nvim(ed)


@pytest.fixture
def editor(editors: Any) -> Any:
    return editors()
