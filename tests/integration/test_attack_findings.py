"""Findings of an attacker's review (issue 15, DESIGN §7, §10, §12), each shown in a
real headless Neovim.

Every test asserts what the promise says should happen and is marked
``xfail(strict=True)``: it passes (as an expected failure) while the hole is
open and starts failing once it is closed, so whoever closes it removes the
marker. Run one Neovim: ``NVIM=0.11 .venv/bin/python -m pytest
tests/integration/test_attack_findings.py -q``.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from tests.conftest import answers, descendants, wait_for
from tests.fake_provider import ThreadedFakeProvider, reply, tool_call
from tests.fake_provider.anthropic_wire import events as anthropic_events
from tests.fake_provider.anthropic_wire import sse as anthropic_sse
from tests.integration.chat_helpers import send, use_fake
from tests.integration.git_helpers import git_repo

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"
KEY = "sk-ant-api03-" + "k" * 40


def call(call_id: str, tool: str, params: dict) -> str:
    return f"```tool {tool} id={call_id}\n{json.dumps(params)}\n```\n"


def header_row(editor, call_id: str) -> int:
    return next(i for i, line in enumerate(editor.lines()) if f"id={call_id}" in line)


# --------------------------------------------------------------------------- finding 1
def test_f1_auto_run_git_reads_a_file_outside_through_git_info_grafts(editor, tmp_path):
    """An unpacked repository whose .git/info/grafts is a symlink to a file outside
    the working directory: the chained, auto-approved `git log` prints that file
    line by line ("error: bad graft data: <line>") into the chat. git_guard checks
    config, objects, alternates and the index, but not the other files git reads
    from the git directory (info/grafts: every line; shallow and packed-refs: one)."""
    editor.setup()
    work = editor.workdir
    git_repo(work)
    secret = tmp_path / "outside-secret.txt"  # outside the working directory
    secret.write_text("db-password-line-one Hunter2\nsecond-private-line\n")
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "grafts").symlink_to(secret)
    # git_guard allows advice.* keys: the repository can even silence git's hint
    with open(work / ".git" / "config", "a") as f:
        f.write("[advice]\n\tgraftFileDeprecated = false\n")
    editor.open_chat(
        HEAD
        + call("c1", "run_terminal_command", {"command": "echo start"})
        + "\n"
        + call("c2", "run_terminal_command", {"command": "git log --oneline"})
    )
    editor.run_tool(5)  # the user runs c1; c2 would follow on its own
    editor.wait_text("```result id=c1 status=completed")
    row = editor.lines().index("```tool run_terminal_command id=c2")
    editor.wait_diag(row, "▶ run_terminal_command")  # the chain stopped: the user is asked
    text = editor.text()
    assert "Hunter2" not in text and "second-private-line" not in text, text
    assert "```result id=c2" not in text


# --------------------------------------------------------------------------- finding 2
def test_f2_run_tools_runs_an_earlier_call_that_shares_the_pending_calls_id(editor):
    """A chat whose last message holds a pending call with the id of an earlier
    call the user DENIED (a hostile model reuses the id in its next reply; a chat
    from a repository can hold it too). :SidekickRunTools (with or without its
    question, which shows `echo harmless`) runs the denied command instead:
    `_run_ids` looks the id up with `call_by_id`, the first call of that id."""
    editor.setup()
    pwned = editor.workdir / "pwned"
    chat = (
        "USER: set up\n\nASSISTANT: Let me prepare.\n\n"
        + call("c1", "run_terminal_command", {"command": f"touch {pwned}"})
        + "\n```result id=c1 status=denied reason=user\nThe user denied this call.\n```\n\n"
        + "USER: now say hi\n\nASSISTANT: Sure.\n\n"
        + call("c1", "run_terminal_command", {"command": "echo harmless"})
    )
    editor.open_chat(chat)
    res = editor.lua("return require('sidekick_tools').run_tools(0, { confirm = false })")
    assert res is None  # nothing runs: the pending call's id is not its own
    row = len(editor.lines()) - 3
    editor.wait_diag(row, "✗ run_terminal_command: Duplicate id")
    assert not pwned.exists(), editor.text()
    assert "```result id=c1 status=denied" in editor.text()  # the denial stands


# --------------------------------------------------------------------------- finding 5
def test_f5_a_key_printed_by_an_auto_run_command_lands_unmasked_in_the_chat(editor):
    """DESIGN §12: key formats are masked in everything the plugin writes into a
    chat. Only the request to the model (llm/request.py) and MCP answers mask;
    the result block written into the buffer (and saved with it) does not."""
    editor.setup()
    (editor.workdir / ".env").write_text(f"ANTHROPIC_API_KEY={KEY}\nGH=ghp_{'a' * 36}\n")
    editor.open_chat(
        HEAD
        + call("c1", "run_terminal_command", {"command": "echo start"})
        + "\n"
        + call("c2", "run_terminal_command", {"command": "cat .env"})
    )
    editor.run_tool(5)
    editor.wait_text("```result id=c2 status=completed")
    editor.nvim.command("write")
    saved = (editor.workdir / "chat.sidekick.md").read_text()
    assert KEY not in saved and "ghp_" + "a" * 36 not in saved, saved


# --------------------------------------------------------------------------- finding 3
def test_f3_an_auto_run_command_writes_logs_without_any_size_bound(editor):
    """DESIGN §8/§12: a task's logs stop at tasks.max_log_bytes (the task fails
    with reason=log_limit). The option is not implemented (config.lua drops it
    silently) and nothing bounds a log but the time limit: an auto-approved
    `cat f f f ...` (or `tail -f` of a growing file, or one sparse file from an
    unpacked archive) writes at disk speed for auto_accept.timeout (120 s), and a
    reply can hold many such calls. Here 32 MiB go to disk against a 1 MiB bound."""
    editor.setup(tasks={"max_log_bytes": 1 << 20})
    (editor.workdir / "big").write_bytes(b"x" * 4095 + b"\n" * 1 + b"y" * (4 << 20))
    editor.open_chat(
        HEAD
        + call("c1", "run_terminal_command", {"command": "echo start"})
        + "\n"
        + call("c2", "run_terminal_command", {"command": "cat " + " ".join(["big"] * 8)})
    )
    editor.run_tool(5)
    text = editor.wait_text("```result id=c2 status=")
    token = text.split("```result id=c2 status=")[1].split("task=")[1].split()[0]
    log = editor.state_dir / "tasks" / token / "stdout"
    assert log.stat().st_size <= 2 << 20, f"{log.stat().st_size} bytes logged"
    assert "```result id=c2 status=failed" in text and "log_limit" in text


# --------------------------------------------------------------------------- finding 4
def test_f4_a_hostile_task_output_filter_freezes_the_editor(editors, monkeypatch):
    """DESIGN §12: "a filter regex runs with a time limit"; issue 15 names this
    very case. task_output's filter runs Python `re` with no limit: a chained,
    auto-approved task_output on the chat's own task with filter ^(a+)+$ over a
    line of 30 a's and a ! keeps the host busy for minutes (40 a's: days), and
    every editor request to the host (any :Sidekick command, list_tasks())
    blocks Neovim meanwhile (rpcrequest is synchronous). The filter's time limit
    is set past the deadline of the editor request below, so a host that waited
    for the regex in any way would miss it."""
    tuning = json.loads(os.environ["SIDEKICK_TOOLS_TUNING"])
    monkeypatch.setenv("SIDEKICK_TOOLS_TUNING", json.dumps({**tuning, "filter_time_limit": 60}))
    ed = editors()
    ed.setup(tasks={"hybrid_threshold": 5})
    line = "a" * 30 + "!"
    ed.open_chat(HEAD + call("c1", "run_terminal_command", {"command": f"echo {line}"}))
    ed.run_tool(5)
    text = ed.wait_text("```result id=c1 status=completed")
    token = text.split("task=")[1].split()[0]
    pid = ed.host_pid()
    assert pid > 0
    ed.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, ...)",
        [
            "",
            "USER: filter it",
            "",
            "ASSISTANT: Looking.",
            "",
            *call("c2", "run_terminal_command", {"command": "echo again"}).splitlines(),
            "",
            *call("c3", "task_output", {"task": token, "filter": "^(a+)+$"}).splitlines(),
        ],
    )
    ed.run_tool(header_row(ed, "c2") + 1)  # the user runs c2; c3 (own task) follows unasked

    LIST = "return #require('sidekick_tools').list_tasks()"

    def matcher() -> list[int]:
        return [p for p, argv in descendants(pid) if "re.compile" in argv]

    try:
        wait_for(matcher)  # c3's filter is running, in a process of its own
        count = answers(lambda: ed.lua(LIST), unblock=ed.kill_host)
        assert count == 2
        assert matcher(), "the filter ended before the editor answered"
    finally:
        for child in matcher():
            os.kill(child, signal.SIGKILL)


# --------------------------------------------------------------------------- finding 6
def _deep_tool_reply(depth: int) -> object:
    """An Anthropic reply whose tool input streams as {"paths": [[[[...]]]]}."""
    evs = anthropic_events(
        reply(tool_call("read_files", {"paths": ["PLACEHOLDER"]}, id="toolu_deep"), chunk=0),
        "fake-model",
        "msg_deep",
        lambda n: f"toolu_{n}",
    )
    body = b"".join(anthropic_sse(name, data) for name, data, _ in evs)
    deep = ("[" * depth + "]" * depth).encode()
    assert b'[\\"PLACEHOLDER\\"]' in body
    return reply(raw_body=body.replace(b'[\\"PLACEHOLDER\\"]', deep))


@pytest.mark.slow
def test_f6_a_deeply_nested_tool_input_leaves_the_chat_stuck_streaming(editor):
    """DESIGN §12: JSON nesting is bounded and each call's problem stays that
    call's. The chat parser bounds nesting, but chat/reply.py parse_tool_input
    runs json.loads on the streamed input and catches only ValueError: the
    RecursionError escapes ReplyRenderer.take() in _ReplyWriter.final(), so
    `session.streaming` is never cleared. Nothing is said to the user; the chat
    is "still streaming" forever: :SidekickSend refuses, :SidekickStop answers
    "reply stopped" but clears nothing, completion notices wait for ever."""
    with ThreadedFakeProvider(api_key=KEY) as fake:
        fake.push(_deep_tool_reply(100_000), reply("second answer"))
        use_fake(editor, fake, KEY)
        editor.open_chat("USER: read something\n")
        send(editor)
        wait_for(lambda: len(fake.requests) == 1)
        editor.lua("vim.api.nvim_buf_set_lines(0, -2, -1, false, {'USER: hello again'})")

        def sent() -> bool:  # refused while the reply streams, then it goes
            result = editor.lua("return { require('sidekick_tools').send() }")
            return "still streaming" not in str(result)

        wait_for(sent)
        editor.wait_text("second answer")  # the chat went on; the deep call never ran
        # Either the loop answered the broken call when the reply ended (failed,
        # saying why), or the user's send came first and denied it: both are
        # right, and which comes first is the machine's timing.
        text = editor.text()
        answer = re.findall(r"```result id=toolu_deep status=(\w+)", text)
        assert answer in (["denied"], ["failed"]), text[-2000:]
        if answer == ["failed"]:
            assert "levels of arrays and objects, the limit is 64" in text


# --------------------------------------------------------------------------- finding 7
def test_f7_an_api_key_with_a_non_ascii_character_is_written_into_the_chat(editor):
    """DESIGN §10: a key never enters the chat or an error message. A key pasted
    with a typographic hyphen (U+2010, what word processors and chat apps turn
    "-" into) makes httpx raise UnicodeEncodeError while building the headers;
    loop._stream catches it as an internal error and writes f"{exc!r}" (which
    holds the whole header value) into the chat under the reply and into a
    notification. It is masked with the key formats only, not with the key
    itself, and the typographic hyphens keep the format masks from matching."""
    key = "sk\u2010ant\u2010api03\u2010" + "Q" * 40  # the real key, with U+2010 for "-"
    with ThreadedFakeProvider(api_key=KEY) as fake:
        use_fake(editor, fake, key)
        editor.open_chat("USER: hello\n")
        send(editor)
        note = wait_for(lambda: [n for n in editor.notifications() if "API key" in n])
        assert "not printable ASCII" in note[0]
        shown = editor.text() + "\n".join(editor.notifications())
        assert "Q" * 40 not in shown, shown
        assert not fake.requests  # nothing was sent


# --------------------------------------------------------------------------- finding 8
PEM_BODY = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACBzZWNyZXQta2V5LWJvZHktdGhhdC1tdXN0LW5vdC1sZWFrAAAAkGFhYWFh",
    "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYW",
]


def test_f8_a_private_key_read_without_its_begin_line_reaches_the_model(editor):
    """DESIGN §10/§12: PEM private keys are masked in what is sent to a model.
    The mask needs the BEGIN line: an auto-approved `tail -n +2 deploy_key`
    (or `grep -v BEGIN deploy_key`) prints the key body and its END line, and
    the next request carries them verbatim."""
    (editor.workdir / "deploy_key").write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(PEM_BODY)
        + "\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    with ThreadedFakeProvider(api_key=KEY) as fake:
        fake.push(
            reply(tool_call("run_terminal_command", {"command": "tail -n +2 deploy_key"})),
            reply("Thanks."),
        )
        use_fake(editor, fake, KEY)
        editor.open_chat("USER: look at the deploy key\n")
        send(editor)
        wait_for(lambda: len(fake.requests) == 2, timeout=20)
        sent = json.dumps(fake.requests[1].json)
        assert not any(line in sent for line in PEM_BODY), sent[-1500:]


# --------------------------------------------------------------------------- finding 9
@pytest.mark.slow
def test_f9_a_reply_with_one_long_line_freezes_editor_requests(editor):
    """DESIGN §9/§10/§12: the host never blocks on what the model controls, and
    editor requests stay fast while a reply streams. Every frame the renderer
    diffs the reply's last line with a per-character Python loop
    (reply_render._common_prefix): a reply that is one long line (minified code,
    base64, or a hostile server) costs O(length) per frame on the host's event
    loop, quadratic in all (16 MiB: editor requests held 45 s). The unit test
    test_a_long_line_is_compared_in_slices_never_character_by_character holds
    the diff to a few slice comparisons; here the long line arrives whole, byte
    for byte, and editor requests through the host are answered while it streams."""
    with ThreadedFakeProvider(api_key=KEY) as fake:
        fake.push(reply("x" * (2 << 20), chunk=128 << 10, tokens_per_second=10))
        use_fake(editor, fake, KEY)
        editor.open_chat("USER: hi\n")
        send(editor)
        wait_for(lambda: len(fake.requests) == 1)
        full = len("ASSISTANT: ") + (2 << 20)
        head = len("ASSISTANT: ")
        partial: set[int] = set()  # lengths of the line seen part-way through

        def streamed() -> bool:  # each probe is an editor request through the host
            probe = "return #require('sidekick_tools').list_tasks()"
            answers(lambda: editor.lua(probe), unblock=editor.kill_host)
            length = editor.lua("return #vim.api.nvim_buf_get_lines(0, 2, 3, false)[1]")
            if head < length < full:
                partial.add(length)
            return length == full

        wait_for(streamed, timeout=120, interval=0.05)
        assert partial  # an editor request was answered part-way through the long line
        assert editor.lines()[2] == "ASSISTANT: " + "x" * (2 << 20)


# --------------------------------------------------------------------------- finding 10
def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_f10_one_auto_run_read_files_call_grows_the_host_by_hundreds_of_mb(editor):
    """read_files caps each file at 256 KiB but not the number of paths nor the
    total: one auto-approved call naming a 256 KiB file 400 times builds a
    100 MiB answer in the host (peak RSS grew by 1.7 GiB for 1,000). The parser lets a
    call body reach 1 MiB, enough for 100,000+ paths: tens of GiB, an OOM kill
    of the host or of something else on the machine."""
    editor.setup()
    (editor.workdir / "big.txt").write_text(("y" * 99 + "\n") * 2621)  # ~256 KiB
    editor.open_chat(HEAD + call("c1", "run_terminal_command", {"command": "echo start"}))
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed")
    pid = editor.host_pid()
    before = _peak_rss_mb(pid)
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, ...)",
        [
            "",
            "USER: read",
            "",
            "ASSISTANT: Reading.",
            "",
            *call("c2", "run_terminal_command", {"command": "echo again"}).splitlines(),
            "",
            *call("c3", "read_files", {"paths": ["big.txt"] * 64}).splitlines(),
            "",
            *call("c4", "read_files", {"paths": ["big.txt"] * 400}).splitlines(),
        ],
    )
    editor.run_tool(header_row(editor, "c2") + 1)
    # 64 files are read up to the call's total, the rest named as not read
    text = editor.wait_text("```result id=c3 status=failed", timeout=60)
    assert "[not read: this call already read" in text
    # 400 is no call the schema takes: the chain stops at it, which its ✗ says
    editor.wait_diag(header_row(editor, "c4"), "✗ read_files")
    grown = _peak_rss_mb(pid) - before
    assert grown < 100, f"the host's peak memory grew by {grown:.0f} MB for one call"


# --------------------------------------------------------------------------- finding 12
@pytest.mark.slow
def test_f12_after_stop_a_models_background_task_restarts_the_loop(editor):
    """DESIGN §10: :SidekickStop "disarms the loop". A model that first started an
    auto-approved background task (`tail -F --retry x`, async) is stopped by the
    user mid-reply; when that task ends (auto_accept.timeout), its completion
    notice is sent (send_on_notice), `_continue` sets `armed = True` again, and
    the model's next calls run unasked: the loop goes on without the user, up
    to max_turns, each turn able to start the next such task."""
    pwned_probe = "call_after_stop"
    with ThreadedFakeProvider(api_key=KEY) as fake:
        fake.push(
            reply(
                tool_call(
                    "run_terminal_command",
                    {"command": "tail -F --retry not-there", "async": True},
                    id="call_bg",
                )
            ),
            reply("Working on it. " * 40, chunk=4, hang_after=20),
            reply(tool_call("list_directory", {"path": "."}, id=pwned_probe)),
            reply("Carried on without you."),
        )
        use_fake(editor, fake, KEY, auto_accept={"timeout": 4})
        editor.open_chat("USER: start watching\n")
        send(editor)
        editor.wait_text("Working on it.")
        editor.lua("require('sidekick_tools').stop()")
        editor.wait_text("```sidekick stopped")
        # the task times out at 4 s: its notice is written, and nothing is sent
        editor.wait_text("USER: [sidekick task", timeout=30)
        editor.wait_text("```result id=call_bg status=failed")
        assert f"```result id={pwned_probe}" not in editor.text(), editor.text()
        assert len(fake.requests) == 2


# ------------------------------------------------------- a second review: findings 13-15
def test_f13_a_chat_file_naming_running_many_times_on_one_line_opens_at_once(editor):
    """Opening a chat looks for a running block (to start the host that follows
    it). The search tried each "status=running" of a line against the rest of
    it: a chat file of one 240 KB line of them, in a cloned repository, froze
    the editor for two minutes as it opened."""
    editor.setup()
    pid = editor.lua("return vim.fn.getpid()")
    hostile = "USER: hi\n\nASSISTANT: x\n```result " + "status=running " * 20_000 + "\n```\n"

    def unblock() -> None:
        os.kill(pid, signal.SIGINT)  # what a user's Ctrl-C does

    answers(lambda: editor.open_chat(hostile), deadline=20, unblock=unblock)
    assert editor.lua("return require('sidekick_tools.host').running()") is False
    # a real running block, after it, is still found: the host starts to follow it
    block = "```result id=r status=running task=abc123\nrunning\n```\n"
    answers(lambda: editor.open_chat(hostile + block, name="b.sidekick.md"), 20, unblock)
    wait_for(lambda: editor.lua("return require('sidekick_tools.host').running()"))


def test_f14_a_malformed_call_with_a_string_never_closed_does_not_hold_the_editor(editor):
    """A call body whose string never closes, after 65 brackets: every quote in
    it started a scan of the rest of the body, on the host's loop, while the
    editor waited for its answer (80 KB: 33 s; Ctrl-C no help). The call gets
    its ✗, and the call the user runs runs."""
    editor.setup()
    editor.lua("require('sidekick_tools').list_tasks()")  # starts the host
    host = editor.host_pid()
    body = "{" * 65 + '"' + '\\"' * 100_000
    editor.open_chat(
        HEAD
        + call("ok", "list_directory", {"path": "."})
        + f"```tool read_files id=bad\n{body}\n```\n"
    )
    row = header_row(editor, "ok") + 1
    info = answers(lambda: editor.run_tool(row), unblock=lambda: os.kill(host, signal.SIGKILL))
    assert info["id"] == "ok"
    editor.wait_text("```result id=ok status=completed")
    editor.wait_diag(header_row(editor, "bad"), "✗ read_files")


def test_f15_reading_a_file_of_key_like_lines_does_not_hold_the_host(editor):
    """Masking a result looked for a private key's body before an END line by
    trying every character of a run of key-like lines: a project file of
    hashes and an END line somewhere, read by an auto-run read_files, held the
    host 44 s (eight such files, 2 MiB: minutes). It is read, masked and written at once,
    and editor requests are answered meanwhile."""
    editor.setup()
    (editor.workdir / "notes.txt").write_text(
        "-----END RSA PRIVATE KEY-----\n" + ("A" * 16 + "\n") * 15_000  # under 256 KiB: pasted
    )
    editor.open_chat(
        HEAD
        + call("a", "list_directory", {"path": "."})
        + call("b", "read_files", {"paths": ["notes.txt"]})
    )
    editor.run_tool(header_row(editor, "a") + 1)  # the chain runs b, approved
    host = editor.host_pid()
    probe = "return #require('sidekick_tools').list_tasks()"

    def read() -> bool:
        answers(lambda: editor.lua(probe), 20, unblock=lambda: os.kill(host, signal.SIGKILL))
        return "```result id=b status=completed" in editor.text()

    wait_for(read, timeout=60)
    assert "AAAAAAAAAAAAAAAA" in editor.text()  # no key: the lines are shown


def test_f16_a_front_matter_line_of_blanks_does_not_hold_the_editor(editor):
    """vim.trim is quadratic on a line of blanks only: a chat file whose front
    matter held one of 40 KB held the editor 11 s at :SidekickModel (and at
    each send). The front matter is read as ever."""
    editor.setup()
    editor.open_chat("---\n" + " " * 100_000 + "\nmodel:  a/b  \n---\nUSER: hi\n")
    read = "return require('sidekick_tools.front_matter').read(0).values"
    assert answers(lambda: editor.lua(read), deadline=20) == {"model": "a/b"}


# ------------------------------------------------- a user's day: finding 17
def test_f17_sending_past_thousands_of_pending_calls_does_not_hold_the_editor(editor):
    """:SidekickSend denies the last reply's pending calls first (a reply of
    thousands, from a model past its budget, waits for consent): each denial
    written made the next call's preparation read the reply's message again,
    on the host's loop, while the editor waited for the send's answer (2,000
    calls: 50 s; 5,000: nearly 7 minutes)."""
    n = 2_000
    calls = "".join(
        call(f"c{i}", "run_terminal_command", {"command": f"make x{i}"}) for i in range(n)
    )
    with ThreadedFakeProvider(api_key="k") as fake:
        fake.push(reply("ok then"))
        use_fake(editor, fake, "k")
        editor.open_chat(HEAD + calls + "USER: no, thanks\n")
        editor.lua("require('sidekick_tools').list_tasks()")  # starts the host
        host = editor.host_pid()
        answers(lambda: send(editor), deadline=40, unblock=lambda: os.kill(host, signal.SIGKILL))
        editor.wait_text("ok then", timeout=60)
    text = editor.text()
    assert text.count("status=denied reason=user") == n
    assert "no, thanks" in json.dumps(fake.requests[0].json)
