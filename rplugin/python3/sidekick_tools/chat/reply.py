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
note (the plugin's own, never sent), a ```` ```tool ````, ```` ```result ```` or
```` ```thinking ```` block (the reply's calls and thinking come as such, never
as text), outside a code fence gets one leading space; a code fence left open
at the end of a text block is closed; CRs become newlines; and blank lines
around a text block are dropped (read back, a text block never has blank lines
around it). The canonical form of a reply
(:meth:`ReplyBuilder.turn`) applies the same rules, so re-reading the chat
gives exactly the blocks the reply had.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
from .reply_entries import (
    Entry,
    RedactedEntry,
    TextEntry,
    ThinkingEntry,
    ToolEntry,
    info_token,
    tool_json,
)

MARKER = "ASSISTANT:"


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


class ReplyBuilder:
    """Accumulates a reply's deltas into blocks, usage and a stop reason.

    ``feed`` returns the index of the block entry the delta changed (or ``None``),
    which the renderer uses to redraw only from there.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.entries: list[Entry] = []
        self.usage = Usage()
        self.stop: Stop | None = None
        self.finished = False
        # each call's entry and its place in `entries` (which only grows), by
        # the call's index: a delta finds it at once, never by a search of a
        # reply that may hold tens of thousands of calls
        self._tools: dict[int, tuple[ToolEntry, int]] = {}
        # call ids the chat holds already: a provider reusing one (a local
        # server numbering its calls per reply, a restarted one) would make a
        # block "Duplicate id" that nothing runs; it gets a fresh id instead
        self._taken: set[str] = set(taken)

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
            self._current(TextEntry).add(delta.text)
        elif isinstance(delta, ThinkingDelta):
            self._current(ThinkingEntry).add(delta.text)
        elif isinstance(delta, SignatureDelta):
            self._current(ThinkingEntry).signature = delta.signature
        elif isinstance(delta, RedactedThinkingDelta):
            self._end_open()
            self.entries.append(RedactedEntry(delta.data))
        elif isinstance(delta, BlockEnd):
            last = self.entries[-1] if self.entries else None
            if last is None or isinstance(last, ToolEntry) or last.ended:
                return None
            last.end()
        elif isinstance(delta, ToolCallStart):
            self._end_open()
            entry = ToolEntry(delta.index, delta.call_id, delta.name, self._taken)
            self._taken.add(entry.call_id)
            self._tools[delta.index] = (entry, len(self.entries))
            self.entries.append(entry)
        elif isinstance(delta, (ToolCallArgs, ToolCallEnd)):
            entry, at = self._tools.get(delta.index) or (None, 0)
            if entry is None or entry.ended:
                return None
            if isinstance(delta, ToolCallArgs):
                entry.add(delta.fragment)
            else:
                entry.end()
            return at
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
        if last is not None and not isinstance(last, ToolEntry):
            last.end()

    def finish(self, stopped: bool = False) -> list[int]:
        """End the reply. Tool calls whose input did not finish streaming are dropped
        (a line in the chat says so). ``stopped`` says the reply was cut short (stop,
        error): then that is expected; otherwise an unfinished call is still dropped,
        since its input cannot be trusted. Returns the entries that changed."""
        changed = []
        for i, entry in enumerate(self.entries):
            if isinstance(entry, ToolEntry):
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
            if isinstance(entry, TextEntry):
                texts.append("\n".join(entry.render()))
            elif isinstance(entry, ToolEntry) and entry.dropped:
                texts.append(entry.dropped_note())
            else:
                flush_text()
                if isinstance(entry, ThinkingEntry):
                    out.append(Thinking(entry.text, info_token(entry.signature)))
                elif isinstance(entry, RedactedEntry):
                    out.append(RedactedThinking(info_token(entry.data)))
                elif isinstance(entry, ToolEntry) and entry.ended:
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
