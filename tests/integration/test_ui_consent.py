"""What a user sees of each call's state, and consent both ways: :SidekickDeny
refuses a call, :SidekickRunTools asks once before running calls the policy
would not approve (DESIGN §5, §6)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.integration.ui_helpers import HEADER_ROW, call_block, chat, three_in_a_batch
from tests.integration.ui_screen import Screen

pytestmark = pytest.mark.integration


def drawn(editor, buf: int = 0) -> dict[str, list[str]]:
    """What the diagnostic handlers drew in `buf`: virtual texts and sign texts."""
    return editor.lua(
        "local out = { virt = {}, signs = {} }\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(..., -1, 0, -1, { details = true })) do\n"
        "  local d = m[4]\n"
        "  if d.virt_text then\n"
        "    local t = {}\n"
        "    for _, c in ipairs(d.virt_text) do table.insert(t, c[1]) end\n"
        "    table.insert(out.virt, table.concat(t))\n"
        "  end\n"
        "  if d.sign_text then table.insert(out.signs, d.sign_text) end\n"
        "end\n"
        "return out",
        buf,
    )


def row_of(editor, needle: str, buf: int = 0) -> int:
    return next(i for i, line in enumerate(editor.lines(buf)) if line.startswith(needle))


def test_state_is_drawn_whatever_the_global_diagnostic_settings(editor):
    # Neovim 0.11+ turns virtual text off by default; a user may turn signs off too
    editor.lua("vim.diagnostic.config({ virtual_text = false, signs = false })")
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo hi"}, "c1")))
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_diag(HEADER_ROW, "✓ run_terminal_command")
    seen = wait_for(lambda: (d := drawn(editor)) and d["virt"] and d)
    assert any("✓ run_terminal_command" in v for v in seen["virt"]), seen
    assert seen["signs"], seen
    # the global setting is still the user's
    assert editor.lua("return vim.diagnostic.config().virtual_text") is False
    # ui = { virtual_text = false } turns ours off; signs stay
    editor.setup(ui={"virtual_text": False})
    seen = wait_for(lambda: (d := drawn(editor)) and not d["virt"] and d)
    assert seen["signs"]
    # a table is the handler's options
    editor.setup(ui={"virtual_text": {"prefix": "»"}, "signs": False})
    seen = wait_for(lambda: (d := drawn(editor)) and d["virt"] and not d["signs"] and d)
    assert any("» ✓ run_terminal_command" in v for v in seen["virt"]), seen


def test_deny_with_a_reason_is_what_the_model_reads(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo fine"}, "ok"),
            call_block("run_terminal_command", {"command": "rm -rf build"}, "rm"),
        )
    )
    row = row_of(editor, "```tool run_terminal_command id=rm")
    editor.nvim.command(f"call cursor({row + 2}, 1)")  # on the JSON line
    editor.nvim.command("SidekickDeny not on my machine, use a temp dir")
    text = editor.wait_text("```result id=rm status=denied reason=user")
    block = text.split("```result id=rm status=denied reason=user\n", 1)[1].split("\n")
    assert block[0] == "not on my machine, use a temp dir"
    editor.wait_diag(row, "⊘ run_terminal_command: denied by you")
    assert "```result id=ok" not in editor.text()  # the other call is untouched
    assert editor.notifications() == []
    # nothing under the cursor: an error message, nothing else
    before = editor.text()
    editor.nvim.command("call cursor(1, 1)")
    editor.nvim.command("SidekickDeny")
    notes = wait_for(editor.notifications)
    assert len(notes) == 1 and "no tool call at line 1" in notes[0]
    assert editor.text() == before
    # a call that has its result already cannot be denied
    editor.nvim.command(f"call cursor({row + 1}, 1)")
    editor.nvim.command("SidekickDeny")
    assert "already has a result" in wait_for(lambda: editor.notifications()[1:])[0]
    assert editor.text() == before


def test_a_denial_goes_on_with_the_auto_acceptable_calls_after_it(editor):
    """As :SidekickRunTool does after the call it runs (and the chain after a
    call the policy denies): the calls after a denied one run while they are
    auto-acceptable, up to the next that needs consent. Left pending, they
    kept a chat loop waiting on the user for a call that needed no one."""
    editor.setup()
    editor.open_chat(
        chat(
            call_block("write_file", {"path": "a.txt", "content": "A"}, "w1"),
            call_block("run_terminal_command", {"command": "echo safe"}, "e1"),
            call_block("write_file", {"path": "b.txt", "content": "B"}, "w2"),
        )
    )
    editor.nvim.command(f"call cursor({HEADER_ROW + 1}, 1)")
    editor.nvim.command("SidekickDeny")
    editor.wait_text("```result id=e1 status=completed exit=0")
    editor.wait_diag(row_of(editor, "```tool write_file id=w2"), "▶ write_file")
    assert "```result id=w2" not in editor.text()
    assert not (editor.workdir / "a.txt").exists() and not (editor.workdir / "b.txt").exists()


def test_a_denial_inside_a_run_tools_batch_leaves_the_rest_to_the_batch(editor):
    """Denying a call queued in :SidekickRunTools starts no chain of its own:
    the batch runs the calls after it, each once, in order."""
    marker, rows = three_in_a_batch(editor)
    editor.wait_diag(rows["c"], "⧗ run_terminal_command (queued")
    editor.nvim.command(f"call cursor({rows['b'] + 1}, 1)")
    editor.nvim.command("SidekickDeny")
    editor.wait_text("```result id=b status=denied")
    c = row_of(editor, "```tool run_terminal_command id=c")
    editor.wait_diag(c, "⧗ run_terminal_command (queued")  # still the batch's
    marker.write_text("")
    editor.wait_text("```result id=c status=completed")
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ all = true })")
    by_call = {t["call_id"]: t for t in tasks}
    assert sorted(t["call_id"] for t in tasks) == ["a", "c"]  # c ran once, b never
    # in the batch's order: c only once a had ended (a chain of the denial's
    # own would have started it while a ran)
    assert by_call["c"]["started_at"] >= by_call["a"]["ended_at"]


def test_deny_key_and_lua_api(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("write_file", {"path": "a.txt", "content": "A"}, "w1"),
            call_block("write_file", {"path": "b.txt", "content": "B"}, "w2"),
        )
    )
    buf = editor.nvim.current.buffer.number
    assert editor.lua("return vim.fn.maparg('<leader>sd', 'n', false, true).buffer") == 1
    editor.nvim.command(f"call cursor({HEADER_ROW + 1}, 1)")
    editor.nvim.feedkeys(editor.nvim.replace_termcodes("\\sd", True, False, True), "x", False)
    text = editor.wait_text("```result id=w1 status=denied reason=user")
    assert "```result id=w1 status=denied reason=user\nThe user denied this call.\n" in text
    # from Lua, in a buffer that is not the current one
    editor.nvim.command("enew")
    w2 = row_of(editor, "```tool write_file id=w2", buf)
    info = editor.lua(
        "local buf, lnum = ...\nreturn require('sidekick_tools').deny(buf, lnum, 'B is wrong')",
        buf,
        w2 + 1,
    )
    assert info == {"id": "w2", "tool": "write_file"}
    text = editor.wait_text("```result id=w2 status=denied reason=user\nB is wrong\n", buf=buf)
    assert text.split("\n")[-1] == "USER: "  # the last pending call resolved
    assert not (editor.workdir / "a.txt").exists() and not (editor.workdir / "b.txt").exists()


CONSENT_CHAT = chat(
    call_block("run_terminal_command", {"command": "ls"}, "safe"),
    call_block("run_terminal_command", {"command": "touch made.txt"}, "touch"),
    call_block("write_file", {"path": "w.txt", "content": "W"}, "write"),
    call_block("run_terminal_command", {"cmd": "oops"}, "broken"),
)


def test_run_tools_asks_once_for_the_calls_that_need_consent(editor):
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(CONSENT_CHAT)
    before = editor.text()
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(1)
    # the malformed call cannot run: it is not counted among the calls to run
    # nor among those needing consent ("Run 4 ... These 3 need" counted it)
    assert "Run 3 pending tool calls? These 2 need your consent:" in dialog
    assert "run_terminal_command  touch made.txt  (touch is not a safe command)" in dialog
    # each led by its line: calls written alike are told apart
    row = next(i for i, line in enumerate(before.split("\n")) if "touch made.txt" in line)
    assert f"  line {row}: run_terminal_command  touch made.txt" in dialog
    assert 'write_file  {"content": "W"} (path="w.txt")' in dialog
    assert "(problem:" in dialog and "command" in dialog.split("(problem:", 1)[1]
    assert "1 other runs without asking." in dialog
    # it is named apart, after the calls asked about, with its problem
    head, invalid = dialog.split("Cannot run (each ✗ says why):", 1)
    assert "(problem:" not in head and "(problem:" in invalid
    assert "  ls" not in dialog  # the safe call is not asked about
    # while the question is open nothing has run
    assert editor.lua("return vim.api.nvim_get_mode().mode") == "r?"
    assert editor.text() == before
    editor.nvim.input("c")  # Cancel
    note = wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert "4 calls still pending" in note[0]
    assert editor.text() == before
    assert not (editor.workdir / "made.txt").exists()
    # asked again, and run
    editor.nvim.input(":SidekickRunTools\r")
    screen.dialog(2)
    editor.nvim.input("r")
    text = editor.wait_text("```result id=broken status=failed")
    for call_id in ("safe", "touch", "write"):
        assert f"```result id={call_id} status=completed" in text
    assert (editor.workdir / "made.txt").exists()
    assert (editor.workdir / "w.txt").read_text() == "W"
    assert len(screen.shown("confirm")) == 2  # one question per command


def setup_denying_rm(editor) -> None:
    """setup() with a policy that denies any command running `rm `."""
    editor.lua(
        "require('sidekick_tools').setup({ python = ..., state_dir = select(2, ...),"
        " auto_accept = { policy = function(tool, params)"
        " if params.command and params.command:find('rm ') then return 'deny' end end } })",
        sys.executable,
        str(editor.state_dir),
    )


def test_run_tools_can_run_only_the_calls_that_need_no_consent(editor):
    """The question offered all or nothing: to run the safe `ls` and decide on
    the `touch` later, a user ran the calls one by one. "Only the others" runs
    the calls the question says run without asking (and writes the policy's
    denials), and leaves the ones it asked about pending."""
    setup_denying_rm(editor)
    screen = Screen(editor)
    # the buttons (a UI is shown them apart from the question) and the default
    editor.lua(
        "local confirm = vim.fn.confirm\n"
        "vim.fn.confirm = function(msg, buttons, default, ...)\n"
        "  _G.buttons = { buttons, default }\n"
        "  return confirm(msg, buttons, default, ...)\n"
        "end"
    )
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "touch first.txt"}, "touch"),
            call_block("run_terminal_command", {"command": "ls"}, "safe"),
            call_block("run_terminal_command", {"command": "rm -rf build"}, "rm"),
            call_block("write_file", {"path": "w.txt", "content": "W"}, "write"),
        )
    )
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(1)
    assert "These 2 need your consent" in dialog and "1 other runs without asking." in dialog
    assert editor.lua("return _G.buttons") == ["&Run\n&Only the others\n&Cancel", 3]
    editor.nvim.input("o")
    text = editor.wait_text("```result id=rm status=denied")
    assert "```result id=safe status=completed" in text
    note = wait_for(lambda: [n for n in editor.notifications() if "left pending" in n])
    assert note == ["sidekick_tools: 2 calls that need your consent left pending"]
    assert "```result id=touch" not in text and "```result id=write" not in text
    assert not (editor.workdir / "first.txt").exists() and not (editor.workdir / "w.txt").exists()
    # asked again: only those two, and no "only the others" with none to run
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(2)
    assert "Run 2 pending tool calls? These 2 need your consent:" in dialog
    assert editor.lua("return _G.buttons") == ["&Run\n&Cancel", 2]
    editor.nvim.input("r")
    editor.wait_text("```result id=write status=completed")
    assert (editor.workdir / "first.txt").exists() and (editor.workdir / "w.txt").read_text() == "W"


def test_a_call_that_cannot_run_is_no_reason_to_ask(editor):
    """Only runnable calls need consent: a malformed call beside a safe one is
    given its failed result, and nothing is asked."""
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "ls"}, "safe"),
            call_block("no_such_tool", {"x": 1}, "unknown"),
            call_block("run_terminal_command", {"cmd": "oops"}, "broken"),
        )
    )
    editor.nvim.input(":SidekickRunTools\r")  # a question would wait for its answer
    asked = wait_for(
        lambda: screen.shown("confirm") or ("```result id=broken" in editor.text() and [""])
    )
    assert asked == [""], f"asked: {asked}"
    text = editor.wait_text("```result id=broken status=failed")
    assert "```result id=unknown status=failed" in text
    assert "```result id=safe status=completed" in text
    assert screen.shown("confirm") == []


def test_run_tools_bang_and_calls_the_policy_decides(editor):
    setup_denying_rm(editor)
    screen = Screen(editor)
    # approved or denied by the policy: nothing to ask
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo hi"}, "a"),
            call_block("run_terminal_command", {"command": "rm -rf build"}, "b"),
        )
    )
    editor.nvim.command("SidekickRunTools")
    text = editor.wait_text("```result id=b status=denied")
    assert "```result id=a status=completed" in text
    row = text.split("\n").index("```tool run_terminal_command id=b")
    editor.wait_diag(row, "⊘ run_terminal_command: denied by the policy")
    # ! runs calls that need consent without the question
    editor.open_chat(
        chat(call_block("run_terminal_command", {"command": "touch bang.txt"}, "c")),
        name="other.sidekick.md",
    )
    editor.nvim.command("SidekickRunTools!")
    editor.wait_text("```result id=c status=completed")
    assert (editor.workdir / "bang.txt").exists()
    assert screen.shown("confirm") == []


def test_without_a_ui_to_ask_on_nothing_runs_unless_confirm_is_false(editor):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "touch no.txt"}, "d")))
    msg = editor.lua("local _, msg = require('sidekick_tools').run_tools(0) return msg")
    assert "nothing was run" in msg
    assert "```result" not in editor.text()
    res = editor.lua("return require('sidekick_tools').run_tools(0, { confirm = false })")
    assert res["ids"] == ["d"]
    editor.wait_text("```result id=d status=completed")
    assert (editor.workdir / "no.txt").exists()


def test_run_tools_with_nothing_pending_says_so(editor):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo once"}, "a")))
    editor.nvim.command("SidekickRunTools")
    editor.wait_text("```result id=a status=completed")
    before = editor.text()
    editor.nvim.command("SidekickRunTools")
    notes = wait_for(
        lambda: [n for n in editor.notifications() if "no pending tool call" in n], timeout=5
    )
    assert len(notes) == 1
    assert editor.text() == before
    editor.nvim.command("SidekickRunTools!")
    wait_for(lambda: len([n for n in editor.notifications() if "no pending tool call" in n]) == 2)


def test_run_tools_runs_only_the_calls_the_question_named(editor):
    """A call added while the question is open (a reply still streaming, say)
    does not run unasked; a hand-written call without an id was named too."""
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "touch asked.txt"}, "asked"),
            '```tool run_terminal_command\n{"command": "touch unnamed.txt"}\n```\n',
        )
    )
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(1)
    assert "touch asked.txt" in dialog and "touch unnamed.txt" in dialog
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, {'```tool run_terminal_command id=late',"
        " '{\"command\": \"touch late.txt\"}', '```'})"
    )
    editor.nvim.input("r")
    wait_for(lambda: (editor.workdir / "asked.txt").exists())
    wait_for(lambda: (editor.workdir / "unnamed.txt").exists())
    editor.wait_text("touch unnamed.txt")
    wait_for(lambda: editor.text().count("```result id=") == 2)
    assert "```result id=late" not in editor.text()
    assert not (editor.workdir / "late.txt").exists()


RACE = (
    "local st, lnum = require('sidekick_tools'), ...\n"
    "local first = st.{first}(0, lnum{arg})\n"
    "local ran, run_all = st.run_tools(0, {{ confirm = false }})\n"
    "{more}"
    "return {{ first = first or vim.NIL, ran = ran or vim.NIL, run_all = run_all, {back} }}"
)


def test_a_call_denied_a_moment_ago_is_not_run_before_its_denial_is_written(editor):
    """A denial is written a moment after :SidekickDeny answers; meanwhile the
    block still looks pending. The burst `<Space>sd:SidekickRunTools!` ran the
    denied command there, and its result replaced the denial."""
    editor.setup()
    marker = editor.workdir / "ran"
    editor.open_chat(
        chat(call_block("run_terminal_command", {"command": f"touch '{marker}'"}, "d1"))
    )
    out = editor.lua(RACE.format(first="deny", arg=", 'no'", more="", back=""), HEADER_ROW + 1)
    assert out["first"] == {"id": "d1", "tool": "run_terminal_command"}
    assert out["ran"] is None  # nothing ran; either the denial was still on its way, or in
    assert out["run_all"] in (
        "sidekick_tools: no pending call can run: d1 already runs or was denied; "
        "its result is coming",
        "sidekick_tools: no pending tool call in the last assistant message",
    )
    editor.wait_text("```result id=d1 status=denied reason=user\nno\n```")
    editor.wait_diag(HEADER_ROW, "⊘ run_terminal_command")
    assert not marker.exists()


def test_a_call_started_a_moment_ago_is_neither_run_again_nor_denied(editor):
    editor.setup()
    go = editor.workdir / "go"
    cmd = f"echo once >> runs.txt; while [ ! -e '{go}' ]; do sleep 0.02; done"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": cmd}, "r1")))
    more = "local _, run_one = st.run_tool(0, lnum)\nlocal _, deny = st.deny(0, lnum)\n"
    lua = RACE.format(first="run_tool", arg="", more=more, back="run_one = run_one, deny = deny")
    out = editor.lua(lua, HEADER_ROW + 1)
    assert out["first"] == {"id": "r1", "tool": "run_terminal_command"}
    assert out["ran"] is None
    assert out["run_all"] == (
        "sidekick_tools: no pending call can run: r1 already runs or was denied; "
        "its result is coming"
    )
    for what in ("run_one", "deny"):
        assert out[what].startswith("sidekick_tools: r1 is already running"), what
    go.write_text("")
    editor.wait_text("```result id=r1 status=completed exit=0")
    assert (editor.workdir / "runs.txt").read_text() == "once\n"


def linked_outside(editor) -> Path:
    """docs/CHANGELOG.md in the project, a link to .bashrc in a folder outside
    it (not there yet): that folder."""
    outside = editor.workdir.parent / "home"
    outside.mkdir()
    (editor.workdir / "docs").mkdir()
    (editor.workdir / "docs" / "CHANGELOG.md").symlink_to(outside / ".bashrc")
    return outside


def test_the_question_says_where_a_write_really_goes(editor):
    """A link the project carries sends a write outside it: the question says so."""
    outside = linked_outside(editor)
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(
        chat(
            call_block("write_file", {"path": "docs/CHANGELOG.md", "content": "x"}, "w"),
            call_block("run_terminal_command", {"command": "ls\u00a0-la"}, "nb"),
        )
    )
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(1)
    assert f"[outside the working directory: {outside / '.bashrc'}]" in dialog
    assert "ls<U+00A0>-la  (it contains the character U+00A0, which is not plain text)" in dialog
    editor.nvim.input("c")
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert not (outside / ".bashrc").exists()


def test_running_a_call_whose_path_leads_outside_through_a_link_asks_first(editor):
    """:SidekickRunTool on a call reading `docs/CHANGELOG.md`: running it was
    the user's consent to what its text shows, but a link the project carries
    sends the write to a file outside it. It is asked about first, naming
    where it goes; declined, nothing runs; agreed, it runs."""
    outside = linked_outside(editor)
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(
        chat(call_block("write_file", {"path": "docs/CHANGELOG.md", "content": "x"}, "w"))
    )
    before = editor.text()
    row = before.split("\n").index("```tool write_file id=w") + 1
    editor.nvim.command(f"call cursor({row}, 1)")
    editor.nvim.input(":SidekickRunTool\r")
    dialog = screen.dialog(1)
    assert f"docs/CHANGELOG.md leads to {outside / '.bashrc'}, outside the working" in dialog
    editor.nvim.input("c")  # Cancel
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert editor.text() == before and not (outside / ".bashrc").exists()
    editor.nvim.input(":SidekickRunTool\r")
    screen.dialog(2)
    editor.nvim.input("r")  # Run
    editor.wait_text("```result id=w status=completed")
    assert (outside / ".bashrc").read_text() == "x"
    # a path that shows where it goes is the user's to read: not asked about
    editor.nvim.command("write")
    text = chat(call_block("write_file", {"path": "../home/y", "content": "y"}, "v"))
    editor.open_chat(text, name="second.sidekick.md")
    editor.run_tool(editor.text().split("\n").index("```tool write_file id=v") + 1)
    editor.wait_text("```result id=v status=completed")
    assert (outside / "y").read_text() == "y"


def test_running_a_write_a_link_leads_into_git_s_folder_asks_first(editor):
    """A repository carries `settings.cfg -> .git/config`: an edit of it by
    hand plants core.fsmonitor, which the next `git status` runs. It is asked
    about first, naming where it lands; agreed, its result says so too."""
    git = editor.workdir / ".git"
    git.mkdir()
    (git / "config").write_text("[core]\n")
    (editor.workdir / "settings.cfg").symlink_to(git / "config")
    editor.setup()
    screen = Screen(editor)
    params = {"path": "settings.cfg", "old": "[core]\n", "new": "[core]\n\tfsmonitor = x\n"}
    editor.open_chat(chat(call_block("replace_in_file", params, "e")))
    before = editor.text()
    editor.nvim.command(
        f"call cursor({before.split(chr(10)).index('```tool replace_in_file id=e') + 1}, 1)"
    )
    editor.nvim.input(":SidekickRunTool\r")
    dialog = screen.dialog(1)
    assert f"settings.cfg leads to {git / 'config'}, in a folder whose files git" in dialog
    editor.nvim.input("c")  # Cancel
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert editor.text() == before and (git / "config").read_text() == "[core]\n"
    editor.nvim.input(":SidekickRunTool\r")
    screen.dialog(2)
    editor.nvim.input("r")  # Run
    editor.wait_text("```result id=e status=completed")
    assert f"settings.cfg, which leads to {git / 'config'}" in editor.text()
    assert "fsmonitor" in (git / "config").read_text()


def test_running_a_call_written_with_needless_escapes_asks_first(editor):
    """A chat file's `{"command": "make test\\u003b\\u0020touch …"}` reads as
    one harmless command and runs two: running it by hand asks first, with
    the command decoded. A model's calls are written with no such escapes."""
    editor.setup()
    screen = Screen(editor)
    canary = editor.workdir / "canary"
    body = '{"command": "echo ok\\u003b\\u0020touch canary"}'
    editor.open_chat(chat(f"```tool run_terminal_command id=u\n{body}\n```\n"))
    before = editor.text()
    editor.nvim.command(f"call cursor({before.split(chr(10)).index(body)}, 1)")
    editor.nvim.input(":SidekickRunTool\r")
    dialog = screen.dialog(1)
    assert "decoded: echo ok; touch canary" in dialog
    editor.nvim.input("c")  # Cancel
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert editor.text() == before and not canary.exists()
    editor.nvim.input(":SidekickRunTool\r")
    screen.dialog(2)
    editor.nvim.input("r")  # Run
    editor.wait_text("```result id=u status=completed")
    assert canary.exists()


