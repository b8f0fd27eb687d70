"""Split a command line into words the way /bin/sh would, or refuse it.

Only the quoting part of the shell language is understood: words separated by
spaces and tabs, single quotes, double quotes and backslashes. Everything that
makes the shell do more than run one program with literal arguments is refused:
separators and pipes, redirections, substitutions and expansions (their
characters even when quoted), unquoted globs,
brace and tilde expansion, comments, ``!`` and variable assignments, every
character that is not printable (controls, non-breaking and other Unicode
spaces, zero-width and bidirectional marks) and every character drawn like an
ASCII one (fullwidth forms, Unicode dashes, slashes and quotes), so nothing can
look like a space, an option or a path it is not, or hide part of the command.

The words returned are exactly the argv the shell would build. An approved
command is re-quoted from them (`shlex.quote`) before it runs, so a difference
between this parser and a real shell can only refuse, never widen, a command.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Shell control and expansion characters: refused anywhere, quoted or not, so a
# command that shows one never runs unasked (whatever a reader takes it for).
_ANYWHERE = {
    ";": "a command separator (;)",
    "&": "a background or && operator",
    "|": "a pipe",
    "<": "a redirection (<)",
    ">": "a redirection (>)",
    "`": "command substitution (`)",
    "$": "an expansion ($)",
}
# Unquoted, each of these makes the shell do something other than pass a literal.
_UNQUOTED = {
    "(": "a subshell or function",
    ")": "a subshell or function",
    "*": "a glob (*)",
    "?": "a glob (?)",
    "[": "a glob ([)",
    "{": "brace expansion ({)",
    "}": "brace expansion (})",
    "!": "a ! (negation or history)",
}
_WORD_START = {"#": "a comment (#)", "~": "tilde expansion (~)"}
# Characters drawn like the ASCII ones the shell and option parsers act on:
# dashes and minus signs, slashes, quotes, dots, stars, bars. (Compatibility
# forms such as fullwidth letters are caught by NFKC in `_look_alike`.)
_LOOK_ALIKES = frozenset(
    "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58\u2e3a\u2e3b\u2044\u2215"
    "\u29f8\u2571\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u2032\u2033\u2035"
    "\u2027\u2217\u204e\u2731\u01c0\u2223\u2758\u02bc\u02b9\u02ba\uff40"
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_DOUBLE_QUOTE_ESCAPES = '"\\'  # (\$ and \` too, but $ and ` are refused anywhere)


class Refused(ValueError):
    """The command is not a plain program call; the message says why."""


@dataclass(frozen=True)
class Word:
    text: str
    plain: bool  # written with no quote or backslash at all


def split(command: str) -> list[Word]:
    """The words of ``command``; raises `Refused` for anything but a plain call."""
    for ch in command:
        if ch != "\t" and not ch.isprintable():
            raise Refused(f"it contains the character U+{ord(ch):04X}, which is not plain text")
        if _look_alike(ch):
            raise Refused(f"it contains U+{ord(ch):04X}, which looks like an ASCII character")
        if ch in _ANYWHERE:
            raise Refused(f"it contains {_ANYWHERE[ch]}")
    words: list[Word] = []
    i, n = 0, len(command)
    while True:
        while i < n and command[i] in " \t":
            i += 1
        if i >= n:
            break
        i = _word(command, i, words)
    if not words:
        raise Refused("the command is empty")
    first = words[0]
    if first.plain and _ASSIGNMENT.match(first.text):
        raise Refused("it starts with a variable assignment")
    return words


def _word(command: str, i: int, words: list[Word]) -> int:
    """Read one word starting at ``i``; append it; return the index after it."""
    n = len(command)
    text: list[str] = []
    plain = True
    if command[i] in _WORD_START:
        raise Refused(f"a word starts with {_WORD_START[command[i]]}")
    while i < n and command[i] not in " \t":
        ch = command[i]
        if ch == "'":
            end = command.find("'", i + 1)
            if end < 0:
                raise Refused("a single quote is not closed")
            text.append(command[i + 1 : end])
            plain, i = False, end + 1
        elif ch == '"':
            i = _double_quoted(command, i + 1, text)
            plain = False
        elif ch == "\\":
            if i + 1 >= n:
                raise Refused("it ends with a backslash")
            text.append(command[i + 1])
            plain, i = False, i + 2
        elif ch in _UNQUOTED:
            raise Refused(f"it contains {_UNQUOTED[ch]}")
        else:
            text.append(ch)
            i += 1
    words.append(Word("".join(text), plain))
    return i


def _double_quoted(command: str, i: int, text: list[str]) -> int:
    n = len(command)
    while i < n:
        ch = command[i]
        if ch == '"':
            return i + 1
        if ch == "\\" and i + 1 < n and command[i + 1] in _DOUBLE_QUOTE_ESCAPES:
            text.append(command[i + 1])
            i += 2
            continue
        text.append(ch)
        i += 1
    raise Refused("a double quote is not closed")


def _look_alike(ch: str) -> bool:
    if ch < "\x80":
        return False
    if ch in _LOOK_ALIKES:
        return True
    folded = unicodedata.normalize("NFKC", ch)
    return folded != ch and folded.isascii()
