"""A streamed reply: accumulate its deltas into blocks, each rendered as chat lines.

Pure Python, no Neovim. The format it writes (read back by
:mod:`sidekick_tools.chat.conversation`):

    ASSISTANT: First line of text
    more text

    ```thinking signature=EqQBCkgIARABGAIiQ...
    The model's reasoning, verbatim.
    ```

    ```tool run_terminal_command id=toolu_01A
    {"command": "pytest -q"}
    ```

Blocks are separated by one blank line; text that starts a reply goes on the
``ASSISTANT:`` line. Thinking is kept byte for byte (its signature signs it), with
the signature on the fence line, or ``thinking redacted=DATA`` for a redacted
block. A tool call's body is its input as one line of JSON.

Model text is written as it came, except where it would break the chat's
structure: a line starting with a role marker, or opening a ```` ```sidekick ````
note (the plugin's own, never sent), outside a code fence gets one leading
space; a code fence left open at the end of a text block is closed; CRs become
newlines; and blank lines around a text block are dropped (read back, a text
block never has blank lines around it). The canonical form of a reply
(:meth:`ReplyBuilder.turn`) applies the same rules, so re-reading the chat
gives exactly the blocks the reply had.
"""

from __future__ import annotations

import json
import re
from typing import Any, Union

from .blocks import (
    ASSISTANT,
    Block,
    BlockEnd,
    Delta,
    RedactedThinking,
    RedactedThinkingDelta,
    SignatureDelta,
    Stop,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolUse,
    Turn,
    Usage,
    UsageDelta,
)
from .call_body import MAX_JSON_DEPTH, json_depth
from .render import fence_for, new_call_id

MARKER = "ASSISTANT:"
_ROLE_MARKERS = ("SYSTEM:", "USER:", "ASSISTANT:")
_UNSAFE_TOKEN = re.compile(r"[\s`]+")
UNNAMED_TOOL = "unnamed_tool"


def trim_blank_lines(lines: list[str]) -> str:
    """``lines`` joined, without the blank (whitespace-only) lines around them. The
    rest is kept as is, leading spaces of the first line too: they can matter
    (an indented fence line is no fence)."""
    first, last = 0, len(lines)
    while first < last and not lines[first].strip():
        first += 1
    while last > first and not lines[last - 1].strip():
        last -= 1
    return "\n".join(lines[first:last])


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
        value = json.loads(raw)
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
        if line.startswith("`" * fence) and not line.rstrip().lstrip("`"):
            return line, 0
        return line, fence
    if line.startswith("```"):
        info = line.lstrip("`")
        if info.split()[:1] == ["sidekick"]:  # only the plugin writes its notes
            return " " + line, 0
        return line, (0 if "`" in info else len(line) - len(info))
    if line.startswith(_ROLE_MARKERS):
        return " " + line, 0
    return line, 0


class _TextEntry:
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

    def render(self) -> list[str]:
        if self.ended:
            return self._done
        shaped, fence = shape_line("".join(self._pieces), self._fence)
        lines = [*self._done, shaped]
        if fence:  # keep the chat valid while the fence is open: close it for now
            lines.append("`" * fence)
        return lines


