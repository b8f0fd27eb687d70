"""Parse a chat buffer (``*.sidekick.md``) into messages, tool calls and results.

Pure Python, no Neovim. The format is fixed by DESIGN.md §4:

* a message starts with ``SYSTEM:``, ``USER:`` or ``ASSISTANT:`` at column 0;
* a fenced block opens with a run of at least three backticks at column 0 followed
  by an info string (which, as in CommonMark, may not contain a backtick) and
  closes with a line made only of at least as many backticks (trailing
  whitespace allowed); role markers and headers inside any fenced block are text;
* a tool call is a fenced block with info ``tool NAME [id=ID] [key=value ...]``
  inside an ASSISTANT message, its body a JSON object of parameters;
* its result is the fenced block ``result id=ID status=STATUS [key=value ...]``
  that follows it with nothing but blank lines in between and carries the same id.

``parse`` is one linear pass over the lines; only tool and result bodies are
joined into strings, and only tool bodies are JSON-decoded (:mod:`.call_body`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from .call_body import read_params

ROLES = ("SYSTEM", "USER", "ASSISTANT")

_ROLE_BY_INITIAL = {role[0]: role for role in ROLES}
MARKERS = tuple(f"{role}:" for role in ROLES)  # what starts a message, at column 0
_FENCE = "```"
# A line (preceded by its "\n") that may open or close a fence or start a message.
_EVENT = re.compile(r"\n(?:```|SYSTEM:|USER:|ASSISTANT:)")
_NONSPACE = re.compile(r"\S")
# how a call's error begins when the block itself is broken (ToolCall.structural)
UNCLOSED_FENCE = "Unclosed fence"
DUPLICATE_ID = "Duplicate id"


@dataclass
class ResultBlock:
    call_id: str | None
    status: str | None  # raw status= value (may be invalid)
    fields: dict[str, str]  # every key=value of the info string except id/status
    start_row: int  # 0-based opening fence row
    end_row: int  # 0-based closing fence row (last row of buffer if unclosed)
    body: str
    closed: bool


@dataclass
class ToolCall:
    tool: str  # "" when the info string names none
    call_id: str | None  # None when the header has no id=
    start_row: int  # 0-based row of the opening fence ("header")
    end_row: int  # closing fence row (or last row of buffer when unclosed)
    fence: str  # the opening backtick run, e.g. "```"
    body: str  # text between the fences, "\n"-joined, CR stripped
    closed: bool
    message_index: int  # index in Chat.messages
    params: dict | None  # the JSON object, when it parses to an object
    error: str | None  # first problem found or None
    result: ResultBlock | None = None  # the result block that follows it, if any

    @property
    def last_row(self) -> int:
        """Last row belonging to the call: the result's end row if any, else ``end_row``."""
        return self.result.end_row if self.result is not None else self.end_row

    @property
    def pending(self) -> bool:
        """True while the call has no result block."""
        return self.result is None

    @property
    def structural(self) -> bool:
        """The block itself is broken (a fence never closed, an id an earlier
        block has): it cannot be told apart from another, so no result can be
        written for it; only its text, fixed, changes that."""
        return (self.error or "").startswith((UNCLOSED_FENCE, DUPLICATE_ID))

    @property
    def repeats_an_id(self) -> bool:
        """An earlier block has this block's id (a pasted copy, a reply reusing it)."""
        return (self.error or "").startswith(DUPLICATE_ID)


@dataclass
class Message:
    role: str  # "SYSTEM" | "USER" | "ASSISTANT"
    start_row: int
    end_row: int  # inclusive
    calls: list[ToolCall] = field(default_factory=list)
    #: Views of this message computed once (:func:`~.conversation.read_chat`'s blocks).
    #: A message object never changes: :func:`reparse` keeps the ones before an edit
    #: and makes new ones from there on.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Chat:
    messages: list[Message]
    calls: list[ToolCall]  # in buffer order
    _starts: list[int] = field(default_factory=list, init=False, repr=False, compare=False)

    def call_at(self, row: int) -> ToolCall | None:
        """The call whose header..last_row range contains ``row`` (0-based), if any."""
        calls = self.calls
        if len(self._starts) != len(calls):
            self._starts = [c.start_row for c in calls]
        i = bisect_right(self._starts, row) - 1
        if i >= 0:
            call = calls[i]
            if call.start_row <= row <= call.last_row:
                return call
        return None

    def last_assistant(self) -> Message | None:
        """The last ASSISTANT message of the buffer, if any."""
        for message in reversed(self.messages):
            if message.role == "ASSISTANT":
                return message
        return None

    def unanswered(self) -> list[ToolCall]:
        """The calls of the last assistant message that have no result yet
        (a running result counts as one): completion notices wait for them."""
        last = self.last_assistant()
        return [c for c in (last.calls if last else []) if c.result is None]

    def call_by_id(self, call_id: str) -> ToolCall | None:
        """The first call whose header carries ``id=call_id``."""
        for call in self.calls:
            if call.call_id == call_id:
                return call
        return None


