"""tools/__init__.py (registry, check_call) and tools/policy.py (decide)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sidekick_tools.config import AgentConfig, Config
from sidekick_tools.tools import REGISTRY, Tool, check_call, command_policy, get_tool
from sidekick_tools.tools.base import ToolContext, ToolResult
from sidekick_tools.tools.policy import decide, judge, outside_note
from sidekick_tools.tools.schema import validate

FIVE = {"run_terminal_command", "read_files", "list_directory", "write_file", "replace_in_file"}


@pytest.fixture
def root(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("a\n")
    (tmp_path / "outside").mkdir()
    (project / "escape").symlink_to(tmp_path / "outside")
    return project


def make_ctx(root, **auto):
    config = Config.from_dict({"auto_accept": auto})
    config.agents = {
        "trusted": AgentConfig(cmd=["t", "{message}"], auto_accept=True),
        "careful": AgentConfig(cmd=["c", "{message}"]),
    }
    return ToolContext(cwd=str(root), tasks=None, config=config, chat="c.sidekick.md", call_id="x")


# ------------------------------------------------------------------ registry


def test_registry_has_the_five_tools_and_each_fits_the_protocol():
    assert set(REGISTRY) >= FIVE
    for name, tool in REGISTRY.items():
        assert isinstance(tool, Tool), name
        assert tool.name == name
        assert isinstance(tool.description, str) and tool.description
        assert "\n" not in tool.description
        assert get_tool(name) is tool


def test_get_tool_unknown():
    assert get_tool("nope") is None


def test_check_call_unknown_tool_lists_known_ones():
    err = check_call("run_command", {"command": "ls"})
    assert err == ('Unknown tool "run_command". Known tools: ' + ", ".join(sorted(REGISTRY)))


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("read_files", {"paths": ["a"]}, None),
        ("read_files", {"paths": "a"}, 'parameter "paths": expected array of strings, got string'),
        ("read_files", {"paths": []}, 'parameter "paths": must not be an empty array'),
        (
            "read_files",
            {"path": ["a"]},
            'unknown parameter "path" (did you mean "paths"? expected: paths)',
        ),
        ("list_directory", {"path": "."}, None),
        ("list_directory", {"path": None}, 'parameter "path": expected string, got null'),
        ("list_directory", {}, 'missing required parameter "path"'),
        ("write_file", {"path": "f", "content": ""}, None),
        (
            "write_file",
            {"path": "f", "content": 5},
            'parameter "content": expected string, got integer',
        ),
        ("write_file", {"path": "f"}, 'missing required parameter "content"'),
        ("replace_in_file", {"path": "f", "old": "a", "new": ""}, None),
        ("replace_in_file", {"path": "f", "old": "a"}, 'missing required parameter "new"'),
        (
            "replace_in_file",
            {"path": "f", "old": "a", "new": None},
            'parameter "new": expected string, got null',
        ),
        (
            "run_terminal_command",
            {"command": "ls", "timeout": 5},
            'unknown parameter "timeout" (did you mean "timeout_seconds"? expected: command, '
            "purpose, cwd, timeout_seconds, async)",
        ),
        ("run_terminal_command", {"command": "ls", "timeout_seconds": 1.5, "async": False}, None),
        (
            "run_terminal_command",
            {"command": "ls", "timeout_seconds": True},
            'parameter "timeout_seconds": expected number, got boolean',
        ),
        ("run_terminal_command", ["ls"], "parameters must be a JSON object, got array"),
    ],
)
def test_check_call(name, params, expected):
    assert check_call(name, params) == expected


def test_adding_a_tool_is_one_registry_entry(monkeypatch, root):
    class Echo:
        name = "echo_tool"
        description = "Echo."
        schema = {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "additionalProperties": False,
        }

        def auto_accept(self, params, ctx):
            return True

        async def run(self, params, ctx):
            return ToolResult.ok(params.get("x", ""))

    monkeypatch.setitem(REGISTRY, "echo_tool", Echo())
    assert check_call("echo_tool", {"x": "hi"}) is None
    assert check_call("echo_tool", {"y": 1}) is not None
    assert decide("echo_tool", {"x": "hi"}, make_ctx(root)) == "ask"  # not in the list
    ctx = make_ctx(root, tools=("echo_tool",))
    assert decide("echo_tool", {"x": "hi"}, ctx) == "approve"


# -------------------------------------------------------------------- decide


@pytest.mark.parametrize(
    "tool, params, expected",
    [
        ("read_files", {"paths": ["a.txt"]}, "approve"),
        ("read_files", {"paths": ["a.txt", "missing/but/inside"]}, "approve"),
        ("read_files", {"paths": ["../outside/x"]}, "ask"),
        ("read_files", {"paths": ["escape/x"]}, "ask"),
        ("read_files", {"paths": ["a.txt", "/etc/passwd"]}, "ask"),
        ("list_directory", {"path": "."}, "approve"),
        ("list_directory", {"path": ".."}, "ask"),
        ("list_directory", {"path": "escape"}, "ask"),
        ("write_file", {"path": "a.txt", "content": "x"}, "ask"),
        ("replace_in_file", {"path": "a.txt", "old": "a", "new": "b"}, "ask"),
        ("run_terminal_command", {"command": "ls -la"}, "approve"),
        ("run_terminal_command", {"command": "git status"}, "approve"),
        ("run_terminal_command", {"command": "ls && rm -rf ."}, "ask"),
        ("run_terminal_command", {"command": "lsblk"}, "ask"),
        ("run_terminal_command", {"command": "pytest"}, "ask"),
        ("no_such_tool", {}, "ask"),
    ],
)
def test_defaults(root, tool, params, expected):
    assert decide(tool, params, make_ctx(root), None) == expected


@pytest.mark.parametrize("answer", ["approve", "deny", " Approve ", "DENY"])
@pytest.mark.parametrize(
    "tool, params",
    [
        ("write_file", {"path": "/etc/x", "content": ""}),
        ("read_files", {"paths": ["a.txt"]}),
        ("run_terminal_command", {"command": "rm -rf /"}),
        ("unknown", {"anything": 1}),
    ],
)
def test_lua_policy_answer_wins(root, tool, params, answer):
    assert decide(tool, params, make_ctx(root), answer) == answer.strip().lower()


@pytest.mark.parametrize("answer", [None, "", "maybe", "ask", 1, True])
def test_other_policy_answers_fall_through_to_defaults(root, answer):
    ctx = make_ctx(root)
    assert decide("read_files", {"paths": ["a.txt"]}, ctx, answer) == "approve"
    assert decide("write_file", {"path": "a.txt", "content": ""}, ctx, answer) == "ask"


def test_tool_name_list_is_required_for_generic_tools(root):
    ctx = make_ctx(root, tools=("list_directory",))
    assert decide("list_directory", {"path": "."}, ctx) == "approve"
    assert decide("read_files", {"paths": ["a.txt"]}, ctx) == "ask"


def test_write_tools_need_opt_in_and_stay_inside_cwd(root):
    ctx = make_ctx(root, tools=("write_file", "replace_in_file"))
    assert decide("write_file", {"path": "new/f.txt", "content": "x"}, ctx) == "approve"
    assert decide("replace_in_file", {"path": "a.txt", "old": "a", "new": "b"}, ctx) == "approve"
    assert decide("write_file", {"path": "../outside/f", "content": "x"}, ctx) == "ask"
    assert decide("write_file", {"path": "escape/f", "content": "x"}, ctx) == "ask"


def test_terminal_ignores_the_tool_list(root):
    listed = make_ctx(root, tools=("run_terminal_command",))
    assert decide("run_terminal_command", {"command": "rm -rf x"}, listed) == "ask"
    unlisted = make_ctx(root, tools=())
    assert decide("run_terminal_command", {"command": "ls"}, unlisted) == "approve"
    custom = make_ctx(root, safe_commands=("make test",))
    assert decide("run_terminal_command", {"command": "make test"}, custom) == "approve"
    assert decide("run_terminal_command", {"command": "ls"}, custom) == "ask"


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"agent": "trusted", "message": "hi"}, "approve"),
        ({"agent": "careful", "message": "hi"}, "ask"),
        ({"agent": "unknown", "message": "hi"}, "ask"),
        ({"agent": 3, "message": "hi"}, "ask"),
        ({"message": "hi"}, "ask"),
    ],
)
def test_use_agent_follows_agent_config(root, monkeypatch, params, expected):
    class UseAgent:  # stand-in until the real tool lands in the registry
        name = "use_agent"
        description = "Ask a configured agent."
        schema = {"type": "object"}

        def auto_accept(self, params, ctx):
            return False  # decide() must not consult it for use_agent

        async def run(self, params, ctx):  # pragma: no cover
            raise AssertionError

    monkeypatch.setitem(REGISTRY, "use_agent", UseAgent())
    assert decide("use_agent", params, make_ctx(root, tools=())) == expected


def test_invalid_params_are_never_auto_approved(root):
    ctx = make_ctx(root)
    assert decide("read_files", {"paths": "a.txt"}, ctx) == "ask"
    assert decide("read_files", {"paths": ["a.txt"], "extra": 1}, ctx) == "ask"
    assert decide("run_terminal_command", {"command": "ls", "async": "no"}, ctx) == "ask"
    assert decide("list_directory", ["."], ctx) == "ask"


def test_a_raising_predicate_means_ask(root, monkeypatch):
    class Broken:
        name = "broken"
        description = "Broken."
        schema = {"type": "object"}

        def auto_accept(self, params, ctx):
            raise RuntimeError("boom")

        async def run(self, params, ctx):  # pragma: no cover
            raise AssertionError

    monkeypatch.setitem(REGISTRY, "broken", Broken())
    assert decide("broken", {}, make_ctx(root, tools=("broken",))) == "ask"


def test_tool_result_helpers():
    assert ToolResult.ok("b", exit=0) == ToolResult("completed", "b", {"exit": 0})
    assert ToolResult.fail("b", reason="timeout") == ToolResult(
        "failed", "b", {"reason": "timeout"}
    )
    assert ToolResult.denied("no") == ToolResult("denied", "no", {})
    assert ToolResult.running("r", task="abc123").fields == {"task": "abc123"}
    assert ToolResult.ok().body == ""
    # fields dicts are never shared between results
    a, b = ToolResult.ok("x"), ToolResult.ok("y")
    a.fields["k"] = 1
    assert b.fields == {}


def test_validate_is_reexported():
    from sidekick_tools import tools

    assert tools.validate is validate


# ------------------------------------------------------------------ off the loop


def held_check(monkeypatch):
    """command_policy.check, made to wait until the event loop has run meanwhile
    (10 s at most): the verdict says whether it did."""
    ran = threading.Event()

    def check(*args):
        held = not ran.wait(timeout=10)
        return command_policy.Verdict(not held, "the loop was held" if held else "the loop ran")

    monkeypatch.setattr(command_policy, "check", check)

    async def meanwhile():
        ran.set()

    return meanwhile


async def test_a_commands_verdict_is_found_while_the_host_answers_others(root, monkeypatch):
    """The git check may read a repository's files at length (a 252 MB index held
    every request of the editor for 6 s): it runs off the event loop."""
    meanwhile = held_check(monkeypatch)
    ctx = make_ctx(root)
    verdict, _ = await asyncio.gather(
        judge("run_terminal_command", {"command": "git status"}, ctx), meanwhile()
    )
    assert verdict == "approve"
    assert await judge("read_files", {"paths": ["a.txt"]}, ctx) == "approve"  # no thread


async def test_an_auto_run_command_is_checked_again_while_the_host_answers_others(
    root, monkeypatch
):
    meanwhile = held_check(monkeypatch)
    ctx = make_ctx(root)
    ctx.auto = True
    result, _ = await asyncio.gather(
        get_tool("run_terminal_command").run({"command": "git status"}, ctx), meanwhile()
    )
    assert result.status == "failed"  # approved with no plan: not run
    assert "(the loop ran)" in result.body


def test_a_question_names_where_a_path_really_leads_outside(root):
    """A symlink the repository carries (docs/CHANGELOG.md -> ~/.bashrc) made a
    write outside look like one inside."""
    outside = root.parent / "outside"
    (root / "docs").mkdir()
    (root / "docs" / "CHANGELOG.md").symlink_to(outside / ".bashrc")
    cwd = str(root)
    note = outside_note({"path": "docs/CHANGELOG.md", "content": "x"}, cwd)
    assert note == f" [outside the working directory: {outside / '.bashrc'}]"
    assert outside_note({"path": "a.txt"}, cwd) == ""
    assert outside_note({"paths": ["a.txt", "../outside/x", "escape/y"]}, cwd) == (
        f" [outside the working directory: {outside / 'x'}, {outside / 'y'}]"
    )
    assert outside_note({"command": "ls", "cwd": "/"}, cwd) == " [outside the working directory: /]"
    assert outside_note({"paths": "../x"}, cwd) == outside_note(None, cwd) == ""


@pytest.mark.parametrize("where", ["home", "above home", "root"])
def test_nothing_is_approved_where_the_working_directory_holds_every_file(
    tmp_path, monkeypatch, where
):
    """A Neovim started in ~ (or a GUI one in /): every file of the user's is
    "inside" the working directory, keys and shell history included, so no
    read, listing or command there runs unasked. A project folder under home
    is unchanged, and the user's own policy function still decides."""
    home = tmp_path / "home" / "me"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / "project").mkdir()
    monkeypatch.setenv("HOME", str(home))
    cwd = {"home": home, "above home": home.parent, "root": "/"}[where]
    key = str(home / ".ssh" / "id_rsa")
    calls = [
        ("read_files", {"paths": [key]}),
        ("list_directory", {"path": str(home / ".ssh")}),
        ("run_terminal_command", {"command": f"cat {key}"}),
        ("run_terminal_command", {"command": "ls"}),
    ]
    ctx = make_ctx(cwd)
    for name, params in calls:
        assert decide(name, params, ctx) == "ask", (name, params)
    assert decide("read_files", {"paths": [key]}, ctx, "approve") == "approve"
    project = make_ctx(home / "project")
    assert decide("run_terminal_command", {"command": "ls"}, project) == "approve"
    assert decide("list_directory", {"path": "."}, project) == "approve"


