"""The state each call of a chat is in, as the text alone says it (DESIGN §5).

Pure: what diagnostics show for the calls no host follows (a chat just opened,
calls written by hand, results written by another Neovim), and the short
detail a finished call's diagnostic carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .parser import Chat, ToolCall

RESULT_STATUSES = ("running", "completed", "failed", "cancelled", "denied")


def text_state(call: ToolCall) -> str:
    """The state the text gives a call: its result's status, else pending."""
    if call.result is None:
        return "pending"
    return call.result.status or "pending"


def names_task(call: ToolCall) -> bool:
    """Does the call's block say a task runs for it (`status=running task=T`)?"""
    res = call.result
    return bool(call.call_id and res and res.status == "running" and res.fields.get("task"))


def fields_detail(fields: dict[str, Any]) -> str:
    """What a finished result's fields say went wrong: "timeout", "exit 1", a reason."""
    if fields.get("reason") == "timeout":
        return "timeout"
    if "exit" in fields:
        return f"exit {fields['exit']}"
    return str(fields.get("reason") or "")


def scan_items(
    chat: Chat,
    skip_ids: set[str],
    problem_of: Callable[[ToolCall], str | None],
    unfollowed: dict[str, tuple[str, str]] | None = None,
    ran: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Diagnostic state of the calls whose id is not in `skip_ids` (the ones a
    host follows draw their own). `problem_of(call)` says what is wrong with a
    call, if anything (its text, or its parameters against the tool's schema);
    `unfollowed` maps ids of running blocks no host follows to the state they
    show and why.

    Every pending, running, failed, cancelled or denied call is listed. Completed
    calls are listed only in the last assistant message, or when their id is in
    `ran` (they ran in this session: an undo and a redo of their result took
    them from the host, not from the user's sight): a long history of ✓ would
    cost Neovim a redraw of thousands of diagnostics on every change and tell
    the user nothing they need to act on.
    """
    items = []
    last = chat.last_assistant()
    recent = {id(c) for c in last.calls} if last else set()
    for call in chat.calls:
        if call.call_id and call.call_id in skip_ids and not call.repeats_an_id:
            continue  # followed: drawn by the host as it runs (a copy of it is not)
        res = call.result
        shown = id(call) in recent or (ran and call.call_id in ran)
        if res is not None and res.status == "completed" and not shown:
            continue
        item: dict[str, Any] = {"row": call.start_row, "tool": call.tool, "id": call.call_id or ""}
        if res is not None and res.status in RESULT_STATUSES:
            item["state"] = res.status
            if res.status == "failed":
                item["detail"] = fields_detail(res.fields) or "failed"
            elif res.status == "running" and call.call_id in (unfollowed or {}):
                item["state"], item["detail"] = (unfollowed or {})[call.call_id]
            elif res.status == "running" and res.fields.get("task"):
                item["detail"] = f"task {res.fields['task']}"
            elif res.status == "denied":
                item["detail"] = res.fields.get("reason") or "denied"  # who: user, policy
            elif res.status == "cancelled":
                item["detail"] = res.status
        elif problem := problem_of(call):
            item["state"] = "failed"
            item["detail"] = problem
        else:
            item["state"] = "pending"
        items.append(item)
    return items