def _key_values(tokens: list[str]) -> dict[str, str]:
    """``key=value`` tokens as a dict (later keys win); tokens without ``=`` are ignored."""
    out: dict[str, str] = {}
    for token in tokens:
        key, eq, value = token.partition("=")
        if eq and key:
            out[key] = value
    return out


def _join(lines: list[str], start: int, stop: int) -> str:
    """``lines[start:stop]`` joined with newlines, a trailing CR stripped from each."""
    chunk = lines[start:stop]
    text = "\n".join(chunk)
    if "\r" in text:
        text = "\n".join(s[:-1] if s.endswith("\r") else s for s in chunk)
    return text


def _new_call(
    lines: list[str],
    tokens: list[str],
    fence_len: int,
    start: int,
    end: int,
    closed: bool,
    message_index: int,
    first_id_row: dict[str, int],
) -> ToolCall:
    name = tokens[1] if len(tokens) > 1 and "=" not in tokens[1] else ""
    call_id = _key_values(tokens[1:]).get("id") or None
    call = ToolCall(
        tool=name,
        call_id=call_id,
        start_row=start,
        end_row=end,
        fence="`" * fence_len,
        body=_join(lines, start + 1, end if closed else end + 1),
        closed=closed,
        message_index=message_index,
        params=None,
        error=None,
    )
    error = None
    if not closed:
        error = (
            f"{UNCLOSED_FENCE}: add a line {call.fence} to end the tool call "
            f"that opens at line {start + 1}"
        )
    elif not name:
        error = "Missing tool name: write the header as ```tool NAME"
    if call_id is not None:
        seen = first_id_row.get(call_id)
        if seen is None:
            first_id_row[call_id] = start
        elif error is None:
            error = (
                f"{DUPLICATE_ID} {call_id}: already used at line {seen + 1}; "
                f"give this call another id, or remove its id= to have one assigned"
            )
    call.params, body_error = read_params(call.body)  # always: it gives params
    call.error = error or body_error
    return call


def _new_result(
    lines: list[str], fields: dict[str, str], start: int, end: int, closed: bool
) -> ResultBlock:
    call_id = fields.pop("id", None) or None
    status = fields.pop("status", None)
    return ResultBlock(
        call_id=call_id,
        status=status,
        fields=fields,
        start_row=start,
        end_row=end,
        body=_join(lines, start + 1, end if closed else end + 1),
        closed=closed,
    )


# What may follow a closing fence's backticks: spaces and tabs (CommonMark), a
# CR (a CRLF file read as Unix), a NUL (Neovim's "\n" in a line, read here as
# a space or kept as "\x00"). Nothing more: the Lua side (folds, the reply
# region) closes a fence on exactly these, and a closer the two read apart
# (`rstrip()` took U+3000 for a blank) let a fold hide a call that then ran.
FENCE_BLANKS = " \t\r\n\x00"


def is_closer(line: str, fence_len: int) -> bool:
    """Does `line` close a fence of `fence_len` backticks?"""
    return line.startswith("`" * fence_len) and not line.lstrip("`").strip(FENCE_BLANKS)


def opener(line: str) -> int:
    """The backticks of the fence `line` opens (0: none): three or more at
    column 0, an info string free of backticks (CommonMark)."""
    if not line.startswith(_FENCE):
        return 0
    info = line.lstrip("`")
    return 0 if "`" in info else len(line) - len(info)


def find_closer(text: str, fence_len: int, start: int) -> tuple[int, int]:
    """Where the fence of ``fence_len`` backticks closes in ``text`` (rows joined,
    each after its "\n"), looking from offset ``start``: the offsets of the "\n"
    that starts the closing line and of the one that ends it (``len(text)`` at the
    end), or (-1, -1) when it never closes. A closing line is at least as many
    backticks and nothing else but trailing FENCE_BLANKS."""
    closer = "\n" + "`" * fence_len
    find = text.find
    while True:
        j = find(closer, start)
        if j == -1:
            return -1, -1
        eol = find("\n", j + 1)
        if eol == -1:
            eol = len(text)
        if not text[j + 1 : eol].lstrip("`").strip(FENCE_BLANKS):
            return j, eol
        start = j + 1


def parse(lines: list[str]) -> Chat:
    """Parse buffer lines (0-based rows) into a :class:`Chat`.

    The lines are joined once into a text that C-level searches scan: for the next
    line that opens a fence or starts a message, then, inside a fence, directly for
    its closing line. Python code runs only for those lines.
    """
    return _parse(lines, 0, [], [])


