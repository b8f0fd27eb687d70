"""Chat buffers for the benchmarks (DESIGN §4 format)."""

from __future__ import annotations

import json


def call_block(call_id: str, params: dict, tool: str = "run_terminal_command") -> list[str]:
    return [f"```tool {tool} id={call_id}", json.dumps(params), "```"]


def one_message(commands: list[str], prefix: str = "c", run_async: bool = True) -> str:
    """Every call in one (the last) assistant message: what run_tools runs."""
    lines = ["USER: go", "", "ASSISTANT: Running them.", ""]
    for i, cmd in enumerate(commands):
        params: dict = {"command": cmd, "purpose": f"bench {i}"}
        if run_async:
            params["async"] = True
        lines += call_block(f"{prefix}{i}", params)
        lines.append("")
    return "\n".join(lines) + "\n"


def one_call_per_message(n: int, command: str, prefix: str = "c") -> str:
    """n assistant messages of one call each, so :SidekickRunTool never chains."""
    lines = ["USER: go", ""]
    for i in range(n):
        lines += [f"ASSISTANT: Step {i}.", ""]
        lines += call_block(f"{prefix}{i}", {"command": command, "async": True})
        lines += ["", "USER: next", ""]
    return "\n".join(lines) + "\n"


def big_chat(total_lines: int, calls: int, pending: int = 10) -> tuple[str, list[str]]:
    """A chat of about `total_lines` lines holding `calls` tool calls, the last
    `pending` without a result. Returns the text and the pending call ids."""
    per = max(12, total_lines // calls)
    lines: list[str] = ["SYSTEM: You are a helpful assistant.", ""]
    pending_ids = []
    for i in range(calls):
        cid = f"call_{i:05d}"
        unit = [f"USER: Please run step {i}.", "", f"ASSISTANT: Running step {i} now.", ""]
        unit += call_block(cid, {"command": "true", "purpose": f"step {i}", "async": True})
        if i < calls - pending:
            unit += [
                "",
                f"```result id={cid} status=completed exit=0 duration=0.01s",
                f"step {i} done",
                "```",
            ]
        else:
            pending_ids.append(cid)
        filler = per - len(unit) - 1
        unit += [f"Notes on step {i}, line {j}: nothing to report." for j in range(filler)]
        unit.append("")
        lines += unit
    return "\n".join(lines) + "\n", pending_ids


def settled_chat(total_lines: int, question: str = "Summarise the steps so far.") -> str:
    """A chat of about `total_lines` lines whose every call has its result (one
    call per 50 lines), ending with a user's question: ready to send."""
    text, _ = big_chat(total_lines, max(1, total_lines // 50), pending=0)
    return text + f"USER: {question}\n"
