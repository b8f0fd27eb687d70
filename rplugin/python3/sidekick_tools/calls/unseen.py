"""Results that never reached their chat: a call whose task ran while no host
followed it gets that task's result when its chat is opened.
"""

from __future__ import annotations

from typing import Any

from ..tasks.identity import owner_gone
from .chain import CallChain
from .scan import call_problem


async def write_unseen(chain: CallChain, buf: int) -> None:
    """Pending calls whose task ran while no host followed them (it died, or
    Neovim quit with `kill_on_exit` off before the call's block said
    running) get that task's result when their chat is opened: the call
    reads as never run otherwise, and running it again would run it twice.
    A task of another Neovim that still runs is that Neovim's to write
    (the same chat open in both): opening it here writes nothing. Nor is
    anything written unasked into a buffer without a name, whose tasks
    cannot be told from another such buffer's."""
    mirror = await chain.marks.mirror(buf)
    pending = [c for c in mirror.chat().calls if c.result is None and c.call_id]
    if not pending or not mirror.name:
        return
    # one look at the chat's tasks, not one per call (a chat may hold many)
    newest: dict[str, Any] = {}
    for task in chain.ctx.tasks.list(chats=[mirror.name], limit=None):  # newest first
        newest.setdefault(task.call_id, task)
    gone: dict[str, bool] = {}  # each owner looked at once
    for call in pending:
        task = newest.get(call.call_id or "")
        if not chain.executor.undelivered(task, call) or call_problem(call):
            continue
        if task.owner != chain.ctx.tasks.owner and not owner_gone(task.owner, gone):
            continue  # the Neovim that runs it (the chat open there too) writes it
        if chain.marks.coming(buf, call):
            continue
        tracked = await chain.marks.prepare(buf, call)
        if tracked is None:
            continue
        earlier = chain.executor.earlier_result(tracked, mirror.name, call)
        if earlier is None:  # delivered meanwhile: not ours to write
            chain.ctx.registry.forget(tracked)
            continue
        await chain.deliver(tracked, earlier)
