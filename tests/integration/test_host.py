"""The Python host's life: lazy start, interpreters, death and replacement, health."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import install_specs
from tests.conftest import wait_for
from tests.integration.conftest import ROOT, SETUP_SAID, setup_errors

pytestmark = pytest.mark.integration

CHAT = (
    "USER: hi\n\nASSISTANT: Sure.\n\n"
    '```tool run_terminal_command id=c1\n{"command": "echo alive"}\n```\n'
)


def host_pid(editor) -> int | None:
    return editor.host_pid() or None


def test_nothing_starts_with_neovim(editor):
    assert editor.lua("return vim.g.loaded_sidekick_tools") is True
    assert editor.lua("return package.loaded['sidekick_tools'] == nil")
    assert editor.lua("return package.loaded['sidekick_tools.host'] == nil")
    assert editor.lua("return vim.fn.exists(':SidekickRunTool')") == 2
    editor.setup()
    assert editor.lua("return require('sidekick_tools.host').running()") is False
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    assert host_pid(editor) is not None


def _pynvim_only_python(tmp: Path) -> str:
    """A venv that can import pynvim (and its dependencies) and nothing of ours."""
    deps = tmp / "deps"
    deps.mkdir()
    for name in ("pynvim", "msgpack", "greenlet", "typing_extensions"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue  # not a dependency of this pynvim version
        if spec.submodule_search_locations:  # a package
            os.symlink(spec.submodule_search_locations[0], deps / name)
        else:  # a single-file module
            os.symlink(spec.origin, deps / Path(spec.origin).name)
    venv = tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "deps.pth").write_text(str(deps) + "\n")
    return str(python)


def test_interpreter_with_pynvim_and_nothing_of_ours(editor, tmp_path):
    python = _pynvim_only_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COVERAGE_PROCESS_START")}
    probe = subprocess.run(
        [
            python,
            "-c",
            "import pynvim\ntry:\n import sidekick_tools\nexcept ImportError: print('ok')",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert probe.stdout.strip() == "ok", probe.stderr
    editor.setup(python=python)
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")


def test_interpreter_without_pynvim_is_explained(editor, tmp_path):
    venv = tmp_path / "nopynvim"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    editor.setup(python=str(venv / "bin" / "python"))
    editor.open_chat(CHAT)
    editor.run_tool(5)
    notes = wait_for(lambda: [n for n in editor.notifications() if "pynvim" in n])
    assert ":SidekickInstall" in notes[0]
    assert "status=" not in editor.text()


def test_dead_host_is_reported_once_and_replaced(editor):
    editor.setup()
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    first = host_pid(editor)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: any("Python host exited" in n for n in editor.notifications()))
    wait_for(lambda: editor.lua("return require('sidekick_tools.host').running()") is False)
    exits = [n for n in editor.notifications() if "Python host exited" in n]
    assert len(exits) == 1
    assert "next command starts a new one" in exits[0]
    # the next command starts a new host, which works
    editor.nvim.command("call cursor(5, 1) | SidekickRunTool")
    wait_for(lambda: host_pid(editor) not in (None, first))
    editor.wait_text("```result id=c1 status=completed exit=0")
    assert len([n for n in editor.notifications() if "Python host exited" in n]) == 1


def test_the_host_ends_quietly_when_neovim_lets_it_go(editor):
    """Neovim closing the host's channel (as it does when it quits) is the
    host's usual end: it exits 0 and prints nothing. pynvim says a closed
    channel with an EOFError, which escaped: every host ended with code 1 and
    `EOFError: connection_lost` on its stderr."""
    editor.setup()
    assert editor.lua("return require('sidekick_tools.host').request('ping')") == "pong"
    editor.lua("vim.fn.chanclose(require('sidekick_tools.host').channel(), 'rpc')")
    said = wait_for(lambda: [n for n in editor.notifications() if "host exited" in n] or None)
    assert len(said) == 1 and "(code 0)" in said[0], said
    assert "Traceback" not in said[0] and "EOFError" not in said[0], said


def test_plugin_loaded_after_start_up_like_a_lazy_loader(tmp_path, monkeypatch):
    """Load the plugin only when a command is first needed (lazy.nvim's `cmd`)."""
    import pynvim

    from tests.integration.conftest import ROOT, Editor, nvim_binary

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xs"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xd"))
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "--clean", "-n"])
    try:
        ed = Editor(nvim, work, tmp_path / "state")
        ed.open_chat(CHAT)  # opened before the plugin exists
        assert ed.lua("return vim.fn.exists(':SidekickRunTool')") == 0
        nvim.command(f"set runtimepath^={ROOT} | runtime plugin/sidekick_tools.lua")
        ed.setup()
        nvim.command("call cursor(5, 1) | SidekickRunTool")
        ed.wait_text("```result id=c1 status=completed exit=0")
        maps = ed.lua("return vim.fn.maparg('<leader>sr', 'n', false, true).buffer")
        assert maps == 1  # setup() gave the already-open chat its keymaps
    finally:
        try:
            nvim.command("qall!")
        except Exception:
            pass


