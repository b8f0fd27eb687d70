"""use_agent and the task tools driven through the chat buffer of a real
headless Neovim, against the fake agent CLI (tests/integration/fake_agent.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import read_text, wait_for

pytestmark = pytest.mark.integration

FAKE = str(Path(__file__).with_name("fake_agent.py"))


def fake(mode: str, *extra: str, **opts) -> dict:
    return {"cmd": [sys.executable, FAKE, "--mode", mode, *extra, "{message}"], **opts}


def call_block(tool: str, params: dict, call_id: str) -> str:
    return f"```tool {tool} id={call_id}\n{json.dumps(params)}\n```\n"


def assistant(*blocks: str, intro: str = "On it.") -> str:
    return f"ASSISTANT: {intro}\n\n" + "\n".join(blocks)


def append(editor, text: str) -> None:
    """Add a message at the end of the chat, as the LLM's reply would arrive."""
    lines = ["", *text.rstrip("\n").split("\n")]
    editor.lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, ...)", lines)


def run(editor, call_id: str) -> None:
    lines = editor.lines()
    header = next(
        i for i, line in enumerate(lines) if re.match(rf"```tool \S+ id={call_id}$", line)
    )
    editor.run_tool(header + 1)


def result(editor, call_id: str, status: str | None = None, timeout: float = 20) -> dict:
    """Wait for the call's result block (with that status) and return its parts."""
    head = f"```result id={call_id} status={status}" if status else f"```result id={call_id} "

    def find():
        lines = editor.lines()
        for i, line in enumerate(lines):
            if line.startswith(head):
                fence = re.match(r"`+", line).group(0)
                end = next(j for j in range(i + 1, len(lines)) if lines[j] == fence)
                fields = dict(re.findall(r"(\w+)=(\S+)", line))
                return {"header": line, "fields": fields, "body": "\n".join(lines[i + 1 : end])}
        return None

    try:
        return wait_for(find, timeout)
    except AssertionError:
        raise AssertionError(f"no {head!r} in:\n{editor.text()}") from None


def answer(block: dict) -> dict:
    """The JSON object at the start of a result body."""
    body = block["body"]
    end = body.find("\n}")
    return json.loads(body[: end + 2])


def output_of(block: dict) -> str:
    return (
        block["body"].split("\n--- output ---\n", 1)[1] if "--- output ---" in block["body"] else ""
    )


def log_path(editor, token: str) -> Path:
    return Path(editor.state_dir) / "tasks" / token / "stdout"


