"""Everyday editing never stops the plugin (DESIGN §5): saving, reloading,
formatters that rewrite the buffer on save, undo/redo, fileformat changes.

Each test acts as a user does: run a call, save, run the next one; let a
background task end after the buffer was saved, reloaded or reformatted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"


def call(call_id: str, command: str, **extra) -> str:
    params = {"command": command, **extra}
    return f"```tool run_terminal_command id={call_id}\n{json.dumps(params)}\n```\n"


def row_of(editor, needle: str) -> int:
    """0-based row of the first line starting with `needle`."""
    return next(i for i, line in enumerate(editor.lines()) if line.startswith(needle))


def background(editor, call_id: str, marker) -> str:
    """Run call `call_id` (a command waiting for `marker`) until it is in the background."""
    editor.run_tool(row_of(editor, f"```tool run_terminal_command id={call_id}") + 1)
    editor.wait_text(f"```result id={call_id} status=running task=")
    return next(
        t["id"]
        for t in editor.lua("return require('sidekick_tools').list_tasks({ all = true })")
        if t["call_id"] == call_id
    )


def wait_cmd(marker, then: str = "echo done") -> str:
    return f"while [ ! -e {marker} ]; do sleep 0.05; done; {then}"


def in_background(editor, call_id: str, then: str) -> tuple[str, Path]:
    """A chat whose call `call_id` runs `then` once released, run until it is in
    the background: (its task's token, the file that releases it)."""
    editor.setup(tasks={"hybrid_threshold": 0.3})
    marker = editor.workdir / "release"
    editor.open_chat(HEAD + call(call_id, wait_cmd(marker, then)))
    return background(editor, call_id, marker), marker


def test_run_save_run_again(editor):
    editor.setup()
    editor.open_chat(HEAD + call("a", "echo first") + "\n" + call("b", "echo second"))
    editor.run_tool(5)
    editor.wait_text("```result id=a status=completed exit=0")
    editor.nvim.command("write")
    editor.run_tool(row_of(editor, "```tool run_terminal_command id=b") + 1)
    editor.wait_text("```result id=b status=completed exit=0")
    editor.nvim.command("write")
    # and once more on a call written by hand, which gets an id on its way
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, {'', 'ASSISTANT: more', '',"
        " '```tool run_terminal_command', '{\"command\": \"echo third\"}', '```'})"
    )
    editor.nvim.command("write")
    editor.run_tool(len(editor.lines()) - 1)  # the JSON line of the new call
    editor.wait_text("third\n```")
    assert not [n for n in editor.notifications() if "changed while starting" in n]


def test_run_tools_after_a_save(editor):
    editor.setup()
    editor.open_chat(HEAD + call("a", "echo one") + "\n" + call("b", "echo two"))
    editor.nvim.command("write")
    res = editor.lua("return require('sidekick_tools').run_tools()")
    assert res["count"] == 2
    editor.wait_text("```result id=b status=completed exit=0")
    assert "```result id=a status=completed exit=0" in editor.text()


@pytest.mark.parametrize(
    "between",
    [
        "write",
        "edit!",
        "checktime",
        "set fileformat=dos | write",
        "set fileencoding=latin1 | write",
        "format",
        "undo",
    ],
)
def test_background_result_lands_after(editor, between):
    """A task that ends after the chat was saved, reloaded, reformatted on save
    or undone still writes its result and notice."""
    token, marker = in_background(editor, "bg", "echo '[RESULT] all good'")
    editor.nvim.command("write")
    if between == "format":
        # the way conform.nvim and vim.lsp.buf.format rewrite a buffer on save
        editor.lua(
            "vim.api.nvim_create_autocmd('BufWritePre', { buffer = 0, callback = function()"
            " local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)"
            " for i, l in ipairs(lines) do lines[i] = (l:gsub('%s+$', '')) end"
            " vim.api.nvim_buf_set_lines(0, 0, -1, false, lines) end })"
        )
        editor.nvim.command("write")
    elif between == "undo":
        editor.lua("vim.api.nvim_buf_set_lines(0, 0, 0, false, {'a line typed and undone'})")
        editor.nvim.command("undo")
    elif between == "checktime":
        # the file changes outside Neovim; the buffer is reloaded on :checktime
        path = editor.workdir / "chat.sidekick.md"
        path.write_text(path.read_text() + "\nUSER: written elsewhere\n")
        editor.nvim.command("set autoread")
        editor.nvim.command("checktime")
        editor.wait_text("written elsewhere")
    else:
        editor.nvim.command(between)
    marker.write_text("")
    out = editor.wait_text("```result id=bg status=completed exit=0")
    assert sum(1 for line in out.split("\n") if line.startswith("```result id=bg")) == 1
    editor.wait_text(f"USER: [sidekick task {token} completed]")
    editor.wait_diag(row_of(editor, "```tool run_terminal_command id=bg"), "✓")
    # and the chat goes on: a new call after all that runs and writes its result
    editor.lua(
        "vim.api.nvim_buf_set_lines(0, -1, -1, false, {'', 'ASSISTANT: next', '',"
        " '```tool run_terminal_command id=next', '{\"command\": \"echo next\"}', '```'})"
    )
    editor.run_tool(len(editor.lines()) - 1)
    editor.wait_text("```result id=next status=completed exit=0")


def test_a_reload_after_a_result_was_written_writes_it_again(editor):
    """`:e!` after a background task's result was written, unsaved: the file's
    running block is back, and nothing can redo the result. It is written again,
    as when the chat is opened (an undo of it stands: that one has a redo)."""
    token, marker = in_background(editor, "bg", "echo '[RESULT] all good'")
    editor.nvim.command("write")
    marker.write_text("")
    editor.wait_text(f"USER: [sidekick task {token} completed]")
    editor.nvim.command("edit!")
    out = editor.wait_text("```result id=bg status=completed exit=0")
    assert sum(1 for line in out.split("\n") if line.startswith("```result id=bg")) == 1
    assert f"status=running task={token}" not in editor.text()
    editor.wait_diag(row_of(editor, "```tool run_terminal_command id=bg"), "✓")


def test_notices_land_in_the_order_their_tasks_ended(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2})
    m1, m2 = editor.workdir / "m1", editor.workdir / "m2"
    editor.open_chat(HEAD + call("one", wait_cmd(m1)) + "\n" + call("two", wait_cmd(m2)))
    first = background(editor, "one", m1)
    second = background(editor, "two", m2)
    m2.write_text("")
    editor.wait_text(f"USER: [sidekick task {second} completed]")
    # the chat now ends with that notice (a USER message the plugin wrote), then
    # an empty `USER: ` line the user deletes: the next notice goes after it
    assert editor.lines()[-1] == "USER: "
    editor.lua("vim.api.nvim_buf_set_lines(0, -2, -1, false, {})")
    m1.write_text("")
    text = editor.wait_text(f"USER: [sidekick task {first} completed]")
    assert text.index(f"task {second} completed") < text.index(f"task {first} completed")


