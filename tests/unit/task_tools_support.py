"""Shared set-up for the use_agent / task tool unit tests: a real TaskManager
(real processes, logs in tmp_path) and a ToolContext around it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from sidekick_tools.config import AgentConfig, Config
from sidekick_tools.tasks.identity import owner_token
from sidekick_tools.tasks.manager import TaskManager, TaskSpec
from sidekick_tools.tasks.store import MemoryStore, TaskStore
from sidekick_tools.tasks.tuning import EngineTuning
from sidekick_tools.tools.base import ToolContext

FAKE_AGENT = str(Path(__file__).resolve().parents[1] / "integration" / "fake_agent.py")
ME = owner_token(os.getpid())
# engine knobs short enough that no test waits them out
FAST = EngineTuning(poll_interval=0.05, adopted_poll_interval=0.05, store_retry=0.01)


def agent(mode: str, *extra: str, **kw: Any) -> AgentConfig:
    cmd = [sys.executable, FAKE_AGENT, "--mode", mode, *extra, "{message}"]
    return AgentConfig(cmd=cmd, **kw)


def make_config(
    agents: dict[str, AgentConfig] | None = None,
    await_timeout: float = 5.0,
    hybrid_threshold: float = 5.0,
) -> Config:
    config = Config.from_dict(
        {"tasks": {"await_timeout": await_timeout, "hybrid_threshold": hybrid_threshold}}
    )
    config.state_dir = ""
    config.agents = dict(agents or {})
    return config


def make_manager(
    state_dir: str, owner: str = ME, store: TaskStore | None = None, **settings: Any
) -> TaskManager:
    """A manager over a memory store (or `store`); `settings` are `tasks.*` options."""
    settings.setdefault("halt_grace", 0.5)
    config = Config.from_dict({"tasks": settings}).tasks
    return TaskManager(store or MemoryStore(), state_dir, owner, config, tuning=FAST)


def make_ctx(tmp_path: Path, manager: TaskManager, config: Config, chat: str = "chat-a"):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return ToolContext(cwd=str(work), tasks=manager, config=config, chat=chat, call_id="c1")


async def shell_task(manager: TaskManager, command: str, cwd: str, **kw: Any):
    """A task started from chat "chat-a" (make_ctx's) unless `chat=` says otherwise."""
    kw.setdefault("chat", "chat-a")
    return await manager.submit(
        TaskSpec(tool="run_terminal_command", command=command, cwd=cwd, **kw)
    )


def body_json(result) -> dict:
    """The JSON object at the start of a result body."""
    text = result.body
    end = text.find("\n}")
    return json.loads(text[: end + 2] if end >= 0 else text)


def output_part(result) -> str:
    marker = "\n--- output ---\n"
    return result.body.split(marker, 1)[1] if marker in result.body else ""


def log_of(manager: TaskManager, token: str) -> str:
    """The task's stdout so far ("" before the file exists)."""
    path = manager.get(token).log_path
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


def mcp_output_lines(result: Any, task: Any, max_lines: int = 10) -> list[str]:
    """The output lines an MCP client reads of a task call's `result` (what
    follows the answer's head), cut to `max_lines`."""
    from sidekick_tools.mcp import answers, face

    got = answers.from_task_call(result, task, face.NAMES, max_lines, None)
    return got.text.split(f"\n{answers.SEPARATOR}\n", 1)[1].split("\n")
