"""Auto-run git: which repositories it may run in, and the hardened command line.

A repository's own files can make read-only git commands start programs
(``core.fsmonitor``, hooks, ``diff.external``, textconv and filter drivers,
``gpg.program`` with ``log.showSignature``, lazy fetches of a partial clone
through ``ext::`` remotes) or read outside the work tree (``core.worktree``, an
index listing ``../`` or absolute paths, alternates, a ``.git`` file pointing
at another repository). Two layers answer that:

1. `repository_problem` (checked before approving): the repository git would
   find from the call's directory lies inside the working directory (or is a
   linked worktree whose git directory links back to it), its configuration
   holds only keys known to be harmless (an allow-list; a line this parser does
   not understand counts as a problem), it borrows no objects, and its index
   lists only paths inside the work tree. Anything else: the user is asked.
2. `shell_command` (what actually runs): system and global configuration off,
   forced ``-c`` overrides, ``--no-ext-diff --no-textconv
   --ignore-submodules=all``, no pager, no optional locks (so no index write and
   no hook), no transport at all, discovery stopped at the working directory.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import struct

from ._fs import is_inside
from .command_forms import words

#: Forced configuration (command-line -c wins over every file).
_NO_PROGRAM = "/dev/null/sidekick-no-program"  # can never exist: /dev/null is no directory
HARDENING_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.untrackedCache=false",
    "credential.helper=",
    "log.showSignature=false",
    f"gpg.program={_NO_PROGRAM}",
    f"gpg.ssh.program={_NO_PROGRAM}",
    f"gpg.x509.program={_NO_PROGRAM}",
    "protocol.allow=never",
    "safe.bareRepository=explicit",
)
_DIFF_HARDENING = ("--no-ext-diff", "--no-textconv", "--ignore-submodules=all")
#: Options added right after the subcommand (the forms never allow their opposites).
HARDENING_OPTIONS = {
    "status": ("--ignore-submodules=all",),
    "diff": _DIFF_HARDENING,
    "log": _DIFF_HARDENING,
    "show": _DIFF_HARDENING,
}
HARDENING_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ALLOW_PROTOCOL": "none",
    "GIT_NO_LAZY_FETCH": "1",
}
#: Variables of the editor's environment that would point git elsewhere.
UNSET_ENV = sorted(
    words(
        "GIT_DIR GIT_WORK_TREE GIT_COMMON_DIR GIT_INDEX_FILE GIT_OBJECT_DIRECTORY "
        "GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_NAMESPACE GIT_CONFIG GIT_CONFIG_PARAMETERS "
        "GIT_CONFIG_COUNT GIT_CONFIG_SYSTEM GIT_EXTERNAL_DIFF GIT_DIFF_OPTS GIT_EXEC_PATH "
        "GIT_SSH GIT_SSH_COMMAND GIT_ASKPASS SSH_ASKPASS GIT_EDITOR GIT_SEQUENCE_EDITOR "
        "GIT_PROXY_COMMAND GIT_SHALLOW_FILE GIT_REPLACE_REF_BASE GIT_DISCOVERY_ACROSS_FILESYSTEM "
        "GIT_ATTR_SOURCE GIT_QUARANTINE_PATH"
    )
)


def shell_command(argv: list[str], sub_index: int, root: str) -> str:
    """The /bin/sh command line that runs git ``argv`` (checked) with the hardening.

    ``argv[0]`` is git's absolute path, ``argv[sub_index]`` the subcommand (if any);
    every word is quoted, so the shell adds nothing.
    """
    words = [argv[0], "--no-pager"]
    for item in HARDENING_CONFIG:
        words += ["-c", item]
    words += argv[1:sub_index]
    if sub_index < len(argv):
        sub = argv[sub_index]
        words += [sub, *HARDENING_OPTIONS.get(sub, ()), *argv[sub_index + 1 :]]
    env = dict(HARDENING_ENV)
    ceiling = os.path.dirname(root)
    if ceiling != root:  # (a path with ":" is refused by repository_problem)
        env["GIT_CEILING_DIRECTORIES"] = ceiling
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"unset {' '.join(UNSET_ENV)}; export {exports}; exec {shlex.join(words)}"


# ----------------------------------------------------------------- the repository
class _Unsafe(Exception):
    pass


def repository_problem(cwd: str, root: str) -> str | None:
    """None when auto-run git in ``cwd`` only meets a harmless repository inside ``root``.

    Both are real (symlink-free) absolute paths, ``cwd`` inside ``root``. No
    repository up to ``root`` is fine: git is stopped there and fails.
    """
    try:
        _walk(cwd, root)
    except _Unsafe as exc:
        return str(exc)
    return None


def _walk(cwd: str, root: str) -> None:
    """Check every repository git could pick on its way up from ``cwd`` to ``root``:
    git passes over a ``.git`` it finds invalid, so the first one is not enough."""
    if ":" in os.path.dirname(root):
        raise _Unsafe("git cannot be stopped above this working directory (its path has a :)")
    here = cwd
    while True:
        dotgit = os.path.join(here, ".git")
        if os.path.lexists(dotgit):
            _check_repository(dotgit, root)
        elif all(os.path.lexists(os.path.join(here, x)) for x in ("HEAD", "objects", "refs")):
            raise _Unsafe(f"{here} is itself a git directory")
        parent = os.path.dirname(here)
        if here == root or parent == here:
            return
        here = parent


def _check_repository(dotgit: str, root: str) -> None:
    linked = False
    if os.path.isdir(dotgit):
        gitdir = os.path.realpath(dotgit)
    elif os.path.isfile(dotgit):
        text = _read(dotgit, 4096).decode("utf-8", "replace").strip()
        if not text.startswith("gitdir:"):
            raise _Unsafe(f"{dotgit} is not a git link file")
        gitdir = os.path.realpath(os.path.join(os.path.dirname(dotgit), text[7:].strip()))
        back = os.path.join(gitdir, "gitdir")
        if not is_inside(gitdir, root):
            # A linked worktree: its git directory names this .git file back.
            named = _read(back, 4096).decode("utf-8", "replace").strip() if _exists(back) else ""
            linked = bool(named) and os.path.realpath(named) == os.path.realpath(dotgit)
    else:
        raise _Unsafe(f"{dotgit} is neither a directory nor a file")
    if not (linked or is_inside(gitdir, root)):
        raise _Unsafe("the repository's git directory is outside the working directory")
    if not os.path.isdir(gitdir):
        raise _Unsafe(f"{gitdir} is not a git directory")
    common = gitdir
    if _exists(os.path.join(gitdir, "commondir")):
        named = _read(os.path.join(gitdir, "commondir"), 4096).decode("utf-8", "replace").strip()
        common = os.path.realpath(os.path.join(gitdir, named))
        if not (linked or is_inside(common, root)):
            raise _Unsafe("the repository's common directory is outside the working directory")
    if not is_inside(os.path.join(common, "objects"), common):
        raise _Unsafe("the repository's objects live elsewhere")
    if os.path.lexists(os.path.join(common, "objects", "info", "alternates")):
        raise _Unsafe("the repository borrows objects from another one (alternates)")
    for config in sorted({os.path.join(common, "config"), os.path.join(gitdir, "config")}):
        if _exists(config):
            problem = config_problem(_read(config, 1 << 20), config)
            if problem:
                raise _Unsafe(problem)
    index = os.path.join(gitdir, "index")
    if _exists(index):
        problem = _index_file_problem(index)
        if problem:
            raise _Unsafe(f"{index}: {problem}")


_index_verdicts: dict[tuple[int, ...], str | None] = {}


def _index_file_problem(path: str) -> str | None:
    """`index_problem` of an index file, remembered while the file is unchanged
    (a large index takes a tenth of a second to read)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _Unsafe(f"cannot read {path}: {exc.strerror}") from None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _index_verdicts:
        problem = index_problem(_read(path, 256 << 20))
        if len(_index_verdicts) >= 16:
            _index_verdicts.clear()
        _index_verdicts[key] = problem
    return _index_verdicts[key]


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _read(path: str, limit: int) -> bytes:
    """A small regular file's bytes; never blocks on a FIFO or reads a device."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _Unsafe(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unsafe(f"{path} is not a regular file")
        if st.st_size > limit:
            raise _Unsafe(f"{path} is too large to check")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _Unsafe(f"{path} is too large to check")
        return b"".join(chunks)
    finally:
        os.close(fd)


# ----------------------------------------------------------------- configuration
_ANY = None  # every key of the section
#: (section, has a subsection) -> allowed keys (lower case). Not listed: ask.
SAFE_CONFIG: dict[tuple[str, bool], frozenset[str] | None] = {
    ("core", False): words(
        "repositoryformatversion filemode bare logallrefupdates ignorecase precomposeunicode "
        "symlinks autocrlf eol safecrlf quotepath checkstat trustctime abbrev commentchar "
        "commentstring whitespace compression loosecompression preloadindex fscache longpaths "
        "protectntfs protecthfs sharedrepository warnambiguousrefs sparsecheckout "
        "sparsecheckoutcone splitindex untrackedcache multipackindex commitgraph "
        "bigfilethreshold deltabasecachelimit packedgitlimit packedgitwindowsize "
        "checkroundtripencoding filesreflocktimeout packedrefstimeout"
    ),
    ("remote", True): words(
        "url pushurl fetch push tagopt prune prunetags mirror skipdefaultupdate skipfetchall"
    ),
    ("branch", True): words("remote merge rebase pushremote description mergeoptions"),
    ("submodule", True): words("url active branch update ignore fetchrecursesubmodules shallow"),
    ("submodule", False): words("recurse active fetchjobs"),
    ("diff", False): words(
        "renames renamelimit algorithm mnemonicprefix noprefix colormoved colormovedws "
        "indentheuristic context interhunkcontext wordregex ignoresubmodules submodule "
        "statgraphwidth statnamewidth relative dirstat suppressblankempty autorefreshindex "
        "srcprefix dstprefix"
    ),
    ("log", False): words(
        "abbrevcommit date decorate initialdecorationset excludedecoration diffmerges follow "
        "graphcolors showroot mailmap"
    ),
    ("worktree", False): words("guessremote"),
    **{
        (name, False): _ANY
        for name in words(
            "user author committer pull push fetch rebase init advice color column gc "
            "maintenance pack repack index feature status tag commit merge blame grep i18n "
            "rerere transfer receive checkout clone apply am stash lfs safe"
        )
    },
    ("color", True): _ANY,
    ("maintenance", True): _ANY,
    ("lfs", True): _ANY,
}

_BLANK = re.compile(rb"[ \t\f\v]*(?:[#;].*)?")
_SECTION = re.compile(
    rb'[ \t\f\v]*\[([A-Za-z0-9.-]+)(?:[ \t]+"((?:[^"\\]|\\.)*)")?\][ \t\f\v]*(?:[#;].*)?'
)
_KEY = re.compile(rb"[ \t\f\v]*([A-Za-z][A-Za-z0-9-]*)[ \t\f\v]*(?:=.*)?")


def config_problem(data: bytes, path: str = "config") -> str | None:
    """None when every key in this git config file is known to be harmless.

    Only the plain syntax git itself writes is understood; anything else (a
    continued line, a key on a header line, a stray CR, a NUL) is a problem too.
    """
    section: tuple[str, bool] | None = None
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        where = f"{path} line {number}"
        if b"\r" in line or b"\0" in line or line.rstrip().endswith(b"\\"):
            return f"{where} is written in a way this check does not read"
        if _BLANK.fullmatch(line):
            continue
        header = _SECTION.fullmatch(line)
        if header:
            name = header[1].decode().lower()
            base, dot, _ = name.partition(".")
            section = (base, bool(dot) or header[2] is not None)
            continue
        key = _KEY.fullmatch(line)
        if key is None or section is None:
            return f"{where} is written in a way this check does not read"
        name = key[1].decode().lower()
        if section not in SAFE_CONFIG:
            return f"{where}: the section [{section[0]}] may start programs; not checked as safe"
        allowed = SAFE_CONFIG[section]
        if allowed is not _ANY and name not in allowed:
            return f"{where}: {section[0]}.{name} may start programs; not checked as safe"
    return None


# ------------------------------------------------------------------------ index
def index_problem(data: bytes) -> str | None:
    """None when every path the index lists stays inside the work tree.

    git reads the files an index names relative to the work tree without
    checking them, so an index entry ``../x`` or ``/etc/x`` makes ``git diff``
    print a file from anywhere.
    """
    hash_size = 20
    if len(data) < 12 + hash_size or data[:4] != b"DIRC":
        return "not an index this check can read"
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        return f"index version {version} is not supported by this check"
    end = len(data) - hash_size
    pos, previous = 12, b""
    for _ in range(count):
        if pos + 62 > end:
            return "the index is truncated"
        mode = struct.unpack_from(">I", data, pos + 24)[0]
        flags = struct.unpack_from(">H", data, pos + 60)[0]
        header = 64 if flags & 0x4000 else 62
        start = pos + header
        if version == 4:
            strip, start = _varint(data, start, end)
            if strip is None or strip > len(previous):
                return "the index is malformed"
        nul = data.find(b"\0", start, end)
        if nul < 0:
            return "the index is truncated"
        if version == 4:
            name = previous[: len(previous) - strip] + data[start:nul]
            pos = nul + 1
        else:
            name = data[start:nul]
            pos += (header + len(name) + 8) & ~7
        if not _tree_path(name, mode):
            shown = name.decode("utf-8", "replace")
            return f"the index lists {shown!r}, a path outside the work tree"
        previous = name
    while pos + 8 <= end:
        if data[pos : pos + 4] == b"link":
            return "a split index is not supported by this check"
        pos += 8 + struct.unpack_from(">I", data, pos + 4)[0]
    return None


def _tree_path(name: bytes, mode: int) -> bool:
    if mode & 0o170000 == 0o040000 and name.endswith(b"/"):  # sparse-index directory
        name = name[:-1]
    if not name or name.startswith(b"/"):
        return False
    parts = name.split(b"/")
    return all(part not in (b"", b".", b"..") and part.lower() != b".git" for part in parts)


def _varint(data: bytes, pos: int, end: int) -> tuple[int | None, int]:
    """git's offset varint (varint.c)."""
    if pos >= end:
        return None, pos
    byte = data[pos]
    pos += 1
    value = byte & 0x7F
    while byte & 0x80:
        if pos >= end or value > (1 << 40):
            return None, pos
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, pos