def test_checkhealth_reports_interpreter_and_storage(editor):
    # its chat section asks each provider's base_url: one on loopback, not listening
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    local = {"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1"}
    # the interpreter itself, not the tests' fork server: the report names it
    editor.setup(python=sys.executable, chat={"model": "local/m", "providers": {"local": local}})
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    editor.nvim.command("checkhealth sidekick_tools")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "Neovim" in text
    assert sys.executable in text
    # each version printed says what it is the version of
    v = sys.version_info
    assert f"Python {v.major}.{v.minor}.{v.micro}" in text
    assert re.search(r"OK pynvim \d+\.\d+", text), text
    assert "host running" in text
    assert "task store: sqlite" in text
    assert f"is importable by {sys.executable}" in text  # the MCP server's optional package
    assert f"provider local: http://127.0.0.1:{port}/v1 does not answer" in text
    assert "ERROR" not in text


def test_checkhealth_says_an_interpreter_that_cannot_run_and_goes_on(editor, tmp_path):
    """A python that does not exist made :checkhealth stop at "Failed to run
    healthcheck ... ENOENT" (vim.system raises): the storage and chat sections
    never showed, and the interpreter had been reported OK."""
    missing = str(tmp_path / "nope" / "python")
    editor.setup(python=missing)
    editor.nvim.command("checkhealth sidekick_tools")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "Failed to run healthcheck" not in text
    line = next(x for x in text.split("\n") if missing in x)
    assert "ERROR" in line and "does not exist or cannot be run" in line and "ENOENT" in line
    assert "OK interpreter" not in text
    assert "leave python out and run :SidekickInstall" in text  # the advice
    # the other sections are still reported
    for title in ("MCP server", "chat (talking to a model)", "storage"):
        assert f"sidekick_tools: {title}" in text, text
    assert "task store: sqlite" in text


