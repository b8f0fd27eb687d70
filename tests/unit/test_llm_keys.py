"""API keys from the environment, a command, or a literal; errors never hold them."""

from __future__ import annotations

import sys

import pytest
from sidekick_tools.llm.errors import KeyUnavailable
from sidekick_tools.llm.keys import resolve_key


async def test_env_key(monkeypatch):
    monkeypatch.setenv("SIDEKICK_TEST_KEY", "  sk-from-env  ")
    assert await resolve_key("env:SIDEKICK_TEST_KEY") == "sk-from-env"


async def test_unset_env_names_the_variable(monkeypatch):
    monkeypatch.delenv("SIDEKICK_TEST_MISSING", raising=False)
    with pytest.raises(KeyUnavailable, match="SIDEKICK_TEST_MISSING is not set"):
        await resolve_key("env:SIDEKICK_TEST_MISSING")


async def test_none_and_literal():
    assert await resolve_key(None) is None
    assert await resolve_key("") is None
    assert await resolve_key("sk-literal ") == "sk-literal"


async def test_command_key_first_line_without_a_shell(tmp_path):
    script = tmp_path / "pass"
    script.write_text("#!/bin/sh\nprintf '\\n  secret-one  \\nuser: me\\n'\n")
    script.chmod(0o700)
    assert await resolve_key(f"cmd:{script} show anthropic") == "secret-one"
    # no shell: a pipe is an argument, not a pipeline
    key = await resolve_key(f"cmd:{sys.executable} -c 'import sys; print(sys.argv[1:])' a | b")
    assert key == "['a', '|', 'b']"


async def test_command_failures_say_why_without_the_output(tmp_path):
    failing = tmp_path / "fail"
    failing.write_text("#!/bin/sh\necho sk-leaked-secret-value\nexit 3\n")
    failing.chmod(0o700)
    with pytest.raises(KeyUnavailable) as caught:
        await resolve_key(f"cmd:{failing}")
    assert "exit 3" in caught.value.message
    assert "sk-leaked" not in caught.value.message
    with pytest.raises(KeyUnavailable, match="could not start"):
        await resolve_key("cmd:/nonexistent/keytool")
    with pytest.raises(KeyUnavailable, match="names no command"):
        await resolve_key("cmd:  ")
    with pytest.raises(KeyUnavailable, match="printed nothing"):
        await resolve_key("cmd:true")
    with pytest.raises(KeyUnavailable, match="cannot be read"):
        await resolve_key("cmd:echo 'unbalanced")


async def test_command_timeout_kills_it():
    with pytest.raises(KeyUnavailable, match="did not finish within 0.2 s"):
        await resolve_key("cmd:sleep 30", timeout=0.2)


async def test_a_key_command_is_never_one_the_project_holds(tmp_path, monkeypatch):
    """`cmd:pass show x` runs the `pass` of an absolute PATH entry: an empty or
    relative entry names the working directory (the host's, the editor's),
    where a cloned repository may hold a `pass` of its own."""
    project, bin_dir = tmp_path / "project", tmp_path / "bin"
    project.mkdir()
    bin_dir.mkdir()
    for where, who in ((project, "project"), (bin_dir, "user")):
        script = where / "pass"
        script.write_text(f"#!/bin/sh\necho key-from-{who}\n")
        script.chmod(0o700)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", f":.:{bin_dir}:/usr/bin:/bin")
    assert await resolve_key("cmd:pass show x") == "key-from-user"
    (bin_dir / "pass").unlink()
    with pytest.raises(KeyUnavailable, match="not found on PATH"):
        await resolve_key("cmd:pass show x")
