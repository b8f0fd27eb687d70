"""Host-side view of the user's configuration.

Lua owns the declaration of every option (lua/sidekick_tools/config.lua: type,
default, description) and validates it; it sends the host the serialisable part.
This module turns that table into typed dataclasses, filling anything missing
with the same defaults so the host also works when driven directly (tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

DEFAULT_AUTO_TOOLS = (
    "read_files",
    "list_directory",
    "await_task",
    "halt_task",
    "task_status",
    "task_output",
    "list_tasks",
)

DEFAULT_SAFE_COMMANDS = (
    "ls",
    "pwd",
    "cat",
    "echo",
    "head",
    "tail",
    "wc",
    "which",
    "date",
    "whoami",
    "grep",
    "git status",
    "git diff",
    "git log",
    "git show",
    "git branch",
)
DEFAULT_AUTO_TIMEOUT = 120.0  # seconds an auto-approved command may run (DESIGN §12)


@dataclass
class Retention:
    completed: float = 86400.0
    failed: float = 172800.0


@dataclass
class TasksConfig:
    store: str = "sqlite"
    max_concurrent: int = 5
    hybrid_threshold: float = 10.0
    default_timeout: float = 1800.0
    await_timeout: float = 55.0
    halt_grace: float = 5.0
    kill_on_exit: bool = True
    nice: int = 10
    max_log_bytes: int = 1073741824  # stdout + stderr; past it the task fails (0: no limit)
    retention: Retention = field(default_factory=Retention)


@dataclass
class AgentConfig:
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    auto_accept: bool = False


@dataclass
class AutoAcceptConfig:
    tools: tuple[str, ...] = DEFAULT_AUTO_TOOLS
    # names of safe forms (tools/command_table.py) or exact commands
    safe_commands: tuple[str, ...] = DEFAULT_SAFE_COMMANDS
    # forms declared by the user: name -> form table, or False to disable a name
    command_forms: dict[str, Any] = field(default_factory=dict)
    timeout: float = DEFAULT_AUTO_TIMEOUT
    has_policy: bool = False  # a Lua policy function exists; the host asks Lua


@dataclass
class McpConfig:
    """The MCP face (python -m sidekick_tools.mcp), see DESIGN §11."""

    share_editor_tasks: bool = False  # MCP clients may await/halt/read Neovim's tasks
    await_timeout: float = 50.0  # cap of one wait, under common ~60 s client limits
    kill_on_exit: bool = True  # halt the server's own tasks when it exits


@dataclass
class Config:
    state_dir: str = ""
    tasks: TasksConfig = field(default_factory=TasksConfig)
    auto_accept: AutoAcceptConfig = field(default_factory=AutoAcceptConfig)
    agents: dict[str, AgentConfig] = field(default_factory=dict)
    result_max_lines: int = 200
    notice_lines: int = 10
    mcp: McpConfig = field(default_factory=McpConfig)
    # The chat loop's table as Lua sends it (llm/settings.py reads it: ChatConfig)
    chat: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> Config:
        raw = dict(raw or {})
        tasks_raw = dict(raw.get("tasks") or {})
        retention_raw = dict(tasks_raw.pop("retention", None) or {})
        known_tasks = {k: v for k, v in tasks_raw.items() if k in TasksConfig.__dataclass_fields__}
        tasks = TasksConfig(**known_tasks, retention=Retention(**_known(Retention, retention_raw)))
        aa_raw = dict(raw.get("auto_accept") or {})
        auto = AutoAcceptConfig(
            tools=tuple(_list(aa_raw.get("tools"), DEFAULT_AUTO_TOOLS)),
            safe_commands=tuple(_list(aa_raw.get("safe_commands"), DEFAULT_SAFE_COMMANDS)),
            command_forms=aa_raw.get("command_forms") or {},
            timeout=float(aa_raw.get("timeout", DEFAULT_AUTO_TIMEOUT)),
            has_policy=bool(aa_raw.get("has_policy", False)),
        )
        agents: dict[str, AgentConfig] = {}
        for name, spec in dict(raw.get("agents") or {}).items():
            spec = dict(spec or {})
            agents[str(name)] = AgentConfig(
                cmd=[str(part) for part in _list(spec.get("cmd"), [])],
                env={str(k): str(v) for k, v in dict(spec.get("env") or {}).items()},
                cwd=spec.get("cwd") or None,
                auto_accept=bool(spec.get("auto_accept", False)),
            )
        result = dict(raw.get("result") or {})
        state_dir = raw.get("state_dir") or default_state_dir()
        return cls(
            state_dir=os.path.expanduser(str(state_dir)),
            tasks=tasks,
            auto_accept=auto,
            agents=agents,
            result_max_lines=int(result.get("max_lines", 200)),
            notice_lines=int(result.get("notice_lines", 10)),
            mcp=McpConfig(**_known(McpConfig, dict(raw.get("mcp") or {}))),
            chat=dict(raw.get("chat") or {}),
        )


def default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "nvim", "sidekick_tools")


def _known(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}


def _list(value: Any, default: Any) -> list[Any]:
    """Lua sends lists as arrays; an empty Lua table may arrive as an empty dict."""
    if value is None:
        return list(default)
    if isinstance(value, dict):
        return list(value.values())
    return list(value)
