"""Thinking blocks fold closed in the windows showing a chat (ui.fold_thinking), in
a real headless Neovim: from a saved chat, while a reply streams in from the fake
provider, after edits; nothing else folds, and other buffers keep their settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sidekick_tools.chat.conversation import read_chat

from tests.conftest import wait_for
from tests.fake_provider import ThreadedFakeProvider, reply, text, thinking
from tests.integration.chat_helpers import use_fake, wait_replies

pytestmark = pytest.mark.integration

CHAT = """\
USER: think first

ASSISTANT:

````thinking signature=c2lnbmF0dXJl
Let me see.
```thinking
a fence inside the thinking, shorter than its own
```
USER: a role marker inside the thinking is text
Done thinking.
````

The answer is 4:

```python
print(2 + 2)
```

```tool list_directory id=c1
{"path": "."}
```
```result id=c1 status=completed
```thinking
not folded: tool output
```

USER: look at this
```thinking
not folded: a user's message
```

ASSISTANT: again

```thinking redacted=ZW5jcnlwdGVk
```
"""


def rows_of(lines: list[str], prefix: str) -> list[int]:
    """1-based rows of the lines starting with `prefix`."""
    return [i + 1 for i, line in enumerate(lines) if line.startswith(prefix)]


def set_lines(editor, start: int, end: int, lines: list[str]) -> None:
    editor.lua(
        "local s, e, l = ...\nvim.api.nvim_buf_set_lines(0, s, e, false, l)", start, end, lines
    )


def folds(editor) -> list[tuple[int, int]]:
    """The closed folds of the current window, as (first, last) 1-based rows."""
    return [tuple(f) for f in editor.lua(FOLDS)]


FOLDS = """
local out, row, last = {}, 1, vim.api.nvim_buf_line_count(0)
while row <= last do
  local first = vim.fn.foldclosed(row)
  if first ~= -1 then
    local fend = vim.fn.foldclosedend(row)
    table.insert(out, { first, fend })
    row = fend + 1
  else
    row = row + 1
  end
end
return out
"""


def test_a_chats_thinking_blocks_are_closed_folds_and_nothing_else(editor):
    editor.setup()
    editor.open_chat(CHAT)
    lines = editor.lines()
    opener = lines.index("````thinking signature=c2lnbmF0dXJl") + 1
    closer = lines.index("````") + 1
    redacted = lines.index("```thinking redacted=ZW5jcnlwdGVk") + 1
    assert folds(editor) == [(opener, closer), (redacted, redacted + 1)]
    # the very blocks the host reads as thinking
    doc = read_chat(lines)
    assert [(a + 1, b + 1) for a, b in doc.thinking_rows] == folds(editor)
    # what the user sees folded: the block, never its signature
    text_ = editor.lua("return vim.fn.foldtextresult(...)", opener)
    assert "thinking" in text_ and "6 lines" in text_ and "c2ln" not in text_
    assert "redacted" in editor.lua("return vim.fn.foldtextresult(...)", redacted)
    # folds the user opened stay open when setup() runs again
    editor.nvim.command("normal! zR")
    editor.setup()
    assert folds(editor) == []
    editor.nvim.command("normal! zM")
    # the settings are the window's for this buffer only
    assert editor.lua("return vim.wo.foldmethod") == "expr"
    editor.nvim.command("enew")
    assert editor.lua("return vim.wo.foldmethod") == "manual"
    assert editor.lua("return vim.wo.foldexpr") == "0"


def test_folds_follow_edits(editor):
    editor.setup()
    editor.open_chat(CHAT)
    opener = editor.lines().index("````thinking signature=c2lnbmF0dXJl") + 1
    first = folds(editor)[0]
    # rows added above move the fold; the block's own rows stay in it
    editor.lua("vim.api.nvim_buf_set_lines(0, 0, 0, false, { 'SYSTEM: be brief', '' })")
    assert folds(editor)[0] == (first[0] + 2, first[1] + 2)
    # the closing fence made longer than its opener's closes it no less;
    # deleted, the block runs to the end of the chat
    closer = first[1] + 2
    set_lines(editor, closer - 1, closer, ["`````"])
    assert folds(editor)[0] == (opener + 2, closer)
    set_lines(editor, closer - 1, closer, [])
    last = editor.lua("return vim.api.nvim_buf_line_count(0)")
    assert folds(editor) == [(opener + 2, last)]
    editor.nvim.command("undo")
    assert folds(editor)[0] == (opener + 2, closer)


