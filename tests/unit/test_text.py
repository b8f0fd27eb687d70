"""The one cleaner of process output (text.py)."""

from __future__ import annotations

import pytest
from sidekick_tools.text import (
    after_cut,
    before_cut,
    clean,
    for_buffer,
    is_binary,
    normalize_newlines,
    strip_ansi,
)


@pytest.mark.parametrize(
    "raw,want",
    [
        ("\x1b[31mred\x1b[0m plain", "red plain"),
        ("\x9b31mred", "red"),  # 8-bit CSI
        ("\x1b]0;title\x07after", "after"),  # OSC ended by BEL
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ST
        ("\x1b]never ended\nnext line", "\nnext line"),  # unterminated: to end of line
        ("a\x1b(Bb", "ab"),  # charset designation
        ("\x1bPq#0;2;0\x1b\\z", "z"),  # DCS
        ("\x1b7saved\x1b8", "saved"),
        ("trailing lone\x1b", "trailing lone"),
        ("no escapes at all", "no escapes at all"),
    ],
)
def test_strip_ansi(raw, want):
    assert strip_ansi(raw) == want


def test_carriage_returns_keep_what_a_terminal_shows_last():
    assert normalize_newlines("a\r\nb\r\n") == "a\nb\n"
    assert normalize_newlines("10%\r50%\r100%\ndone") == "100%\ndone"
    # a bar redrawn then left with a final CR still shows its last state
    assert normalize_newlines("bar 5%\rbar 70%\r") == "bar 70%"
    assert clean("\x1b[32m5%\x1b[0m\r\x1b[32m9%\x1b[0m\n") == "9%\n"


def test_for_buffer():
    assert for_buffer(b"") == ""
    assert for_buffer(b"ok\x07 \x1b[1mbold\x1b[0m\ttab\n") == "ok bold\ttab\n"
    assert for_buffer(b"caf\xc3\xa9 \xff") == "caf\u00e9 \ufffd"
    assert for_buffer(b"\x00\x01\x02binary") == "[binary output: 9 bytes not shown]"
    assert is_binary(bytes(range(1, 32)) * 10) and not is_binary(b"text\n" * 100)


def test_json_from_outside_has_no_lone_surrogates():
    """Half a surrogate pair, escaped, decodes to a str no UTF-8 carries (to Neovim,
    a buffer, a file): it becomes U+FFFD; a whole pair stays the character it is."""
    from sidekick_tools.chat.call_body import read_params
    from sidekick_tools.text import loads_json

    value = loads_json(r'{"a\udc00": ["x\ud800y", {"b": "\ud83d\ude00"}], "n": 1}')
    assert value == {"a\ufffd": ["x\ufffdy", {"b": "\U0001f600"}], "n": 1}
    nested = loads_json("[" * 900 + r'"\ud800"' + "]" * 900)  # walked without recursion
    for _ in range(900):
        nested = nested[0]
    assert nested == "\ufffd"
    params, problem = read_params(r'{"command": "echo \ud800"}')
    assert problem is None and params == {"command": "echo \ufffd"}


def test_a_cut_takes_the_word_it_went_through():
    assert after_cut("03-Q7wER rest of it") == " rest of it"
    assert after_cut(b"03-Q7wER\nrest") == b"\nrest"
    assert before_cut("start sk-ant-ap") == "start "
    assert before_cut(b"start sk-ant-ap") == b"start "
    assert after_cut("") == before_cut("") == ""
    # at most 4 KiB of one word
    assert after_cut("x" * 5000) == "x" * 904
    assert before_cut("y" * 5000) == "y" * 904
