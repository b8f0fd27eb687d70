"""Driving the MCP server the way agents do: the official SDK's client over real stdio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.forkserver import SERVERS

# The SDK takes about a second to import: imported where a test uses it, not
# when every pytest worker collects the suite.
if TYPE_CHECKING:
    from mcp import ClientSession, StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = str(ROOT / "rplugin" / "python3")
FAKE_AGENT = str(Path(__file__).resolve().parent / "fake_agent.py")

# What the server process needs from the test's environment (the SDK client passes
# only a safe subset on): the dirs tests set, and coverage's COVERAGE_* variables so
# that the server is measured (its data file is absolute in COVERAGE_PROCESS_CONFIG).
PASSED_ENV = ("HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "SIDEKICK_TOOLS_TUNING")


def passed_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k in PASSED_ENV or k.startswith(("COVERAGE_", "SIDEKICK_TEST_FORKSERVER"))
    }


def server_args(state_dir: Path | str, config: Path | str | None = None) -> list[str]:
    args = ["-P", "-m", "sidekick_tools.mcp", "--state-dir", str(state_dir)]
    return args + (["--config", str(config)] if config else [])


def server_params(
    state_dir: Path | str,
    cwd: Path | str,
    config: Path | str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> StdioServerParameters:
    from mcp import StdioServerParameters

    full_env = passed_env()
    full_env["PYTHONPATH"] = PYTHONPATH
    full_env.update(env or {})
    return StdioServerParameters(
        command=SERVERS.python("MCP"),  # forked with the SDK imported (tests/forkserver.py)
        args=args if args is not None else server_args(state_dir, config),
        env=full_env,
        cwd=str(cwd),
    )


def write_config(state_dir: Path, **settings: Any) -> Path:
    """Write ``<state_dir>/mcp.json`` the way the plugin's setup() does."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state_dir / "mcp.json"
    path.write_text(json.dumps(settings))
    return path


def agent_cmd(mode: str, *extra: str) -> list[str]:
    return [sys.executable, FAKE_AGENT, "--mode", mode, *extra, "{message}"]


@asynccontextmanager
async def connect(
    params: StdioServerParameters, name: str = "pytest-agent", errlog: Any = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with a server started from ``params``."""
    from mcp import ClientSession, stdio_client
    from mcp import types as mcp_types

    log = errlog or sys.stderr
    async with stdio_client(params, errlog=log) as (read, write):
        info = mcp_types.Implementation(name=name, version="1.0")
        async with ClientSession(read, write, client_info=info) as session:
            await session.initialize()
            yield session


class Progress:
    """Collects the progress notifications of one call."""

    def __init__(self) -> None:
        self.events: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.events.append((progress, total, message))


async def call(
    session: ClientSession, tool: str, args: dict[str, Any] | None = None, **kw: Any
) -> tuple[str, bool]:
    """(text, is_error) of one tools/call."""
    from mcp import types as mcp_types

    result = await session.call_tool(tool, args or {}, **kw)
    texts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
    assert len(texts) == len(result.content) == 1, result
    return texts[0], bool(result.is_error)


def head(text: str) -> dict[str, Any]:
    """The JSON object an answer starts with."""
    end = text.find("\n}")
    return json.loads(text[: end + 2] if end >= 0 else text)


def output_of(text: str) -> str:
    marker = "\n--- output ---\n"
    return text.split(marker, 1)[1] if marker in text else ""


def wait_cmd(marker: Path, then: str = "echo done") -> str:
    """A shell command that waits (polling) until ``marker`` exists, then runs ``then``."""
    return f"while [ ! -e {marker} ]; do sleep 0.05; done; {then}"


class SyncClient:
    """An MCP client session on a thread and event loop of its own, for tests that
    also drive Neovim through pynvim (which runs an event loop of its own)."""

    def __init__(self, params: StdioServerParameters, name: str = "pytest-agent") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._ready: concurrent.futures.Future[ClientSession] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self._main = asyncio.run_coroutine_threadsafe(self._hold(params, name), self.loop)
        try:
            self.session = self._ready.result(timeout=60)
        except BaseException:
            self._finish()
            raise

    async def _hold(self, params: StdioServerParameters, name: str) -> None:
        self._stop = asyncio.Event()
        try:
            async with connect(params, name) as session:
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as e:
            if not self._ready.done():
                self._ready.set_exception(e)
            raise

    def start(self, tool: str, args: dict[str, Any] | None = None) -> concurrent.futures.Future:
        """Send one call; its future resolves to (text, is_error)."""
        return asyncio.run_coroutine_threadsafe(call(self.session, tool, args), self.loop)

    def call(self, tool: str, args: dict[str, Any] | None = None, timeout: float = 90) -> Any:
        return self.start(tool, args).result(timeout)

    def close(self) -> None:
        """Ends the session (its server exits); once only, later calls do nothing."""
        if self.loop.is_closed():
            return
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._finish()

    def _finish(self) -> None:
        try:
            self._main.result(timeout=30)
        except Exception:
            pass
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()
