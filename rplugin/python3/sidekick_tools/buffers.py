"""A host-side mirror of a chat buffer, kept current by nvim_buf_attach events.

With the mirror the host never asks Neovim for a whole buffer after the first
look: it applies the line events Neovim sends anyway, and knows the changedtick
every edit it computes is based on. Pure Python, no pynvim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .chat import Chat, parse
from .chat.parser import reparse


@dataclass
class BufferMirror:
    buf: int
    name: str
    lines: list[str]
    tick: int | None
    _parsed: Chat | None = field(default=None, repr=False)
    _changed_from: int | None = field(default=None, repr=False)  # first row edited since

    def on_lines(self, tick: int | None, first: int, last: int, data: list[str]) -> None:
        """Apply one `nvim_buf_lines_event` (last == -1 means to the end)."""
        if self.tick is not None and tick is not None and tick <= self.tick:
            return  # already part of the snapshot this mirror started from
        if last < 0:
            last = len(self.lines)
        self.lines[first:last] = data
        self.tick = tick
        if self._changed_from is None or first < self._changed_from:
            self._changed_from = first

    def on_tick(self, tick: int) -> None:
        """`nvim_buf_changedtick_event`: the tick moved without a text change."""
        if self.tick is None or tick > self.tick:
            self.tick = tick

    def chat(self) -> Chat:
        """The parsed chat, cached until the text changes (then parsed again from
        the message the first edit is in)."""
        if self._parsed is None:
            self._parsed = parse(self.lines)
        elif self._changed_from is not None:
            self._parsed = reparse(self.lines, self._parsed, self._changed_from)
        self._changed_from = None
        return self._parsed
