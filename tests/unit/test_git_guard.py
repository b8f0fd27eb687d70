"""tools/git_guard.py, git_config.py, git_index.py: which repositories auto-run git may
meet (config, index, layout)."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from pathlib import Path

import pytest
from sidekick_tools.defaults import default
from sidekick_tools.tools import command_policy
from sidekick_tools.tools.command_table import table_for
from sidekick_tools.tools.git_config import config_problem
from sidekick_tools.tools.git_guard import repository_problem
from sidekick_tools.tools.git_index import index_problem

DEFAULT_SAFE_COMMANDS = tuple(default("auto_accept.safe_commands"))

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def init(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=ENV)
    (path / "f.txt").write_text("f\n")
    git(path, "add", "f.txt")
    git(path, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "f")
    return path


# ---------------------------------------------------------------- configuration
ORDINARY = b"""[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
[remote "origin"]
\turl = https://example.com/org/command-line-filter.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
\tremote = origin
\tmerge = refs/heads/main
[user]
\temail = a@b ; a comment
# a comment naming core.fsmonitor and filter
[pull]
\trebase = true
[submodule "lib"]
\turl = ../lib
\tactive = true
[lfs "https://example.com/x.git/info/lfs"]
\taccess = basic
"""


def test_an_ordinary_configuration_passes():
    assert config_problem(ORDINARY) is None
    assert config_problem(ORDINARY.replace(b"\n", b"\r\n")) is None
    assert config_problem(b"") is None


@pytest.mark.parametrize(
    "text",
    [
        b"[core]\n\tfsmonitor = /tmp/x\n",
        b"[core]\n\tFSMonitor = /tmp/x\n",
        b"[CORE]\n\tfsmonitor\n",
        b"[core]\n\thooksPath = /tmp/hooks\n",
        b"[core]\n\tpager = /tmp/x\n",
        b"[core]\n\tsshCommand = /tmp/x\n",
        b"[core]\n\taskPass = /tmp/x\n",
        b"[core]\n\teditor = /tmp/x\n",
        b"[core]\n\tworktree = /\n",
        b"[core]\n\talternateRefsCommand = x\n",
        b"[core]\n\tgitProxy = x\n",
        b"[diff]\n\texternal = /tmp/x\n",
        b'[diff "drv"]\n\ttextconv = /tmp/x\n',
        b'[diff "drv"]\n\tcommand = /tmp/x\n',
        b'[filter "lfs"]\n\tclean = git-lfs clean -- %f\n',
        b'[filter "x"]\n\tprocess = /tmp/x\n',
        b'[merge "x"]\n\tdriver = /tmp/x\n',
        b"[include]\n\tpath = /tmp/evil.cfg\n",
        b'[includeIf "gitdir:/"]\n\tpath = /tmp/evil.cfg\n',
        b"[credential]\n\thelper = /tmp/x\n",
        b"[pager]\n\tlog = /tmp/x\n",
        b"[gpg]\n\tprogram = /tmp/x\n",
        b'[gpg "ssh"]\n\tprogram = /tmp/x\n',
        b"[log]\n\tshowSignature = true\n",
        b"[format]\n\tpretty = %G?\n",
        b'[pretty]\n\tsig = "%G?"\n',
        b"[extensions]\n\tpartialClone = origin\n",
        b"[extensions]\n\tworktreeConfig = true\n",
        b'[remote "origin"]\n\tpromisor = true\n',
        b'[remote "origin"]\n\tuploadpack = /tmp/x\n',
        b"[protocol]\n\tallow = always\n",
        b'[protocol "ext"]\n\tallow = always\n',
        b"[uploadpack]\n\tpackObjectsHook = /tmp/x\n",
        b"[mailmap]\n\tfile = /etc/passwd\n",
        b"[alias]\n\tst = !sh\n",
        b"[hook]\n\tx = y\n",
        b"[sequence]\n\teditor = /tmp/x\n",
        b"[http]\n\tproxy = x\n",
        b"[core.x]\n\tfsmonitor = y\n",  # legacy subsection syntax: not a known section
        b'[core "x"]\n\tfilemode = y\n',
        b"[unknownsection]\n\tkey = value\n",
        # syntax this check does not read (git might)
        b"[core] fsmonitor = /tmp/x\n",
        b"[core]\n\tfilemode = true \\\nfsmonitor = /tmp/x\n",
        b"[core]\n\tfilemode = true\rfsmonitor = /tmp/x\n",
        b"[core]\n\tfilemode = true\x00\n",
        b"\xef\xbb\xbf[core]\n\tfilemode = true\n",
        b"[core\n\tfilemode = true\n",
        b"fsmonitor = /tmp/x\n",
        b"[core]\n\tfs monitor = x\n",
        b"[core]\n\tfsmonitor # on\n",
    ],
)
def test_configuration_that_may_start_programs_is_a_problem(text):
    assert config_problem(text, "cfg")


# ------------------------------------------------------------------------ index
SHA = bytes.fromhex("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")


def entry(path: bytes, version: int, previous: bytes = b"", mode: int = 0o100644) -> bytes:
    fixed = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0) + SHA
    if version == 4:
        common = os.path.commonprefix([previous, path])
        strip = len(previous) - len(common)
        assert strip < 128
        return fixed + struct.pack(">H", len(path)) + bytes([strip]) + path[len(common) :] + b"\0"
    data = fixed + struct.pack(">H", len(path)) + path + b"\0"
    return data + b"\0" * (-len(data) % 8)


def index(paths: list[bytes], version: int = 2, extensions: bytes = b"", **kw) -> bytes:
    body = b"DIRC" + struct.pack(">II", version, len(paths))
    previous = b""
    for path in paths:
        body += entry(path, version, previous, **kw)
        previous = path
    body += extensions
    return body + hashlib.sha1(body).digest()


@pytest.mark.parametrize("version", [2, 3, 4])
def test_an_index_of_ordinary_paths_passes(version):
    assert index_problem(index([b"a", b"dir/b", b"dir/c.txt", b"z\xc3\xa9"], version)) is None


@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize(
    "path",
    [
        b"../secret",
        b"a/../../secret",
        b"/etc/passwd",
        b"./x",
        b"a//b",
        b"a/./b",
        b"..",
        b"a/..",
        b".git/config",
        b"a/.GIT/x",
        b"",
    ],
)
def test_an_index_naming_paths_outside_the_tree_is_a_problem(version, path):
    assert "outside the work tree" in index_problem(index([b"a", path], version))


def test_v4_prefix_compression_cannot_hide_dot_dot():
    # "..a" then "../secret": the second entry is stored as strip 1 + "/secret"
    data = index([b"..a", b"../secret"], 4)
    assert b"../" not in data
    assert "outside" in index_problem(data)


def test_sparse_directory_entries_pass():
    assert index_problem(index([b"dir/"], 2, mode=0o040000)) is None


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"DIRC",
        b"XXXX" + b"\0" * 40,
        index([b"a"])[:30],
        b"DIRC" + struct.pack(">II", 5, 0) + b"\0" * 20,
        b"DIRC" + struct.pack(">II", 2, 3) + entry(b"a", 2) + b"\0" * 20,
    ],
)
def test_an_index_this_check_cannot_read_is_a_problem(data):
    assert index_problem(data)


def test_a_split_index_is_a_problem():
    link = b"link" + struct.pack(">I", 20) + b"\0" * 20
    assert "split index" in index_problem(index([b"a"], 2, extensions=link))


def test_real_indexes_pass(tmp_path):
    repo = init(tmp_path / "r")
    (repo / "d").mkdir()
    (repo / "d" / "g.txt").write_text("g\n")
    git(repo, "add", ".")
    assert index_problem((repo / ".git" / "index").read_bytes()) is None
    git(repo, "update-index", "--index-version", "4")
    assert index_problem((repo / ".git" / "index").read_bytes()) is None


# --------------------------------------------------------- the repository layout
def test_an_ordinary_repository_passes(tmp_path):
    repo = init(tmp_path / "r")
    (repo / "sub").mkdir()
    assert repository_problem(str(repo), str(repo)) is None
    assert repository_problem(str(repo / "sub"), str(repo)) is None


def test_no_repository_at_all_passes(tmp_path):
    assert repository_problem(str(tmp_path), str(tmp_path)) is None


def test_a_git_file_pointing_outside_is_a_problem(tmp_path):
    other = init(tmp_path / "other")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert "outside" in repository_problem(str(work), str(work))


def test_a_git_symlink_pointing_outside_is_a_problem(tmp_path):
    other = init(tmp_path / "other")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".git").symlink_to(other / ".git")
    assert "outside" in repository_problem(str(work), str(work))


def test_a_linked_worktree_passes(tmp_path):
    """A worktree's git directory is in the main repository but names it back."""
    main = init(tmp_path / "main")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    wt = tmp_path / "wt"
    assert repository_problem(str(wt), str(wt)) is None
    # the same .git file copied elsewhere is not named back: refused
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / ".git").write_text((wt / ".git").read_text())
    assert repository_problem(str(fake), str(fake))