def test_a_result_whose_call_was_deleted_is_said_once(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "m"
    editor.open_chat(HEAD + call("gone", wait_cmd(marker)))
    token = background(editor, "gone", marker)
    start = row_of(editor, "```tool run_terminal_command id=gone")
    end = row_of(editor, "```result id=gone")
    editor.lua("local s, e = ... vim.api.nvim_buf_set_lines(0, s, e, false, {})", start, end + 3)
    marker.write_text("")
    wait_for(lambda: [n for n in editor.notifications() if token in n and "deleted" in n])
    said = [n for n in editor.notifications() if token in n and "deleted" in n]
    assert len(said) == 1
    assert "id=gone" not in editor.text()


def test_undoing_a_result_makes_the_call_pending_again(editor):
    editor.setup()
    editor.open_chat(HEAD + call("u", "echo hi"))
    editor.run_tool(5)
    editor.wait_text("```result id=u status=completed exit=0")
    editor.wait_diag(4, "✓")
    editor.nvim.command("undo")
    wait_for(lambda: "```result id=u" not in editor.text())
    editor.wait_diag(4, "▶ run_terminal_command")
    editor.nvim.command("redo")
    editor.wait_diag(4, "✓")
    editor.nvim.command("undo")
    editor.wait_diag(4, "▶")
    editor.run_tool(5)
    editor.wait_text("```result id=u status=completed exit=0")
    editor.wait_diag(4, "✓")


def test_a_result_written_while_the_user_types_is_an_undo_step_of_its_own(editor):
    """Typing in the chat while a task ends: its result and notice went into
    the typing's undo step, so one `u` took them back with the typing and the
    call read as never run (:SidekickRunTools offered to run it again). They
    are a step of their own: `u` takes back the typing after them, then them,
    then the typing before."""
    _, marker = in_background(editor, "bg", "echo finished")
    editor.nvim.command("set undolevels=900 | setlocal undolevels=700")
    editor.lua(
        "_G.__optionset = 0\nvim.api.nvim_create_autocmd('OptionSet', { pattern = 'undolevels',"
        " callback = function() _G.__optionset = _G.__optionset + 1 end })"
    )
    editor.nvim.command("normal! gg")
    editor.nvim.input("A more")
    wait_for(lambda: editor.nvim.api.get_mode()["mode"] == "i")
    marker.write_text("")
    editor.wait_text("```result id=bg status=completed exit=0")
    editor.nvim.input(" and after<Esc>")
    wait_for(lambda: editor.nvim.api.get_mode()["mode"] == "n")
    assert editor.lines()[0] == "USER: go more and after"
    # the user's own settings stay, and their OptionSet autocommands never ran
    assert editor.nvim.eval("[&g:undolevels, &l:undolevels]") == [900, 700]
    assert editor.lua("return _G.__optionset") == 0
    editor.nvim.command("undo")
    assert editor.lines()[0] == "USER: go more"
    assert "```result id=bg status=completed exit=0" in editor.text()
    editor.nvim.command("undo")
    assert "```result id=bg status=completed" not in editor.text()
    assert editor.lines()[0] == "USER: go more"
    editor.nvim.command("undo")
    assert editor.lines()[0] == "USER: go"


def test_a_result_lost_to_an_edit_is_written_when_an_undo_brings_its_call_back(editor):
    """A task ends while its call's block is gone (a formatter mangled it):
    the result cannot be written, and that is said. An undo brings the
    running block back: its result was shown as "undone" (it never was
    written) and only reopening the chat wrote it. It is written now."""
    token, marker = in_background(editor, "lost", "echo late")
    editor.nvim.command("%s/id=lost$/id=mangled/")
    marker.write_text("")
    wait_for(lambda: any(f"task {token} of call lost" in n for n in editor.notifications()))
    editor.nvim.command("undo")
    out = editor.wait_text("```result id=lost status=completed exit=0")
    assert "late" in out.split("```result id=lost", 1)[1]
    assert not any("undone" in d["message"] for d in editor.diagnostics())


def test_undo_and_redo_of_a_result_in_an_older_message_bring_its_check_back(editor):
    """A call of an earlier assistant message that ran in this session shows ✓;
    undoing its result and redoing it left it with no state at all, like old
    history, while the calls whose results were never undone kept theirs."""
    editor.setup()
    later = "\nUSER: more\n\nASSISTANT: Later.\n\n" + call("l", "echo later")
    editor.open_chat(HEAD + call("u", "echo hi") + later)
    editor.run_tool(5)
    editor.wait_text("```result id=u status=completed exit=0")
    editor.wait_diag(4, "✓")
    editor.nvim.command("undo")
    editor.wait_diag(4, "▶ run_terminal_command")
    editor.nvim.command("redo")
    editor.wait_diag(4, "✓ run_terminal_command")


def test_running_state_stays_in_view_after_a_format_on_save(editor):
    """A formatter that rewrites every line drops extmarks: the running call's
    mark is set again, so its ⟳ does not vanish."""
    editor.setup(tasks={"hybrid_threshold": 0.2})
    marker = editor.workdir / "m"
    editor.open_chat(HEAD + call("f", wait_cmd(marker)))
    background(editor, "f", marker)
    editor.wait_diag(4, "⟳")
    editor.lua(
        "vim.api.nvim_create_autocmd('BufWritePre', { buffer = 0, callback = function()"
        " vim.api.nvim_buf_set_lines(0, 0, -1, false,"
        " vim.api.nvim_buf_get_lines(0, 0, -1, false)) end })"
    )
    editor.nvim.command("write")
    # what the next redraw (the running clock ticks every second) shows
    wait_for(
        lambda: (
            editor.lua(
                "local d = require('sidekick_tools.consumers.diagnostics')"
                " d.draw(vim.api.nvim_get_current_buf()) return true"
            )
            and (editor.diag_at(4) or {}).get("message", "").startswith("⟳")
        )
    )
    marker.write_text("")
    editor.wait_diag(4, "✓")


def shown_rows(editor) -> list[int]:
    """Rows where Neovim draws the plugin's diagnostics (their signs and virtual
    text are extmarks of namespaces of their own)."""
    return editor.lua(
        "local rows = {}\n"
        "for name, ns in pairs(vim.api.nvim_get_namespaces()) do\n"
        "  if name:find('sidekick_tools', 1, true) and name:find('diagnostic', 1, true) then\n"
        "    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {})) do\n"
        "      rows[m[2]] = true\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local out = vim.tbl_keys(rows) table.sort(out) return out"
    )


def test_a_formatter_rewriting_every_line_leaves_each_state_on_its_call(editor):
    """`:%!cat` (any formatter) replaces every line: every extmark, the ones
    Neovim draws the diagnostics with included, goes to the first line. The
    finished call's ✓ and the pending call's ▶ come back to their calls."""
    editor.setup()
    editor.open_chat(HEAD + call("a", "echo one") + "\n" + call("b", "echo two > two.txt"))
    editor.run_tool(5)
    editor.wait_text("```result id=a status=completed exit=0")
    pending = row_of(editor, "```tool run_terminal_command id=b")
    editor.wait_diag(4, "✓")
    editor.wait_diag(pending, "▶")
    wait_for(lambda: shown_rows(editor) == [4, pending])
    editor.nvim.command("%!cat")
    wait_for(lambda: shown_rows(editor) == [4, pending])
    assert editor.diag_at(4)["message"].startswith("✓")
    assert editor.diag_at(pending)["message"].startswith("▶")
    # and the chat goes on: the pending call runs from its row
    editor.run_tool(pending + 1)
    editor.wait_text("```result id=b status=")


def test_deny_plan_and_run_call_requests(editor):
    """The host side of :SidekickDeny, :SidekickRunTools' confirmation and rerun."""
    editor.setup()
    editor.open_chat(
        HEAD
        + call("safe", "ls")
        + "\n"
        + call("risky", "rm -rf build")
        + "\n"
        + call("no", "curl example.com")
    )
    host = "require('sidekick_tools.host')"
    buf = editor.nvim.current.buffer.number
    plan = editor.lua(f"return {host}.request('plan', ...)", buf, str(editor.workdir))
    assert [(p["id"], p["verdict"]) for p in plan] == [
        ("safe", "approve"),
        ("risky", "ask"),
        ("no", "ask"),
    ]
    assert plan[1]["what"] == "rm -rf build"
    row = row_of(editor, "```tool run_terminal_command id=no")
    editor.lua(f"return {host}.request('deny', ...)", buf, row, "  not on   my network ")
    text = editor.wait_text("```result id=no status=denied reason=user")
    assert "not on my network" in text.split("status=denied reason=user", 1)[1]
    editor.wait_diag(row, "⊘ run_terminal_command")
    # denying twice, or a line with no call, is refused with a message
    for r in (row, 0):
        ok = editor.lua(f"return pcall({host}.request, 'deny', ...)", buf, r, "")
        assert ok is False

    # a call run again replaces its result block
    def token() -> str | None:
        line = next((x for x in editor.lines() if x.startswith("```result id=safe")), "")
        return line.split("task=")[1].split()[0] if "task=" in line else None

    editor.lua(f"return {host}.request('run_call', ...)", buf, "safe", str(editor.workdir))
    first = wait_for(token)
    editor.lua(f"return {host}.request('run_call', ...)", buf, "safe", str(editor.workdir))
    wait_for(lambda: token() not in (None, first))
    assert editor.text().count("```result id=safe") == 1


def test_a_notice_carries_a_short_tail_and_the_log(editor):
    editor.setup(tasks={"hybrid_threshold": 0.2}, result={"notice_lines": 4})
    marker = editor.workdir / "m"
    editor.open_chat(HEAD + call("long", wait_cmd(marker, "seq 1 50")))
    token = background(editor, "long", marker)
    marker.write_text("")
    text = editor.wait_text(f"USER: [sidekick task {token} completed]")
    lines = text.split("\n")
    start = lines.index(f"USER: [sidekick task {token} completed]") + 2
    payload = json.loads("\n".join(lines[start : lines.index("```", start)]))
    out = payload["output"].split("\n")
    assert out[1:] == ["47", "48", "49", "50"]
    assert "46 earlier lines truncated" in out[0] and payload["log"] in out[0]
    # the result block above keeps up to result.max_lines
    block = text.split("```result id=long status=completed", 1)[1]
    assert "\n1\n2\n" in block


@pytest.mark.parametrize("run_async", [False, True])
def test_reloading_unsaved_keeps_a_hand_written_calls_id_and_result(editor, run_async):
    """A call written without an id gets one in the buffer when it runs; `:e!`
    reloads the file as saved, without it. The block gets its id back (it is
    not offered to run again) and its result lands on it when the command ends."""
    editor.setup(tasks={"hybrid_threshold": 0.3})
    marker = editor.workdir / "go"
    params = {"command": wait_cmd(marker, "echo after-reload"), "async": run_async}
    editor.open_chat(HEAD + f"```tool run_terminal_command\n{json.dumps(params)}\n```\n")
    editor.run_tool(5)
    header = wait_for(lambda: "id=call_" in editor.lines()[4] and editor.lines()[4])
    call_id = header.split("id=")[1]
    if run_async:
        editor.wait_text(f"```result id={call_id} status=running task=")
    # the file as saved, read in the same request as the reload: the host puts
    # the id back a moment later, which a separate read could already see
    reloaded = editor.lua("vim.cmd('edit!') return vim.api.nvim_buf_get_lines(0, 4, 5, false)[1]")
    assert "id=" not in reloaded
    wait_for(lambda: editor.lines()[4] == header)
    editor.wait_diag(4, "⟳ run_terminal_command")
    marker.write_text("")
    editor.wait_text(f"```result id={call_id} status=completed exit=0")
    assert editor.text().count("```tool run_terminal_command") == 1
    assert editor.text().count("\nafter-reload\n```") == 1
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ all = true })")
    assert [t["call_id"] for t in tasks] == [call_id]  # run once
    assert not [n for n in editor.notifications() if "not written" in n]


