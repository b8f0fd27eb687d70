"""Tool descriptions with the user's numbers (DESIGN §7).

A tool's ``description`` and the descriptions in its ``schema`` name a
configured value as ``{tasks.default_timeout}`` (an option's dotted path on
`Config`); what the model or an MCP client is shown is that text with the value
in force, so a user who changes an option reads their own number. Validation
uses the schema as it is: descriptions never change what it accepts.
"""

from __future__ import annotations

import copy
import re
from typing import Any

_OPTION = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)+)\}")


def _value(config: Any, path: str) -> Any:
    node = config
    for name in path.split("."):
        node = getattr(node, name)
    return node


def fill(text: str, config: Any) -> str:
    """``text`` with each ``{option.path}`` replaced by its value in ``config``."""

    def value(m: re.Match[str]) -> str:
        v = _value(config, m.group(1))
        return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)

    return _OPTION.sub(value, text)


def schema(tool_schema: dict[str, Any], config: Any) -> dict[str, Any]:
    """A copy of ``tool_schema`` whose every ``description`` is `fill`ed."""
    out = copy.deepcopy(tool_schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                if key == "description" and isinstance(child, str):
                    node[key] = fill(child, config)
                else:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(out)
    return out
