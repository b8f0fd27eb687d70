"""The chat buffer format: parse a chat into messages and tool calls, render results.

Pure Python (no pynvim); see docs/architecture.md, section ``chat/``.
"""

from __future__ import annotations

from .call_body import MAX_BODY_BYTES
from .parser import ROLES, Chat, Message, ResultBlock, ToolCall, parse
from .render import (
    clean_output,
    fence_for,
    header_with_id,
    new_call_id,
    notice_lines,
    result_lines,
    truncate_tail,
)

__all__ = [
    "MAX_BODY_BYTES",
    "ROLES",
    "Chat",
    "Message",
    "ResultBlock",
    "ToolCall",
    "clean_output",
    "fence_for",
    "header_with_id",
    "new_call_id",
    "notice_lines",
    "parse",
    "result_lines",
    "truncate_tail",
]