def test_checkhealth_says_a_state_dir_that_cannot_be_used(editor, tmp_path):
    """setup() said "state_dir ... cannot be used", while :checkhealth said
    "state dir does not exist yet (created on first use)" and "task store:
    sqlite ... (created on first use)", with no warning. A dir under a regular
    file fails the way one under an unwritable or immutable dir does."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    state = blocker / "state"
    editor.setup(state_dir=str(state))
    told = [n for n in editor.notifications() if "cannot be used" in n]
    assert told and "ENOTDIR" in told[0]  # what setup() said
    editor.nvim.command("checkhealth sidekick_tools")
    text = "\n".join(editor.nvim.current.buffer[:])
    storage = text[text.index("sidekick_tools: storage") :]
    assert "does not exist yet" not in storage and "created on first use" not in storage
    line = next(x for x in storage.split("\n") if "state dir cannot be used" in x)
    assert "ERROR" in line and "ENOTDIR" in line and str(blocker) in line
    assert "tasks are kept in memory" in line
    assert "set setup({ state_dir = ... })" in storage  # the advice
    assert "task store: memory" in storage
    assert not state.exists()
    # a dir that can be made is made, as setup() makes it: nothing to say
    editor.setup(state_dir=str(tmp_path / "fresh" / "state"))
    editor.nvim.command("checkhealth sidekick_tools")
    text = "\n".join(editor.nvim.current.buffer[:])
    storage = text[text.index("sidekick_tools: storage") :]
    assert "OK state dir is writable" in storage and "ERROR" not in storage


def test_setup_rejects_wrong_types(editor):
    said = setup_errors(editor, {"tasks": {"max_concurrent": "x"}})
    assert any("tasks.max_concurrent must be number" in line for line in said), said
    said = setup_errors(editor, {"agents": {"a": {"cmd": []}}})
    assert any("agents.a.cmd" in line for line in said), said


@pytest.mark.parametrize(
    ("opts", "said"),
    [
        ({"tasks": {"max_concurrent": 0}}, "option tasks.max_concurrent must be at least 1, got 0"),
        ({"tasks": {"max_concurrent": -1}}, "option tasks.max_concurrent must be at least 1"),
        ({"tasks": {"max_concurrent": 2.5}}, "option tasks.max_concurrent must be a whole number"),
        ({"result": {"max_lines": 0}}, "option result.max_lines must be at least 1, got 0"),
        ({"chat": {"model": "nomodel"}}, 'chat.model must be provider/model, such as "'),
        ({"chat": {"model": "a/b c"}}, "chat.model must be provider/model"),
        ({"tasks": {"default_timeout": -1}}, "option tasks.default_timeout must be at least 0"),
        ({"auto_accept": {"timeout": -5}}, "option auto_accept.timeout must be at least 0"),
        ({"chat": {"timeouts": {"connect": 0}}}, "option chat.timeouts.connect must be at least 1"),
        ({"chat": {"timeouts": {"read": -1}}}, "option chat.timeouts.read must be at least 1"),
        ({"chat": {"timeouts": {"read": 0.5}}}, "option chat.timeouts.read must be at least 1"),
        # a value out of a list says what it got, as the others do
        ({"notify": "sometimes"}, 'option notify must be "always", "never" or "background", got'),
        # a list of keys holds keys: a number in it mapped nothing, and nothing said so
        (
            {"keymaps": {"tasks_window": {"halt": ["x", 3]}}},
            "option keymaps.tasks_window.halt must be a key, a list of keys",
        ),
        ({"keymaps": {"output_window": {"close": {"k": "q"}}}}, "option keymaps.output_window"),
    ],
)
def test_setup_rejects_wrong_values_with_the_options_name(editor, opts, said):
    lines = setup_errors(editor, opts)
    assert any(line.startswith(said) for line in lines), lines
    # the wrong option keeps its default
    assert editor.lua("return require('sidekick_tools.config').current.tasks.max_concurrent") == 5
    assert editor.lua("return require('sidekick_tools.config').current.result.max_lines") == 200


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        # a misspelt tool: nothing was said, and that tool asked every time
        (
            ["read_files", "read_file"],
            'option auto_accept.tools: "read_file" is no tool (tools: await_task, ',
        ),
        # listed, these two still asked: the safe commands and each agent decide them
        (
            ["run_terminal_command"],
            "option auto_accept.tools: run_terminal_command is not decided by this list "
            "(auto_accept.safe_commands and auto_accept.policy are)",
        ),
        (
            ["use_agent"],
            "option auto_accept.tools: use_agent is not decided by this list "
            "(agents.NAME.auto_accept and auto_accept.policy are)",
        ),
    ],
)
def test_setup_says_an_auto_accept_tool_it_cannot_honour(editor, tools, said):
    lines = setup_errors(editor, {"auto_accept": {"tools": tools}})
    assert any(line.startswith(said) for line in lines), lines
    default = editor.lua("return require('sidekick_tools.config').defaults().auto_accept.tools")
    assert editor.lua("return require('sidekick_tools.config').current.auto_accept.tools") == (
        default
    )


def test_setup_never_raises_and_says_every_wrong_option_at_once(editor):
    """`tasks.max_concurrent = 0` raised E5113 with a traceback that ended the
    user's init.lua there, and only the first wrong option was said."""
    said = editor.lua(
        "local said, notify = {}, vim.notify\n"
        "vim.notify = function(msg, level) table.insert(said, { msg, level }) end\n"
        "require('sidekick_tools').setup({ state_dir = ..., python = select(2, ...),\n"
        "  tasks = { max_concurrent = 0, halt_grace = 2, retention = 'long' },\n"
        "  result = { max_lines = 'x' }, notify = 'sometimes', chat = { max_turns = 3 } })\n"
        "vim.g.after_setup = true  -- the rest of an init.lua\n"
        "vim.notify = notify\n"
        "return said",
        str(editor.state_dir),
        sys.executable,
    )
    assert editor.lua("return vim.g.after_setup") is True
    errors = [msg for msg, level in said if level == 4]
    assert len(errors) == 1, said
    lines = errors[0].split("\n")
    assert lines[0].startswith("sidekick_tools: ") and "default" in lines[0]
    assert lines[1:] == [
        "option tasks.max_concurrent must be at least 1, got 0",
        "option tasks.retention must be a table, got string",
        "option result.max_lines must be number, got string",
        'option notify must be "always", "never" or "background", got "sometimes"',
    ]
    current = editor.lua("return require('sidekick_tools.config').current")
    # the wrong ones keep their defaults, the right ones are in force
    assert current["tasks"]["max_concurrent"] == 5
    assert current["tasks"]["retention"] == {"completed": 86400, "failed": 172800}
    assert current["result"]["max_lines"] == 200
    assert current["notify"] == "background"
    assert current["tasks"]["halt_grace"] == 2
    assert current["chat"]["max_turns"] == 3
    assert current["state_dir"] == str(editor.state_dir)
    # and the plugin works with them
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")