@pytest.mark.slow
def test_seed_workflow_delegate_await_read_list_halt(editor):
    r1 = editor.workdir / "release-1"
    editor.setup(
        agents={
            "builder": fake("wait", "--release", str(r1)),
            "stubborn": fake("stubborn"),
        },
        tasks={"await_timeout": 1, "hybrid_threshold": 1, "halt_grace": 1},
    )
    editor.open_chat(
        "USER: build it\n\n"
        + assistant(
            call_block(
                "use_agent", {"agent": "builder", "message": "build it", "async": True}, "c1"
            )
        )
    )
    run(editor, "c1")
    started = result(editor, "c1", "running")
    token = started["fields"]["task"]
    assert re.fullmatch(r"[0-9a-f]{6}", token)
    assert "await_task" in started["body"] and token in started["body"]
    editor.wait_diag(4, "⟳ use_agent")

    # first await: capped at tasks.await_timeout (1 s), the task is still running
    append(
        editor, assistant(call_block("await_task", {"task": token, "timeout_seconds": 30}, "c2"))
    )
    run(editor, "c2")
    first = answer(result(editor, "c2", "completed"))
    assert first["status"] == "running"
    assert first["timed_out"] is True
    assert first["message"] == "Task still running. Call await_task again to continue waiting."

    # read new output with a filter, then list: both auto-accepted, so they chain
    wait_for(lambda: "problem in batch 0" in read_text(log_path(editor, token)))
    append(
        editor,
        assistant(
            call_block("task_output", {"task": token, "filter": "^error"}, "c3"),
            call_block("list_tasks", {}, "c4"),
        ),
    )
    run(editor, "c3")
    filtered = result(editor, "c3", "completed")
    meta = answer(filtered)
    assert meta["filter"] == "^error" and meta["matching_lines"] == 1
    assert output_of(filtered) == "error: problem in batch 0"  # ANSI colours stripped
    assert meta["progress"]["percent"] == 10
    listing = result(editor, "c4", "completed")["body"]
    assert listing.startswith("Running (1):")
    assert f"{token}  use_agent(builder)" in listing
    assert "task_output" in listing.splitlines()[-1]

    # the filter consumed nothing: an unfiltered read still has every line
    append(editor, assistant(call_block("task_output", {"task": token}, "c5")))
    run(editor, "c5")
    unfiltered = result(editor, "c5", "completed")
    assert answer(unfiltered)["new_lines"] == 5
    assert "batch 0 line 2" in output_of(unfiltered)

    # second await: the agent is released and finishes within this wait
    append(editor, assistant(call_block("await_task", {"task": token}, "c6")))
    r1.write_text("")
    run(editor, "c6")
    second = answer(result(editor, "c6", "completed"))
    if second["status"] == "running":  # released just as the wait ended: await again
        append(editor, assistant(call_block("await_task", {"task": token}, "c6b")))
        run(editor, "c6b")
        second = answer(result(editor, "c6b", "completed"))
    assert second["status"] == "completed"
    assert second["exit_code"] == 0
    assert second["summary"] == "finished build it"

    # the background call's block now holds the agent's summary, not its transcript
    done = result(editor, "c1", "completed")
    assert done["fields"]["exit"] == "0"
    assert done["body"] == "finished build it"
    editor.wait_text(f'"id": "{token}"')  # the completion notice

    # start another agent that ignores SIGTERM, then halt it
    append(
        editor,
        assistant(
            call_block("use_agent", {"agent": "stubborn", "message": "x", "async": True}, "c7")
        ),
    )
    run(editor, "c7")
    other = result(editor, "c7", "running")["fields"]["task"]
    wait_for(
        lambda: "ready" in read_text(log_path(editor, other))
    )  # (the log may not be there yet)
    append(editor, assistant(call_block("halt_task", {"task": other}, "c8")))
    run(editor, "c8")
    halted = answer(result(editor, "c8", "completed"))
    assert halted == {
        "task": other,
        "status": "cancelled",
        "output": "ready",
        "message": halted["message"],
    }
    result(editor, "c7", "cancelled")
    wait_for(lambda: editor.lua("return require('sidekick_tools').get_task(...)", other))
    assert editor.lua("return require('sidekick_tools').get_task(...).status", other) == "cancelled"

    # status of both, and halting a finished task says it already ended
    append(
        editor,
        assistant(
            call_block("task_status", {"task": token}, "c9"),
            call_block("task_status", {"task": other}, "c10"),
            call_block("halt_task", {"task": token}, "c11"),
        ),
    )
    run(editor, "c9")
    assert answer(result(editor, "c9", "completed")) == {
        "status": "completed",
        "result": "finished build it",
    }
    assert answer(result(editor, "c10", "completed"))["status"] == "failed"
    again = answer(result(editor, "c11", "completed"))
    assert again["status"] == "completed" and "already ended" in again["message"]


def test_agent_summary_within_the_threshold(editor):
    editor.setup(agents={"fake": fake("summary")})
    editor.open_chat(
        "USER: go\n\n"
        + assistant(call_block("use_agent", {"agent": "fake", "message": "fix it"}, "a1"))
    )
    run(editor, "a1")
    block = result(editor, "a1", "completed")
    assert block["fields"]["exit"] == "0"
    assert block["body"] == "Done: handled 'fix it'\nall good"
    editor.wait_diag(4, "✓ use_agent")


def test_agent_prompt_summary_and_quoting(editor):
    editor.setup(agents={"fake": fake("prompt")})
    message = "why $(touch pwned); `id` 'q' \"dq\""
    editor.open_chat(
        "USER: go\n\n"
        + assistant(call_block("use_agent", {"agent": "fake", "message": message}, "a1"))
    )
    run(editor, "a1")
    block = result(editor, "a1", "completed")
    # the response starts on the last prompt's own line (DESIGN §8)
    assert block["body"] == f"{message}\nfinal answer for {message}"
    assert not (editor.workdir / "pwned").exists()


