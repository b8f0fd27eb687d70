"""Host-side view of the user's configuration.

Lua owns the declaration of every option (lua/sidekick_tools/config.lua: type,
default, description) and validates it; it sends the host the serialisable part,
whole. This module turns that table into typed dataclasses, which have no
defaults of their own: what a caller gives only in part (the MCP server's
settings file, tests) is completed from the declared defaults (`defaults.resolve`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .defaults import resolve

# The `chat` of the tasks MCP clients start: "mcp:<client name>" (mcp/face.py).
MCP_CHAT_PREFIX = "mcp:"


def started_by_mcp(task: Any) -> bool:
    """Whether an MCP client started ``task`` (else a Neovim did)."""
    return str(task.chat).startswith(MCP_CHAT_PREFIX)


@dataclass
class Retention:
    completed: float
    failed: float


@dataclass
class TasksConfig:
    store: str
    max_concurrent: int
    hybrid_threshold: float
    default_timeout: float
    await_timeout: float
    halt_grace: float
    kill_on_exit: bool
    nice: int
    max_log_bytes: int  # stdout + stderr; past it the task fails (0: no limit)
    retention: Retention


@dataclass
class AgentConfig:
    """One entry of option ``agents``; the entry's own optional fields default here."""

    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    auto_accept: bool = False


@dataclass
class AutoAcceptConfig:
    tools: tuple[str, ...]
    # names of safe forms (tools/command_table.py) or exact commands
    safe_commands: tuple[str, ...]
    # forms declared by the user: name -> form table, or False to disable a name
    command_forms: dict[str, Any]
    timeout: float
    has_policy: bool  # a Lua policy function exists; the host asks Lua


@dataclass
class McpConfig:
    """The MCP face (python -m sidekick_tools.mcp), see DESIGN §11."""

    share_editor_tasks: bool  # MCP clients may await/halt/read Neovim's tasks
    await_timeout: float  # cap of one wait, under common ~60 s client limits
    kill_on_exit: bool  # halt the server's own tasks when it exits


@dataclass
class Config:
    state_dir: str
    tasks: TasksConfig
    auto_accept: AutoAcceptConfig
    agents: dict[str, AgentConfig]
    result_max_lines: int
    notice_lines: int
    mcp: McpConfig
    # The chat loop's table as Lua sends it (llm/settings.py reads it: ChatConfig)
    chat: dict[str, Any] = field(default_factory=dict)
    # The temporary directory setup() named for an unusable state_dir (statedir.py)
    state_fallback: str | None = None

    def halts_on_exit(self, task: Any) -> bool:
        """Whether ``task`` is halted when the Neovim or MCP server running it
        exits: the `kill_on_exit` of the side that started it (``mcp.kill_on_exit``
        for an MCP client's task, ``tasks.kill_on_exit`` for Neovim's), whichever
        side took it over since, so that a task one side keeps is kept."""
        if started_by_mcp(task):
            return bool(self.mcp.kill_on_exit)
        return bool(self.tasks.kill_on_exit)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> Config:
        """The configuration in ``raw`` (setup()'s nested tables, whole or in part:
        what it lacks takes the declared default)."""
        raw = resolve(raw)
        tasks_raw = dict(raw["tasks"])
        retention = Retention(**_known(Retention, dict(tasks_raw.pop("retention"))))
        tasks = TasksConfig(**_known(TasksConfig, tasks_raw), retention=retention)
        aa_raw = raw["auto_accept"]
        auto = AutoAcceptConfig(
            tools=tuple(_list(aa_raw["tools"])),
            safe_commands=tuple(_list(aa_raw["safe_commands"])),
            command_forms=aa_raw["command_forms"] or {},
            timeout=float(aa_raw["timeout"]),
            has_policy=bool(aa_raw.get("has_policy")),
        )
        agents: dict[str, AgentConfig] = {}
        for name, spec in dict(raw["agents"] or {}).items():
            spec = dict(spec or {})
            agents[str(name)] = AgentConfig(
                cmd=[str(part) for part in _list(spec.get("cmd"))],
                env={str(k): str(v) for k, v in dict(spec.get("env") or {}).items()},
                cwd=spec.get("cwd") or None,
                auto_accept=bool(spec.get("auto_accept", False)),
            )
        result = raw["result"]
        state_dir = raw["state_dir"] or default_state_dir()
        return cls(
            state_dir=os.path.expanduser(str(state_dir)),
            tasks=tasks,
            auto_accept=auto,
            agents=agents,
            result_max_lines=int(result["max_lines"]),
            notice_lines=int(result["notice_lines"]),
            mcp=McpConfig(**_known(McpConfig, dict(raw["mcp"]))),
            chat=dict(raw.get("chat") or {}),
            state_fallback=str(raw["state_fallback"]) if raw.get("state_fallback") else None,
        )


def tasks_config(**options: Any) -> TasksConfig:
    """The ``tasks.*`` options given, the others at their declared default."""
    return Config.from_dict({"tasks": options}).tasks


def default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "nvim", "sidekick_tools")


def _known(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}


def _list(value: Any) -> list[Any]:
    """Lua sends lists as arrays; an empty Lua table may arrive as an empty dict."""
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value.values())
    return list(value)
