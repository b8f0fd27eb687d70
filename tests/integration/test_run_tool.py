""":SidekickRunTool end to end in a real headless Neovim."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import wait_for
from tests.integration.ui_helpers import result_body, three_in_a_batch

pytestmark = pytest.mark.integration


def call_block(tool: str, params: dict, call_id: str | None = "call_01") -> str:
    info = f"tool {tool}" + (f" id={call_id}" if call_id else "")
    return f"```{info}\n{json.dumps(params)}\n```\n"


def chat(*blocks: str, intro: str = "ASSISTANT: Let me look.\n\n") -> str:
    return "USER: please help\n\n" + intro + "\n".join(blocks)


def test_run_command_writes_result_and_diagnostic(editor):
    editor.setup()
    buf = editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo hello"})))
    header = editor.lines().index("```tool run_terminal_command id=call_01")
    info = editor.run_tool(header + 1)
    assert info["id"] == "call_01"
    text = editor.wait_text("```result id=call_01 status=completed exit=0")
    lines = text.split("\n")
    res = lines.index(next(line for line in lines if line.startswith("```result id=call_01")))
    assert lines[res + 1] == "hello"
    assert lines[res + 2] == "```"
    assert res == header + 3  # right after the call block
    d = editor.wait_diag(header, "✓ run_terminal_command")
    assert d["severity"] == 3  # INFO
    # the last pending call resolved: an empty USER: line was appended
    assert editor.lines(buf)[-1] == "USER: "


@pytest.mark.parametrize("command", ["SidekickRunTool", "SidekickRunTools!"])
def test_calls_run_in_the_windows_working_directory(editor, command):
    """A window-local :lcd is where the call runs (the cwd comes with the request)."""
    editor.setup()
    sub = editor.workdir / "sub dir"
    sub.mkdir()
    (sub / "here.txt").write_text("found\n")
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "pwd; cat here.txt"})))
    editor.nvim.command(f"lcd {str(sub).replace(' ', chr(92) + ' ')}")
    editor.nvim.command("call cursor(5, 1)")
    editor.nvim.command(command)
    out = editor.wait_text("```result id=call_01 status=completed exit=0")
    lines = out.split("\n")
    res = next(i for i, line in enumerate(lines) if line.startswith("```result id=call_01"))
    assert lines[res + 1 : res + 3] == [str(sub), "found"]


@pytest.mark.parametrize("fn", ["run_tool()", "run_tools(nil, { confirm = false })"])
def test_the_reply_carries_the_running_state(editor, fn):
    """When run_tool/run_tools return, Lua already knows the call runs: the
    reply brings the state along, no later notification is needed for it."""
    editor.setup()
    marker = editor.workdir / "go"
    cmd = f"while [ ! -e '{marker}' ]; do sleep 0.02; done"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": cmd})))
    editor.nvim.command("call cursor(5, 1)")
    states = editor.lua(
        f"""
        local info = require('sidekick_tools').{fn}
        local out, buf = {{}}, vim.api.nvim_get_current_buf()
        for _, st in pairs(require('sidekick_tools.client').tracked[buf] or {{}}) do
          table.insert(out, st.state)
        end
        return {{ info = info, states = out }}
        """
    )
    assert states["states"] == ["running"]
    assert "events" not in states["info"]
    editor.wait_diag(4, "⟳ run_terminal_command (running")
    marker.write_text("")
    editor.wait_text("```result id=call_01 status=completed exit=0")


def test_failed_command_shows_exit_code(editor):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo oops >&2; exit 3"})))
    header = 4
    editor.run_tool(header + 1)
    text = editor.wait_text("status=failed exit=3")
    assert "oops" in text
    d = editor.wait_diag(header, "✗ run_terminal_command: exit 3")
    assert d["severity"] == 1  # ERROR


def test_running_diagnostic_while_the_command_runs(editor):
    editor.setup()
    marker = editor.workdir / "release"
    cmd = f"while [ ! -e {marker} ]; do sleep 0.05; done; echo released"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": cmd})))
    editor.run_tool(5)
    d = editor.wait_diag(4, "⟳ run_terminal_command (running")
    assert d["severity"] == 4  # HINT
    # the editor stays responsive while the task runs: edit the buffer meanwhile
    editor.lua("vim.api.nvim_buf_set_lines(0, 0, 0, false, {'SYSTEM: be brief', ''})")
    marker.write_text("")
    text = editor.wait_text("```result id=call_01 status=completed exit=0")
    assert "\nreleased\n" in text
    # the mark followed the call down two lines
    editor.wait_diag(6, "✓ run_terminal_command")


def test_hand_written_call_gets_an_id(editor):
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "echo x"}, None)))
    info = editor.run_tool(5)
    assert re.fullmatch(r"call_[0-9a-f]{6}", info["id"])
    text = editor.wait_text(f"```result id={info['id']} status=completed")
    assert f"```tool run_terminal_command id={info['id']}" in text


def test_no_call_under_cursor_is_an_error_and_nothing_else(editor):
    editor.setup()
    original = chat(call_block("run_terminal_command", {"command": "echo x"}))
    editor.open_chat(original)
    result = editor.run_tool(1)
    assert result is None
    notes = editor.notifications()
    assert any("no tool call at line 1" in n for n in notes), notes
    assert editor.text() + "\n" == original or editor.text() == original.rstrip("\n")


def test_no_call_in_the_buffer_is_said_without_starting_the_host(editor):
    """DESIGN §6: no call under the cursor is an error message, nothing else;
    with no call in the buffer at all, not even the host is started for it."""
    editor.setup()
    editor.open_chat("USER: hello\n\nASSISTANT: Hi, no tools today.\n")
    assert editor.run_tool(3) is None
    notes = editor.notifications()
    assert any("no tool call at line 3" in n for n in notes), notes
    assert editor.host_pid() == 0


def test_chain_runs_auto_acceptable_calls_and_stops_at_the_first_that_is_not(editor):
    editor.setup()
    (editor.workdir / "notes.txt").write_text("remember the milk\n")
    text = chat(
        call_block("run_terminal_command", {"command": "echo first"}, "c1"),
        call_block("read_files", {"paths": ["notes.txt"]}, "c2"),
        call_block("run_terminal_command", {"command": "ls"}, "c3"),
        call_block("write_file", {"path": "out.txt", "content": "x"}, "c4"),
        call_block("run_terminal_command", {"command": "echo never"}, "c5"),
    )
    editor.open_chat(text)
    editor.run_tool(5)
    out = editor.wait_text("```result id=c3 status=completed")
    assert "```result id=c1 status=completed" in out
    assert "remember the milk" in out
    # write_file is not auto-acceptable: the chain stops there and nothing later runs
    # (the states of calls no host follows come from a scan a moment after the text
    # changed; until it is drawn, a state may stand where the writes moved it from)
    editor.wait_diag(editor.lines().index("```tool write_file id=c4"), "▶ write_file")
    assert "id=c4 status" not in editor.text()
    assert "id=c5 status" not in editor.text()
    assert not (editor.workdir / "out.txt").exists()
    assert not editor.lines()[-1].startswith("USER:")


def test_run_tools_runs_every_pending_call_of_the_last_message(editor):
    editor.setup()
    text = chat(
        call_block("write_file", {"path": "a.txt", "content": "A"}, "w1"),
        call_block("run_terminal_command", {"command": "cat a.txt"}, "r1"),
    )
    editor.open_chat(text)
    editor.nvim.command("SidekickRunTools!")  # write_file needs consent: given by the !
    out = editor.wait_text("```result id=r1 status=completed exit=0")
    assert "```result id=w1 status=completed" in out
    assert (editor.workdir / "a.txt").read_text() == "A"
    lines = out.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("```result id=r1"))
    assert lines[header + 1] == "A"


def test_policy_function_can_deny(editor):
    editor.lua(
        "require('sidekick_tools').setup({ python = ..., state_dir = select(2, ...),"
        " auto_accept = { policy = function(tool, params)"
        " if params.command and params.command:find('rm ') then return 'deny' end end } })",
        __import__("sys").executable,
        str(editor.state_dir),
    )
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "rm -rf nothing"})))
    editor.run_tool(5)
    editor.wait_text("```result id=call_01 status=denied")
    editor.wait_diag(4, "⊘ run_terminal_command")


def test_a_policy_given_by_setup_again_rules_the_next_call(editor):
    """setup() again (a config reload) with a policy: the running host asks it
    before the next call, as it would have had the policy been there from the start."""
    editor.setup()
    first = call_block("run_terminal_command", {"command": "echo one"}, "c1")
    # not a safe command, so the chain after c1 leaves it for the user
    second = call_block("run_terminal_command", {"command": "echo two > two.txt"}, "c2")
    editor.open_chat(chat(first, second))
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    editor.wait_diag(next(i for i, x in enumerate(editor.lines()) if "id=c2" in x), "▶")
    editor.lua(
        "require('sidekick_tools').setup({ python = ..., state_dir = select(2, ...),"
        " auto_accept = { policy = function() return 'deny' end } })",
        __import__("sys").executable,
        str(editor.state_dir),
    )
    row = next(i for i, line in enumerate(editor.lines()) if "id=c2" in line)
    editor.run_tool(row + 1)
    editor.wait_text("```result id=c2 status=denied")
    assert not (editor.workdir / "two.txt").exists()


def test_deleting_a_running_block_writes_nothing_back(editor):
    editor.setup()
    marker = editor.workdir / "go"
    cmd = f"while [ ! -e {marker} ]; do sleep 0.05; done; echo done-it"
    editor.open_chat(chat(call_block("run_terminal_command", {"command": cmd})))
    editor.run_tool(5)
    editor.wait_diag(4, "⟳")
    before = editor.lines()
    editor.lua("vim.api.nvim_buf_set_lines(0, 4, 7, false, {})")  # delete the call block
    after_delete = editor.lines()
    assert len(after_delete) == len(before) - 3
    marker.write_text("")
    # the task ends; the host drops the call (its mark is gone) and writes nothing
    # (the task may not be stored yet when the block is deleted: the call's tool
    # starts after :SidekickRunTool answers)
    wait_for(
        lambda: (
            [t["status"] for t in editor.lua("return require('sidekick_tools').list_tasks()")]
            == ["completed"]
        )
    )
    wait_for(
        lambda: (
            editor.lua(
                "local b = require('sidekick_tools.client')\n"
                "return vim.tbl_count(b.tracked[vim.api.nvim_get_current_buf()] or {})"
            )
            == 0
        )
    )
    assert editor.lines() == after_delete
    assert "done-it" not in editor.text()


def test_long_output_keeps_the_tail_and_names_the_log(editor):
    editor.setup(result={"max_lines": 5})
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "seq 1 50"})))
    editor.run_tool(5)
    editor.wait_text("```result id=call_01 status=completed exit=0")
    body = result_body(editor, "call_01")
    assert body[-5:] == ["46", "47", "48", "49", "50"]
    assert "45" not in body
    note = body[0]
    assert "truncated" in note
    log = re.search(r"(/\S+/stdout)", note).group(1)
    with open(log) as f:
        assert f.read().split() == [str(i) for i in range(1, 51)]


def test_a_long_outputs_note_counts_every_line_it_hides(editor):
    """`seq 1 300000`: "[... 1726752 earlier bytes and 37249 earlier lines not
    shown; ...]" while 299,800 lines were hidden."""
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "seq 1 300000"})))
    editor.run_tool(5)
    editor.wait_text("```result id=call_01 status=completed exit=0")
    body = result_body(editor, "call_01")
    assert re.fullmatch(
        r"\[\.\.\. 299800 earlier lines truncated; full output: /\S+/stdout\]", body[0]
    )
    assert body[1:] == [str(i) for i in range(299801, 300001)]


