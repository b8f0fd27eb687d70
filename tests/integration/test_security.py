"""Security (DESIGN §12): what a chat, a repository or a model controls cannot
make the plugin run, read, write or block what it should not."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

HEAD = "USER: go\n\nASSISTANT: On it.\n\n"


def call(call_id: str, tool: str, params: dict) -> str:
    return f"```tool {tool} id={call_id}\n{json.dumps(params)}\n```\n"


HOSTILE_MODULES = ("logging", "secrets", "sqlite3", "sidekick_tools", "json", "asyncio", "pynvim")


def test_the_host_never_imports_from_the_project_folder(editors, monkeypatch):
    """A cloned repository with a logging.py, secrets.py, sqlite3/ or
    sidekick_tools/ (and PYTHONPATH pointing into it) runs none of them."""
    ed = editors()
    sentinel = ed.workdir.parent / "pwned"
    code = f"open({str(sentinel)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit(3)\n"
    for name in HOSTILE_MODULES:
        (ed.workdir / f"{name}.py").write_text(code)
    for name in ("sqlite3", "sidekick_tools", "encodings"):  # packages shadow modules too
        pkg = ed.workdir / "pkgs" / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(code)
    (ed.workdir / "sitecustomize.py").write_text(code)
    (ed.workdir / "usercustomize.py").write_text(code)
    ed.lua("vim.env.PYTHONPATH = '.:pkgs:'")  # set by a hostile .envrc, say
    ed.setup()
    ed.open_chat(HEAD + call("c1", "run_terminal_command", {"command": "echo alive"}))
    ed.run_tool(5)
    ed.wait_text("```result id=c1 status=completed exit=0")
    assert not sentinel.exists(), sentinel.read_text()


def test_output_cannot_act_on_the_editor_through_a_modeline(editor):
    """`vim: set ff=mac :` printed by a task must not become a modeline that
    mangles the saved chat when it is opened again."""
    editor.nvim.command("set modeline modelines=5")  # a user who has them on
    editor.setup()
    cmd = "printf 'vim: set ff=mac tw=7 :\\n'"
    editor.open_chat(HEAD + call("m", "run_terminal_command", {"command": cmd}))
    editor.run_tool(5)
    editor.wait_text("```result id=m status=completed exit=0")
    editor.nvim.command("write")
    editor.nvim.command("edit!")
    assert editor.lua("return vim.bo.fileformat") == "unix"
    assert editor.lua("return vim.bo.textwidth") == 0
    assert editor.lua("return vim.bo.modeline") is False
    # and the control: another file with the same line does get it
    other = editor.workdir / "note.txt"
    other.write_text("x\nvim: set tw=7 :\n")
    editor.nvim.command(f"edit {other}")
    assert editor.lua("return vim.bo.textwidth") == 7
