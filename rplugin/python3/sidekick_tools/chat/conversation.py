"""Read a chat buffer into the neutral conversation a provider request is built from.

Pure Python, no Neovim. The buffer is the whole truth: the same lines always give
the same :class:`~sidekick_tools.chat.blocks.Conversation`, and the lines a reply
was rendered into (:mod:`sidekick_tools.chat.reply`) give back that reply's blocks.

* Front matter (optional, row 0): ``---``, ``key: value`` lines, ``---``.
* ``SYSTEM:`` messages make the system text (joined by a blank line).
* ``USER:`` messages are user text; completion notices are user text too.
* ``ASSISTANT:`` messages are split into text, thinking blocks
  (```` ```thinking signature=… ````, ```` ```thinking redacted=… ````) and tool calls;
  each call's result goes first in the next user turn, then that turn's text;
  ```` ```sidekick ... ```` blocks are the plugin's notes (an error, a stop) and
  are not sent.
* Consecutive messages of one role are one turn; an empty message is none.
* Text is taken without the blank lines around it; thinking byte for byte.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

from .blocks import (
    ASSISTANT,
    USER,
    Block,
    Conversation,
    RedactedThinking,
    Text,
    Thinking,
    ToolResultBlock,
    ToolUse,
    Turn,
)
from .parser import (
    MARKERS,
    Chat,
    Message,
    ResultBlock,
    ToolCall,
    _key_values,
    find_closer,
    parse,
)
from .reply import trim_blank_lines
from .reply_entries import UNNAMED_TOOL

#: A fenced block whose info string starts with this word is a note of the plugin's
#: under a reply (``sidekick error``, ``sidekick stopped``): shown, never sent.
NOTE = "sidekick"

#: Result statuses the model is told are errors (``is_error`` for Anthropic).
ERROR_STATUSES = ("failed", "cancelled", "denied")

# Blanks as Lua's `%s` has them (front_matter.lua reads the front matter too,
# to show and set the model: both must read the same one): ASCII only, so a
# no-break space before `model:` makes no key on either side.
_BLANKS = " \t\r\n\v\f"
_FRONT_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t\r\n\v\f]*:[ \t\r\n\v\f]*(.*)")
_FRONT_MAX_ROWS = 64


@dataclass
class FrontMatter:
    values: dict[str, str]  # raw strings, in the order written
    end_row: int  # row of the closing ---


@dataclass
class ChatDocument:
    front: FrontMatter | None
    conversation: Conversation
    chat: Chat
    #: calls that cannot be sent: no result block, or no id to pair one with
    unanswered: list[ToolCall] = field(default_factory=list)
    #: (first, last) rows of each thinking block, for folding
    thinking_rows: list[tuple[int, int]] = field(default_factory=list)


def unanswered_calls(chat: Chat) -> list[ToolCall]:
    """Calls a request cannot carry yet: without a result, or without an id.

    Before sending, give each a result (``status=denied``, "not run: the user
    replied instead"), assigning an id first where it has none.
    """
    return [call for call in chat.calls if call.result is None or not call.call_id]


def read_front_matter(lines: list[str], chat: Chat | None = None) -> FrontMatter | None:
    """The ``---`` block at row 0, if there is one before the first message. A
    line that starts a message (at column 0, inside a fence too) ends the
    search: that ``---`` was text (as front_matter.lua reads it)."""
    if not lines or lines[0].rstrip(_BLANKS) != "---":
        return None
    limit = min(len(lines), _FRONT_MAX_ROWS)
    if chat is not None and chat.messages:
        limit = min(limit, chat.messages[0].start_row)
    values: dict[str, str] = {}
    for row in range(1, limit):
        if lines[row].startswith(MARKERS):
            return None
        line = lines[row].rstrip(_BLANKS)
        if line == "---":
            return FrontMatter(values, row)
        m = _FRONT_KEY.fullmatch(line.strip(_BLANKS))
        if m:
            value = m.group(2).strip(_BLANKS)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            values[m.group(1)] = value
    return None


def misplaced_front_matter(lines: list[str]) -> int | None:
    """The row of a front matter that only blank lines keep from row 0, where
    it would be read (so it is not): None when there is none such."""
    for row, line in enumerate(lines[:_FRONT_MAX_ROWS]):
        if line.strip(_BLANKS):
            if row and read_front_matter(lines[row : row + _FRONT_MAX_ROWS]) is not None:
                return row
            return None
    return None


def result_content(result: ResultBlock) -> str:
    """What the model reads for a result: its status line, then its body."""
    head = f"status={result.status or 'unknown'}"
    for key, value in result.fields.items():
        head += f" {key}={value}"
    return f"{head}\n{result.body}" if result.body else head


def _fences(lines: list[str], start: int, end: int) -> list[tuple[int, int, str]]:
    """Fenced blocks at column 0 in rows ``start..end``: (open row, close row, info).

    The same rules as the chat parser: an opener's info holds no backtick; a closer
    is a line of at least as many backticks and nothing else; an unclosed block
    runs to the end (its close row is then ``end + 1``, past the last row). Only
    fence lines cost Python work.
    """
    text = "\n" + "\n".join(lines[start : end + 1])
    find, count = text.find, text.count
    size = len(text)
    out: list[tuple[int, int, str]] = []
    row, row_at = start, 0  # the "\n" at offset row_at starts `row`
    p = find("\n```")
    while p != -1:
        row += count("\n", row_at, p)
        row_at = p
        eol = find("\n", p + 1)
        if eol == -1:
            eol = size
        line = text[p + 1 : eol]
        info = line.lstrip("`")
        if "`" in info:
            p = find("\n```", eol)
            continue
        j, e = find_closer(text, len(line) - len(info), eol)
        if j == -1:
            out.append((row, end + 1, info.strip()))
            return out
        open_row = row
        row += count("\n", row_at, j)
        row_at = j
        out.append((open_row, row, info.strip()))
        p = find("\n```", e)
    return out


def _text(lines: list[str], first: int, last: int, marker: str | None) -> str:
    """Rows ``first..last`` as text without the blank lines around it; ``marker``
    (and one space after it) is removed from the first row when it starts the message."""
    if first > last:
        return ""
    chunk = lines[first : last + 1]
    if marker is not None:
        head = chunk[0][len(marker) :]
        chunk = [head[1:] if head.startswith(" ") else head, *chunk[1:]]
    return trim_blank_lines(chunk)


def _thinking(lines: list[str], open_row: int, close_row: int, info: str) -> Block:
    fields = _key_values(info.split()[1:])
    if "redacted" in fields:
        return RedactedThinking(fields["redacted"])
    return Thinking("\n".join(lines[open_row + 1 : close_row]), fields.get("signature", ""))


def _assistant_blocks(
    lines: list[str], start: int, end: int, calls: list[ToolCall], thinking_rows: list
) -> tuple[list[Block], list[ToolCall]]:
    """An assistant message's blocks in order, and its calls (with results)."""
    call_at = {call.start_row: call for call in calls}
    blocks: list[Block] = []
    text_from = start
    skip_to = start  # rows before this belong to a block already taken
    for open_row, close_row, info in _fences(lines, start, end):
        if open_row < skip_to:
            continue
        call = call_at.get(open_row)
        kind = info.split()[:1]
        is_thinking = kind == ["thinking"]
        is_note = kind == [NOTE]
        if call is None and not is_thinking and not is_note:
            continue  # a code block inside text
        text = _text(lines, text_from, open_row - 1, "ASSISTANT:" if text_from == start else None)
        if text:
            blocks.append(Text(text))
        if call is not None:
            params = call.params if call.params is not None else {}
            blocks.append(ToolUse(call.call_id or "", call.tool or UNNAMED_TOOL, params))
            last = call.last_row
        elif is_note:  # the plugin's note (an error, a stop): shown, never sent
            last = close_row
        else:
            blocks.append(_thinking(lines, open_row, close_row, info))
            thinking_rows.append((open_row, min(close_row, end)))
            last = close_row
        text_from = skip_to = last + 1
    text = _text(lines, text_from, end, "ASSISTANT:" if text_from == start else None)
    if text:
        blocks.append(Text(text))
    return blocks, calls


def _results(calls: list[ToolCall]) -> list[Block]:
    out: list[Block] = []
    for call in calls:
        res = call.result
        if res is None or not call.call_id:
            continue
        out.append(
            ToolResultBlock(
                call.call_id,
                result_content(res),
                is_error=(res.status or "") in ERROR_STATUSES,
                status=res.status or "unknown",
            )
        )
    return out


# A message's part of a turn: (role, blocks). An assistant message gives its
# blocks, then its calls' results as the start of the next user turn; consecutive
# parts of one role make one turn.
Part = tuple[str, tuple[Block, ...]]


def _message_view(lines: list[str], msg: Message) -> tuple[str, list[Part], list]:
    """What one message gives the conversation, read once per message object:
    (its system text, its parts, its thinking rows)."""
    view = msg.memo.get("read")
    if view is None:
        system, parts, rows = "", [], []
        if msg.role == "ASSISTANT":
            blocks, calls = _assistant_blocks(lines, msg.start_row, msg.end_row, msg.calls, rows)
            results = _results(calls)
            parts = [(ASSISTANT, tuple(blocks))] if blocks else []
            parts += [(USER, tuple(results))] if results else []
        else:
            text = _text(lines, msg.start_row, msg.end_row, f"{msg.role}:")
            if msg.role == "SYSTEM":
                system = text
            elif text:
                parts = [(USER, (Text(text),))]
        view = msg.memo["read"] = (system, parts, rows)
    return view


def _turn_of(run: list[Part], home: Message, index: int) -> Turn:
    """The turn made of the parts in ``run``, the first of them part ``index`` of
    ``home``: made once, and found on ``home`` while it is made of the same parts."""
    key = ("turn", index)
    made = home.memo.get(key)
    if made is not None and len(made[0]) == len(run) and all(map(operator.is_, made[0], run)):
        return made[1]
    turn = Turn(run[0][0], [block for _, blocks in run for block in blocks])
    home.memo[key] = (tuple(run), turn)
    return turn


def read_chat(lines: list[str], chat: Chat | None = None) -> ChatDocument:
    """The chat in ``lines`` as a conversation (``chat``: its parse, if already made).

    Each message is read once (its view is kept on the message, which a reparse
    keeps while its rows are unchanged) and each turn made once, so a chat read
    again after an edit at its end gives the same turn objects up to the edit;
    what is done to a turn (masking, encoding) can be remembered by it. The turns
    are shared: never change one.
    """
    if chat is None:
        chat = parse(lines)
    turns: list[Turn] = []
    system: list[str] = []
    thinking_rows: list[tuple[int, int]] = []
    run: list[Part] = []  # the parts of the turn being gathered
    home: tuple[Message, int] | None = None  # where its first part comes from
    for msg in chat.messages:
        text, parts, rows = _message_view(lines, msg)
        if text:
            system.append(text)
        if rows:
            thinking_rows += rows
        for index, part in enumerate(parts):
            if run and run[0][0] != part[0]:
                turns.append(_turn_of(run, *home))
                run = []
            if not run:
                home = (msg, index)
            run.append(part)
    if run:
        turns.append(_turn_of(run, *home))
    return ChatDocument(
        front=read_front_matter(lines, chat),
        conversation=Conversation("\n\n".join(system) or None, turns),
        chat=chat,
        unanswered=unanswered_calls(chat),
        thinking_rows=thinking_rows,
    )
