"""What the tools that work on one ``path`` share: that path must really lie
inside the working directory for a call to run unasked, and the work runs in a
thread, off the host's loop."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from . import _fs
from .base import ToolContext, ToolResult
from .schema import validate


def _a_chat(path: str, ctx: ToolContext) -> bool:
    """Is `path` a chat (this one, or any `*.sidekick.md`, in any case)? A chat written on
    disk reaches its buffer on `:checktime`, calls and results forged."""
    target = _fs.real(path, ctx.cwd)
    if target.lower().endswith(".sidekick.md"):
        return True
    return bool(ctx.chat) and os.path.isabs(ctx.chat) and target == os.path.realpath(ctx.chat)


class PathTool:
    """A tool with a ``path`` parameter; a subclass gives ``schema`` and ``work``."""

    schema: dict[str, Any]
    writes = False  # a tool that writes its path

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        """The path really lies inside ctx.cwd (symlinks and .. resolved); a write
        neither lands where tools run what it holds (`_fs.writes_code`: `.git`,
        a hooks folder, …) nor in a chat.
        Only the tool's own condition: `policy.decide` may ask for more (a tool
        that writes must also be named in auto_accept.tools, which none is by
        default)."""
        path = params.get("path")
        if not isinstance(path, str) or not _fs.is_inside(path, ctx.cwd):
            return False
        return not self.writes or not (_fs.writes_code(path, ctx.cwd) or _a_chat(path, ctx))

    def written_file(self, params: dict[str, Any], cwd: str) -> str | None:
        """The real path a tool that writes its path would write (see
        `tools.written_file`)."""
        path = params.get("path")
        if not self.writes or not isinstance(path, str) or not path:
            return None
        try:
            return _fs.real(path, cwd)
        except (ValueError, OSError):
            return None

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        return await asyncio.to_thread(self.work, params, ctx.cwd)

    def work(self, params: dict[str, Any], cwd: str) -> ToolResult:
        """The tool's work on valid ``params``, in a worker thread."""
        raise NotImplementedError
