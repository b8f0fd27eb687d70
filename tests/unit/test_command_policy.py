"""tools/command_policy.py: the allow-list of argv forms, checked against command lines.

Each row is a command line (and an optional ``cwd`` parameter) with the verdict
the default table must give in a small working directory holding a FIFO, a
socket, symlinks pointing out of it (to a directory, a file, /proc, /dev and
``..``), a symlink loop, and a git repository. Rows are grouped by the way an
attacker would try to get a command past the policy.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from sidekick_tools.defaults import default
from sidekick_tools.tools import command_policy, shell_words
from sidekick_tools.tools.command_table import table_for

DEFAULT_SAFE_COMMANDS = tuple(default("auto_accept.safe_commands"))

TABLE = table_for(DEFAULT_SAFE_COMMANDS, {})


@dataclass
class World:
    root: Path
    outside: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("policy")
    root = base / "work"
    root.mkdir()
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    (root / "a.txt").write_text("a\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("b\n")
    os.mkfifo(root / "fifo")
    (root / "out").symlink_to(outside)
    (root / "secret_link").symlink_to(outside / "secret.txt")
    (root / "in_link").symlink_to(root / "a.txt")
    (root / "environ").symlink_to("/proc/self/environ")
    (root / "zero").symlink_to("/dev/zero")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "dotdot").symlink_to("..")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    yield World(root, outside)
    sock.close()


def fill(world: World, text: str | None) -> str | None:
    if text is None:
        return None
    return text.replace("{root}", str(world.root)).replace("{out}", str(world.outside))


def verdict(world: World, command: str, cwd: str | None = None):
    return command_policy.check(fill(world, command), fill(world, cwd), str(world.root), TABLE)


def row(command: str, cwd: str | None = None, id: str | None = None):
    return pytest.param(command, cwd, id=id or (command if cwd is None else f"{command} @ {cwd}"))


APPROVED = [
    # plain forms of the default programs
    row("ls"),
    row("ls -la"),
    row("ls -l -a"),
    row("ls --all"),
    row("ls -la sub"),
    row("ls sub/"),
    row("ls ./sub"),
    row("ls a.txt sub"),
    row("ls -R"),
    row("ls --color=auto"),
    row("ls --color"),
    row("ls -I '*.o'"),
    row("ls --sort=size"),
    row("ls -w 80"),
    row("ls -w80"),
    row("ls in_link"),
    row("ls -- -la"),
    row("ls 'a file with spaces'"),
    row("ls résumé.txt"),
    row("ls 文件"),
    row("pwd"),
    row("pwd -P"),
    row("cat a.txt"),
    row("cat -n a.txt"),
    row("cat sub/b.txt"),
    row("cat a.txt sub/b.txt"),
    row("cat in_link"),
    row("cat ./a.txt"),
    row("cat sub/../a.txt"),
    row("cat {root}/a.txt"),
    row("cat -- a.txt"),
    row("cat '*.txt'"),
    row("cat \\*.txt"),
    row('cat "a.txt"'),
    row("cat a\\ b.txt"),
    row("echo hi"),
    row("echo -n hi"),
    row("echo 'a  b'"),
    row("echo --output=x"),
    row("echo '~'"),
    row("echo '*'"),
    row("echo -e 'a\\tb'"),
    row("head -n 5 a.txt"),
    row("head -5 a.txt"),
    row("head -n5 a.txt"),
    row("head --lines=5 a.txt"),
    row("head --lines 5 a.txt"),
    row("head -c 10 a.txt"),
    row("tail -f a.txt"),
    row("tail -n 20 a.txt"),
    row("tail --follow=name a.txt"),
    row("tail -F a.txt"),
    row("tail -s 1 -f a.txt"),
    row("wc -l a.txt"),
    row("wc a.txt sub/b.txt"),
    row("which python3"),
    row("which -a ls"),
    row("date"),
    row("date -u"),
    row("date +%Y-%m-%d"),
    row("date '+%H:%M'"),
    row("date -d tomorrow"),
    row("date -r a.txt"),
    row("date --iso-8601=seconds"),
    row("date -Iseconds"),
    row("whoami"),
    row("grep foo a.txt"),
    row("grep -rn foo ."),
    row("grep -r foo"),
    row("grep -e foo a.txt"),
    row("grep -i foo sub"),
    row("grep -f a.txt sub/b.txt"),
    row("grep --include='*.py' -r foo ."),
    row("grep -C 2 foo a.txt"),
    row("grep -2 foo a.txt"),
    row("grep -e -r a.txt"),
    # git, read-only forms
    row("git status"),
    row("git status --short"),
    row("git status -sb"),
    row("git status --porcelain=v2"),
    row("git status -uno"),
    row("git status -- sub"),
    row("git  status"),
    row("git --no-pager status"),
    row("git diff"),
    row("git diff --stat"),
    row("git diff --cached"),
    row("git diff HEAD~1"),
    row("git diff HEAD~1 HEAD -- sub"),
    row("git diff -U5"),
    row("git diff --word-diff"),
    row("git diff main..feature"),
    row("git diff -M50%"),
    row("git log"),
    row("git log --oneline -n 3"),
    row("git log -5"),
    row("git log -p -1"),
    row("git log --format='%h %s'"),
    row("git log --pretty=oneline"),
    row("git log --since='2 weeks ago'"),
    row("git log --author=bob"),
    row("git log --grep fix"),
    row("git log -- sub/b.txt"),
    row("git log -- --output=x", id="--output after -- is a path operand"),
    row("git log -S foo"),
    row("git log --graph --decorate --all"),
    row("git show"),
    row("git show HEAD"),
    row("git show HEAD~1 --stat"),
    row("git show 'HEAD@{1}'"),
    row("git show HEAD:a.txt"),
    row("git branch"),
    row("git branch -a"),
    row("git branch -vv"),
    row("git branch --list 'feat*'"),
    row("git branch --show-current"),
    row("git branch -r --contains HEAD"),
    # the cwd parameter inside the working directory
    row("ls", "sub"),
    row("ls", "."),
    row("ls", "{root}"),
    row("cat ../a.txt", "sub"),
    row("git status", "sub"),
]

REFUSED = [
    # shell control and expansion, quoted or not
    row("ls; rm -rf x"),
    row("ls && id"),
    row("ls || id"),
    row("ls | cat"),
    row("ls & id"),
    row("ls > out.txt"),
    row("ls >> f"),
    row("cat < a.txt"),
    row("cat <<EOF"),
    row("echo $(id)"),
    row("echo `id`"),
    row("echo ${HOME}"),
    row("echo $HOME"),
    row("ls${IFS}-la"),
    row("ls$IFS/"),
    row("cat a.txt\nid", id="newline"),
    row("cat a.txt\r\nid", id="CRLF"),
    row("cat a.txt\rid", id="CR"),
    row("ls\x00", id="NUL"),
    row("ls\x1b[31m", id="escape"),
    row("echo 'a;b'"),
    row('echo "a|b"'),
    row("grep 'a|b' a.txt"),
    row("ls \\;"),
    row("echo \\$HOME"),
    row("echo '$HOME'"),
    # globs, braces, tilde, comments, history, subshells
    row("ls *.txt"),
    row("cat ?.txt"),
    row("cat [a].txt"),
    row("cat a.{txt,md}"),
    row("cat {/etc/passwd,a.txt}"),
    row("cat {a..z}"),
    row("ls ~"),
    row("cat ~/.ssh/id_rsa"),
    row("cat ~root/x"),
    row("ls # comment"),
    row("ls #"),
    row("! ls"),
    row("ls !x"),
    row("(ls)"),
    row("ls )"),
    # variable assignments before the program
    row("FOO=1 ls"),
    row("LD_PRELOAD=/tmp/x.so ls"),
    row("GIT_DIR=/tmp git status"),
    row("PATH=. ls"),
    # quoting tricks
    row("'ls' -la"),
    row('"ls"'),
    row("l's' -la"),
    row("\\ls"),
    row("ls 'unclosed"),
    row('ls "unclosed'),
    row("ls \\"),
    row("git 'status'"),
    row("git st\\atus"),
    # characters that look like spaces, dashes, dots or letters
    row("ls\u00a0-la", id="no-break space"),
    row("ls\u2009-la", id="thin space"),
    row("ls\u3000-la", id="ideographic space"),
    row("ls\u200b", id="zero width space"),
    row("ls \u202ea.txt", id="right-to-left override"),
    row("cat a.txt\u2028id", id="line separator"),
    row("cat a.txt\u0085id", id="next line"),
    row("git log \uff0d\uff0doutput=x", id="fullwidth hyphens"),
    row("git log \u2010\u2010output=x", id="unicode hyphens"),
    row("git log \u2013output=x", id="en dash"),
    row("git log \u2212\u2212output=x", id="minus signs"),
    row("cat \uff0e\uff0e/out/secret.txt", id="fullwidth dots"),
    row("cat out\u2215secret.txt", id="division slash"),
    row("c\u0430t a.txt", id="cyrillic a"),
    row("ls\uff1bid", id="fullwidth semicolon"),
    row("git\u00a0status", id="git no-break space"),
    row("\uff4c\uff53", id="fullwidth ls"),
    row("\U0001d425s", id="mathematical l"),
    # wrappers that run other programs
    row("env ls"),
    row("env -i ls"),
    row("xargs cat"),
    row("sh -c ls"),
    row("bash -c 'ls'"),
    row("dash -c ls"),
    row("find . -name x"),
    row("find . -exec cat '{}' +"),
    row("timeout 5 ls"),
    row("nice ls"),
    row("nohup ls"),
    row("command ls"),
    row("exec ls"),
    row("sudo ls"),
    row("time ls"),
    row("watch ls"),
    row("busybox ls"),
    row("stdbuf -o0 ls"),
    row("setsid ls"),
    row("strace ls"),
    row("chroot / ls"),
    row("ionice ls"),
    row("doas ls"),
    row("su -c ls"),
    row("eval ls"),
    row(". ./x"),
    row("source x"),
    # programs and subcommands that are not safe forms
    row("/bin/ls"),
    row("./ls"),
    row("bin/ls"),
    row("rm -rf x"),
    row("python3 -c 'print(1)'"),
    row("lsblk"),
    row("LS"),
    row("git"),
    row("git push"),
    row("git commit -m x"),
    row("git stash"),
    row("git checkout ."),
    row("git config core.pager x"),
    row("git clean -fdx"),
    row("git rev-parse HEAD"),
    row("git branch foo"),
    row("git branch -D main"),
    row("git branch -m x"),
    row("git branch --set-upstream-to=x"),
    row("git branch -c copy"),
    # git global options that point it elsewhere or run programs
    row("git -C /tmp status"),
    row("git --git-dir=/tmp/x status"),
    row("git --work-tree=/ status"),
    row("git -c core.fsmonitor=x status"),
    row("git -c core.pager=x log"),
    row("git --exec-path=/tmp status"),
    row("git --paginate log"),
    row("git -p log"),
    # options that write, execute or read other files
    row("git log --output=.git/config"),
    row("git log --output .git/config"),
    row("git log --out=x", id="abbreviated --out="),
    row("git log --outp=x"),
    row("git log --o=x"),
    row("git log --output-directory=x"),
    row("git diff --output=x"),
    row("git diff --ext-diff"),
    row("git diff --textconv"),
    row("git log --ext-diff -p"),
    row("git log --textconv"),
    row("git log --show-signature"),
    row("git log '--format=%G?'"),
    row("git log --pretty=format:%GS"),
    row("git log --pretty='%GK'"),
    row("git show --format=%GG"),
    row("git log -c"),
    row("git diff --no-index a.txt sub/b.txt"),
    row("git diff -O/etc/passwd"),
    row("git diff --submodule=diff"),
    row("git diff --ignore-submodules=none"),
    row("git status --ignore-submodules=none"),
    row("git status -v"),
    row("git log -L 1,2:a.txt"),
    row("git diff --color-moved-ws"),
    row("date -s 2020-01-01"),
    row("date --set=x"),
    row("date 010112002020"),
    row("date -f a.txt"),
    row("date -d 'TZ=\"/dev/zero\" now'", id="date -d TZ= opens a file"),
    row("date --date='TZ=\"fifo\" now'"),
    row("date --file=a.txt"),
    row("wc --files0-from=a.txt"),
    row("wc --files0-from a.txt"),
    row("grep -R foo ."),
    row("grep --dereference-recursive x ."),
    row("grep -D read x a.txt"),
    row("grep --devices=read x a.txt"),
    row("ls -L"),
    row("ls --dereference"),
    row("tail --pid"),
    row("cat --help=x"),
    row("ls --colo=always", id="abbreviated --colo"),
    row("head --line=5 a.txt", id="abbreviated --line"),
    row("tail --foll a.txt", id="abbreviated --foll"),
    row("head -n"),
    row("grep -e"),
    row("which /etc/passwd"),
    row("which ../x"),
    # paths outside the working directory, special files
    row("cat /etc/passwd"),
    row("cat ../outside/secret.txt"),
    row("cat ../../etc/passwd"),
    row("cat sub/../../x"),
    row("cat out/secret.txt"),
    row("cat secret_link"),
    row("ls out"),
    row("ls out/"),
    row("ls .."),
    row("ls /"),
    row("ls /tmp"),
    row("cat /proc/self/environ"),
    row("cat environ"),
    row("cat /proc/1/cmdline"),
    row("cat /sys/kernel/notes"),
    row("cat /dev/zero"),
    row("cat zero"),
    row("head -c 1 /dev/urandom"),
    row("cat fifo"),
    row("tail -f fifo"),
    row("cat sock"),
    row("cat loop1"),
    row("cat dotdot/x"),
    row("ls dotdot"),
    row("grep foo /etc/passwd"),
    row("grep -r foo .."),
    row("grep -f /etc/passwd a.txt"),
    row("grep --exclude-from=../x foo a.txt"),
    row("grep -r foo out"),
    row("date -r /etc/passwd"),
    row("date --reference=../x"),
    row("wc -l /etc/shadow"),
    row("git log -- ../x"),
    row("git diff /etc/passwd a.txt"),
    row("git diff -- /etc/passwd"),
    row("git status -- .."),
    row("git show HEAD -- ../x"),
    row("cat ''"),
    row("cat -- /etc/passwd"),
    row("cat -- ../x"),
    row("ls -- .."),
    row("head -n 5 -- /etc/passwd"),
    row("cat {out}/secret.txt", id="absolute path outside"),
    row("cat //etc/passwd"),
    row("cat /./etc/passwd"),
    row("cat sub//../../x"),
    # the cwd parameter outside the working directory, or not a directory
    row("ls", ".."),
    row("ls", "/tmp"),
    row("ls", "out"),
    row("ls", "~"),
    row("cat secret.txt", "out"),
    row("ls", "/proc"),
    row("ls", "fifo"),
    row("ls", "dotdot"),
    row("ls", "a.txt"),
    row("cat ../../x", "sub"),
    # empty
    row(""),
    row("   "),
    row("\t"),
]


@pytest.mark.parametrize("command, cwd", APPROVED)
def test_approved(world, command, cwd):
    result = verdict(world, command, cwd)
    assert result.approved, result.reason
    assert result.plan is not None


@pytest.mark.parametrize("command, cwd", REFUSED)
def test_refused(world, command, cwd):
    result = verdict(world, command, cwd)
    assert not result.approved
    assert result.plan is None
    assert result.reason  # a reason for the log


def test_the_table_is_large_enough():
    assert len(APPROVED) + len(REFUSED) >= 150
    assert len(REFUSED) >= 150


@pytest.mark.parametrize("command, cwd", APPROVED[:40])
def test_the_plan_runs_exactly_the_checked_words(world, command, cwd):
    """The shell line of a plan splits back into the program's path and the checked words."""
    result = verdict(world, command, cwd)
    words = shlex.split(result.plan.shell)
    assert words[0] == "exec"
    assert tuple(words[1:]) == result.plan.argv
    checked = [w.text for w in shell_words.split(fill(world, command))]
    assert os.path.isabs(words[1]) and os.path.basename(words[1]) == checked[0]
    assert words[2:] == checked[1:]