def test_a_commondir_pointing_outside_is_a_problem(tmp_path):
    other = init(tmp_path / "other")
    work = init(tmp_path / "work")
    (work / ".git" / "commondir").write_text(str(other / ".git"))
    assert "common directory" in repository_problem(str(work), str(work))


def test_alternates_are_a_problem(tmp_path):
    other = init(tmp_path / "other")
    work = init(tmp_path / "work")
    (work / ".git" / "objects" / "info" / "alternates").write_text(str(other / ".git" / "objects"))
    assert "alternates" in repository_problem(str(work), str(work))


def test_objects_elsewhere_are_a_problem(tmp_path):
    other = init(tmp_path / "other")
    work = init(tmp_path / "work")
    os.rename(work / ".git" / "objects", tmp_path / "old-objects")
    (work / ".git" / "objects").symlink_to(other / ".git" / "objects")
    assert "objects" in repository_problem(str(work), str(work))


def test_a_bare_repository_inside_is_a_problem(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(work / "x.git")], check=True, env=ENV)
    assert "git directory" in repository_problem(str(work / "x.git"), str(work))
    assert "git directory" in repository_problem(str(work / "x.git" / "refs"), str(work))


def test_a_config_or_index_that_is_not_a_regular_file_is_a_problem(tmp_path):
    work = init(tmp_path / "work")
    (work / ".git" / "config").unlink()
    os.mkfifo(work / ".git" / "config")
    assert "not a regular file" in repository_problem(str(work), str(work))
    (work / ".git" / "config").unlink()
    (work / ".git" / "config").symlink_to("/dev/zero")
    assert "not a regular file" in repository_problem(str(work), str(work))
    (work / ".git" / "config").unlink()
    (work / ".git" / "config").write_text("[core]\n\tbare = false\n")
    assert repository_problem(str(work), str(work)) is None
    (work / ".git" / "index").unlink()
    os.mkfifo(work / ".git" / "index")
    assert "not a regular file" in repository_problem(str(work), str(work))