def test_fold_thinking_off_leaves_the_window_alone(editor):
    editor.setup(ui={"fold_thinking": False})
    editor.open_chat(CHAT)
    assert editor.lua("return vim.wo.foldmethod") == "manual"
    assert folds(editor) == []
    # turned on by setup(): the open chat folds; off again: the window's settings come back
    editor.setup()
    assert len(folds(editor)) == 2
    editor.setup(ui={"fold_thinking": False})
    assert editor.lua("return vim.wo.foldmethod") == "manual"
    assert folds(editor) == []


KEY = "fake-key-" + "f" * 24


@pytest.fixture
def fake() -> Iterator[Any]:
    with ThreadedFakeProvider(api_key=KEY) as server:
        yield server


def test_a_streamed_replys_thinking_folds_closed(editor, fake):
    fake.push(
        reply(
            thinking("first I consider\nthen I decide\nand then I check"),
            text("Decided."),
            chunk=3,
            tokens_per_second=200,
        )
    )
    use_fake(editor, fake, KEY, chat={"model": "fake/m", "thinking": 1024})
    editor.open_chat("USER: decide\n")
    # no thinking yet: the window keeps its own folding (a stream costs nothing)
    assert editor.lua("return vim.wo.foldmethod") == "manual"
    editor.nvim.command("SidekickSend")
    editor.wait_text("Decided.")
    # the folds come when the reply's region closes, after its last text is drawn
    wait_replies(editor, 1)
    lines = editor.lines()
    opener = rows_of(lines, "```thinking signature=")[0]
    closer = next(i + 1 for i in range(opener, len(lines)) if lines[i] == "```")
    assert lines[opener : closer - 1] == ["first I consider", "then I decide", "and then I check"]
    assert folds(editor) == [(opener, closer)]


# A thinking block's closing fence followed by a character the host's parser
# took for a blank and the fold did not (U+3000, with Python's `rstrip()`), or
# the other way (Lua's `%s` takes "\v" and "\f"): the fold ran on over the
# call below, hidden, and the text the user saw and ran was inside its result.
HIDDEN = """\
USER: please run the tests

ASSISTANT: I'll run the test suite.
````thinking
The user wants the tests run.
````{tail}
```tool run_terminal_command id=call_aaaaaa
{{"command": "touch canary; make test"}}
```
`````result id=call_aaaaaa status=failed exit=2
````
```tool run_terminal_command
{{"command": "make test"}}
```
`````
"""


@pytest.mark.parametrize(
    "tail", ["\u3000", "\xa0", "\x85", "\x1c", "\v", "\f", "\x00", "\r", " \t", "`"]
)
def test_a_fold_closes_where_the_host_closes_the_fence(editor, tail):
    from sidekick_tools.chat.parser import parse

    editor.setup()
    editor.open_chat(HIDDEN.format(tail=tail))
    lines = editor.lines()
    assert folds(editor) == [(a + 1, b + 1) for a, b in read_chat(lines).thinking_rows]
    calls = [c.start_row + 1 for c in parse(lines).calls]
    assert calls  # the host reads calls here
    for row in calls:  # and none of them is folded out of sight
        assert all(not (a <= row <= b) for a, b in folds(editor)), (row, folds(editor))


STALE = """\
USER: hi

ASSISTANT: ok

```thinking
real thought
```

``` `x`
`````thinking
````
```tool run_terminal_command id=x
{"command": "touch owned_fold"}
```
`````

done
"""


def test_an_edit_that_pairs_the_fences_below_anew_refolds_them(editor):
    """`:9s/ `x`//` makes line 9 open a code block that the 4-backtick line
    closes: the `thinking` line below is text, the tool block a call. Neovim
    evaluates folds again only near the edit: the old thinking fold stayed
    closed over the call. A fold the user opened stays open."""
    from sidekick_tools.chat.parser import parse

    editor.setup()
    editor.open_chat(STALE)
    assert folds(editor) == [(5, 7), (10, 15)]
    editor.nvim.command("normal! 5Gzo")  # the user opens the first
    editor.nvim.command("9s/ `x`//")
    lines = editor.lines()
    assert [c.start_row + 1 for c in parse(lines).calls] == [12]
    wait_for(lambda: folds(editor) == [])
    assert [(a + 1, b + 1) for a, b in read_chat(lines).thinking_rows] == [(5, 7)]
    editor.nvim.command("normal! zM")  # and what is a thinking block still folds
    assert folds(editor) == [(5, 7)]