def test_the_program_is_looked_up_outside_the_working_directory(world, tmp_path):
    """A repository's own `ls` is never what runs, whatever PATH says."""
    evil = world.root / "bin"
    evil.mkdir(exist_ok=True)
    (evil / "ls").write_text("#!/bin/sh\necho evil\n")
    (evil / "ls").chmod(0o755)
    system = os.environ["PATH"]
    for path in (f"{evil}:{system}", f".:{system}", f":{system}", f"bin:{system}"):
        result = command_policy.check("ls", None, str(world.root), TABLE, {"PATH": path})
        assert result.approved, result.reason
        assert not result.plan.argv[0].startswith(str(world.root))
    only_evil = command_policy.check("ls", None, str(world.root), TABLE, {"PATH": str(evil)})
    assert not only_evil.approved
    assert "not found" in only_evil.reason


def test_reasons_name_the_problem(world):
    assert "--output" in verdict(world, "git log --output=x").reason
    assert "outside the working directory" in verdict(world, "cat ../x").reason
    assert "FIFO" in verdict(world, "cat fifo").reason
    assert "cwd" in verdict(world, "ls", "..").reason
    assert "pipe" in verdict(world, "ls | cat").reason


def test_a_long_run_of_short_flags_is_judged_without_holding_a_core(world):
    """Each flag of `ls -llll…` copied the rest of the word (quadratic: 26 s
    for a call's 1 MiB, in a thread of the host's). Judged as ever."""
    from tests.conftest import answers

    assert answers(lambda: verdict(world, "ls -" + "l" * 1_000_000), deadline=20).approved
    said = answers(lambda: verdict(world, "ls -" + "l" * 1_000_000 + "%"), deadline=20)
    assert not said.approved and "-% is not an option" in said.reason