@pytest.mark.parametrize(
    ("link", "markers"),
    [
        ("BISECT_START", ["BISECT_LOG"]),
        ("rebase-merge/head-name", ["rebase-merge/onto", "rebase-merge/interactive"]),
        ("rebase-apply/head-name", ["rebase-apply/onto"]),
        ("sequencer/todo", []),
        ("a-file-of-a-future-git", []),
    ],
)
def test_any_link_in_the_git_directory_is_a_problem(tmp_path, link, markers):
    """git reads (and quotes) more files of its directory than any list names:
    none may be a link, whatever it is called."""
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    work = init(tmp_path / "work")
    gitdir = work / ".git"
    for marker in markers:
        (gitdir / marker).parent.mkdir(exist_ok=True)
        (gitdir / marker).write_text("")
    (gitdir / link).parent.mkdir(exist_ok=True)
    (gitdir / link).symlink_to(tmp_path / "secret.txt")
    assert "not a regular file" in repository_problem(str(work), str(work))
    (gitdir / link).unlink()
    os.mkfifo(gitdir / link)
    assert "not a regular file" in repository_problem(str(work), str(work))
    (gitdir / link).unlink()
    (gitdir / link).write_text("")
    if link != "BISECT_START":  # an empty bisect start is git's own problem, not a leak
        assert repository_problem(str(work), str(work)) is None


