"""reply_merge.lua: the user's changes to a streaming reply's rows and the rest
of the reply, merged when it ends (the chat-loop tests drive it whole)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

BASE = ["ASSISTANT: One.", "Two.", "Three par"]
THEIRS = ["ASSISTANT: One.", "Two.", "Three part.", "Four."]

CASES = {
    "nothing changed": (BASE, THEIRS),
    "text typed on a written row": (
        ["ASSISTANT: One.", "Two. Mine", "Three par"],
        ["ASSISTANT: One.", "Two. Mine", "Three part.", "Four."],
    ),
    "a row of the user's between two": (
        ["ASSISTANT: One.", "Mine", "Two.", "Three par"],
        ["ASSISTANT: One.", "Mine", "Two.", "Three part.", "Four."],
    ),
    "the ASSISTANT: line changed": (
        ["SSISTANT: One.", "Two.", "Three par"],
        ["SSISTANT: One.", "Two.", "Three part.", "Four."],
    ),
    # the formatter's change to the row the reply went on writing: the reply's
    "a trailing blank stripped from the row being written": (
        ["ASSISTANT: One.", "Two.", "Three par  "],
        THEIRS,
    ),
    "a row the reply went on writing changed": (["ASSISTANT: One.", "Two.", "Three parX"], None),
    "a row taken away": (["ASSISTANT: One.", "Three par"], None),
    "all but the first row taken away (an undo)": (["ASSISTANT: One."], None),
    "a row typed where the reply goes on": (BASE + ["Mine"], None),
    "a NUL in a changed row": (["ASSISTANT: One.", "Two.\n", "Three par"], None),
}


def test_three_way_keeps_the_users_changes_or_says_it_cannot(editor):
    for name, (ours, merged) in CASES.items():
        got = editor.lua(
            "return require('sidekick_tools.reply_merge').three_way(...) or vim.NIL",
            BASE,
            ours,
            THEIRS,
        )
        assert got == merged, name


def test_changes_make_one_list_into_the_other_on_its_rows(editor):
    pairs = [
        (["a", "b", "c"], ["a", "B", "c", "d"]),
        (["a", "b", "c"], ["x", "a", "c"]),
        (["a"], ["a"]),
        (["a\n", "b"], ["c"]),  # no line diff: every row replaced
    ]
    for a, b in pairs:
        # the changes applied bottom up to `a`, as reply_region applies them
        got = editor.lua(
            "local a, b = ...\n"
            "local rows = vim.deepcopy(a)\n"
            "local changes = require('sidekick_tools.reply_merge').changes(a, b)\n"
            "for i = #changes, 1, -1 do\n"
            "  local c = changes[i]\n"
            "  for _ = c.from + 1, c.to do table.remove(rows, c.from + 1) end\n"
            "  for j, line in ipairs(c.rows) do table.insert(rows, c.from + j, line) end\n"
            "end\n"
            "return { rows, #changes }",
            a,
            b,
        )
        assert got[0] == b
        assert (got[1] == 0) == (a == b)


def test_apply_does_to_the_rows_what_set_text_does_to_the_buffer(editor):
    edits = [
        [0, 11, 0, 11, ["One."]],  # text at the end of the last row
        [0, 15, 0, 15, ["", "Two and"]],  # a new row
        [1, 7, 1, 7, [" three", "", "Four"]],  # rows and an empty one
        [1, 0, 2, 0, ["Second"]],  # a middle row rewritten, across rows
        [0, 0, 0, 9, [""]],  # text taken away
    ]
    got = editor.lua(
        "local merge = require('sidekick_tools.reply_merge')\n"
        "local rows = { 'ASSISTANT: ' }\n"
        "vim.api.nvim_buf_set_lines(0, 0, -1, false, rows)\n"
        "for _, e in ipairs(...) do\n"
        "  merge.apply(rows, e)\n"
        "  vim.api.nvim_buf_set_text(0, e[1], e[2], e[3], e[4], e[5])\n"
        "end\n"
        "return { rows, vim.api.nvim_buf_get_lines(0, 0, -1, false) }",
        edits,
    )
    assert got[0] == got[1]
    assert got[0] == [": One.", "Second", "Four"]


def test_adds_words_tells_the_users_words_from_what_writing_over_them_loses_nothing(editor):
    cases = [
        (["ASSISTANT: One.", "Two.", "Three parX"], True),
        (["ASSISTANT: One.", "Two. Mine", "Three par"], True),
        (["ASSISTANT: One.", "Two.\n", "Three par"], True),  # not diffed: kept
        (["ASSISTANT: One.", "Two.", "Three"], False),  # a word deleted
        (["ASSISTANT: One.", "Three par"], False),  # a row taken away
        (["ASSISTANT: One. Two.", "Three par "], False),  # joined, blanks changed
    ]
    for ours, expected in cases:
        got = editor.lua("return require('sidekick_tools.reply_merge').adds_words(...)", BASE, ours)
        assert got is expected, ours
