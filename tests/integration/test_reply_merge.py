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
        (["ASSISTANT: One.", "Two.", "Three pa"], False),  # cut: an undo of the last step
        (["ASSISTANT: One.", "Two.", "Thre par"], False),  # `x` in a word
        (["ASSISTANT: One.", "Two.", "Three rap"], True),  # the same letters, other text
    ]
    for ours, expected in cases:
        got = editor.lua("return require('sidekick_tools.reply_merge').adds_words(...)", BASE, ours)
        assert got is expected, ours


# Lua: the region of a reply driven by hand, as the host's edits arrive, with
# the user's changes between them (`user` runs after the edits before it)
DRIVE = """
local edits, user, final = ...
local region = require("sidekick_tools.reply_region")
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "USER: hi there", "", "ASSISTANT:", "", "USER: " })
region.open(buf, 7, 2)
for i, e in ipairs(edits) do
  if user[tostring(i)] then
    vim.cmd("let &undolevels = &undolevels") -- what ends an undo step as typing does
    vim.cmd(user[tostring(i)])
    vim.cmd("let &undolevels = &undolevels")
  end
  region.edit(buf, 7, e[1], e[2], e[3])
end
region.close(buf, 7, final)
return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
"""


@pytest.mark.parametrize("user", ["normal! u", "normal! 4G$x"])
def test_characters_taken_from_the_row_being_written_leave_one_reply(editor, user):
    """`u` after a change of the user's takes back the reply's last step, and
    `x` in the row it writes takes a letter: no text of the user's is there,
    and the reply is written over it, once (it was written again below, the
    cut copy left above)."""
    editor.lua("vim.bo.undolevels = 1000")
    edits = [
        [[0, 10, 0, 10, [" One."]], "ASSISTANT:", 1],
        [[0, 15, 0, 15, ["", "Two long para"]], "ASSISTANT: One.", 1],
        [[1, 13, 1, 13, ["graph goes"]], "Two long para", 2],
        [[1, 23, 1, 23, [" on."]], "Two long paragraph goes", 2],
    ]
    # a change of the user's in their message before the reply's third edit,
    # so that `u` after it takes back the reply's step, not the user's
    steps = {"3": "call cursor(1, 14) | normal! x", "4": user}
    lines = editor.lua(DRIVE, edits, steps, ["ASSISTANT: One.", "Two long paragraph goes on."])
    assert sum(line.startswith("ASSISTANT:") for line in lines) == 1, lines
    assert "Two long paragraph goes on." in lines


def test_an_edit_over_rows_the_user_changed_is_not_applied_over_them(editor):
    """A fence that grows (a thinking block whose text holds ```) is one edit
    over several rows: applied, it wrote over the user's change in a row
    between; it waits for the reply's end, and the change stays."""
    edits = [
        [
            [0, 10, 0, 10, [" Text.", "", "```thinking", "step one", "step tw", "```"]],
            "ASSISTANT:",
            1,
        ],
        [[2, 3, 5, 3, ["`thinking", "step one", "step two ```", "````"]], "```thinking", 6],
    ]
    final = ["ASSISTANT: Text.", "", "````thinking", "step one", "step two ```", "````"]
    lines = editor.lua(DRIVE, edits, {"2": "call setline(6, 'step one (MINE)')"}, final)
    assert lines[2:8] == [
        "ASSISTANT: Text.",
        "",
        "````thinking",
        "step one (MINE)",
        "step two ```",
        "````",
    ]
