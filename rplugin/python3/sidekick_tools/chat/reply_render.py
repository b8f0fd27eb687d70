"""Stream a reply into the chat buffer: the lines it renders to, as minimal edits.

Pure Python, no Neovim. :class:`ReplyRenderer` keeps the reply's lines as
:mod:`sidekick_tools.chat.reply` renders them and, on each :meth:`~ReplyRenderer.take`,
the one ``nvim_buf_set_text`` edit that brings the buffer from the previous take
to now: appending text is a small edit at the end, whatever the reply's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..secrets_mask import (
    PEM_BEGIN,
    PEM_END,
    REPLACEMENT,
    key_body,
    mask,
    mask_keys,
    mask_literals,
)
from .blocks import Block, Delta
from .parser import is_closer, opener
from .reply import MARKER, ReplyBuilder, deltas_of


@dataclass(frozen=True)
class Edit:
    """One change to the reply's rows, as ``nvim_buf_set_text`` takes it: rows are
    relative to the reply's first row, columns are UTF-8 byte offsets, and the edit
    applies to the text as it stood after the previous edit."""

    start_row: int
    start_col: int
    end_row: int
    end_col: int
    lines: list[str]


def _blen(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, in C-speed slice comparisons: a
    streamed line grows at its end, so this is usually one `startswith`, and a
    long line costs log(n) comparisons, never a Python loop over it."""
    if b.startswith(a):
        return len(a)
    if a.startswith(b):
        return len(b)
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo]; they differ before hi
    while hi - lo > 16:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    while lo < hi and a[lo] == b[lo]:
        lo += 1
    return lo


def _first_difference(old: list[str], new: list[str], r: int) -> int:
    """The first row from ``r`` where the lists differ (or the shorter one's end).
    Whole runs are compared at C speed first: unchanged rows are the same objects."""
    n = min(len(old), len(new))
    step = 64
    while step > 8:
        if r + step <= n and old[r : r + step] == new[r : r + step]:
            r += step
            step = min(step * 2, 8192)
        else:
            step //= 2
    while r < n and old[r] == new[r]:
        r += 1
    return r


def diff_edit(old: list[str], new: list[str], lo: int = 0) -> Edit | None:
    """The one edit that turns ``old`` into ``new`` (both non-empty), knowing rows
    before ``lo`` are equal; ``None`` when they are equal."""
    n_old, n_new = len(old), len(new)
    r = _first_difference(old, new, min(lo, n_old, n_new))
    if r == n_old and r == n_new:
        return None
    s = 0
    while s < n_old - r and s < n_new - r and old[n_old - 1 - s] == new[n_new - 1 - s]:
        s += 1
    old_end, new_end = n_old - s, n_new - s  # changed rows: old[r:old_end] -> new[r:new_end]
    if old_end > r and new_end > r:
        c = _common_prefix(old[r], new[r])
        first = old[r][:c]
        lines = [new[r][c:], *new[r + 1 : new_end]]
        return Edit(r, _blen(first), old_end - 1, _blen(old[old_end - 1]), lines)
    if new_end > r:  # rows inserted before old[r]
        if r < n_old:
            return Edit(r, 0, r, 0, [*new[r:new_end], ""])
        last = _blen(old[-1])
        return Edit(n_old - 1, last, n_old - 1, last, ["", *new[r:new_end]])
    # rows old[r:old_end] deleted
    if r > 0:
        return Edit(r - 1, _blen(old[r - 1]), old_end - 1, _blen(old[old_end - 1]), [""])
    return Edit(0, 0, old_end, 0, [""])


def apply_edit(lines: list[str], edit: Edit) -> list[str]:
    """``lines`` after ``edit`` (what Neovim does with it): for tests and the bench."""
    start_line = lines[edit.start_row].encode("utf-8", "surrogatepass")
    end_line = lines[edit.end_row].encode("utf-8", "surrogatepass")
    head = start_line[: edit.start_col].decode("utf-8", "surrogatepass")
    tail = end_line[edit.end_col :].decode("utf-8", "surrogatepass")
    middle = list(edit.lines) or [""]
    middle[0] = head + middle[0]
    middle[-1] = middle[-1] + tail
    return [*lines[: edit.start_row], *middle, *lines[edit.end_row + 1 :]]