def reparse(lines: list[str], previous: Chat, first_changed: int) -> Chat:
    """``parse(lines)``, for lines that differ from those ``previous`` was parsed
    from only at row ``first_changed`` and after.

    A message marker is outside every fence, so the parse state at one depends on
    nothing before it: the messages that start before the edit's message are kept
    (the same objects, with their memos) and the scan starts again at that message.
    Typing at the end of a 100,000-line chat re-reads only its last message.
    """
    kept = previous.messages
    starts = [m.start_row for m in kept]
    k = bisect_right(starts, first_changed - 1) - 1
    if (
        k + 1 < len(kept)
        and starts[k + 1] == first_changed < len(lines)
        and lines[first_changed].startswith(MARKERS)
    ):
        k += 1  # the edited line is still a marker: the message before it ends as before
    if k < 0:  # the edit is before the first message
        return parse(lines)
    messages = kept[:k]
    calls = [call for message in messages for call in message.calls]
    return _parse(lines, kept[k].start_row, messages, calls)


def _parse(lines: list[str], first: int, messages: list[Message], calls: list[ToolCall]) -> Chat:
    """The scan from row ``first`` (0, or a message's marker), after ``messages``
    (ending just before it) with their ``calls``."""
    last = len(lines) - 1
    first_id_row: dict[str, int] = {}
    for call in calls:
        if call.call_id is not None:
            first_id_row.setdefault(call.call_id, call.start_row)

    # Row r starts right after the (r - first)-th "\n" of `text` (0-based).
    rest = lines[first:] if first else lines
    text = "\n" + "\n".join(rest)
    if text.count("\n") != len(rest):  # a line holds "\n" (Neovim's NUL): hide it
        text = "\n" + "\n".join(s.replace("\n", " ") for s in rest)
    count = text.count
    search = _EVENT.search
    nonspace = _NONSPACE.search

    msg: Message | None = None
    assistant = False  # the current message is an ASSISTANT message
    candidate: ToolCall | None = None  # closed call that may still get its result
    candidate_end = 0  # offset of the "\n" that ends the candidate's closing fence

    row = first
    row_nl = 0  # offset of the "\n" that starts `row`
    pos = 0
    while True:
        m = search(text, pos)
        if m is None:
            break
        nl = m.start()
        row += count("\n", row_nl, nl)
        row_nl = nl
        line = lines[row]
        if candidate is not None and nonspace(text, candidate_end, nl):
            candidate = None

        if line.startswith(_FENCE):
            info = line.lstrip("`")
            if "`" in info:  # CommonMark: a backtick fence's info has no backtick
                candidate = None
                pos = nl + 1
                continue
            fence_len = len(line) - len(info)
            info = info.strip()
            kind = 0  # 0: other block, 1: tool call, 2: result of `candidate`
            tokens: list[str] = []
            fields: dict[str, str] = {}
            if info.startswith("tool") and assistant:
                tokens = info.split()
                if tokens[0] == "tool":
                    kind = 1
            elif info.startswith("result") and candidate is not None:
                tokens = info.split()
                if tokens[0] == "result":
                    fields = _key_values(tokens[1:])
                    if (fields.get("id") or None) == candidate.call_id:
                        kind = 2
            start = row

            j, eol = find_closer(text, fence_len, nl + 1)
            if j == -1:  # unclosed: the block runs to the end of the buffer
                if kind == 1:
                    assert msg is not None
                    index = len(messages) - 1
                    call = _new_call(
                        lines, tokens, fence_len, start, last, False, index, first_id_row
                    )
                    calls.append(call)
                    msg.calls.append(call)
                elif kind == 2:
                    assert candidate is not None
                    candidate.result = _new_result(lines, fields, start, last, False)
                break

            row += count("\n", row_nl, j)
            row_nl = j
            target, candidate = candidate, None
            if kind == 1:
                assert msg is not None
                call = _new_call(
                    lines, tokens, fence_len, start, row, True, len(messages) - 1, first_id_row
                )
                calls.append(call)
                msg.calls.append(call)
                candidate = call
                candidate_end = eol
            elif kind == 2:
                assert target is not None
                target.result = _new_result(lines, fields, start, row, True)
            pos = eol
            continue

        # A role marker (the only other kind of event).
        role = _ROLE_BY_INITIAL[line[0]]
        if msg is not None:
            msg.end_row = row - 1
        msg = Message(role=role, start_row=row, end_row=row, calls=[])
        messages.append(msg)
        assistant = role == "ASSISTANT"
        candidate = None
        pos = nl + 1

    if msg is not None:
        msg.end_row = last
    return Chat(messages=messages, calls=calls)