def test_failing_agent_is_failed_with_exit_code(editor):
    editor.setup(agents={"fake": fake("fail")})
    editor.open_chat(
        "USER: go\n\n" + assistant(call_block("use_agent", {"agent": "fake", "message": "m"}, "a1"))
    )
    run(editor, "a1")
    block = result(editor, "a1", "failed")
    assert block["fields"]["exit"] == "2"
    assert "could not do it" in block["body"]
    editor.wait_diag(4, "✗ use_agent: exit 2")


def test_unknown_agent_lists_configured_agents(editor):
    editor.setup(agents={"alpha": fake("plain"), "beta": fake("plain")})
    editor.open_chat(
        "USER: go\n\n"
        + assistant(call_block("use_agent", {"agent": "gamma", "message": "m"}, "a1"))
    )
    run(editor, "a1")
    block = result(editor, "a1", "failed")
    assert 'Unknown agent "gamma"' in block["body"] and "alpha, beta" in block["body"]


def test_no_agents_configured_says_how(editor):
    editor.setup()
    editor.open_chat(
        "USER: go\n\n"
        + assistant(call_block("use_agent", {"agent": "claude", "message": "m"}, "a1"))
    )
    run(editor, "a1")
    block = result(editor, "a1", "failed")
    assert "no agents are configured" in block["body"]
    assert "{message}" in block["body"]


def test_agent_past_the_threshold_finishes_in_the_background(editor):
    release = editor.workdir / "go"
    editor.setup(
        agents={"slow": fake("wait", "--release", str(release))},
        tasks={"hybrid_threshold": 1},
    )
    editor.open_chat(
        "USER: go\n\n" + assistant(call_block("use_agent", {"agent": "slow", "message": "m"}, "a1"))
    )
    run(editor, "a1")
    running = result(editor, "a1", "running")
    assert "Still running after 1s" in running["body"]
    release.write_text("")
    block = result(editor, "a1", "completed")
    assert block["body"] == "finished m"
    assert block["fields"]["task"] == running["fields"]["task"]


def test_auto_accepted_agent_chains_and_others_wait(editor):
    editor.setup(
        agents={"trusted": fake("plain", auto_accept=True), "careful": fake("plain")},
    )
    editor.open_chat(
        "USER: go\n\n"
        + assistant(
            call_block("list_tasks", {}, "l1"),
            call_block("use_agent", {"agent": "trusted", "message": "m"}, "u1"),
            call_block("use_agent", {"agent": "careful", "message": "m"}, "u2"),
        )
    )
    run(editor, "l1")
    assert result(editor, "l1", "completed")["body"].startswith("Running (0): none")
    assert result(editor, "u1", "completed")["body"].endswith("plain line 4")
    header = editor.lines().index("```tool use_agent id=u2")
    editor.wait_diag(header, "▶ use_agent")
    assert "id=u2 status" not in editor.text()


def test_malformed_task_tool_calls_fail_clearly(editor):
    editor.setup()
    editor.open_chat(
        "USER: go\n\n"
        + assistant(
            call_block("await_task", {"task": "abcdef", "timeout_seconds": -3}, "m1"),
        )
    )
    run(editor, "m1")
    assert "must be >= 0" in result(editor, "m1", "failed")["body"]
    append(editor, assistant(call_block("task_output", {"task": "abcdef", "filter": "(x"}, "m2")))
    run(editor, "m2")
    assert "invalid filter regex" in result(editor, "m2", "failed")["body"]
    append(editor, assistant(call_block("halt_task", {"task": "nope!"}, "m3")))
    run(editor, "m3")
    assert "Task ID not found or expired." in result(editor, "m3", "failed")["body"]
    append(editor, assistant(call_block("task_status", {"task": "abcdef"}, "m4")))
    run(editor, "m4")
    assert answer(result(editor, "m4", "failed")) == {
        "status": "not_found",
        "error": "Task ID not found or expired.",
    }
