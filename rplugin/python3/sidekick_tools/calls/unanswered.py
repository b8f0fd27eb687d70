"""The last reply's calls that have no result when the user sends
(`:SidekickSend`, DESIGN §10): those whose result is on its way are waited
for; the others are denied, saying whether the user replied or went on without
them, unless their task ran unseen (that result is written instead).
"""

from __future__ import annotations

import asyncio

from ..chat.parser import Chat
from ..tools.base import ToolResult
from .chain import CallChain


async def running_calls(chain: CallChain, buf: int) -> list[str]:
    """The ids of the last reply's calls that have no result yet because it
    is on its way (`CallMarks.coming`: they run, or wait their turn in a
    batch the user agreed to), when every call without a result is such a
    one; else none (sending then says what is missing)."""
    mirror = await chain.marks.mirror(buf)
    calls = mirror.chat().unanswered()
    if calls and all(chain.marks.coming(buf, c) for c in calls):
        return [c.call_id or "" for c in calls]
    return []


async def deny_pending(chain: CallChain, buf: int) -> None:
    """The last reply's pending calls get a denied result, saying whether the
    user replied or sent with nothing typed (the model reads which); one
    whose task ran unseen (its result never reached the chat) gets that
    task's result; those whose result is on its way are left to it."""
    mirror = await chain.marks.mirror(buf)
    calls = mirror.chat().unanswered()
    if user_typing(mirror.chat(), mirror.lines):
        why = "not run: the user replied instead"
    else:
        why = "not run: the user went on without running it"
    # its result comes: it runs, is queued to, or was denied a moment ago
    calls = [call for call in calls if not chain.marks.coming(buf, call)]
    # all prepared in one edit, before the first answer is written: prepared
    # one by one, each answer written changed the reply's message, which the
    # next call read again (a reply of thousands held the editor for minutes)
    prepared = await chain.marks.prepare_all(buf, calls)
    waits = []
    for tracked, call in zip(prepared, calls):
        if tracked is None:
            continue
        earlier = chain.executor.earlier_result(tracked, mirror.name, call)
        if earlier is not None:  # it ran before (its result was never written): not denied
            waits.append(chain.deliver(tracked, earlier))
            continue
        result = ToolResult(status="denied", body=why, fields={"reason": "user"})
        waits.append(chain.answer(tracked, result))
    if waits:
        await asyncio.gather(*waits)


def user_typing(chat: Chat, lines: list[str]) -> bool:
    """The chat ends with a USER: message that has text in it (not a notice)."""
    from ..chat.render import is_notice

    last = chat.messages[-1] if chat.messages else None
    if last is None or last.role != "USER" or is_notice(lines[last.start_row]):
        return False
    text = "\n".join(lines[last.start_row : last.end_row + 1])
    return bool(text.removeprefix("USER:").strip())
