"""What the tools that work on one ``path`` share: that path must really lie
inside the working directory for a call to run unasked, and the work runs in a
thread, off the host's loop."""

from __future__ import annotations

import asyncio
from typing import Any

from . import _fs
from .base import ToolContext, ToolResult
from .schema import validate


class PathTool:
    """A tool with a ``path`` parameter; a subclass gives ``schema`` and ``work``."""

    schema: dict[str, Any]

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        """The path really lies inside ctx.cwd (symlinks and .. resolved). Only the
        tool's own condition: `policy.decide` may ask for more (a tool that
        writes must also be named in auto_accept.tools, which none is by default)."""
        path = params.get("path")
        return isinstance(path, str) and _fs.is_inside(path, ctx.cwd)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        return await asyncio.to_thread(self.work, params, ctx.cwd)

    def work(self, params: dict[str, Any], cwd: str) -> ToolResult:
        """The tool's work on valid ``params``, in a worker thread."""
        raise NotImplementedError