def test_help_tags_resolve(editor, tmp_path):
    import shutil

    from tests.integration.conftest import ROOT

    doc = tmp_path / "rtp" / "doc"
    shutil.copytree(ROOT / "doc", doc)
    (doc / "tags").unlink()
    editor.nvim.command(f"helptags {doc}")  # fails on duplicate tags
    # the shipped tags file is the one :helptags makes, so :h works without it
    assert (doc / "tags").read_text() == (ROOT / "doc" / "tags").read_text()
    editor.nvim.command(f"set runtimepath^={doc.parent}")
    for tag in (
        "sidekick_tools",
        "sidekick-tools",  # the plugin's own name, as users type it (was E149)
        ":SidekickRunTool",
        ":SidekickDeny",
        "sidekick_tools-config",
        "sidekick_tools.setup()",
        "sidekick_tools.deny()",
        "sidekick_tools-safe-commands",
        "sidekick_tools-safe-git",
        "sidekick_tools-command-forms",
    ):
        editor.nvim.command(f"help {tag}")
        # 'buftype' and the text, not 'filetype': Neovim 0.10 run as root sets none
        assert editor.lua("return vim.bo.buftype") == "help"
        assert editor.lua("return vim.api.nvim_buf_get_name(0)").endswith("/sidekick_tools.txt")
        assert f"*{tag}*" in editor.lua("return vim.api.nvim_get_current_line()")
        editor.nvim.command("helpclose")