def test_setup_warns_once_about_unknown_names_and_keeps_the_rest(editor):
    editor.setup(
        bogus_option=1,
        tasks={"bogus": 1, "max_concurrent": 3},
        keymaps={"tasks_window": {"nope": "x"}},
    )
    assert editor.notifications() == [
        "sidekick_tools: setup() ignores unknown options: bogus_option, "
        "keymaps.tasks_window.nope, tasks.bogus (:h sidekick_tools-config)"
    ]
    assert editor.lua("return require('sidekick_tools.config').current.tasks.max_concurrent") == 3
    # the names inside options of type table are the user's own: no warning
    editor.setup(
        agents={"mine": {"cmd": ["true", "{message}"], "auto_accept": True}},
        chat={
            "model": "here/m",
            "providers": {"here": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        },
        auto_accept={"command_forms": {"mytool": False}, "safe_commands": ["ls"]},
        ui={"virtual_text": {"prefix": ""}},
        keymaps={"tasks_window": {"output": ["<CR>"]}, "output_window": {"close": "q"}},
    )
    assert len(editor.notifications()) == 1


@pytest.mark.parametrize(
    ("entry", "host_prog"),
    [("", None), (".", None), ("bin", None), ("", "python3")],
)
def test_the_python_on_path_is_never_one_of_the_project(editors, monkeypatch, entry, host_prog):
    """With no python option or venv, the host's python3 comes from PATH (or
    g:python3_host_prog names it); an empty or relative entry, which names the
    working directory, does not count."""
    workdir = Path.cwd()
    marker = workdir / "marker"
    for folder in (workdir, workdir / "bin"):
        folder.mkdir(exist_ok=True)
        fake = folder / "python3"
        fake.write_text(f'#!/bin/sh\necho "$0" >> {marker}\nexec {sys.executable} "$@"\n')
        fake.chmod(0o755)
    real_bin = Path(sys.executable).parent  # a python3 with pynvim, outside the project
    entries = [entry.format(workdir=workdir), str(real_bin), "/usr/bin", "/bin"]
    monkeypatch.setenv("PATH", os.pathsep.join(entries))
    editor = editors()
    if host_prog:
        editor.lua("vim.g.python3_host_prog = ...", host_prog)
    editor.lua("require('sidekick_tools').setup({ state_dir = ... })", str(editor.state_dir))
    python, source = editor.lua("return { require('sidekick_tools.host').find_python() }")
    expected = "g:python3_host_prog" if host_prog else "PATH"
    assert (python, source) == (str(real_bin / "python3"), expected)
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("entry", ["", "."])
def test_sidekick_install_never_runs_a_python_of_the_project(editors, monkeypatch, entry):
    """:SidekickInstall makes its venv with the python3 of an absolute PATH
    entry, as the host's Python is found: an empty or `.` entry names the
    working directory, where a repository may hold a python3 of its own."""
    workdir = Path.cwd()
    bin_dir = workdir.parent / "user-bin"
    for folder, who in ((workdir, "project"), (bin_dir, "user")):
        folder.mkdir(exist_ok=True)
        fake = folder / "python3"  # leaves a mark and fails: no venv is made
        fake.write_text(f"#!/bin/sh\ntouch {workdir.parent / who}\nexit 3\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([entry, str(bin_dir), "/usr/bin", "/bin"]))
    editor = editors()
    editor.lua(
        "_G.__install = nil\n"
        "require('sidekick_tools.install').run(function(ok, msg) _G.__install = { ok, msg } end)"
    )
    res = wait_for(lambda: editor.lua("return _G.__install"))
    assert res[0] is False
    assert (workdir.parent / "user").exists()
    assert not (workdir.parent / "project").exists()


def test_keymaps_are_buffer_local_and_configurable(editor):
    editor.setup(keymaps={"run_tool": "<F5>", "halt": False})
    editor.open_chat(CHAT)
    assert editor.lua("return vim.fn.maparg('<F5>', 'n', false, true).buffer") == 1
    assert editor.lua("return vim.fn.maparg('<leader>sh', 'n')") == ""
    editor.nvim.command("enew")
    assert editor.lua("return vim.fn.maparg('<F5>', 'n')") == ""
    editor.nvim.command("buffer chat.sidekick.md")
    editor.nvim.command("call cursor(5, 1)")
    editor.nvim.feedkeys(editor.nvim.replace_termcodes("<F5>", True, False, True), "x", False)
    editor.wait_text("```result id=c1 status=completed exit=0")


def test_setup_again_takes_back_the_chat_keys_it_no_longer_configures(editor):
    """A config reload (setup() again) with a key moved or turned off: the open
    chats lose the old key, the new one works, and a mapping the user made over
    a key of the plugin's is left alone."""
    editor.setup(keymaps={"run_tool": "<F5>", "send": "<F6>"})
    other = editor.open_chat(CHAT, "other.sidekick.md")
    editor.open_chat(CHAT)
    editor.lua("vim.keymap.set('n', '<F6>', '<Cmd>echo 1<CR>', { buffer = 0 })")
    editor.setup(keymaps={"run_tool": "<F8>", "deny": False, "halt": "<F9>"})
    editor.lua("vim.g.mapleader = ','")  # changed after: the keys mapped stay what they were
    editor.setup(keymaps={"run_tool": "<F8>", "deny": False, "halt": "<F9>"})
    other_maps = editor.lua(
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_keymap(..., 'n')) do out[m.lhs] = m.rhs end\n"
        "return out",
        other,
    )
    assert "<F5>" not in other_maps and "<F6>" not in other_maps, other_maps
    assert other_maps.get("<F8>") == "<Cmd>SidekickRunTool<CR>"
    maps = editor.lua(
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_keymap(0, 'n')) do out[m.lhs] = m.rhs or '' end\n"
        "return out"
    )
    assert "<F5>" not in maps, maps
    assert maps.get("<F8>") == "<Cmd>SidekickRunTool<CR>"
    assert maps.get("<F9>") == "<Cmd>SidekickHalt<CR>"
    assert maps.get("<F6>") == "<Cmd>echo 1<CR>"  # the user's own, kept
    assert maps.get(",ss") == "<Cmd>SidekickSend<CR>"  # the leader in force now
    assert ",sd" not in maps
    assert "\\sd" not in maps and "\\ss" not in maps and "\\sh" not in maps, maps