def test_a_bisect_start_linked_outside_is_refused_and_would_have_leaked(tmp_path):
    """`git status` during a bisect prints the branch named in BISECT_START, which
    may be any file: the policy refuses to auto-run it there."""
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    work = init(tmp_path / "work")
    (work / ".git" / "BISECT_LOG").write_text("")
    (work / ".git" / "BISECT_START").symlink_to(tmp_path / "secret.txt")
    leak = subprocess.run(["git", "status"], cwd=work, env=ENV, capture_output=True, text=True)
    assert "TOPSECRET" in leak.stdout  # the control: git really reads it
    table = table_for(DEFAULT_SAFE_COMMANDS, {})
    for command in ("git status", "git branch"):
        result = command_policy.check(command, None, str(work), table)
        assert not result.approved
        assert "BISECT_START" in result.reason


def test_the_object_store_is_not_walked_but_its_info_is(tmp_path):
    work = init(tmp_path / "work")
    objects = work / ".git" / "objects"
    (objects / "ab").mkdir(exist_ok=True)
    (objects / "ab" / "cdef").symlink_to("/dev/null")  # git checks objects by their hash
    assert repository_problem(str(work), str(work)) is None
    (objects / "info").mkdir(exist_ok=True)
    (objects / "info" / "packs").symlink_to("/dev/null")
    assert "not a regular file" in repository_problem(str(work), str(work))


def test_a_directory_of_the_git_directory_that_cannot_be_listed_is_a_problem(tmp_path, monkeypatch):
    """What cannot be looked at is not passed (a rebase-merge/ of mode 0111 hid
    a head-name linked outside from any user but root)."""
    work = init(tmp_path / "work")
    hidden = work / ".git" / "rebase-merge"
    hidden.mkdir()
    real_scandir = os.scandir

    def scandir(path="."):
        if os.fspath(path) == str(hidden):
            raise PermissionError(13, "Permission denied", str(hidden))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert "cannot look into" in repository_problem(str(work), str(work))


def test_object_stores_anywhere_are_left_out_but_their_info(tmp_path):
    """LFS's and a submodule's object stores can hold many thousands of files:
    not walked (git checks objects by their hash), but for their info."""
    work = init(tmp_path / "work")
    lfs = work / ".git" / "lfs" / "objects" / "ab" / "cd"
    lfs.mkdir(parents=True)
    for i in range(50):
        (lfs / f"oid{i}").symlink_to("/dev/null")
    assert repository_problem(str(work), str(work)) is None
    info = work / ".git" / "modules" / "sub" / "objects" / "info"
    info.mkdir(parents=True)
    (info / "packs").symlink_to("/dev/null")
    assert "not a regular file" in repository_problem(str(work), str(work))


def test_a_socket_in_the_git_directory_passes(tmp_path):
    """git's fsmonitor daemon leaves a socket in .git; a socket cannot be read."""
    import socket

    work = init(tmp_path / "work")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(work / ".git" / "fsmonitor--daemon.ipc"))
        assert repository_problem(str(work), str(work)) is None
    finally:
        sock.close()