def test_calls_waiting_their_turn_in_run_tools_say_so_and_can_still_be_denied(editor):
    """:SidekickRunTools runs the calls one after the other: the ones behind a
    running call show ⧗ queued, not ▶ (which invites running them by hand);
    one denied while it waits is not run when its turn comes."""
    marker, rows = three_in_a_batch(editor)
    editor.wait_diag(rows["a"], "⟳ run_terminal_command")
    for cid in "bc":
        editor.wait_diag(rows[cid], "⧗ run_terminal_command (queued, runs after the calls above)")
    editor.nvim.command(f"call cursor({rows['c'] + 1}, 1)")
    editor.nvim.command("SidekickDeny not this one")
    editor.wait_text("```result id=c status=denied")
    marker.write_text("")
    editor.wait_text("```result id=b status=completed")
    text = editor.text()
    assert "```result id=a status=completed" in text and "\nthird\n" not in text
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ all = true })")
    assert sorted(t["call_id"] for t in tasks) == ["a", "b"]


def test_a_call_whose_text_changed_while_the_question_was_open_is_not_run(editor):
    """What runs is what the user was asked about: a call whose text changed
    while :SidekickRunTools' question was open (a reply still arriving, an
    edit) is not run, and the user is told."""
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": "touch asked.txt"}, "c1")))
    editor.lua(
        "require('sidekick_tools.consent').ask = function()\n"
        "  local row = vim.fn.search('touch asked.txt') - 1\n"
        "  vim.api.nvim_buf_set_lines(0, row, row + 1, false,"
        ' { \'{"command": "touch other.txt"}\' })\n'
        "  return true\n"
        "end"
    )
    editor.nvim.command("SidekickRunTools")
    wait_for(lambda: [n for n in editor.notifications() if "c1 changed after you were asked" in n])
    wait_for(lambda: [n for n in editor.notifications() if "none ran" in n])
    assert "```result" not in editor.text()
    assert not (editor.workdir / "other.txt").exists()
    assert not (editor.workdir / "asked.txt").exists()