def test_keymaps_false_turns_every_chat_key_off(editor):
    """`keymaps = false`, as many plugins take it: no key in the chats, said
    as no problem; the tasks window keeps its own keys (they are only there)."""
    said = editor.lua(SETUP_SAID, {"keymaps": False})
    assert said[0] and said[2] == [], said
    editor.open_chat(CHAT)
    maps = editor.lua(
        "local out = {}\n"
        "for _, m in ipairs(vim.api.nvim_buf_get_keymap(0, 'n')) do\n"
        "  if (m.rhs or ''):find('Sidekick') then table.insert(out, m.lhs) end\n"
        "end\n"
        "return out"
    )
    assert maps == []
    editor.nvim.command("SidekickTasks")
    assert editor.lua("return vim.bo.filetype") == "sidekick_tasks"
    keys = editor.lua(
        "return vim.tbl_map(function(m) return m.lhs end, vim.api.nvim_buf_get_keymap(0, 'n'))"
    )
    assert "q" in keys and "x" in keys, keys


def test_sidekick_install_installs_what_pyproject_names(editor):
    """pynvim always; httpx2 (the chat loop) and mcp on Python 3.10+, with the
    version specs of pyproject.toml's dependencies and its chat and mcp extras."""
    packages = "return require('sidekick_tools.install').packages(...)"
    assert editor.lua(packages, "3.9") == install_specs.core() == install_specs.for_python((3, 9))
    assert editor.lua(packages, "3.11") == install_specs.core() + install_specs.extra(
        "chat"
    ) + install_specs.extra("mcp")
    assert editor.lua(packages, "3.11") == install_specs.for_python((3, 11))
    assert editor.lua(packages, "3.10") == editor.lua(packages, "3.13")


