"""tools/command_forms.py and command_table.py: the built-in table, the user's entries
and forms, and (with real programs) that every option said to take a value does."""

from __future__ import annotations

import os
import subprocess

import pytest
from sidekick_tools.defaults import default
from sidekick_tools.tools import command_policy
from sidekick_tools.tools.command_forms import BUILTIN_FORMS, FORBIDDEN_OPTIONS
from sidekick_tools.tools.command_table import FormError, table_for, user_form

DEFAULT_SAFE_COMMANDS = tuple(default("auto_accept.safe_commands"))

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def fields_of(form):
    return {
        "flags": sorted(form.flags),
        "values": sorted(form.values),
        "optional_values": sorted(form.optional_values),
        "path_values": sorted(form.path_values),
        "operands": form.operands,
        "numeric": form.numeric,
    }


@pytest.mark.parametrize("name", sorted(BUILTIN_FORMS))
def test_builtin_forms_pass_the_checks_user_forms_get(name):
    form = BUILTIN_FORMS[name]
    assert user_form(name, fields_of(form)).options() == form.options()
    forbidden = FORBIDDEN_OPTIONS["*"] | FORBIDDEN_OPTIONS.get(form.program, frozenset())
    assert not form.options() & forbidden


def test_every_default_name_has_a_builtin_form():
    table = table_for(DEFAULT_SAFE_COMMANDS, {})
    assert table.problems == ()
    assert set(table.forms) == set(DEFAULT_SAFE_COMMANDS)
    assert table.exact == frozenset()


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("sh", {}, "runs other programs"),
        ("env", {"operands": "none"}, "runs other programs"),
        ("xargs", {}, "runs other programs"),
        ("git", {}, "per subcommand"),
        ("rg; rm", {}, "named by a program"),
        ("/usr/bin/rg", {}, "named by a program"),
        ("a b c", {}, "named by a program"),
        ("", {}, "named by a program"),
        ("rg", "yes", "must be a table"),
        ("rg", {"flag": ["-i"]}, "unknown field 'flag'"),
        ("rg", {"flags": ["i"]}, "is not an option"),
        ("rg", {"flags": ["-name"]}, "is not an option"),
        ("rg", {"flags": ["--x=y"]}, "is not an option"),
        ("rg", {"flags": [3]}, "is not an option"),
        ("rg", {"flags": ["--pre"]}, "can never be auto-accepted"),
        ("rg", {"values": ["--pre"]}, "can never be auto-accepted"),
        ("rg", {"flags": ["-z"]}, "can never be auto-accepted"),
        ("rg", {"flags": ["--follow"]}, "can never be auto-accepted"),
        ("sort", {"path_values": ["--files0-from"]}, "can never be auto-accepted"),
        ("git blame", {"flags": ["--textconv"]}, "can never be auto-accepted"),
        ("git blame", {"values": ["-c"]}, "can never be auto-accepted"),
        ("date", {"flags": ["-s"]}, "can never be auto-accepted"),
        ("tar", {"values": ["--to-command"]}, "can never be auto-accepted"),
        ("rg", {"flags": ["-i"], "values": ["-i"]}, "in both flags and values"),
        ("rg", {"operands": "anything"}, "operands must be one of"),
        ("rg", {"max_operands": -1}, "whole number"),
        ("rg", {"max_operands": 1.5}, "whole number"),
        ("rg", {"max_operands": True}, "whole number"),
        ("rg", {"numeric": "yes"}, "true or false"),
    ],
)
def test_user_form_errors_say_what_to_fix(name, raw, message):
    with pytest.raises(FormError) as info:
        user_form(name, raw)
    assert message in str(info.value)
    assert "auto_accept.command_forms" in str(info.value)


def test_user_form_accepts_lua_shaped_tables():
    form = user_form(
        "rg",
        {"flags": {"1": "-i", "2": "--hidden"}, "values": [], "operands": "pattern+paths"},
    )
    assert form.flags == {"-i", "--hidden"}
    assert form.values == frozenset()
    assert user_form("cargo check", {"max_operands": 0.0}).max_operands == 0