def open_file(editor, path, lines=None) -> int:
    """`path` in a buffer of its own (typed into when `lines` is given); the chat stays current."""
    chat_buf = editor.nvim.current.buffer.number
    editor.nvim.command(f"badd {path}")
    buf = int(editor.lua("return vim.fn.bufnr(...)", str(path)))
    editor.lua("vim.fn.bufload(...)", buf)
    if lines is not None:
        editor.lua("vim.api.nvim_buf_set_lines(..., 0, -1, false, select(2, ...))", buf, lines)
    assert editor.nvim.current.buffer.number == chat_buf
    return buf


@pytest.mark.parametrize(
    "call",
    [
        {"tool": "write_file", "params": {"path": "notes.txt", "content": "by the tool\n"}},
        {
            "tool": "replace_in_file",
            "params": {"path": "link.txt", "old": "on disk", "new": "by the tool"},
        },
    ],
)
def test_a_file_with_unsaved_changes_in_neovim_is_not_written(editor, call):
    """Neither the user's unsaved edits nor the tool's are lost: the call fails,
    saying so, and writes nothing; saved, the call runs again and writes it."""
    editor.setup()
    notes = editor.workdir / "notes.txt"
    notes.write_text("on disk\n")
    (editor.workdir / "link.txt").symlink_to("notes.txt")  # the same file by another name
    buf = open_file(editor, notes, ["on disk, and typed"])
    editor.open_chat(chat(call_block(call["tool"], call["params"], "w1")))
    editor.run_tool(5)
    text = editor.wait_text("```result id=w1 status=failed")
    assert f"has unsaved changes in Neovim (buffer {buf}); nothing was written" in text
    assert notes.read_text() == "on disk\n"
    assert editor.lines(buf) == ["on disk, and typed"]
    editor.wait_diag(4, "✗ " + call["tool"])
    # saved (the typed line is kept), the same call runs again and writes
    editor.lua("vim.api.nvim_buf_call(..., function() vim.cmd('silent write') end)", buf)
    editor.lua("vim.api.nvim_buf_set_lines(0, 7, -1, false, {})")  # its result removed
    editor.run_tool(5)
    editor.wait_text("```result id=w1 status=completed")
    assert "by the tool" in notes.read_text()


