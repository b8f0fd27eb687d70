"""Auto-run git: which repositories it may run in.

A repository's own files can make read-only git commands start programs
(``core.fsmonitor``, hooks, ``diff.external``, textconv and filter drivers,
``gpg.program`` with ``log.showSignature``, lazy fetches of a partial clone
through ``ext::`` remotes) or read outside the work tree (``core.worktree``, an
index listing ``../`` or absolute paths, alternates, a ``.git`` file pointing
at another repository). Two layers answer that:

1. `repository_problem` (checked before approving): the repository git would
   find from the call's directory lies inside the working directory (or is a
   linked worktree whose git directory links back to it), its configuration
   holds only keys known to be harmless (`git_config`; a line that parser does
   not understand counts as a problem), it borrows no objects, and its index
   lists only paths inside the work tree (`git_index`). Anything else: the user
   is asked.
2. `git_hardening.shell_command` (what actually runs): see there.
"""

from __future__ import annotations

import os
import stat

from ._fs import is_inside
from .git_config import config_problem
from .git_index import index_problem


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
        named = _git_path(dotgit, b"gitdir: ")
        gitdir = os.path.realpath(os.path.join(os.path.dirname(dotgit), named))
        back = os.path.join(gitdir, "gitdir")
        if not is_inside(gitdir, root):
            # A linked worktree: its git directory names this .git file back.
            named = _git_path(back) if _exists(back) else ""
            linked = bool(named) and os.path.realpath(named) == os.path.realpath(dotgit)
    else:
        raise _Unsafe(f"{dotgit} is neither a directory nor a file")
    if not (linked or is_inside(gitdir, root)):
        raise _Unsafe("the repository's git directory is outside the working directory")
    if not os.path.isdir(gitdir):
        raise _Unsafe(f"{gitdir} is not a git directory")
    common = gitdir
    if _exists(os.path.join(gitdir, "commondir")):
        named = _git_path(os.path.join(gitdir, "commondir"))
        common = os.path.realpath(os.path.join(gitdir, named))
        if not (linked or is_inside(common, root)):
            raise _Unsafe("the repository's common directory is outside the working directory")
    if not is_inside(os.path.join(common, "objects"), common):
        raise _Unsafe("the repository's objects live elsewhere")
    if os.path.lexists(os.path.join(common, "objects", "info", "alternates")):
        raise _Unsafe("the repository borrows objects from another one (alternates)")
    for directory in sorted({gitdir, common}):
        _check_git_files(directory)
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


def _git_path(path: str, prefix: bytes = b"") -> str:
    """The path a git link file names (``.git``'s ``gitdir: ``, ``commondir``,
    a worktree's ``gitdir``), read the way git reads it: the prefix exactly, and
    only the line ends at the end taken off, so that ``g `` stays ``g `` (with
    its space), the directory git will use. A path git would cut short (at a NUL)
    or that is empty is not trusted."""
    data = _read(path, 4096)
    if not data.startswith(prefix):
        raise _Unsafe(f"{path} is not a git link file")
    named = data[len(prefix) :].rstrip(b"\r\n")
    if not named or b"\0" in named or b"\n" in named:
        raise _Unsafe(f"{path} names no path this check can read as git does")
    return os.fsdecode(named)


# Every file of a git directory may be read by a read-only command, and quoted
# when git cannot parse it ("bad graft data: <line>", "bisect started on
# <BISECT_START>", "rebasing <rebase-merge/head-name>"): each must be a regular
# file of the repository's own (never a link to one elsewhere, a FIFO or a
# device), whatever its name, and every directory listable (what cannot be
# looked at is not passed). Object stores (`objects`, also a submodule's or
# LFS's) are left out, git checks each object against its hash and never
# quotes one, but for their `info`, which names other stores and packs. A
# socket (git's fsmonitor daemon) cannot be read.
_OBJECTS = "objects"
_TREE_LIMIT = 20000  # entries looked at; a larger git directory: the user is asked


def _unlistable(exc: OSError) -> None:
    raise _Unsafe(f"cannot look into {exc.filename}: {exc.strerror}")


def _check_git_files(gitdir: str) -> None:
    if os.path.lexists(os.path.join(gitdir, "info", "grafts")):
        raise _Unsafe("the repository has info/grafts (git quotes that file in its errors)")
    seen = 0
    tops = [gitdir]
    while tops:
        top = tops.pop()
        if os.path.islink(top) or not os.path.isdir(top):
            raise _Unsafe(f"{top} is not a directory of the repository's own")
        for here, dirs, files in os.walk(top, onerror=_unlistable):  # links are not followed
            seen += len(dirs) + len(files)
            if seen > _TREE_LIMIT:
                raise _Unsafe(f"{gitdir} holds too many files to check")
            for name in dirs:
                if os.path.islink(os.path.join(here, name)):
                    raise _Unsafe(f"{os.path.join(here, name)} is a link")
            for name in files:
                _regular(os.path.join(here, name))
            if _OBJECTS in dirs and _holds_a_store(gitdir, here):  # only its info
                dirs.remove(_OBJECTS)
                info = os.path.join(here, _OBJECTS, "info")
                if os.path.lexists(info):
                    tops.append(info)


def _holds_a_store(gitdir: str, here: str) -> bool:
    """Whether ``here/objects`` is one of git's object stores: the repository's
    own, LFS's, or a submodule's (under ``modules/``), never one inside a linked
    worktree's directory, whose files git reads (and quotes) as they are, or one
    inside another store. A name that could be either is looked into."""
    rel = os.path.relpath(here, gitdir)
    parts = [] if rel == os.curdir else rel.split(os.sep)
    if parts in ([], ["lfs"]):
        return True
    inner = {_OBJECTS, "info", "worktrees"}
    return len(parts) >= 2 and parts[0] == "modules" and not inner.intersection(parts)


def _regular(path: str) -> None:
    """A file git may read: absent, a regular file, or a socket, which cannot be
    read (no link, FIFO or device)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _Unsafe(f"cannot check {path}: {exc.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
        raise _Unsafe(f"{path} is not a regular file (a link, FIFO or device)")


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
