"""Auto-run git never starts a program a repository names (real git, real repositories).

Each hostile repository sets one of git's program-starting keys to a script that
leaves a sentinel file. For each, three things are proven:

- the control: plain git, run the way a user would, does start the script
  (so the repository really is hostile and the test can fail);
- the policy: every command the default table would approve in it, run
  exactly as planned, starts nothing (most are not approved at all: the
  repository's configuration is refused and the user is asked);
- where the hardening alone is enough (``neutralised``), the hardened
  command line starts nothing even without the repository check.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sidekick_tools.defaults import default
from sidekick_tools.tools import command_policy, git_hardening, shell_words
from sidekick_tools.tools.command_table import table_for

DEFAULT_SAFE_COMMANDS = tuple(default("auto_accept.safe_commands"))

TABLE = table_for(DEFAULT_SAFE_COMMANDS, {})
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
USER_ENV = {**CLEAN_ENV, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
COMMANDS = [
    "git status",
    "git diff",
    "git diff HEAD~1",
    "git log -p -2",
    "git log --stat",
    "git show",
    "git branch -v",
]


@dataclass
class Repo:
    root: Path
    sentinels: Path
    base: Path

    def git(self, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd or self.root,
            env=USER_ENV,
            capture_output=True,
            check=True,
            text=True,
        )
        return proc.stdout.strip()

    def evil(self, name: str) -> str:
        """A script that leaves sentinels/NAME and passes its input through."""
        path = self.base / f"evil-{name}"
        path.write_text(
            f'#!/bin/sh\ntouch "{self.sentinels}/{name}"\n'
            'if [ -f "$1" ]; then cat "$1"; else cat; fi\n'
        )
        path.chmod(0o755)
        return str(path)

    def fired(self) -> list[str]:
        return sorted(p.name for p in self.sentinels.iterdir())

    def make_racy(self) -> None:
        """Give f.txt a new mtime (same size) so status re-reads it and rewrites the index."""
        st = os.stat(self.root / "f.txt")
        os.utime(self.root / "f.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))


def run_shell(repo: Repo, shell: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        ["/bin/sh", "-c", shell],
        cwd=repo.root,
        env=env or CLEAN_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )


def plain(repo: Repo, command: str) -> None:
    run_shell(repo, command, USER_ENV)


@pytest.fixture
def repo(tmp_path):
    sentinels = tmp_path / "sentinels"
    sentinels.mkdir()
    root = tmp_path / "work"
    r = Repo(root, sentinels, tmp_path)
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=USER_ENV)
    r.git("config", "user.email", "a@b")
    r.git("config", "user.name", "a")
    (root / "f.txt").write_text("one\n")
    (root / ".gitattributes").write_text("*.txt diff=drv filter=flt\n")
    r.git("add", ".")
    r.git("commit", "-qm", "one")
    (root / "f.txt").write_text("two\n")
    r.git("commit", "-qam", "two")
    (root / "f.txt").write_text("six\n")  # a change in the work tree, same size
    return r


def _fsmonitor(r: Repo) -> None:
    r.git("config", "core.fsmonitor", r.evil("fsmonitor"))


def _hook(r: Repo) -> None:
    (r.root / ".git" / "hooks").mkdir(exist_ok=True)
    hook = r.root / ".git" / "hooks" / "post-index-change"
    hook.write_text(Path(r.evil("hook")).read_text())
    hook.chmod(0o755)
    r.make_racy()


def _hooks_path(r: Repo) -> None:
    hooks = r.base / "hooks"
    hooks.mkdir()
    (hooks / "post-index-change").write_text(Path(r.evil("hookspath")).read_text())
    (hooks / "post-index-change").chmod(0o755)
    r.git("config", "core.hooksPath", str(hooks))
    r.make_racy()


def _external(r: Repo) -> None:
    r.git("config", "diff.external", r.evil("external"))


def _textconv(r: Repo) -> None:
    r.git("config", "diff.drv.textconv", r.evil("textconv"))


def _diff_command(r: Repo) -> None:
    r.git("config", "diff.drv.command", r.evil("diffcommand"))


def _clean(r: Repo) -> None:
    r.git("config", "filter.flt.clean", r.evil("clean"))
    r.make_racy()


def _process(r: Repo) -> None:
    r.git("config", "filter.flt.process", r.evil("process"))
    r.make_racy()


def _signature(r: Repo) -> None:
    tree, parent = r.git("write-tree"), r.git("rev-parse", "HEAD")
    body = (
        f"tree {tree}\nparent {parent}\nauthor a <a@b> 1700000000 +0000\n"
        "committer a <a@b> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n"
        " iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    (r.base / "commit.txt").write_text(body)
    commit = r.git("hash-object", "-t", "commit", "-w", str(r.base / "commit.txt"))
    r.git("update-ref", "HEAD", commit)
    r.git("config", "gpg.program", r.evil("gpg"))
    r.git("config", "log.showSignature", "true")


def _lazy_fetch(r: Repo) -> None:
    blob = r.git("rev-parse", "HEAD~1:f.txt")
    (r.root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    for key, value in (
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.promisor", "true"),
        ("remote.origin.url", f"ext::sh -c touch% {r.sentinels}/fetch"),
        ("protocol.ext.allow", "always"),
    ):
        r.git("config", key, value)


def _include(r: Repo) -> None:
    included = r.base / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = {r.evil('included')}\n")
    r.git("config", "include.path", str(included))


def _submodule(r: Repo) -> None:
    """A submodule whose own configuration defines a filter: git status and diff in
    the superproject would run git in the submodule, and the filter with it."""
    sub = r.base / "subsrc"
    subprocess.run(["git", "init", "-q", str(sub)], check=True, env=USER_ENV)
    (sub / "g.txt").write_text("g\n")
    (sub / ".gitattributes").write_text("*.txt filter=flt\n")
    r.git("add", ".", cwd=sub)
    r.git("-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "g", cwd=sub)
    r.git("-c", "protocol.file.allow=always", "submodule", "-q", "add", str(sub), "sm")
    r.git("commit", "-qm", "sm")
    r.git("config", "filter.flt.clean", r.evil("submodule"), cwd=r.root / "sm")
    g = r.root / "sm" / "g.txt"
    g.write_text("h\n")
    st = os.stat(g)
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))


@dataclass
class Hostile:
    setup: Callable[[Repo], None]
    refused: bool  # the repository check refuses it (the user is asked)
    neutralised: bool  # the hardened command line alone starts nothing


HOSTILE = {
    "core.fsmonitor": Hostile(_fsmonitor, refused=True, neutralised=True),
    "post-index-change hook": Hostile(_hook, refused=False, neutralised=True),
    "core.hooksPath": Hostile(_hooks_path, refused=True, neutralised=True),
    "diff.external": Hostile(_external, refused=True, neutralised=True),
    "diff.<driver>.textconv": Hostile(_textconv, refused=True, neutralised=True),
    "diff.<driver>.command": Hostile(_diff_command, refused=True, neutralised=True),
    "filter.<driver>.clean": Hostile(_clean, refused=True, neutralised=False),
    "filter.<driver>.process": Hostile(_process, refused=True, neutralised=False),
    "gpg.program + log.showSignature": Hostile(_signature, refused=True, neutralised=True),
    "partial clone lazy fetch over ext::": Hostile(_lazy_fetch, refused=True, neutralised=True),
    "include.path": Hostile(_include, refused=True, neutralised=True),
    "submodule with a filter": Hostile(_submodule, refused=False, neutralised=True),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_repository_starts_nothing_when_auto_run(repo, name):
    case = HOSTILE[name]
    case.setup(repo)
    for command in COMMANDS:
        plain(repo, command)
    assert repo.fired(), "control: plain git should have started the hostile program"
    for sentinel in repo.sentinels.iterdir():
        sentinel.unlink()
    if name in ("post-index-change hook", "core.hooksPath", "filter.<driver>.clean"):
        repo.make_racy()

    for command in COMMANDS:
        result = command_policy.check(command, None, str(repo.root), TABLE)
        assert result.approved is not case.refused, (command, result.reason)
        if result.approved:
            run_shell(repo, result.plan.shell)
    assert repo.fired() == []

    if case.neutralised:
        for command in COMMANDS:
            argv = [w.text for w in shell_words.split(command)]
            run_shell(repo, git_hardening.shell_command(["git", *argv[1:]], 1, str(repo.root)))
        assert repo.fired() == []


def test_an_editor_environment_pointing_git_elsewhere_is_ignored(repo, tmp_path):
    """GIT_DIR and friends in the editor's environment do not reach auto-run git: a
    copy of the repository whose configuration defines a filter is not used."""
    other = tmp_path / "other.git"
    subprocess.run(["cp", "-r", str(repo.root / ".git"), str(other)], check=True)
    subprocess.run(
        ["git", "config", "--file", str(other / "config"), "filter.flt.clean", repo.evil("env")],
        check=True,
        env=USER_ENV,
    )
    env = {**CLEAN_ENV, "GIT_DIR": str(other), "GIT_WORK_TREE": str(repo.root)}
    repo.make_racy()
    run_shell(repo, "git status", {**env, "GIT_CONFIG_GLOBAL": "/dev/null"})
    assert repo.fired() == ["env"]
    (repo.sentinels / "env").unlink()
    repo.make_racy()
    result = command_policy.check("git status", None, str(repo.root), TABLE)
    run_shell(repo, result.plan.shell, env)
    assert repo.fired() == []


def test_a_clean_repository_still_answers(repo):
    """The hardening changes nothing a user wants to see."""
    outputs = {}
    for command in ("git status --short", "git log --oneline", "git diff", "git branch"):
        result = command_policy.check(command, None, str(repo.root), TABLE)
        assert result.approved, result.reason
        proc = subprocess.run(
            ["/bin/sh", "-c", result.plan.shell],
            cwd=repo.root,
            env=CLEAN_ENV,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        outputs[command] = proc.stdout
    assert outputs["git status --short"].strip() == "M f.txt"
    assert [line.split(" ", 1)[1] for line in outputs["git log --oneline"].splitlines()] == [
        "two",
        "one",
    ]
    assert "+six" in outputs["git diff"]
    assert outputs["git branch"].startswith("* ")


def test_a_repository_above_the_working_directory_is_not_used(repo):
    """Run in a subdirectory that is the working directory, git does not climb to the
    repository above it (GIT_CEILING_DIRECTORIES): it finds none and fails."""
    sub = repo.root / "sub"
    sub.mkdir()
    result = command_policy.check("git status", None, str(sub), TABLE)
    assert result.approved
    proc = subprocess.run(
        ["/bin/sh", "-c", result.plan.shell], cwd=sub, env=CLEAN_ENV, capture_output=True
    )
    assert proc.returncode != 0
    assert b"not a git repository" in proc.stderr