def test_a_buffer_showing_a_file_a_tool_wrote_reads_it_again(editor):
    """With no changes of its own, it shows what the tool wrote at once (not at the
    next :checktime), and `u` in it takes the tool's change back."""
    editor.setup()
    notes = editor.workdir / "notes.txt"
    notes.write_text("one\ntwo\n")
    buf = open_file(editor, notes)
    editor.open_chat(
        chat(call_block("replace_in_file", {"path": "notes.txt", "old": "two", "new": "2"}, "r1"))
    )
    editor.run_tool(5)
    editor.wait_text("```result id=r1 status=completed")
    wait_for(lambda: editor.lines(buf) == ["one", "2"])
    assert editor.lua("return vim.bo[...].modified", buf) is False
    editor.lua("vim.api.nvim_buf_call(..., function() vim.cmd('silent undo') end)", buf)
    assert editor.lines(buf) == ["one", "two"]


def test_a_file_read_shows_code_that_names_secrets_as_it_is(editor):
    """What the model reads of a source file is what the file holds (its
    replace_in_file must match it); a secret's literal in it is still masked."""
    editor.setup()
    source = (
        "class Settings:\n"
        "    api_key: Optional[str] = None\n"
        "    token = os.environ['TOKEN']\n"
        "    password = 'hunter2'\n"
    )
    (editor.workdir / "settings.py").write_text(source)
    editor.open_chat(chat(call_block("read_files", {"paths": ["settings.py"]}, "r1")))
    editor.run_tool(5)
    text = editor.wait_text("```result id=r1 status=completed")
    assert "    api_key: Optional[str] = None\n    token = os.environ['TOKEN']\n" in text
    assert "    password = '***'" in text and "hunter2" not in text


def test_a_new_file_with_unsaved_text_under_a_linked_folder_is_not_written(editor):
    """A buffer for a file not on disk yet, in folders not made yet, under a link:
    the same file as the call's path once the link is resolved."""
    editor.setup()
    (editor.workdir / "realdir").mkdir()
    (editor.workdir / "linkdir").symlink_to("realdir")
    target = editor.workdir / "linkdir" / "newsub" / "new.txt"
    buf = open_file(editor, target, ["typed, never written"])
    call = {"path": "realdir/newsub/new.txt", "content": "by the tool\n"}
    editor.open_chat(chat(call_block("write_file", call, "w1")))
    editor.run_tool(5)
    text = editor.wait_text("```result id=w1 status=failed")
    assert f"has unsaved changes in Neovim (buffer {buf})" in text
    assert not (editor.workdir / "realdir" / "newsub").exists()