def test_a_deleted_calls_result_never_goes_to_another_block_reading_the_same(editor):
    """A hand-written call runs (it gets an id) and its block is deleted while
    it runs; a later message has a block reading the same, never run. That one
    is another call: it gets neither the id nor the result."""
    editor.setup(tasks={"hybrid_threshold": 0.3})
    marker = editor.workdir / "go"
    params = json.dumps({"command": wait_cmd(marker, "echo first-run")})
    block = f"```tool run_terminal_command\n{params}\n```\n"
    editor.open_chat(HEAD + block + "\nUSER: more\n\nASSISTANT: later\n\n" + block)
    editor.run_tool(5)
    editor.wait_text("```result id=call_")
    first = editor.lines()[4]
    assert "id=call_" in first
    end = next(i for i, line in enumerate(editor.lines()) if line.startswith("USER: more"))
    editor.lua("vim.api.nvim_buf_set_lines(0, 4, ..., false, {})", end)  # the call and its block
    marker.write_text("")
    wait_for(lambda: [n for n in editor.notifications() if "not written" in n])
    text = editor.text()
    assert "id=call_" not in text and "first-run\n" not in text
    assert text.count("```tool run_terminal_command\n") == 1


@pytest.mark.parametrize("saved_id", [True, False])
def test_a_reload_that_takes_away_a_result_not_saved_has_it_written_again(editor, saved_id):
    """`:e!` after a call ended and before the result was saved: the file has
    the call (with its id, or not yet), never its result. The result is
    written again, the call is not run a second time, and its state is ✓
    (it was: ✓ on a call with no result, or ▶ and the command run twice)."""
    editor.setup()
    runs = editor.workdir / "runs.txt"
    params = json.dumps({"command": f"echo ran >> {runs}; echo quick-done"})
    header = "```tool run_terminal_command" + (" id=q1" if saved_id else "")
    editor.open_chat(HEAD + f"{header}\n{params}\n```\n")
    editor.run_tool(5)
    editor.wait_text("\nquick-done\n```")
    call_id = editor.lines()[4].split("id=")[1]
    editor.nvim.command("edit!")
    text = editor.wait_text(f"```result id={call_id} status=completed exit=0")
    assert editor.lines()[4] == f"```tool run_terminal_command id={call_id}"
    assert text.count("\nquick-done\n```") == 1
    editor.wait_diag(4, "✓ run_terminal_command")
    assert runs.read_text() == "ran\n"  # run once
    assert not [n for n in editor.notifications() if "not written" in n]


