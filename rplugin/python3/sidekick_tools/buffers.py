"""A host-side mirror of a chat buffer, kept current by nvim_buf_attach events.

With the mirror the host never asks Neovim for a whole buffer after the first
look: it applies the line events Neovim sends anyway, and knows the changedtick
every edit it computes is based on. Pure Python, no pynvim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .chat import Chat, parse


@dataclass
class BufferMirror:
    buf: int
    name: str
    lines: list[str]
    tick: int | None
    _parsed: Chat | None = field(default=None, repr=False)
    _parsed_tick: int | None = field(default=None, repr=False)

    def on_lines(self, tick: int | None, first: int, last: int, data: list[str]) -> None:
        """Apply one `nvim_buf_lines_event` (last == -1 means to the end)."""
        if self.tick is not None and tick is not None and tick <= self.tick:
            return  # already part of the snapshot this mirror started from
        if last < 0:
            last = len(self.lines)
        self.lines[first:last] = data
        self.tick = tick
        self._parsed = None

    def on_tick(self, tick: int) -> None:
        """`nvim_buf_changedtick_event`: the tick moved without a text change."""
        if self.tick is None or tick > self.tick:
            self.tick = tick

    def chat(self) -> Chat:
        """The parsed chat, cached until the text changes."""
        if self._parsed is None or self._parsed_tick != self.tick:
            self._parsed = parse(self.lines)
            self._parsed_tick = self.tick
        return self._parsed
