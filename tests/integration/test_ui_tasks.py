""":SidekickTasks: the task window read back from a real headless Neovim."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from sidekick_tools.tasks.model import NAMES, Task, TaskStatus
from sidekick_tools.tasks.store import SqliteStore

from tests.conftest import wait_for
from tests.integration.ui_helpers import (
    HEADER_ROW,
    call_block,
    chat,
    current_buf,
    gated,
    result_body,
    row_of,
    start_background,
    wait_lines,
)

pytestmark = pytest.mark.integration


def open_tasks(editor, args: str = "", bang: bool = False) -> int:
    editor.nvim.command(f"SidekickTasks{'!' if bang else ''} {args}".strip())
    buf = current_buf(editor)
    assert editor.lua("return vim.bo[...].filetype", buf) == "sidekick_tasks"
    return buf


def test_running_task_shows_progress_then_completes_live(editor):
    editor.setup()
    marker = editor.workdir / "release"
    token = start_background(editor, gated(marker))
    buf = open_tasks(editor)
    assert editor.lua("return vim.bo[...].modifiable", buf) is False
    lines = wait_lines(editor, buf, lambda ls: any(token in ln and "50%" in ln for ln in ls))
    assert lines[0].startswith("Tasks · this Neovim · any status · 1-1 of 1 · page 1/1")
    row = lines[row_of(lines, token)]
    assert row.startswith("⟳ " + token)
    assert "run_terminal_command" in row
    assert "█████░░░░░  50%" in row
    assert "half" in row  # progress text
    assert "[PROGRESS:50]" in row  # the label: the command
    marker.write_text("")
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("✓ " + token) for ln in ls))
    row = lines[row_of(lines, token)]
    assert "exit 0" in row
    assert "%" not in row  # no progress bar once it ended
    assert re.search(r"\d+\.\ds", row)  # a duration


def test_failed_task_and_status_filters(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo ok"}, "c1"),
            call_block("run_terminal_command", {"command": "echo bad; exit 3"}, "c2"),
        )
    )
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=completed")
    editor.run_tool(editor.lines().index("```tool run_terminal_command id=c2") + 1)
    editor.wait_text("```result id=c2 status=failed exit=3")
    buf = open_tasks(editor, "failed")
    lines = editor.lines(buf)
    assert "· failed ·" in lines[0] and "1-1 of 1" in lines[0]
    assert lines[1].startswith("✗ ") and "exit 3" in lines[1] and "echo bad; exit 3" in lines[1]
    open_tasks(editor, "completed")
    lines = editor.lines(buf)
    assert len(lines) == 2 and lines[1].startswith("✓ ") and "echo ok" in lines[1]
    # the filter key cycles: completed -> failed
    editor.nvim.input("f")
    lines = wait_lines(editor, buf, lambda ls: "· failed ·" in ls[0])
    assert lines[1].startswith("✗ ")
    open_tasks(editor, "running")
    assert editor.lines(buf)[1] == "  (no tasks)"
    # only one tasks window, whatever the number of :SidekickTasks
    n = editor.lua(
        "local n = 0 for _, w in ipairs(vim.api.nvim_list_wins()) do "
        "local ft = vim.bo[vim.api.nvim_win_get_buf(w)].filetype "
        "if ft == 'sidekick_tasks' then n = n + 1 end end return n"
    )
    assert n == 1
    editor.nvim.command("messages clear")
    editor.nvim.command("SidekickTasks bogus")
    assert any("unknown status bogus" in n for n in editor.notifications())


def test_halt_from_the_tasks_window_keeps_partial_output(editor):
    editor.setup(tasks={"halt_grace": 1})
    marker = editor.workdir / "never"
    token = start_background(editor, gated(marker, before="echo partial-line"))
    log = Path(editor.lua("return require('sidekick_tools.client').task(...).log_path", token))
    wait_for(lambda: log.exists() and log.read_text() == "partial-line\n")  # printed: halt now
    chat_buf = current_buf(editor)
    buf = open_tasks(editor)
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⟳ " + token) for ln in ls))
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.command("SidekickHalt")
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⊘ " + token) for ln in ls))
    assert "cancelled" in lines[row_of(lines, token)]
    # the call's diagnostic turns ⊘ and its partial output is in the result block
    editor.wait_diag(HEADER_ROW, "⊘ run_terminal_command", buf=chat_buf)
    text = editor.wait_text("status=cancelled", buf=chat_buf)
    assert "partial-line" in text.split("```result id=call_01", 1)[1]  # the output, not the call
    # and in the output view
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.input("o")
    wait_for(lambda: editor.lua("return vim.bo.filetype") == "sidekick_output")
    out = wait_lines(editor, 0, lambda ls: ls and ls[-1].startswith(f"[task {token} cancelled"))
    assert out[0] == "partial-line"


def test_halt_key_in_the_tasks_window(editor):
    editor.setup(tasks={"halt_grace": 1})
    token = start_background(editor, gated(editor.workdir / "never"))
    buf = open_tasks(editor)
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⟳ " + token) for ln in ls))
    editor.nvim.command(f"call cursor({row_of(lines, token) + 1}, 1)")
    editor.nvim.input("x")
    wait_lines(editor, buf, lambda ls: any(ln.startswith("⊘ " + token) for ln in ls))


def test_jump_to_the_call_in_its_chat(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo one"}, "c1"),
            call_block("run_terminal_command", {"command": "echo two"}, "c2"),
        )
    )
    chat_buf = current_buf(editor)
    c2 = editor.lines().index("```tool run_terminal_command id=c2")
    editor.run_tool(c2 + 1)
    editor.wait_text("```result id=c2 status=completed")
    buf = open_tasks(editor)
    # move the chat's cursor away, then jump back from the list
    editor.lua("vim.api.nvim_win_set_cursor(vim.fn.bufwinid(...), {1, 0})", chat_buf)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("gd")
    wait_for(lambda: current_buf(editor) == chat_buf)
    row = editor.lua("return vim.api.nvim_win_get_cursor(0)[1]")
    assert editor.lines(chat_buf)[row - 1] == "```tool run_terminal_command id=c2"
    assert editor.lua("return vim.fn.bufwinid(...)", buf) != -1  # list stays open


def test_ten_thousand_stored_tasks_open_one_page(editors, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = SqliteStore(str(state / "tasks.db"))
    now = time.time()
    tasks = []
    for i in range(10_000):
        created = now - 10_000 + i
        tasks.append(
            Task(
                id=f"{i:06x}",
                tool="run_terminal_command",
                label=f"echo {i}",
                command=f"echo {i}",
                status=TaskStatus.COMPLETED if i % 3 else TaskStatus.FAILED,
                exit_code=0 if i % 3 else 1,
                owner="4242:elsewhere",
                created_at=created,
                started_at=created,
                ended_at=created + 1.5,
            )
        )
    store.insert_many(tasks)
    store.close()
    editor = editors()
    editor.setup(tasks_window={"page_size": 50})
    buf = open_tasks(editor, "all", bang=True)
    lines = editor.lines(buf)
    assert len(lines) == 1 + 50
    assert lines[0] == "Tasks · every Neovim · any status · 1-50 of 10000 · page 1/200 · ? help"
    assert lines[1].startswith("✗ 00270f")  # newest first (9999 = 0x270f)
    assert "echo 9999" in lines[1]
    editor.nvim.input("]]")
    lines = wait_lines(editor, buf, lambda ls: "51-100 of 10000" in ls[0])
    assert "page 2/200" in lines[0]
    assert lines[1].startswith("✓ 0026dd")  # 9949
    editor.nvim.input("[[")
    wait_lines(editor, buf, lambda ls: "1-50 of 10000" in ls[0])
    # this Neovim's own tasks: none of those
    editor.nvim.input("a")
    lines = wait_lines(editor, buf, lambda ls: "this Neovim" in ls[0])
    assert "0 of 0" in lines[0]
    # page size follows the window when not configured
    editor.setup()
    open_tasks(editor, "all", bang=True)
    height = editor.lua("return vim.api.nvim_win_get_height(0)")
    assert len(editor.lines(buf)) == min(100, height - 1) + 1


def test_lua_and_python_declare_the_same_statuses_in_the_same_order(editor):
    """Each language declares the task statuses once; the two declarations agree."""
    lua = editor.lua("return require('sidekick_tools.constants').task_statuses")
    assert lua == list(NAMES)


def test_help_lists_the_configured_keys(editor):
    editor.setup(keymaps={"tasks_window": {"halt": "X", "jump": False}})
    open_tasks(editor)
    help_lines = editor.lua("return require('sidekick_tools.consumers.tasks_window').help_lines()")
    text = "\n".join(help_lines)
    assert "<CR> o" in text and "open the task's output" in text
    assert re.search(r"^X\s+halt the task", text, re.M)
    assert "jump to the tool call" not in text
    editor.nvim.input("?")
    wait_for(lambda: editor.lua("return vim.api.nvim_win_get_config(0).relative") != "")
    assert any("halt the task" in ln for ln in editor.lines(0))
    editor.nvim.input("q")
    wait_for(lambda: editor.lua("return vim.bo.filetype") == "sidekick_tasks")


def test_the_help_closes_with_the_keys_the_user_configured(editor):
    """The help float closes with <Esc> and with the configured close and help
    keys (it closed only with the defaults q and ?)."""
    editor.setup(keymaps={"tasks_window": {"close": "gq", "help": "g?"}})
    open_tasks(editor)

    def float_open() -> bool:
        return editor.lua("return vim.api.nvim_win_get_config(0).relative") != ""

    for key in ("gq", "g?", "<Esc>"):
        editor.nvim.input("g?")
        wait_for(float_open)
        editor.nvim.input(key)
        wait_for(lambda: editor.lua("return vim.bo.filetype") == "sidekick_tasks")


def test_setup_says_which_keys_two_actions_share(editor):
    """A key given to two actions of one place: setup() says so (the later mapping
    wins, and the other action would have no key without a word)."""
    editor.setup()
    assert not [n for n in editor.notifications() if "are both" in n]
    editor.setup(
        keymaps={
            "send": "<leader>sr",
            "tasks_window": {"close": "Q"},
            "output_window": {"close": "x"},
        }
    )
    said = [n for n in editor.notifications() if "are both" in n]
    assert said == [
        "sidekick_tools: keymaps.run_tool and keymaps.send are both <leader>sr; "
        "only keymaps.send works",
        "sidekick_tools: keymaps.tasks_window.quickfix and keymaps.tasks_window.close are "
        "both Q; only keymaps.tasks_window.close works",
        "sidekick_tools: keymaps.output_window.halt and keymaps.output_window.close are "
        "both x; only keymaps.output_window.close works",
    ]


def test_statusline_counts_running_and_unseen_failures(editor):
    editor.setup()
    marker = editor.workdir / "release"
    start_background(editor, gated(marker, after="exit 4"))
    wait_for(lambda: editor.lua("return require('sidekick_tools').statusline()") == "⟳ 1")
    marker.write_text("")
    wait_for(lambda: editor.lua("return require('sidekick_tools').statusline()") == "✗ 1")
    editor.nvim.command("SidekickTasks")
    assert editor.lua("return require('sidekick_tools').statusline()") == ""


def hl_text(editor, buf: int, row: int, group: str) -> list[str]:
    """Text of `row` covered by highlight `group` in the tasks window."""
    return editor.lua(
        "local buf, row, group = ...\n"
        "local ns = vim.api.nvim_create_namespace('sidekick_tools_tasks')\n"
        "local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1]\n"
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, {row, 0}, {row, -1},"
        " { details = true })) do\n"
        "  if m[4].hl_group == group then table.insert(out, line:sub(m[3] + 1, m[4].end_col)) end\n"
        "end\n"
        "return out",
        buf,
        row,
        group,
    )


def test_the_list_shows_the_command_then_the_purpose_dimmed(editor):
    fake_agent = str(Path(__file__).with_name("fake_agent.py"))
    editor.setup(agents={"helper": {"cmd": [sys.executable, fake_agent, "--mode", "plain"]}})
    editor.open_chat(
        chat(
            call_block(
                "run_terminal_command", {"command": "echo hi", "purpose": "Say hello"}, "c1"
            ),
            call_block("use_agent", {"agent": "helper", "message": "tidy the docs"}, "a1"),
            call_block(  # not a safe command: the chain stops before it, it runs by hand
                "run_terminal_command", {"command": "true " + "x" * 80, "purpose": "Long"}, "c2"
            ),
        )
    )
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=completed")
    editor.run_tool(editor.lines().index("```tool use_agent id=a1") + 1)
    editor.wait_text("```result id=a1 status=completed")
    editor.run_tool(editor.lines().index("```tool run_terminal_command id=c2") + 1)
    editor.wait_text("```result id=c2 status=completed")
    buf = open_tasks(editor)
    lines = editor.lines(buf)
    cmd_row = next(i for i, ln in enumerate(lines) if "echo hi" in ln)
    assert lines[cmd_row].endswith("  echo hi  Say hello")
    assert hl_text(editor, buf, cmd_row, "SidekickTasksDim") == ["Say hello"]
    agent_row = next(i for i, ln in enumerate(lines) if "use_agent" in ln)
    assert lines[agent_row].endswith("  helper: tidy the docs")
    assert hl_text(editor, buf, agent_row, "SidekickTasksDim") == []
    # a long command is cut, so its purpose stays in view
    long_row = next(i for i, ln in enumerate(lines) if "xxx" in ln)
    assert lines[long_row].endswith("  true " + "x" * 54 + "…  Long")


def test_an_auto_run_command_is_listed_as_its_call_wrote_it(editor):
    """A chained (auto-run) command runs in a checked, hardened form (`exec
    /usr/bin/git -c core.fsmonitor=false ...`): the list showed that instead of
    the command in the chat. It shows the call's command; the task still ran
    the hardened one."""
    from tests.integration.git_helpers import git_repo

    editor.setup()
    git_repo(editor.workdir)
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": "echo start"}, "c1"),
            call_block(
                "run_terminal_command",
                {"command": "git log --oneline", "purpose": "See the history"},
                "c2",
            ),
            call_block("run_terminal_command", {"command": "git status"}, "c3"),
        )
    )
    editor.run_tool(HEADER_ROW + 1)  # c2 and c3 follow on their own
    editor.wait_text("```result id=c3 status=completed")
    tasks = {t["call_id"]: t for t in editor.lua("return require('sidekick_tools').list_tasks()")}
    assert "core.fsmonitor=false" in tasks["c2"]["command"]  # what ran: hardened
    assert "core.fsmonitor=false" in tasks["c3"]["command"]
    buf = open_tasks(editor)
    lines = editor.lines(buf)
    log_row = row_of(lines, tasks["c2"]["id"])
    assert lines[log_row].endswith("  git log --oneline  See the history"), lines[log_row]
    assert hl_text(editor, buf, log_row, "SidekickTasksDim") == ["See the history"]
    status_row = row_of(lines, tasks["c3"]["id"])
    assert lines[status_row].endswith("exit 0  git status"), lines[status_row]
    assert not any("GIT_" in line or "fsmonitor" in line for line in lines), lines
    # list_tasks() says both: `command` what ran, `call_command` the call's text
    assert tasks["c2"]["call_command"] == "git log --oneline"
    assert tasks["c3"]["call_command"] == "git status"
    assert tasks["c1"]["call_command"] == ""  # run by hand: its own text ran


def run_in_a_first_editor(editors, text: str, call_id: str, name: str) -> str:
    """A first Neovim runs call `call_id` of chat `name` to its end, saves, quits."""
    from tests.integration.conftest import quit_nvim

    first = editors()
    first.setup()
    first.open_chat(text, name=name)
    first.run_tool(HEADER_ROW + 1)
    first.wait_text(f"```result id={call_id} status=completed")
    token = first.lua("return require('sidekick_tools').list_tasks()")[0]["id"]
    first.nvim.command("write")
    quit_nvim(first)
    return token


def test_this_neovims_tasks_every_neovims_and_the_chats_opened_after_a_restart(editors):
    text = chat(call_block("run_terminal_command", {"command": "echo before"}, "c1"))
    token = run_in_a_first_editor(editors, text, "c1", "old.sidekick.md")
    editor = editors()
    editor.setup()
    buf = open_tasks(editor)
    lines = editor.lines(buf)
    assert lines[0].startswith("Tasks · this Neovim · any status · 0 of 0")
    # every Neovim's: the first one's task is there
    open_tasks(editor, bang=True)
    lines = editor.lines(buf)
    assert lines[0].startswith("Tasks · every Neovim · any status · 1-1 of 1")
    assert lines[1].startswith("✓ " + token)
    # the scope key goes back to this Neovim's
    editor.nvim.input("a")
    wait_lines(
        editor, buf, lambda ls: ls[0].startswith("Tasks · this Neovim") and "0 of 0" in ls[0]
    )
    # opening the chat that ran it makes it this Neovim's, without a key pressed
    editor.nvim.command("wincmd p")
    editor.nvim.command(f"edit {editor.workdir / 'old.sidekick.md'}")
    lines = wait_lines(editor, buf, lambda ls: "1-1 of 1" in ls[0])
    assert lines[0].startswith("Tasks · this Neovim · any status")
    assert lines[1].startswith("✓ " + token)
    # `all` is every status of this Neovim's tasks; ! with a status: every Neovim's
    open_tasks(editor, "all")
    assert editor.lines(buf)[0].startswith("Tasks · this Neovim · any status · 1-1 of 1")
    open_tasks(editor, "failed", bang=True)
    assert editor.lines(buf)[0].startswith("Tasks · every Neovim · failed · 0 of 0")
    tasks = editor.lua("return require('sidekick_tools').list_tasks({ status = 'all' })")
    assert [t["id"] for t in tasks] == [token]


COUNTING = "echo run >> runs.txt; wc -l < runs.txt"


def test_rerun_replaces_the_result_block(editor):
    editor.setup()
    editor.open_chat(
        chat(
            call_block("run_terminal_command", {"command": COUNTING}, "c1"),
            call_block("run_terminal_command", {"command": gated(editor.workdir / "go")}, "c2"),
        )
    )
    chat_buf = current_buf(editor)
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=completed")
    assert [ln.strip() for ln in result_body(editor, "c1")] == ["1"]
    buf = open_tasks(editor)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("r")
    wait_for(lambda: [ln.strip() for ln in result_body(editor, "c1", chat_buf)] == ["2"])
    assert editor.text(chat_buf).count("```result id=c1 ") == 1
    wait_lines(
        editor, buf, lambda ls: "1-2 of 2" in ls[0] and all(ln.startswith("✓ ") for ln in ls[1:])
    )
    # a call still running is not run twice
    c2 = editor.lines(chat_buf).index("```tool run_terminal_command id=c2")
    editor.lua(
        "local buf, lnum = ...\nrequire('sidekick_tools').run_tool(buf, lnum)", chat_buf, c2 + 1
    )
    lines = wait_lines(editor, buf, lambda ls: any(ln.startswith("⟳ ") for ln in ls))
    editor.nvim.command(
        f"call cursor({next(i for i, ln in enumerate(lines) if ln.startswith('⟳ ')) + 1}, 1)"
    )
    editor.nvim.input("r")
    wait_for(lambda: any("c2 is already running as task" in n for n in editor.notifications()))
    (editor.workdir / "go").write_text("")
    editor.wait_text("```result id=c2 status=completed", buf=chat_buf)
    assert editor.text(chat_buf).count("```result id=c2 ") == 1


def test_rerun_refuses_a_call_that_now_reads_otherwise(editor):
    """`r` on a task's row runs its call again as the chat reads now: after an
    edit of the call (or a change of the file on disk), that is not the
    command the row shows, and the user has not read it. Refused, saying
    where to read it; nothing runs."""
    editor.setup()
    editor.open_chat(chat(call_block("run_terminal_command", {"command": COUNTING}, "c1")))
    chat_buf = current_buf(editor)
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=completed")
    edited = '{"command": "echo edited >> runs.txt"}'
    editor.lua(
        "local buf, row, text = ...\n"
        "vim.api.nvim_buf_set_lines(buf, row, row + 1, false, { text })",
        chat_buf,
        HEADER_ROW + 1,
        edited,
    )
    open_tasks(editor)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("r")
    said = wait_for(lambda: [n for n in editor.notifications() if "no longer reads" in n] or None)
    assert "call c1 no longer reads as what task" in said[0] and ":SidekickRunTool" in said[0]
    assert (editor.workdir / "runs.txt").read_text() == "run\n"
    assert [ln.strip() for ln in result_body(editor, "c1", chat_buf)] == ["1"]
    tasks = editor.lua("return require('sidekick_tools').list_tasks()")
    assert len(tasks) == 1


def test_a_task_without_a_chat_call_cannot_be_rerun(editors, tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = SqliteStore(str(state / "tasks.db"))
    now = time.time()
    store.insert_many(
        [
            Task(
                id="abc123",
                tool="run",
                label="make test",
                command="make test",
                status=TaskStatus.FAILED,
                exit_code=2,
                owner="4242:an-agent",
                created_at=now,
                started_at=now,
                ended_at=now + 1,
            )
        ]
    )
    store.close()
    editor = editors()
    editor.setup()
    buf = open_tasks(editor, bang=True)
    assert editor.lines(buf)[1].startswith("✗ abc123")
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("r")
    notes = wait_for(editor.notifications)
    assert "task abc123 was not started from a tool call in a chat; it cannot be rerun" in notes[0]


def test_rerun_after_a_restart_loads_the_chat(editors):
    text = chat(call_block("run_terminal_command", {"command": COUNTING}, "c1"))
    run_in_a_first_editor(editors, text, "c1", "count.sidekick.md")
    editor = editors()
    editor.setup()
    buf = open_tasks(editor, bang=True)
    path = str(editor.workdir / "count.sidekick.md")
    assert editor.lua("return vim.fn.bufloaded(...)", path) == 0
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("r")
    chat_buf = wait_for(
        lambda: (
            editor.lua("return vim.fn.bufnr(...)", path) > 0
            and editor.lua("return vim.fn.bufnr(...)", path)
        )
    )
    wait_for(lambda: [ln.strip() for ln in result_body(editor, "c1", chat_buf)] == ["2"])
    assert editor.lua("return vim.bo[...].modified", chat_buf) is True
    assert current_buf(editor) == buf  # the list keeps the focus
    assert any("call c1 runs again in count.sidekick.md" in n for n in editor.notifications())


def test_failed_output_to_the_quickfix_list(editor):
    editor.setup()
    sub = editor.workdir / "sub" / "src"
    sub.mkdir(parents=True)
    (sub / "x.py").write_text("one\ntwo\nthree\nfour\n")
    secret = "printf 'pass%s\\n' word=hunter2x"  # its output is a password=: masked
    command = f"echo building; echo 'src/x.py:3: boom'; {secret}; echo 'noise' >&2; exit 1"
    editor.open_chat(
        chat(call_block("run_terminal_command", {"command": command, "cwd": "sub"}, "c1"))
    )
    editor.run_tool(HEADER_ROW + 1)
    editor.wait_text("```result id=c1 status=failed exit=1")
    token = editor.lua("return require('sidekick_tools').list_tasks()")[0]["id"]
    chat_buf = current_buf(editor)
    tasks_buf = open_tasks(editor)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("Q")
    wait_for(lambda: editor.lua("return vim.bo.buftype") == "quickfix")
    qf = editor.lua("return vim.fn.getqflist({ title = 1, items = 1 })")
    assert qf["title"].startswith(f"sidekick task {token} failed, exit 1")
    assert qf["title"].endswith(": " + command)
    texts = [i["text"].strip() for i in qf["items"]]
    assert texts == ["building", "boom", "password=***", "noise"]
    valid = [i for i in qf["items"] if i["valid"] == 1]
    assert len(valid) == 1 and valid[0]["lnum"] == 3
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("<CR>")
    wait_for(lambda: editor.lua("return vim.api.nvim_buf_get_name(0)") == str(sub / "x.py"))
    assert editor.lua("return vim.api.nvim_win_get_cursor(0)[1]") == 3
    # it opened where the chat was, and the task list is still there
    assert editor.lua("return vim.fn.bufwinid(...)", tasks_buf) != -1
    assert editor.lua("return vim.fn.bufwinid(...)", chat_buf) == -1
    assert editor.lua("return vim.fn.getcwd()") == str(editor.workdir)


def test_jump_shows_the_whole_block_near_the_top(editor):
    editor.setup()
    filler = "\n".join(f"line {i}" for i in range(60))
    editor.open_chat(
        "USER: hi\n\nASSISTANT: Sure.\n"
        + filler
        + "\n\n"
        + call_block("run_terminal_command", {"command": "seq 1 5"}, "c1")
        + "\nmore text\n"
        + filler
        + "\n"
    )
    chat_buf = current_buf(editor)
    header = editor.lines().index("```tool run_terminal_command id=c1") + 1
    editor.run_tool(header)
    editor.wait_text("```result id=c1 status=completed")
    end = next(i + 1 for i, ln in enumerate(editor.lines()) if i + 1 > header + 3 and ln == "```")
    open_tasks(editor)
    editor.lua("vim.api.nvim_win_set_cursor(vim.fn.bufwinid(...), {1, 0})", chat_buf)
    editor.nvim.command("call cursor(2, 1)")
    editor.nvim.input("gd")
    wait_for(lambda: current_buf(editor) == chat_buf)
    view = editor.lua(
        "return { top = vim.fn.line('w0'), bot = vim.fn.line('w$'), cur = vim.fn.line('.') }"
    )
    assert view["cur"] == header
    assert view["top"] <= header <= view["top"] + 2, view
    assert end <= view["bot"], (end, view)
