"""reparse: after an edit, parsing again from the edited message gives exactly
what a whole parse gives, and keeps the messages before it (with their memos)."""

from __future__ import annotations

import random

import pytest
from sidekick_tools.buffers import BufferMirror
from sidekick_tools.chat.conversation import read_chat
from sidekick_tools.chat.parser import parse, reparse

# Lines that move the parser's state: markers, fences of several lengths, tool
# and result headers (ids that repeat, so duplicates are found across messages),
# bodies, text that looks like a marker inside a fence, blank lines.
VOCABULARY = [
    "USER: hello",
    "USER:",
    "ASSISTANT: sure",
    "ASSISTANT:",
    "SYSTEM: be brief",
    "```tool terminal id=a1",
    "```tool terminal id=a2",
    "```tool read_file",
    "````tool edit_file id=a1",
    "```result id=a1 status=completed exit=0",
    "```result id=a2 status=failed",
    "```result status=completed",
    "```thinking signature=c2ln",
    "```sidekick error",
    "```python",
    "```",
    "````",
    "``` not `a` fence",
    '{"command": "ls"}',
    '{"path": "README.md"}',
    "[1, 2]",
    "{broken",
    "plain text",
    "USER: inside a fence this is text",
    "",
    "",
]


def random_lines(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(VOCABULARY) for _ in range(n)]


def edit(rng: random.Random, lines: list[str]) -> tuple[list[str], int]:
    """One random nvim_buf_set_lines-like edit: (new lines, first row changed)."""
    first = rng.randrange(len(lines) + 1)
    last = min(len(lines), first + rng.randrange(4))
    return lines[:first] + random_lines(rng, rng.randrange(4)) + lines[last:], first


@pytest.mark.parametrize("seed", range(40))
def test_reparse_equals_a_whole_parse(seed: int) -> None:
    rng = random.Random(seed)
    lines = random_lines(rng, rng.randrange(1, 80))
    chat = parse(lines)
    for _ in range(30):
        lines, first = edit(rng, lines)
        chat = reparse(lines, chat, first)
        assert chat == parse(lines), (seed, first)


def test_messages_before_the_edit_are_kept_with_their_memo() -> None:
    lines = [
        "USER: one",
        "ASSISTANT: running",
        "```tool terminal id=t1",
        '{"command": "ls"}',
        "```",
        "",
        "```result id=t1 status=completed exit=0",
        "a b",
        "```",
        "USER: two",
    ]
    before = parse(lines)
    read_chat(lines, before)  # fills each message's memo
    lines = [*lines[:-1], "USER: two, edited", "ASSISTANT: fine"]
    after = reparse(lines, before, 9)
    assert after.messages[0] is before.messages[0]
    assert after.messages[1] is before.messages[1]
    assert after.messages[1].memo  # the blocks read before are reused
    assert after.messages[2] is not before.messages[2]
    assert [m.role for m in after.messages] == ["USER", "ASSISTANT", "USER", "ASSISTANT"]
    assert read_chat(lines, after) == read_chat(lines)


def test_an_edit_that_opens_a_fence_swallows_the_messages_after_it() -> None:
    lines = ["USER: a", "ASSISTANT: b", "USER: c", "ASSISTANT: d"]
    chat = parse(lines)
    lines[1] = "```"  # an unclosed fence: the rest is its text
    chat = reparse(lines, chat, 1)
    assert [m.role for m in chat.messages] == ["USER"]
    assert chat == parse(lines)


def test_an_edit_before_the_first_message_parses_it_all() -> None:
    lines = ["---", "model: x/y", "---", "USER: a"]
    chat = parse(lines)
    lines.insert(0, "```")
    assert reparse(lines, chat, 0) == parse(lines)
    assert parse(lines).messages == []


@pytest.mark.parametrize("seed", range(10))
def test_the_mirror_parses_what_its_line_events_made(seed: int) -> None:
    """Line events (several between two looks, some before and some after the
    first edit) leave the mirror's chat equal to a whole parse of its lines."""
    rng = random.Random(1000 + seed)
    lines = random_lines(rng, 60)
    mirror = BufferMirror(1, "chat.sidekick.md", list(lines), 1)
    mirror.chat()
    tick = 1
    for _ in range(40):
        for _ in range(rng.randrange(1, 4)):
            first = rng.randrange(len(mirror.lines) + 1)
            last = min(len(mirror.lines), first + rng.randrange(3))
            tick += 1
            mirror.on_lines(tick, first, last, random_lines(rng, rng.randrange(3)))
        assert mirror.chat() == parse(mirror.lines)
        docs = read_chat(mirror.lines, mirror.chat()), read_chat(mirror.lines)
        assert docs[0] == docs[1]