def test_running_a_task_again_whose_cwd_leads_outside_through_a_link_asks_first(editor):
    """The tasks list's `r` runs a call again by its id: it asks, as
    :SidekickRunTool does, when the call's cwd leads outside through a link."""
    outside = editor.workdir.parent / "home"
    outside.mkdir()
    (editor.workdir / "docs").symlink_to(outside)
    editor.setup()
    screen = Screen(editor)
    editor.open_chat(
        chat(call_block("run_terminal_command", {"command": "pwd", "cwd": "docs"}, "p"))
    )
    row = editor.text().split("\n").index("```tool run_terminal_command id=p") + 1
    editor.nvim.command(f"call cursor({row}, 1)")
    editor.nvim.input(":SidekickRunTool\r")
    assert "docs leads to" in screen.dialog(1)
    editor.nvim.input("r")
    text = editor.wait_text("```result id=p status=completed")
    token = text.split("task=")[1].split()[0]
    editor.nvim.input(f":lua require('sidekick_tools').rerun('{token}')\r")
    dialog = screen.dialog(2)
    assert f"docs leads to {outside}, outside the working directory" in dialog
    editor.nvim.input("c")  # Cancel
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert editor.text().count("```result id=p") == 1


def test_the_question_shows_the_whole_command_and_its_line_breaks(editor):
    """A model padded a command with an innocent start: the question showed its
    first 120 characters, newlines drawn as spaces, and hid what the shell runs
    after them."""
    editor.setup()
    screen = Screen(editor)
    start = "python -m pytest -q " + " ".join(f"tests/unit/test_part_{i}.py" for i in range(8))
    command = start + " --tb=short\ntouch pwned.txt"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": command}, "long")))
    editor.nvim.input(":SidekickRunTools\r")
    dialog = screen.dialog(1)
    assert "--tb=short ⏎ touch pwned.txt" in dialog
    editor.nvim.input("c")
    wait_for(lambda: [n for n in editor.notifications() if "nothing was run" in n])
    assert not (editor.workdir / "pwned.txt").exists()