WHEELHOUSE = ROOT / ".venv" / "wheelhouse"


@pytest.mark.skipif(os.environ.get("SIDEKICK_SKIP_INSTALL_TEST") == "1", reason="opted out")
@pytest.mark.slow
def test_sidekick_install_creates_a_working_venv(editors, monkeypatch):
    """:SidekickInstall's venv and pip run for real, against the wheels `make setup`
    downloaded (pip's own PIP_NO_INDEX and PIP_FIND_LINKS): no index is asked, so the
    suite stays on loopback. The `python3` it finds is the one these wheels are for."""
    if not (WHEELHOUSE / ".done").exists():
        pytest.fail(f"no wheels in {WHEELHOUSE}: run make setup")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(WHEELHOUSE))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    editor = editors()
    editor.lua(
        "_G.__install = nil\n"
        "require('sidekick_tools.install').run(function(ok, msg) _G.__install = { ok, msg } end)"
    )
    res = wait_for(lambda: editor.lua("return _G.__install"), timeout=240)
    assert res[0] is True, res[1]
    venv_python = editor.lua("return require('sidekick_tools.host').venv_python()")
    assert Path(venv_python).exists()
    if sys.version_info >= (3, 10):  # the chat loop's and the MCP server's packages come along
        probe = [venv_python, "-c", "import httpx2, mcp.server.lowlevel"]
        assert subprocess.run(probe, cwd=editor.state_dir.parent).returncode == 0
    # with no python configured, the plugin now uses that venv
    editor.lua("require('sidekick_tools').setup({ state_dir = ... })", str(editor.state_dir))
    assert editor.lua("return require('sidekick_tools.host').find_python()") == venv_python
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0", timeout=60)


