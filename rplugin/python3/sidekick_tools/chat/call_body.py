"""A tool call's body: the JSON object of its parameters, and the limits that
keep a hostile body the call's own problem (DESIGN §4, §12).

Pure Python, no Neovim.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

from ..text import DuplicateKey, loads_json

#: Tool call bodies larger than this (UTF-8 bytes) are refused without decoding.
MAX_BODY_BYTES = 1024 * 1024

# Arrays and objects nested deeper than this are refused before decoding: the
# decoder (and every consumer after it) recurses once per level, and a body
# like [[[[...]]]] must be that call's problem, not the whole chat's.
MAX_JSON_DEPTH = 64
# A string runs to its closing quote, or to the end of the text when it has
# none (then it is no JSON, which the decoder says): were an unclosed string
# no string, each quote in it (`\"`) would start a scan to the end again, a
# call body of 80 KB holding the host 30 s.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_NO_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON `text` (strings skipped); at or
    below `MAX_JSON_DEPTH`, possibly an upper bound (the count of brackets)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return text.count("[") + text.count("{")  # an upper bound, cheap
    # strings and all but brackets dropped, then the depth is the highest running
    # sum of the steps, all at C speed (a loop over each bracket's match held an
    # MCP server 11 s on a line of 8 MB)
    if '"' in text:
        text = _JSON_STRING.sub("", text)
    steps = map(_STEP.__getitem__, _NO_BRACKETS.sub("", text))
    return max(0, max(accumulate(steps), default=0))


_JSON_TYPES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def read_params(body: str) -> tuple[dict | None, str | None]:
    """A tool call's body decoded: (its parameters, None), or (None, the
    problem in words for the chat). Where a problem is, is said within the
    body: the block moves as results are written above it, and the problem
    is written into its result."""
    size = len(body)
    if size > MAX_BODY_BYTES // 4:  # only then can the UTF-8 size exceed the limit
        size = len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        return None, (
            f"Tool call body too large: {size} bytes, the limit is {MAX_BODY_BYTES} bytes "
            f"(1 MiB); pass large content by file path instead"
        )
    if not body.strip():
        return (
            None,
            'Empty tool call body: write the parameters as a JSON object, e.g. {"key": "value"}',
        )
    depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        return None, (
            f"Tool call body nested too deeply: {depth} levels of arrays and objects, "
            f"the limit is {MAX_JSON_DEPTH}"
        )
    try:
        value = loads_json(body, unique=True)
    except DuplicateKey as exc:
        return None, (
            f"Malformed JSON in tool call body: the key {json.dumps(exc.key)} is "
            "written twice; write each key once"
        )
    except RecursionError:  # json_depth bounds it; never let one call break the chat
        return None, f"Tool call body nested too deeply (the limit is {MAX_JSON_DEPTH} levels)"
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            return None, (
                f"Malformed JSON in tool call body: {exc.msg}: line {exc.lineno}, "
                f"column {exc.colno} of the block"
            )
        return None, f"Malformed JSON in tool call body: {exc}"
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), type(value).__name__)
        return None, (
            f"Tool call body must be a JSON object of parameters, not {kind}: "
            f'write it as {{"name": value, ...}}'
        )
    return value, None
