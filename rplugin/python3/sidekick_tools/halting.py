"""What :SidekickHalt answers. The editor waits for the answer, never for the
whole kill: a task that dies on SIGTERM is answered as ended; a stubborn one
as halting, and the user is told again how it ended when it has (its
diagnostic and result block follow through the task's events)."""

from __future__ import annotations

import asyncio
from typing import Any

from .calls import UserError
from .calls.writer import log_failure
from .tasks.model import TERMINAL

ANSWER_WAIT = 0.1  # seconds :SidekickHalt may hold the editor before answering


def halt_answer(tasks: Any, port: Any, token: str, grace: float) -> dict[str, Any]:
    """Halt task `token` (from an RPC handler's greenlet); the answer for the
    editor: ``{id, status, message, halted}``, status ``halting`` while it
    ends; ``halted``: this halt ends it (its end is told by this answer and,
    while halting, by one message when it has ended)."""
    task = tasks.get(token)
    if task is None:
        raise UserError(f"sidekick_tools: no task {token} (unknown or expired)")
    status = task.status.value
    if status in TERMINAL:
        return answer(token, status, f"already {status}")
    halting = asyncio.ensure_future(tasks.halt(token))
    halting.add_done_callback(log_failure)
    try:
        task = port.block_on(asyncio.wait_for(asyncio.shield(halting), ANSWER_WAIT))
    except asyncio.TimeoutError:
        # told again once it has ended: the SIGKILL this speaks of may never come
        halting.add_done_callback(lambda fut: _ended(port, token, fut))
        return {
            "id": token,
            "status": "halting",
            "message": f"sidekick_tools: halting task {token}: SIGTERM sent; SIGKILL in "
            f"{grace:g}s if it is still running",
            "halted": True,
        }
    return answer(token, task.status.value, task.status.value, halted=True)


def answer(token: str, status: str, said: str, halted: bool = False) -> dict[str, Any]:
    message = f"sidekick_tools: task {token} {said}"
    return {"id": token, "status": status, "message": message, "halted": halted}


def _ended(port: Any, token: str, halting: asyncio.Future[Any]) -> None:
    """A halt answered as halting has ended: say how the task ended."""
    if not halting.cancelled() and halting.exception() is None:
        port.notify_user(f"sidekick_tools: task {token} {halting.result().status.value}")