def test_a_hostile_index_is_refused_and_would_have_leaked(tmp_path):
    """An index naming ../secret makes plain `git diff` print a file from outside the
    working directory; the policy refuses to auto-run git diff there."""
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=ENV)
    (work / ".git" / "index").write_bytes(index([b"../secret.txt"]))
    git(work, "hash-object", "-w", "/dev/null")
    leak = subprocess.run(["git", "diff"], cwd=work, env=ENV, capture_output=True, text=True)
    assert "TOPSECRET" in leak.stdout  # the control: git really reads it
    result = command_policy.check("git diff", None, str(work), table_for(DEFAULT_SAFE_COMMANDS, {}))
    assert not result.approved
    assert "../secret.txt" in result.reason


def test_every_repository_on_the_way_up_is_checked(tmp_path):
    """git passes over an invalid .git (an empty directory) and climbs to the next one:
    a hostile repository above it is found all the same."""
    work = init(tmp_path / "work")
    git(work, "config", "filter.x.clean", "/tmp/evil")
    (work / "sub" / ".git").mkdir(parents=True)
    assert "filter" in repository_problem(str(work / "sub"), str(work))


def test_a_working_directory_below_a_colon_is_refused(tmp_path):
    work = tmp_path / "a:b" / "work"
    work.mkdir(parents=True)
    assert ":" in repository_problem(str(work), str(work))


def filtered(work: Path, marker: Path) -> None:
    """`work`'s config gets a clean filter that leaves `marker`, for every file."""
    git(work, "config", "filter.x.clean", f"touch {marker}; cat")
    (work / ".gitattributes").write_text("* filter=x\n")
    f = work / "f.txt"
    f.write_text("g\n")  # the same size, another time: status hashes it, through the filter
    os.utime(f, (f.stat().st_mtime + 10,) * 2)


def approved(command: str, work: Path) -> command_policy.Verdict:
    return command_policy.check(command, None, str(work), table_for(DEFAULT_SAFE_COMMANDS, {}))


def test_a_git_file_is_read_as_git_reads_it_and_would_have_run_a_filter(tmp_path):
    """git takes `gitdir: g ` as the directory `g ` (only line ends come off): the
    check looked at a decoy `g` instead, and auto-ran `git status` under a
    filter driver of `g `'s config."""
    work = init(tmp_path / "work")
    marker = tmp_path / "ran"
    filtered(work, marker)
    os.rename(work / ".git", work / "g ")
    (work / "g").mkdir()
    (work / ".git").write_text("gitdir: g \n")
    subprocess.run(["git", "status"], cwd=work, env=ENV, capture_output=True, check=True)
    assert marker.exists()  # the control: git really uses `g `
    marker.unlink()
    result = approved("git status", work)
    assert not result.approved
    assert "[filter]" in result.reason and "g /config" in result.reason


def test_a_commondir_is_read_as_git_reads_it_and_would_have_run_a_filter(tmp_path):
    work = init(tmp_path / "work")
    marker = tmp_path / "ran"
    filtered(work, marker)
    os.rename(work / ".git", work / "c ")
    (work / "c").mkdir()
    (work / "wt").mkdir()
    for name in ("HEAD", "index"):
        (work / "wt" / name).write_bytes((work / "c " / name).read_bytes())
    (work / "wt" / "commondir").write_text("../c \n")
    (work / ".git").write_text("gitdir: wt\n")
    subprocess.run(["git", "status"], cwd=work, env=ENV, capture_output=True, check=True)
    assert marker.exists()  # the control
    result = approved("git status", work)
    assert not result.approved
    assert "c /config" in result.reason


@pytest.mark.parametrize(
    "text", [b"gitdir: \n", b"gitdir: a\0b\n", b"gitdir: a\nb\n", b"gitdir:a\n"]
)
def test_a_git_file_this_check_cannot_read_as_git_does_is_refused(tmp_path, text):
    work = init(tmp_path / "work")
    os.rename(work / ".git", work / "a")
    (work / ".git").write_bytes(text)
    assert repository_problem(str(work), str(work))