def test_a_path_that_reads_as_inside_but_leads_out_through_a_link_is_hidden(root):
    """The question before running by hand is for what the call's text does
    not show: `sub/../docs/x` and `/project/docs/x` read as inside too; a path
    written as outside (`../x`) shows where it goes."""
    from sidekick_tools.tools.policy import hidden_outside

    outside = root.parent / "outside"
    (root / "docs").symlink_to(outside)
    (root / "sub").mkdir()
    cwd = str(root)
    for path in ("docs/x", "./docs/x", "docs//x", "sub/../docs/x", str(root / "docs" / "x")):
        assert hidden_outside({"path": path}, cwd) == [(path, str(outside / "x"))], path
    assert hidden_outside({"paths": ["a.txt", "sub/../docs/y"]}, cwd) == [
        ("sub/../docs/y", str(outside / "y"))
    ]
    assert hidden_outside({"cwd": "docs"}, cwd) == [("docs", str(outside))]
    for path in ("../outside/x", str(outside / "x"), "a.txt"):
        assert hidden_outside({"path": path}, cwd) == [], path


def test_a_write_into_a_folder_whose_files_git_runs_is_never_approved(root):
    """With writes opted into auto_accept.tools, `.git/config` was "inside" the
    working directory: a chained write set core.fsmonitor, and the next `git
    status` (a shell prompt's) ran it. A write there, written so or led there
    by a link, a `.git` file, Mercurial's folder, or a chat, is asked about;
    reading and listing them are not."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "settings.cfg").symlink_to(root / ".git" / "config")
    (root / "notes.sidekick.md").write_text("USER: hi\n")
    ctx = make_ctx(root, tools=sorted(FIVE - {"run_terminal_command"}))
    writes = [
        ".git/config",
        ".git/hooks/pre-commit",
        "sub/../.git/config",
        ".GIT/config",  # a case-insensitive file system's .git
        ".git",  # a `.git` file points git at another folder
        ".hg/hgrc",
        "settings.cfg",  # a link into .git
        "notes.sidekick.md",
        "NOTES.Sidekick.MD",
        "c.sidekick.md",
    ]
    for path in writes:
        assert decide("write_file", {"path": path, "content": "x"}, ctx) == "ask", path
        params = {"path": path, "old": "a", "new": "b"}
        assert decide("replace_in_file", params, ctx) == "ask", path
    assert decide("write_file", {"path": "src/a.py", "content": "x"}, ctx) == "approve"
    # husky's hooks, Jujutsu's config, and the folder core.hooksPath names (review)
    subprocess.run(["git", "-C", str(root), "config", "core.hooksPath", "tools/hooks"], check=True)
    for path in (".husky/pre-commit", ".jj/repo/config.toml", "tools/hooks/pre-commit"):
        assert decide("write_file", {"path": path, "content": "x"}, ctx) == "ask", path
    for path in (".github/workflows/ci.yml", "my.git/x", "tools/hooks.md", "tools/x"):
        assert decide("write_file", {"path": path, "content": "x"}, ctx) == "approve", path
    assert decide("read_files", {"paths": [".git/config", "settings.cfg"]}, ctx) == "approve"
    assert decide("list_directory", {"path": ".git"}, ctx) == "approve"


def test_a_write_a_link_leads_into_git_s_folder_is_named(root):
    """The question and the write's result say where it lands; a path written
    as `.git/…` shows it already."""
    from sidekick_tools.tools.policy import hidden_code
    from sidekick_tools.tools.write_file import write

    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "settings.cfg").symlink_to(root / ".git" / "config")
    cwd = str(root)
    target = str(root / ".git" / "config")
    params = {"path": "settings.cfg", "content": "x"}
    assert hidden_code("write_file", params, cwd) == [("settings.cfg", target)]
    assert hidden_code("replace_in_file", {"path": "settings.cfg"}, cwd) == [
        ("settings.cfg", target)
    ]
    assert hidden_code("read_files", {"paths": ["settings.cfg"]}, cwd) == []
    assert hidden_code("write_file", {"path": ".git/config"}, cwd) == []
    note = outside_note(params, cwd, "write_file")
    assert note == f" [in a folder whose files git or Mercurial run: {target}]"
    assert outside_note(params, cwd) == ""  # no tool: no write
    assert f"settings.cfg, which leads to {target}" in write("settings.cfg", "x", cwd).body
    assert write("b.txt", "x", cwd).body == "Created b.txt (1 byte written)."


def test_the_hooks_folder_is_the_one_git_takes_hooks_from(root, tmp_path):
    """core.hooksPath as git reads it (review: a comment on its line, an
    included file, a linked worktree, a line of its own or not), not a line
    that merely says hookspath; and the files that name what a commit runs."""
    import subprocess

    def git(*args, cwd=root):
        subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    ctx = make_ctx(root, tools=["write_file"])

    def asks(path, where=ctx):
        return decide("write_file", {"path": path, "content": "x"}, where) == "ask"

    config = root / ".git" / "config"
    base = config.read_text()
    config.write_text(base + "[alias]\n\thookspath = tools\n")  # no hooks path at all
    assert not asks("tools/x.py")
    config.write_text(base + "[core]\n\thooksPath = tools/hooks # ours\n")
    assert asks("tools/hooks/pre-commit") and not asks("tools/x.py")
    (root / "extra.cfg").write_text("[core]\n\thooksPath = more/hooks\n")
    config.write_text(base + "[include]\n\tpath = ../extra.cfg\n")
    assert asks("more/hooks/pre-commit")
    config.write_text(base)
    wt = tmp_path / "wt"  # a linked worktree: its .git is a file
    git("worktree", "add", "-q", str(wt))
    git("config", "core.hooksPath", "wt-hooks", cwd=wt)
    assert asks("wt-hooks/pre-commit", make_ctx(wt, tools=["write_file"]))
    assert asks(".pre-commit-config.yaml") and asks("sub/lefthook.yml")
