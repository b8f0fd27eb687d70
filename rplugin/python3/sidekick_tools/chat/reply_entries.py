"""How each kind of block a reply streams becomes chat lines, while it streams
and once it has ended (the format: :mod:`.reply`).

Pure Python, no Neovim. A text block's lines are shaped as they complete, so what
the model writes never breaks the chat's structure; thinking is kept byte for
byte; a tool call's input is written as one line of JSON once it is whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, Union

from ..text import loads_json
from .call_body import MAX_JSON_DEPTH, json_depth
from .parser import MARKERS, is_closer, opener
from .render import fence_for, new_call_id

_UNSAFE_TOKEN = re.compile(r"[\s`]+")
UNNAMED_TOOL = "unnamed_tool"


def info_token(value: str) -> str:
    """``value`` fit for a fence's info string: no whitespace, no backticks."""
    return _UNSAFE_TOKEN.sub("_", value)


def tool_json(value: dict[str, Any]) -> str:
    """A tool call's input as the one-line JSON written into the chat."""
    return json.dumps(value, ensure_ascii=False)


def parse_tool_input(raw: str) -> dict[str, Any] | None:
    """The call input streamed as ``raw``: ``{}`` when empty, ``None`` when not an object."""
    if not raw.strip():
        return {}
    if json_depth(raw) > MAX_JSON_DEPTH:  # the decoder recurses once per level
        return None
    try:
        value = loads_json(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def shape_line(line: str, fence: int) -> tuple[str, int]:
    """One line of model text as written into the chat, and the fence state after it.

    ``fence`` is the length of the open code fence (0: none), tracked exactly as the
    chat parser does: an opener is three or more backticks at column 0 with an info
    string free of backticks; a closer is a line of at least as many backticks only.
    """
    if fence:
        if is_closer(line, fence):
            return line, 0
        return line, fence
    if line.startswith("```"):
        info = line.lstrip("`")
        # only the plugin writes its notes, its call and result blocks, and the
        # model's thinking: a model's calls are its native ones, its thinking
        # comes as thinking, never as text shaped like such a block
        if info.split()[:1] in (["sidekick"], ["tool"], ["result"], ["thinking"]):
            return " " + line, 0
        return line, opener(line)
    if line.startswith(MARKERS):
        return " " + line, 0
    return line, 0


class TextEntry:
    """A text block: shaped complete lines, and the line still being written."""

    kind = "text"

    def __init__(self) -> None:
        self._done: list[str] = []
        self._pieces: list[str] = []
        self._fence = 0
        self._cr = False  # the last piece ended with CR: a following LF belongs to it
        self._started = False
        self.ended = False

    @property
    def empty(self) -> bool:
        return not self._started

    def add(self, text: str) -> None:
        if self._cr:
            text = "\n" + (text[1:] if text.startswith("\n") else text)
            self._cr = False
        if text.endswith("\r"):
            text = text[:-1]
            self._cr = True
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not self._started:
            text = text.lstrip("\n")
            if not text:
                return
            self._started = True
        if "\n" not in text:
            self._pieces.append(text)
            return
        parts = text.split("\n")
        self._pieces.append(parts[0])
        self._commit("".join(self._pieces))
        for line in parts[1:-1]:
            self._commit(line)
        self._pieces = [parts[-1]] if parts[-1] else []

    def _commit(self, line: str) -> None:
        shaped, self._fence = shape_line(line, self._fence)
        self._done.append(shaped)

    def end(self) -> None:
        if self.ended:
            return
        if self._cr:
            self.add("")
            self._cr = False
        self.ended = True
        if not self._started:
            return
        self._commit("".join(self._pieces))
        self._pieces = []
        while self._done and not self._done[-1].strip():
            self._done.pop()
        if self._fence:
            self._done.append("`" * self._fence)
            self._fence = 0
        if not self._done:
            self._started = False

    @property
    def settled(self) -> int:
        """How many first lines of `render()` stay as they are until the end:
        the complete lines, but the blank ones at their end (the end drops
        those, and may close a fence where they stood)."""
        if self.ended:
            return 0
        n = len(self._done)
        while n and not self._done[n - 1].strip():
            n -= 1
        return n

    def render(self) -> list[str]:
        if self.ended:
            return self._done
        shaped, fence = shape_line("".join(self._pieces), self._fence)
        lines = [*self._done, shaped]
        if fence:  # keep the chat valid while the fence is open: close it for now
            lines.append("`" * fence)
        return lines


_BACKTICKS = re.compile("`+")


class _Streamed:
    """A block whose text streams in pieces, kept as its lines (the last one still
    open) and the longest backtick run in it, so that a frame's render costs its
    lines, not a join, a split and a scan of the whole text again."""

    empty = False

    def __init__(self) -> None:
        self._done: list[str] = []  # the complete lines
        self._line: list[str] = []  # the pieces of the open line
        self._longest = 0  # the longest backtick run so far
        self._run = 0  # the backtick run at the text's end (a piece may go on with it)
        self._rendered: list[str] | None = None  # once ended
        self.ended = False

    def add(self, piece: str) -> None:
        if not piece:
            return
        self._rendered = None
        self._count_backticks(piece)
        if "\n" not in piece:
            self._line.append(piece)
            return
        parts = piece.split("\n")
        self._line.append(parts[0])
        self._done.append("".join(self._line))
        self._done.extend(parts[1:-1])
        self._line = [parts[-1]] if parts[-1] else []

    def _count_backticks(self, piece: str) -> None:
        if "`" not in piece:
            self._run = 0
            return
        lead = len(piece) - len(piece.lstrip("`"))
        if lead == len(piece):
            self._run += lead
            self._longest = max(self._longest, self._run)
            return
        self._longest = max(self._longest, self._run + lead)
        for run in _BACKTICKS.finditer(piece, lead):
            self._longest = max(self._longest, len(run.group()))
        self._run = len(piece) - len(piece.rstrip("`"))

    def lines(self) -> list[str]:
        """The text's lines (none when it is empty)."""
        if not self._done and not self._line:
            return []
        if len(self._line) > 1:
            self._line = ["".join(self._line)]
        return [*self._done, self._line[0] if self._line else ""]

    @property
    def joined(self) -> str:
        return "\n".join(self.lines())

    def fence(self) -> str:
        """A fence longer than any backtick run in the text (as `fence_for`)."""
        return "`" * max(3, self._longest + 1)

    def end(self) -> None:
        self.ended = True


class ThinkingEntry(_Streamed):
    kind = "thinking"

    def __init__(self) -> None:
        super().__init__()
        self._signature = ""

    @property
    def signature(self) -> str:
        return self._signature

    @signature.setter
    def signature(self, value: str) -> None:
        self._signature = value
        self._rendered = None

    @property
    def text(self) -> str:
        return self.joined

    def render(self) -> list[str]:
        if self._rendered is not None:
            return self._rendered
        fence = self.fence()
        header = f"{fence}thinking"
        if self.signature:
            header += f" signature={info_token(self.signature)}"
        lines = [header, *self.lines(), fence]
        if self.ended:
            self._rendered = lines
        return lines


class RedactedEntry:
    kind = "redacted_thinking"
    ended = True
    empty = False

    def __init__(self, data: str) -> None:
        self.data = data

    def end(self) -> None:
        pass

    def render(self) -> list[str]:
        return [f"```thinking redacted={info_token(self.data)}", "```"]


class ToolEntry(_Streamed):
    kind = "tool_use"

    def __init__(self, index: int, call_id: str, name: str, taken: Collection[str] = ()) -> None:
        super().__init__()
        self.index = index
        self.call_id = info_token(call_id)
        if not self.call_id or self.call_id in taken:  # none, or one the chat has
            self.call_id = new_call_id(set(taken))
        self.name = info_token(name) or UNNAMED_TOOL
        self.dropped = False

    @property
    def raw(self) -> str:
        return self.joined

    def input(self) -> dict[str, Any]:
        """The call's input; ``{}`` when what streamed is not a JSON object (the chat
        then shows the raw text, which the parser reports as malformed)."""
        return parse_tool_input(self.raw) or {}

    def body(self) -> str:
        raw = self.raw
        if not self.ended:
            return raw
        value = parse_tool_input(raw)
        return raw if value is None else tool_json(value)

    def dropped_note(self) -> str:
        return f"[tool call {self.name} dropped: the reply stopped before its input was complete]"

    def render(self) -> list[str]:
        if self.dropped:
            return [self.dropped_note()]
        if self._rendered is not None:
            return self._rendered
        if not self.ended:  # the input as it streams
            fence = self.fence()
            return [f"{fence}tool {self.name} id={self.call_id}", *self.lines(), fence]
        body = self.body()  # complete: shown as the JSON it is
        fence = fence_for(body)
        lines = [f"{fence}tool {self.name} id={self.call_id}"]
        if body:
            lines.extend(body.split("\n"))
        lines.append(fence)
        self._rendered = lines
        return lines


Entry = Union[TextEntry, ThinkingEntry, RedactedEntry, ToolEntry]