# The entries whose text the request's API key is masked in; in a text entry
# (what the model says) every other secret too (`_mask_prose_line`), not in a
# call's input (what the call does) nor in thinking (its signature signs it as
# it came).
_MASKED = ("text", "tool_use")

# Where a line of what the model says stands: the length of the code fence it
# is in (0: none), and whether it is inside a private key's block.
_OUTSIDE = (0, False)


def _mask_prose_line(
    line: str, state: tuple[int, bool], secrets: tuple[str, ...]
) -> tuple[str, tuple[int, bool]]:
    """One line of the model's text masked, and where the next one stands.
    Outside code every secret form is masked; in a fence, code, only what is a
    key by its form (`password: str` is a type there, `token = headers[...]`
    no secret). A private key's body is masked line by line to its END line."""
    fence, in_key = state
    if in_key:
        masked, in_key = key_body(line)
        return masked, (fence, in_key)
    begin = PEM_BEGIN.search(line)
    if begin is not None and not PEM_END.search(line, begin.end()):
        rest = line[begin.end() :].strip()
        shown = mask_keys(line[: begin.end()], secrets) + (" " + REPLACEMENT if rest else "")
        return shown, (fence, True)
    masked = mask_keys(line, secrets) if fence else mask(line, secrets).replace("\n", " ")
    if fence:
        return masked, ((0 if is_closer(line, fence) else fence), False)
    return masked, (opener(line), False)


def mask_reply_text(text: str) -> str:
    """A model's text masked as the chat shows it (`_mask_prose_line`, line by
    line): so the model reads back its code as it wrote it, not mangled by
    the masks for prose (`token = request.headers[...]` is no secret)."""
    out, state = [], _OUTSIDE
    for line in text.split("\n"):
        masked, state = _mask_prose_line(line, state, ())
        out.append(masked)
    return "\n".join(out)