def test_a_reload_brings_back_the_result_of_a_call_without_a_task(editor):
    editor.setup()
    (editor.workdir / "notes.txt").write_text("remember the milk\n")
    block = '```tool read_files id=r1\n{"paths": ["notes.txt"]}\n```\n'
    editor.open_chat(HEAD + block)
    editor.run_tool(5)
    editor.wait_text("```result id=r1 status=completed")
    editor.nvim.command("edit!")
    text = editor.wait_text("```result id=r1 status=completed")
    assert text.count("remember the milk") == 1
    editor.wait_diag(4, "✓ read_files")


def test_a_chat_closed_unsaved_after_its_call_ran_says_the_call_reads_as_never_run(editor):
    """`:bwipeout!` right after running a call written without an id (it got
    one in the buffer, unsaved): its result cannot reach that chat again, and
    the user is told so, not that it is written when the chat is opened."""
    editor.setup()
    params = json.dumps({"command": "sleep 0.5; echo wiped-done"})
    editor.open_chat(HEAD + f"```tool run_terminal_command\n{params}\n```\n")
    editor.run_tool(5)
    wait_for(lambda: "id=call_" in editor.lines()[4])
    editor.nvim.command("bwipeout!")
    note = wait_for(lambda: [n for n in editor.notifications() if "not written" in n])
    assert "closed before the call's id was saved" in note[0]
    assert "it is written when you open" not in note[0]
    assert "ERROR" not in (editor.state_dir / "host.log").read_text()


