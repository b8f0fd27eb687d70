"""Tools an LLM can call from the chat buffer; one module per tool.

Adding a tool: write ``tools/<name>.py`` exporting ``TOOL`` (see base.Tool),
then add one line to ``_TOOLS`` below.
"""

from __future__ import annotations

from typing import Any

from . import list_directory, read_files, replace_in_file, run_terminal_command, write_file
from .base import Tool, ToolContext, ToolResult
from .schema import validate

_TOOLS: tuple[Tool, ...] = (
    run_terminal_command.TOOL,
    read_files.TOOL,
    list_directory.TOOL,
    write_file.TOOL,
    replace_in_file.TOOL,
)

REGISTRY: dict[str, Tool] = {tool.name: tool for tool in _TOOLS}


def get_tool(name: str) -> Tool | None:
    return REGISTRY.get(name)


def check_call(name: str, params: Any) -> str | None:
    """None when ``name`` is a known tool and ``params`` fit its schema, else the problem."""
    tool = REGISTRY.get(name)
    if tool is None:
        known = ", ".join(sorted(REGISTRY))
        return f'Unknown tool "{name}". Known tools: {known}'
    return validate(tool.schema, params)


__all__ = [
    "REGISTRY",
    "Tool",
    "ToolContext",
    "ToolResult",
    "check_call",
    "get_tool",
    "validate",
]