def test_setup_again_reaches_the_running_host(editor):
    """A lazy.nvim reload calls setup() again: every option reaches the host."""
    editor.setup(tasks={"retention": {"completed": 100, "failed": 200}, "max_concurrent": 2})
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    editor.setup(
        tasks={
            "retention": {"completed": 7, "failed": 9},
            "max_concurrent": 3,
            "default_timeout": 42,
            "halt_grace": 1.5,
            "nice": 4,
            "hybrid_threshold": 3,
            "max_log_bytes": 4096,
        },
        result={"max_lines": 12, "notice_lines": 3},
        auto_accept={"safe_commands": ["ls"]},
        agents={"fake": {"cmd": ["true", "{message}"]}},
    )
    got = editor.lua("return require('sidekick_tools.host').request('settings')")
    assert got["tasks"] == {
        "max_concurrent": 3,
        "default_timeout": 42,
        "halt_grace": 1.5,
        "retention": {"completed": 7, "failed": 9},
        "nice": 4,
        "max_log_bytes": 4096,
    }
    config = got["config"]
    assert config["tasks"]["hybrid_threshold"] == 3
    assert config["result_max_lines"] == 12 and config["notice_lines"] == 3
    assert list(config["auto_accept"]["safe_commands"]) == ["ls"]
    assert config["agents"]["fake"]["cmd"] == ["true", "{message}"]


def test_host_stderr_has_no_info_lines(editor):
    """What the user is shown when the host dies: warnings and errors only."""
    editor.setup()
    editor.open_chat(CHAT)
    editor.run_tool(5)
    editor.wait_text("```result id=c1 status=completed exit=0")
    log = (editor.state_dir / "host.log").read_text()
    assert " INFO " in log  # the host did log at INFO level, into its file
    assert "INFO" not in editor.lua("return require('sidekick_tools.host').stderr_tail()")


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroups")
def test_the_hosts_session_yields_by_tasks_nice(editor):
    """The host leads a session of its own, shared by its tasks; where the kernel
    shares the CPU between sessions first, the session takes `tasks.nice`, so
    that the tasks together yield to the editor (setup() again raises it)."""
    with open("/proc/self/autogroup") as f:
        ours = f.read()  # empty in the boot session's default group
    editor.setup()
    editor.lua("require('sidekick_tools').list_tasks()")  # starts the host
    pid = editor.host_pid()

    def group_nice() -> str:
        with open(f"/proc/{pid}/autogroup") as f:
            return f.read().split()[-1]

    assert os.getsid(pid) == pid
    assert group_nice() == "10"  # the default tasks.nice
    with open("/proc/self/autogroup") as f:
        assert f.read() == ours  # the editor's (the test's) session is untouched
    editor.setup(tasks={"nice": 12})
    wait_for(lambda: group_nice() == "12")


def test_sidekick_install_does_not_claim_the_venv_when_python_is_configured(editor):
    """With setup({ python = ... }) the host keeps that interpreter (the help:
    "The host uses it from then on unless `python` is set"), but the message
    said "the host now runs with <venv>". venv and pip are stubbed: only the
    words are under test."""
    editor.setup(python=sys.executable)
    editor.lua(
        "_G.__install = nil\n"
        "vim.system = function(cmd, opts, cb) cb({ code = 0, stdout = '', stderr = '' }) end\n"
        "require('sidekick_tools.mcp').probe = function() return { version = '3.11' } end\n"
        "require('sidekick_tools.install').run(function(ok, msg) _G.__install = { ok, msg } end)"
    )
    ok, msg = wait_for(lambda: editor.lua("return _G.__install"))
    venv = editor.lua("return require('sidekick_tools.host').venv_python()")
    assert ok is True
    # what it installed is said by name
    assert msg.startswith("sidekick_tools: installed pynvim, httpx2, mcp; ")
    assert f"the host now runs with {venv}" not in msg
    assert f"keeps running with {sys.executable} (setup({{ python = ... }}))" in msg