class ReplyRenderer:
    """Renders a streaming reply into chat lines and hands out minimal edits.

    Put one empty line where the reply goes; that is the reply's row 0. Feed every
    delta; every ~16 ms call :meth:`take` and apply the edit it returns (if any)
    with ``nvim_buf_set_text`` at the reply's rows; when the stream ends, call
    :meth:`finish` and :meth:`take` once more. ``lines`` is the whole reply as
    rendered so far; ``reply`` the accumulated blocks, usage and stop reason.
    """

    def __init__(self, taken: Iterable[str] = (), secrets: Iterable[str] = ()) -> None:
        self.reply = ReplyBuilder(taken)  # taken: the call ids the chat has already
        # the request's API key: a provider echoing it (or a piece of it) never
        # gets it into the chat, but in thinking, which its signature signs
        self._secrets = tuple(secrets)
        self._lines: list[str] = [MARKER]
        self._shown: list[str] = [""]
        self._starts: list[int] = []  # row where each entry's region (separator first) begins
        self._dirty: int | None = 0  # first entry to redraw
        self._lo = 0  # rows before this are unchanged since the last take
        # each line masked in the last flush, with its masked form: an entry is
        # rendered whole each frame, its unchanged lines are not masked again
        self._masked: dict[str, str] = {}
        # a text entry's masked lines, by entry, and how many of them it had
        # settled then: those are taken as they are, not looked up line by line
        # (a reply of a million lines cost a million lookups a frame)
        self._settled: dict[int, tuple[int, list[str]]] = {}
        # a text entry's masked settled lines, and where its next line stands
        self._prose: dict[int, tuple[int, list[str], tuple[int, bool]]] = {}

    def feed(self, delta: Delta) -> None:
        index = self.reply.feed(delta)
        if index is not None:
            self._mark(index)

    def feed_all(self, deltas: Any) -> None:
        for delta in deltas:
            self.feed(delta)

    def finish(self, stopped: bool = False) -> None:
        for index in self.reply.finish(stopped):
            self._mark(index)
        # An entry that ended may render differently (fence closed, JSON canonical).
        self._mark(max(0, len(self.reply.entries) - 1))

    def _mark(self, index: int) -> None:
        self._dirty = index if self._dirty is None else min(self._dirty, index)

    @property
    def lines(self) -> list[str]:
        self._flush()
        return self._lines

    def _flush(self) -> None:
        if self._dirty is None:
            return
        entries = self.reply.entries
        k = min(self._dirty, len(self._starts))
        first_visible = all(e.empty for e in entries[:k])
        if first_visible:  # the first visible entry may share row 0 with the marker
            k = 0
        row = len(self._lines) if k >= len(self._starts) else self._starts[k]
        if k == 0:
            row = 0
        del self._starts[k:]
        out = self._lines[:row] if k else [MARKER]
        self._lo = min(self._lo, row)
        known, self._masked = self._masked, {}
        for entry in entries[k:]:
            self._starts.append(len(out))
            if entry.empty:
                continue
            rendered = entry.render()
            if entry.kind == "text" or (self._secrets and entry.kind in _MASKED):
                rendered = self._masked_lines(entry, rendered, known)
            if first_visible:
                first_visible = False
                if entry.kind == "text" and not rendered[0].startswith("`"):
                    out[0] = f"{MARKER} {rendered[0]}"
                    out.extend(rendered[1:])
                    continue
            else:
                out.append("")
            out.extend(rendered)
        self._lines = out
        self._dirty = None

    def _masked_lines(self, entry: Any, rendered: list[str], known: dict[str, str]) -> list[str]:
        if entry.kind == "text":
            return self._masked_prose(entry, rendered)
        settled, masked = self._settled.get(id(entry), (0, []))
        fresh = rendered[settled:]
        if len(fresh) > 8 and not any("\n" in s for s in self._secrets):
            # many new lines (a frame of a fast stream) in one call: no piece of
            # a key is found across a line break, so the lines come back as many
            done = mask_literals("\n".join(fresh), self._secrets).split("\n")
        else:
            done = [self._mask(line, known) for line in fresh]
        out = masked[:settled] + done
        now = getattr(entry, "settled", 0)
        if now:
            self._settled[id(entry)] = (now, out)
        else:
            self._settled.pop(id(entry), None)
        return out

    def _mask(self, line: str, known: dict[str, str]) -> str:
        masked = known.get(line)
        if masked is None:
            masked = mask_literals(line, self._secrets)
        self._masked[line] = masked
        return masked

    def _masked_prose(self, entry: Any, rendered: list[str]) -> list[str]:
        """A text entry's lines masked in order from the last settled one, with
        where they stand (in a code fence, in a private key) carried on."""
        settled, masked, state = self._prose.get(id(entry), (0, [], _OUTSIDE))
        now = getattr(entry, "settled", 0)
        out, at_now = masked[:settled], state
        for row in range(settled, len(rendered)):
            line, state = _mask_prose_line(rendered[row], state, self._secrets)
            out.append(line)
            if row + 1 == now:
                at_now = state
        if now > settled:
            self._prose[id(entry)] = (now, out, at_now)
        elif not now:
            self._prose.pop(id(entry), None)
        return out

    def take(self) -> Edit | None:
        """The edit that brings the buffer from the last taken state to now."""
        self._flush()
        edit = diff_edit(self._shown, self._lines, self._lo)
        self._shown = self._lines  # _flush builds a new list, never changes this one
        self._lo = len(self._lines)
        return edit


def reply_lines(blocks: list[Block]) -> list[str]:
    """Finished blocks (thinking, text, tool calls) as chat lines, ``ASSISTANT:`` first."""
    renderer = ReplyRenderer()
    for index, block in enumerate(blocks):
        renderer.feed_all(deltas_of(block, index))
    renderer.finish()
    return renderer.lines