class _ThinkingEntry:
    kind = "thinking"

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self.signature = ""
        self.ended = False

    @property
    def empty(self) -> bool:
        return False

    @property
    def text(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def add(self, text: str) -> None:
        self._pieces.append(text)

    def end(self) -> None:
        self.ended = True

    def render(self) -> list[str]:
        text = self.text
        fence = fence_for(text)
        header = f"{fence}thinking"
        if self.signature:
            header += f" signature={info_token(self.signature)}"
        return [header, *(text.split("\n") if text else ()), fence]


class _RedactedEntry:
    kind = "redacted_thinking"
    ended = True
    empty = False

    def __init__(self, data: str) -> None:
        self.data = data

    def end(self) -> None:
        pass

    def render(self) -> list[str]:
        return [f"```thinking redacted={info_token(self.data)}", "```"]


class _ToolEntry:
    kind = "tool_use"

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index = index
        self.call_id = info_token(call_id) or new_call_id(set())
        self.name = info_token(name) or UNNAMED_TOOL
        self._pieces: list[str] = []
        self.ended = False
        self.dropped = False

    empty = False

    @property
    def raw(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def add(self, fragment: str) -> None:
        self._pieces.append(fragment)

    def end(self) -> None:
        self.ended = True

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
        body = self.body()
        fence = fence_for(body)
        lines = [f"{fence}tool {self.name} id={self.call_id}"]
        if body:
            lines.extend(body.split("\n"))
        lines.append(fence)
        return lines


_Entry = Union[_TextEntry, _ThinkingEntry, _RedactedEntry, _ToolEntry]


class ReplyBuilder:
    """Accumulates a reply's deltas into blocks, usage and a stop reason.

    ``feed`` returns the index of the block entry the delta changed (or ``None``),
    which the renderer uses to redraw only from there.
    """

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.usage = Usage()
        self.stop: Stop | None = None
        self.finished = False
        self._tools: dict[int, _ToolEntry] = {}

    def _current(self, kind: type) -> Any:
        last = self.entries[-1] if self.entries else None
        if isinstance(last, kind) and not last.ended:
            return last
        self._end_open()
        entry = kind()
        self.entries.append(entry)
        return entry

    def feed(self, delta: Delta) -> int | None:
        """Take one delta; return the first entry it changed (a new entry changes the
        one before it too, by ending it), or None."""
        if self.finished:
            raise RuntimeError("reply already finished")
        before = len(self.entries)
        changed = self._feed(delta)
        if changed is not None and len(self.entries) > before:
            return max(0, before - 1)
        return changed

    def _feed(self, delta: Delta) -> int | None:
        if isinstance(delta, TextDelta):
            if not delta.text:
                return None
            self._current(_TextEntry).add(delta.text)
        elif isinstance(delta, ThinkingDelta):
            self._current(_ThinkingEntry).add(delta.text)
        elif isinstance(delta, SignatureDelta):
            self._current(_ThinkingEntry).signature = delta.signature
        elif isinstance(delta, RedactedThinkingDelta):
            self._end_open()
            self.entries.append(_RedactedEntry(delta.data))
        elif isinstance(delta, BlockEnd):
            last = self.entries[-1] if self.entries else None
            if last is None or isinstance(last, _ToolEntry) or last.ended:
                return None
            last.end()
        elif isinstance(delta, ToolCallStart):
            self._end_open()
            entry = _ToolEntry(delta.index, delta.call_id, delta.name)
            self._tools[delta.index] = entry
            self.entries.append(entry)
        elif isinstance(delta, ToolCallArgs):
            entry = self._tools.get(delta.index)
            if entry is None or entry.ended:
                return None
            entry.add(delta.fragment)
            return self.entries.index(entry)
        elif isinstance(delta, ToolCallEnd):
            entry = self._tools.get(delta.index)
            if entry is None or entry.ended:
                return None
            entry.end()
            return self.entries.index(entry)
        elif isinstance(delta, UsageDelta):
            self.usage = self.usage.merged(delta.usage)
            return None
        elif isinstance(delta, Stop):
            self.stop = delta
            return None
        else:
            raise TypeError(f"not a reply delta: {delta!r}")
        return len(self.entries) - 1

    def _end_open(self) -> None:
        last = self.entries[-1] if self.entries else None
        if last is not None and not isinstance(last, _ToolEntry):
            last.end()

    def finish(self, stopped: bool = False) -> list[int]:
        """End the reply. Tool calls whose input did not finish streaming are dropped
        (a line in the chat says so). ``stopped`` says the reply was cut short (stop,
        error): then that is expected; otherwise an unfinished call is still dropped,
        since its input cannot be trusted. Returns the entries that changed."""
        changed = []
        for i, entry in enumerate(self.entries):
            if isinstance(entry, _ToolEntry):
                if not entry.ended:
                    entry.dropped = True
                    entry.end()
                    changed.append(i)
            elif not entry.ended:
                entry.end()
                changed.append(i)
        self.finished = True
        return changed

    @property
    def tool_calls(self) -> list[ToolUse]:
        """The reply's complete tool calls, in order."""
        return [b for b in self.blocks() if isinstance(b, ToolUse)]

    def blocks(self) -> list[Block]:
        """The reply as canonical content blocks: exactly what re-reading its rendered
        lines from the chat gives. Adjacent text (with dropped-call notes) is one block."""
        out: list[Block] = []
        texts: list[str] = []

        def flush_text() -> None:
            text = trim_blank_lines("\n\n".join(texts).split("\n"))
            texts.clear()
            if text:
                out.append(Text(text))

        for entry in self.entries:
            if entry.empty:
                continue
            if isinstance(entry, _TextEntry):
                texts.append("\n".join(entry.render()))
            elif isinstance(entry, _ToolEntry) and entry.dropped:
                texts.append(entry.dropped_note())
            else:
                flush_text()
                if isinstance(entry, _ThinkingEntry):
                    out.append(Thinking(entry.text, info_token(entry.signature)))
                elif isinstance(entry, _RedactedEntry):
                    out.append(RedactedThinking(info_token(entry.data)))
                elif isinstance(entry, _ToolEntry) and entry.ended:
                    out.append(ToolUse(entry.call_id, entry.name, entry.input()))
        flush_text()
        return out

    def turn(self) -> Turn:
        return Turn(ASSISTANT, self.blocks())


def deltas_of(block: Block, index: int = 0) -> list[Delta]:
    """The deltas that stream ``block`` whole (``index`` names a tool call)."""
    if isinstance(block, Text):
        return [TextDelta(block.text), BlockEnd()]
    if isinstance(block, Thinking):
        out: list[Delta] = [ThinkingDelta(block.text)]
        if block.signature:
            out.append(SignatureDelta(block.signature))
        return [*out, BlockEnd()]
    if isinstance(block, RedactedThinking):
        return [RedactedThinkingDelta(block.data)]
    if isinstance(block, ToolUse):
        return [
            ToolCallStart(index, block.call_id, block.name),
            ToolCallArgs(index, tool_json(block.input)),
            ToolCallEnd(index),
        ]
    raise TypeError(f"not a reply block: {block!r}")
