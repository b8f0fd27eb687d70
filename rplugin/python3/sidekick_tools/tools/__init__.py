"""Tools an LLM can call from the chat buffer; one module per tool.

Adding a tool: write ``tools/<name>.py`` exporting ``TOOL`` (see base.Tool),
then add one line to ``_TOOLS`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import (
    await_task,
    described,
    halt_task,
    list_directory,
    list_tasks,
    read_files,
    replace_in_file,
    run_terminal_command,
    task_output,
    task_status,
    use_agent,
    write_file,
)
from .base import Tool, ToolContext, ToolResult
from .schema import validate

if TYPE_CHECKING:
    from ..chat.blocks import ToolSpec

_TOOLS: tuple[Tool, ...] = (
    run_terminal_command.TOOL,
    read_files.TOOL,
    list_directory.TOOL,
    write_file.TOOL,
    replace_in_file.TOOL,
    use_agent.TOOL,
    await_task.TOOL,
    halt_task.TOOL,
    task_status.TOOL,
    task_output.TOOL,
    list_tasks.TOOL,
)

REGISTRY: dict[str, Tool] = {tool.name: tool for tool in _TOOLS}


def get_tool(name: str) -> Tool | None:
    return REGISTRY.get(name)


def specs(config: Any) -> list[ToolSpec]:
    """Every tool as the model sees it, its descriptions carrying the values in
    force in ``config`` (a `Config`): what a chat request sends as native tools."""
    from ..chat.blocks import ToolSpec  # the chat loop's model: not needed to run tools

    return [
        ToolSpec(
            tool.name,
            described.fill(tool.description, config),
            described.schema(tool.schema, config),
        )
        for tool in _TOOLS
    ]


def check_call(name: str, params: Any) -> str | None:
    """None when ``name`` is a known tool and ``params`` fit its schema, else the problem."""
    tool = REGISTRY.get(name)
    if tool is None:
        known = ", ".join(sorted(REGISTRY))
        return f'Unknown tool "{name}". Known tools: {known}'
    return validate(tool.schema, params)


def setup_problem(name: str, params: Any, config: Any) -> str | None:
    """What in the user's setup keeps a well-formed call from running (an agent
    that is not configured), for the consent question to list it as such; a
    tool says so with ``setup_problem(params, config)`` on its TOOL."""
    check = getattr(REGISTRY.get(name), "setup_problem", None)
    return check(params, config) if check is not None and isinstance(params, dict) else None


def written_file(name: str, params: Any, cwd: str) -> str | None:
    """The file a call of a tool that writes one would write, as a real path
    (links resolved): the editor is asked about its buffers of it first. None
    for a tool that writes no file, or a path the tool refuses anyway."""
    target = getattr(REGISTRY.get(name), "written_file", None)
    return target(params, cwd) if target is not None and isinstance(params, dict) else None


def result_from_task(tool_name: str, task: Any) -> ToolResult:
    """The final result of a call whose task ended in the background.

    A tool that runs tasks may define ``result_from_task(task)`` on its TOOL (an
    agent answers with its summary, not its transcript); the default is the
    terminal command's: exit code and the tail of the output.
    """
    tool = REGISTRY.get(tool_name)
    build = getattr(tool, "result_from_task", None) or run_terminal_command.result_from_task
    return build(task)


__all__ = [
    "REGISTRY",
    "Tool",
    "ToolContext",
    "ToolResult",
    "check_call",
    "get_tool",
    "result_from_task",
    "setup_problem",
    "specs",
    "validate",
    "written_file",
]
