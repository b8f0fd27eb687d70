"""Every option's default, as declared once in Lua (lua/sidekick_tools/config.lua).

``defaults.json`` beside this module is generated from that declaration by
``nvim -l scripts/gen_options.lua`` (a test fails when it is stale); nothing in
Python writes a default of its own. Lua sends the host the whole configuration;
what is given only in part (the MCP server's ``mcp.json``, a test) is completed
from here by `resolve`, the way ``setup()`` completes a user's table.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

with open(os.path.join(os.path.dirname(__file__), "defaults.json"), encoding="utf-8") as _f:
    #: dotted option path ("tasks.max_concurrent") -> its default (None: nil)
    DEFAULTS: dict[str, Any] = json.load(_f)["defaults"]


def default(path: str) -> Any:
    """A copy of option ``path``'s default."""
    return copy.deepcopy(DEFAULTS[path])


def resolve(raw: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of ``raw`` (nested tables, as ``setup()`` takes them) in which every
    declared option it lacks has its default. An option given replaces its default
    whole, as in Lua: a table option (``agents``, ``chat.providers``) is not merged."""
    out = copy.deepcopy(dict(raw or {}))
    for path, value in DEFAULTS.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if node.get(leaf) is None:
            node[leaf] = copy.deepcopy(value)
    return out