def test_a_saved_result_is_not_written_into_a_file_replaced_outside_neovim(editor):
    """A result that was saved is in the file: a reload brings it back by itself.
    Replaced outside Neovim (a `git checkout`), the file holds the same call in
    another conversation, never run: it gets no result of the old one."""
    editor.setup()
    params = json.dumps({"command": "echo ran-once"})
    block = f"```tool run_terminal_command\n{params}\n```\n"
    path = editor.workdir / "chat.sidekick.md"
    editor.open_chat(HEAD + block)
    editor.run_tool(5)
    editor.wait_text("\nran-once\n```")
    editor.nvim.command("write")
    path.write_text("USER: another conversation\n\nASSISTANT: Running it.\n\n" + block)
    editor.nvim.command("checktime")
    wait_for(lambda: editor.lines()[0] == "USER: another conversation")
    editor.wait_diag(4, "▶ run_terminal_command")
    assert "```result" not in editor.text()


def test_a_reload_writes_back_every_result_it_took(editor):
    editor.setup()
    editor.open_chat(HEAD + call("m1", "echo one-done") + "\n" + call("m2", "echo two-done"))
    editor.nvim.command("SidekickRunTools!")
    editor.wait_text("```result id=m2 status=completed")
    editor.wait_text("```result id=m1 status=completed")
    editor.nvim.command("edit!")
    text = editor.wait_text("```result id=m2 status=completed")
    text = editor.wait_text("```result id=m1 status=completed")
    assert text.count("\none-done\n```") == 1 and text.count("\ntwo-done\n```") == 1