def test_an_index_whose_name_lengths_disagree_with_its_flags_is_refused_and_would_have_leaked(
    tmp_path,
):
    """git steps from entry to entry by the name length in the flags; a name with
    a NUL inside it made the check step otherwise, and see a harmless entry `b`
    where git saw `/.../secret.txt`."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=ENV)
    git(work, "hash-object", "-w", "/dev/null")
    fake = entry(b"b", 2)  # a 62-byte header and "b\0": 64 bytes
    # the check, stepping by the NUL after "!", met the fake entry, then what
    # looked like an extension running past the end
    hidden = b"!\0" + fake + b"ZZZZ" + struct.pack(">I", 0x7FFFFFF0)
    first = struct.pack(">10I", 0, 0, 0, 0, 0, 0, 0o100644, 0, 0, 0) + SHA
    first += struct.pack(">H", len(hidden)) + hidden + b"\0"
    first += b"\0" * (-len(first) % 8)
    body = b"DIRC" + struct.pack(">II", 2, 2) + first + entry(str(secret).encode(), 2)
    (work / ".git" / "index").write_bytes(body + hashlib.sha1(body).digest())
    leak = subprocess.run(["git", "diff"], cwd=work, env=ENV, capture_output=True, text=True)
    assert "TOPSECRET" in leak.stdout  # the control: git really reads it
    result = approved("git diff", work)
    assert not result.approved
    assert "length disagrees" in result.reason


def test_a_linked_worktree_named_objects_is_walked_and_would_have_leaked(tmp_path):
    """Only git's object stores are left out of the walk, not every directory
    named `objects`: a linked worktree's `gitdir` linked outside was printed
    whole by `git branch -vv`."""
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    work = init(tmp_path / "work")
    git(work, "branch", "other")
    linked = work / ".git" / "worktrees" / "objects"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("ref: refs/heads/other\n")
    (linked / "commondir").write_text("../..\n")
    (linked / "gitdir").symlink_to(tmp_path / "secret.txt")
    leak = subprocess.run(
        ["git", "branch", "-vv"], cwd=work, env=ENV, capture_output=True, text=True
    )
    assert "TOPSECRET" in leak.stdout  # the control
    result = approved("git branch -vv", work)
    assert not result.approved
    assert "worktrees/objects/gitdir is not a regular file" in result.reason


def test_an_index_read_by_threads_is_read_as_the_check_reads_it_and_would_have_leaked(tmp_path):
    """With `index.threads` above 1, git loads entries from where an IEOT extension
    says and extensions from where an EOIE one says: an entry hidden in an unknown
    extension's payload, which the check (reading entries in order) never sees.
    The command that runs loads the index in order, as the check reads it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    work = init(tmp_path / "work")
    body = b"DIRC" + struct.pack(">II", 2, 1) + entry(b"f.txt", 2)
    first_extension = len(body)
    hidden = entry(b"../" * 20 + str(secret).lstrip("/").encode(), 2)
    unknown = b"ZZZZ" + struct.pack(">I", len(hidden))
    ieot = struct.pack(">III", 1, first_extension + 8, 1)  # one block: the hidden entry
    ieot_head = b"IEOT" + struct.pack(">I", len(ieot))
    body += unknown + hidden + ieot_head + ieot
    eoie = struct.pack(">I", first_extension) + hashlib.sha1(unknown + ieot_head).digest()
    body += b"EOIE" + struct.pack(">I", len(eoie)) + eoie
    (work / ".git" / "index").write_bytes(body + hashlib.sha1(body).digest())
    git(work, "config", "index.threads", "4")
    git(work, "hash-object", "-w", "/dev/null")  # the blob the entries name
    leak = subprocess.run(["git", "diff"], cwd=work, env=ENV, capture_output=True, text=True)
    assert "TOPSECRET" in leak.stdout  # the control: git really reads it
    verdict = approved("git diff", work)
    assert verdict.approved  # the check sees f.txt alone
    ran = subprocess.run(
        ["/bin/sh", "-c", verdict.plan.shell], cwd=work, env=ENV, capture_output=True, text=True
    )
    assert ran.returncode == 0
    assert "TOPSECRET" not in ran.stdout + ran.stderr