def test_table_entries_declared_forms_and_disabled_names():
    table = table_for(
        ["ls", "git status", "make test", "npm run lint", "cat", "sh -c make", "ls; id"],
        {"cat": False, "rg": {"flags": ["-i"], "operands": "pattern+paths"}, "bad": "x"},
    )
    assert set(table.forms) == {"ls", "git status", "rg"}
    assert table.exact == {("make", "test"), ("npm", "run", "lint")}
    assert len(table.problems) == 3
    assert any("sh runs other programs" in p for p in table.problems)
    assert any("'ls; id' cannot be used" in p for p in table.problems)
    assert any("command_forms['bad']" in p for p in table.problems)


def test_a_declared_form_replaces_the_builtin_one_and_a_broken_one_disables_it():
    tight = table_for(["cat"], {"cat": {"operands": "paths", "max_operands": 1}})
    assert tight.forms["cat"].flags == frozenset()
    broken = table_for(["cat"], {"cat": {"flags": ["--files0-from"]}})
    assert "cat" not in broken.forms and broken.problems


def test_quoted_entries_are_reported():
    table = table_for(["'ls'", "git\\ status"], {})
    assert not table.forms and len(table.problems) == 2
    assert "plainly" in table.problems[0]


def test_a_declared_form_is_matched(tmp_path):
    table = table_for([], {"rg": {"flags": ["-i"], "values": ["-g"], "operands": "pattern+paths"}})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "rg").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "rg").chmod(0o755)
    (tmp_path / "work").mkdir()
    env = {"PATH": str(tmp_path / "bin")}

    def ok(command):
        return command_policy.check(command, None, str(tmp_path / "work"), table, env).approved

    assert ok("rg -i foo src")
    assert ok("rg -g '*.py' foo")
    assert not ok("rg --pre cat foo")
    assert not ok("rg foo /etc")
    assert not ok("rg -L foo")


# ------------------------------------------------ value-taking options, for real
SECRET = "SECRET-CONTENT-7f3a"


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    base = tmp_path_factory.mktemp("arity")
    root = base / "work"
    root.mkdir()
    secret = base / "secret.txt"
    secret.write_text(SECRET + "\n")
    (root / "a.txt").write_text("alpha\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=GIT_ENV)
    for args in (
        ["add", "a.txt"],
        ["-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, env=GIT_ENV)
    return root, secret


def value_options():
    for name, form in sorted(BUILTIN_FORMS.items()):
        for option in sorted(form.values):
            yield pytest.param(name, option, id=f"{name} {option}")


@pytest.mark.parametrize("name, option", list(value_options()))
def test_an_option_said_to_take_a_value_takes_the_next_word(place, name, option):
    """`prog OPT /outside/secret a.txt` is approved only because OPT takes the secret's
    path as its value. Run for real, the program must agree: were the path an
    operand instead, cat/head/tail/grep (and git diff, which compares two paths
    outside the work tree) would print the secret, and ls and wc its name."""
    root, secret = place
    after = {"date": " +%Y", "git branch": ""}.get(name, " a.txt")
    command = f"{name} {option} {secret}{after}"
    table = table_for(DEFAULT_SAFE_COMMANDS, {})
    result = command_policy.check(command, None, str(root), table)
    assert result.approved, result.reason
    proc = subprocess.run(
        ["/bin/sh", "-c", result.plan.shell],
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=20,
        env=GIT_ENV,
    )
    out = proc.stdout.decode(errors="replace")
    assert SECRET not in out
    if option not in ("--src-prefix", "--dst-prefix"):  # these print their value
        assert secret.name not in out  # ls, wc and git diff --stat print operand names


def test_the_run_reveals_the_secret_when_the_path_is_an_operand(place):
    """The check above can fail: the same shape with the secret as an operand leaks."""
    root, secret = place
    proc = subprocess.run(
        ["git", "diff", str(secret), "a.txt"], cwd=root, capture_output=True, env=GIT_ENV
    )
    assert SECRET in proc.stdout.decode()
    proc = subprocess.run(["head", "-q", str(secret)], cwd=root, capture_output=True)
    assert SECRET in proc.stdout.decode()
