"""A regex filter over a task's new output, that cannot block the host.

The pattern comes from the model (`task_output`'s `filter`), and Python's
`re` can take exponential time (`^(a+)+$` on a long line) while holding the
GIL, so a thread would not help: the lines are matched in a separate Python
process (`-I -S`: the standard library only) that is killed when
`time_limit` passes. The host reads the log itself and only hands the text over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import weakref
from re import Pattern
from typing import Any

from .output import read_new

# Reads {"pattern", "flags", "lines", "max_chars"} on stdin; writes the indices
# of matching lines, stopping once their text passes max_chars ("cut").
_MATCHER = r"""
import json, re, sys
job = json.loads(sys.stdin.buffer.read())
rx = re.compile(job["pattern"], job["flags"])
hits, size, cut = [], 0, False
for i, line in enumerate(job["lines"]):
    if rx.search(line):
        size += len(line) + 1
        if size > job["max_chars"]:
            cut = True
            break
        hits.append(i)
sys.stdout.write(json.dumps({"hits": hits, "cut": cut}))
"""

READ_PIECE = 1 << 20

# Matchers running at once, per event loop: each may spend its whole time
# limit on one core (a hostile pattern), and a client may ask for hundreds at
# once; the others wait their turn, and the host's own work keeps a core.
MATCHERS = 2
_turns: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _turn() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = asyncio.Semaphore(MATCHERS)
    return turn


class FilterTimeout(ValueError):
    """The filter regex ran past its time limit and was stopped."""


class FilterFailed(ValueError):
    """The filter could not be run."""


def region_lines(path: str, start: int, scan_bytes: int, complete: bool) -> tuple[list[str], bool]:
    """The lines of [start, start + scan_bytes) of `path` (ANSI cleaned, each
    piece split at newlines), and whether unread bytes remain after them."""
    lines: list[str] = []
    offset, scanned, more = start, 0, False
    while scanned < scan_bytes:
        chunk = read_new(
            path, offset, min(READ_PIECE, scan_bytes - scanned), complete_lines=complete
        )
        if not chunk.data:
            more = chunk.more
            break
        lines.extend(chunk.text.split("\n"))
        scanned += len(chunk.data)
        offset = chunk.next_offset
        more = chunk.more
        if not more:
            break
    return lines, more


async def matching_lines(
    lines: list[str], rx: Pattern[str], max_chars: int, time_limit: float
) -> tuple[list[str], bool]:
    """(the lines `rx` finds something in, cut at `max_chars`; True when cut),
    matched in a separate process stopped after `time_limit` seconds (counted
    once its turn has come: at most MATCHERS run at once)."""
    if not lines:
        return [], False
    async with _turn():
        return await _match(lines, rx, max_chars, time_limit)


async def _match(
    lines: list[str], rx: Pattern[str], max_chars: int, time_limit: float
) -> tuple[list[str], bool]:
    job = json.dumps(
        {"pattern": rx.pattern, "flags": rx.flags, "lines": lines, "max_chars": max_chars}
    ).encode()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _MATCHER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise FilterFailed(f"cannot run the filter: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(job), time_limit)
    except asyncio.TimeoutError:
        raise FilterTimeout(
            f"filter took too long (more than {time_limit:g}s on {len(lines)} lines) and "
            "was stopped: use a simpler regex (nested repetition such as (a+)+ can take "
            "exponential time)"
        ) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise FilterFailed(f"the filter failed: {last[0]}")
    answer = json.loads(out)
    return [lines[i] for i in answer["hits"]], bool(answer["cut"])
