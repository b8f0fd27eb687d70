"""Path resolution, the "inside cwd" test, reads of regular files and atomic
writes, shared by the file tools."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess


class PathError(ValueError):
    """A path parameter that cannot name a file (e.g. it holds a NUL byte)."""


class NotRegularFile(OSError):
    """A FIFO, device or socket where a file tool expects a regular file."""

    def __init__(self) -> None:
        super().__init__("not a regular file")


class LedOutside(OSError):
    """The file opened lies outside the folder it had to be in: a link in its
    path was changed between the check and the open."""

    def __init__(self) -> None:
        super().__init__("it led outside the working directory as it was opened; not read")


def read_regular(
    path: str, limit: int, large: tuple[int, int] | None = None, inside: str | None = None
) -> tuple[bytes, int]:
    """At most ``limit`` bytes of a regular file, and its size; with
    ``large=(size, head)``, a file over that size gives only its first ``head``
    bytes. Opened without blocking, so that a FIFO cannot hold the call:
    IsADirectoryError for a directory, NotRegularFile for anything else that
    is no regular file. With ``inside``, the file opened must lie in that
    folder (LedOutside): what was checked before is the path, and a link on
    it may have been swapped since."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if inside is not None and not opened_inside(f.fileno(), inside):
            raise LedOutside()
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile()
        if large is not None and st.st_size > large[0]:
            limit = min(limit, large[1])
        return f.read(limit), st.st_size


def opened_inside(fd: int, folder: str) -> bool:
    """Does the file open on `fd` lie in `folder`? Asked of the kernel (Linux's
    /proc/self/fd, macOS's F_GETPATH); where neither answers, the check made
    on the path before the open stands."""
    opened = None
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        import fcntl

        if hasattr(fcntl, "F_GETPATH"):
            try:
                raw = fcntl.fcntl(fd, fcntl.F_GETPATH, b"\0" * 1024)
                opened = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            except OSError:
                opened = None
    if opened is None or not os.path.isabs(opened):
        return True  # no way to ask: the check made before stands
    root = os.path.realpath(folder)
    return under(opened, root)


def resolve(path: str, cwd: str) -> str:
    """Absolute, normalised path of ``path`` taken relative to ``cwd``.

    ``~`` is expanded; ``..`` is folded lexically; symlinks are left alone
    (use `real` for that).
    """
    if "\x00" in path:
        raise PathError("path contains a NUL character")
    return os.path.normpath(os.path.join(os.path.abspath(cwd), os.path.expanduser(path)))


def real(path: str, cwd: str) -> str:
    """Like `resolve`, with every existing symlink along the way resolved."""
    return os.path.realpath(resolve(path, cwd))


def is_inside(path: str, cwd: str) -> bool:
    """Whether ``path`` really is ``cwd`` or under it.

    Both sides are resolved to real paths, so neither ``..`` nor a symlink
    (anywhere along the path, the last component included) can escape.
    For a path that does not exist yet, its existing ancestors decide.
    """
    try:
        target = real(path, cwd)
        root = os.path.realpath(os.path.abspath(cwd))
    except (PathError, ValueError, OSError):
        return False
    return under(target, root)


def under(path: str, folder: str) -> bool:
    """Is `path` `folder` or in it? Both absolute and normalised: no link is
    followed here (`is_inside` resolves them first)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# Folders whose files a tool the user runs anyway executes: git's (its config's
# core.fsmonitor, core.pager and aliases, its hooks: a shell prompt or a git
# plugin runs `git status` unasked), Mercurial's (hgrc hooks), Jujutsu's (its
# config names programs), husky's git hooks; a `.git` file points git at
# another folder. A write there is code the user never saw run. So is one into
# the folder git takes its hooks from (`core.hooksPath`), and into the files
# that name the commands a commit runs (pre-commit's, lefthook's).
RUN_BY_TOOLS = frozenset((".git", ".hg", ".jj", ".husky"))
RUN_AT_COMMIT = frozenset(
    (".pre-commit-config.yaml", "lefthook.yml", "lefthook.yaml", ".lefthook.yml", ".lefthook.yaml")
)


def runs_code(path: str) -> bool:
    """Does the absolute `path` lie in (or is it) one of RUN_BY_TOOLS, or name
    one of RUN_AT_COMMIT, or lie in the folder git takes its hooks from?"""
    if any(part.lower() in RUN_BY_TOOLS for part in path.split(os.sep)):
        return True
    if os.path.basename(path).lower() in RUN_AT_COMMIT:
        return True
    hooks = _hooks_dir(_existing_folder(path))
    return hooks is not None and under(path, hooks)


def _existing_folder(path: str) -> str:
    folder = os.path.dirname(path)
    while folder and not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder or os.sep


def _hooks_dir(folder: str) -> str | None:
    """The absolute folder git takes the hooks of the repository `folder` is in
    from (core.hooksPath as git reads it: in a worktree's config, an included
    file, a line of its own or not), None outside a repository or without git."""
    git = shutil.which("git")
    hooks = None
    if git is not None:
        # the editor's GIT_DIR and the like must not point git elsewhere
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["GIT_TERMINAL_PROMPT"] = "0"
        argv = [git, "-c", "core.fsmonitor=false", "-C", folder, "rev-parse", "--git-path", "hooks"]
        try:
            done = subprocess.run(
                argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=5
            )
            said = done.stdout.strip()
            if done.returncode == 0 and said:
                hooks = os.path.realpath(os.path.join(folder, said))
        except (OSError, subprocess.SubprocessError, ValueError):
            hooks = None
    return hooks


def writes_code(path: str, cwd: str) -> str | None:
    """Where a write to `path` really lands when that is in a folder whose
    files tools run (`runs_code`; as written, or through a link), else None."""
    try:
        shown, target = resolve(path, cwd), real(path, cwd)
    except (ValueError, OSError):
        return None
    # (each look may ask git: the same path is not looked at twice)
    return target if runs_code(shown) or (target != shown and runs_code(target)) else None


def as_written(shown: str, cwd: str) -> str:
    """`shown`, the path a write was given, as its result names it: with where
    it really went when a link in the project led it outside `cwd` or into a
    `.git` or `.hg`."""
    try:
        path, target = resolve(shown, cwd), real(shown, cwd)
    except (ValueError, OSError):
        return shown
    hidden = runs_code(target) and not runs_code(path)
    if target != path and (hidden or not is_inside(shown, cwd)):
        return f"{shown}, which leads to {target}"
    return shown


def too_broad(cwd: str) -> str | None:
    """What ``cwd`` is when "inside it" says nothing: the root of the file
    system, the home folder or a folder above it (every file of the user's is
    inside, keys and shell history included); else None."""
    try:
        root = os.path.realpath(os.path.abspath(cwd))
        home = os.path.realpath(os.path.expanduser("~"))
    except (ValueError, OSError):
        return "a folder that cannot be resolved"
    if root == os.sep:
        return "the root of the file system"
    if home == root:
        return "your home folder"
    if under(home, root):
        return "a folder above your home folder"
    return None


def atomic_write(target: str, data: bytes) -> int | None:
    """Write ``data`` to ``target`` so readers see the old or the new file, never half.

    Creates missing parent directories. Writes a temporary file in the same
    directory (readable by its owner alone while it is written, when it
    replaces a file), fsyncs it, gives it the old file's permission bits (or
    the umask default for a new file) and renames it over ``target``. A symlink
    at ``target`` is followed: the file it points to is replaced, not the link.
    Returns the previous size in bytes, or None when the file was created.
    """
    target = os.path.realpath(target)
    parent = os.path.dirname(target)
    if os.path.isdir(target):
        raise IsADirectoryError(f"{target} is a directory")
    os.makedirs(parent, exist_ok=True)
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise NotRegularFile()  # a FIFO or a device is not replaced by a file

    base = os.path.basename(target)
    # 0o666 & ~umask for a new file, applied by the kernel. A file replaced
    # gets its mode back once its new content is written: until then the
    # temporary file is the owner's alone, or another user could open it (it
    # appears beside the old file) and read what a 0600 file was to hold.
    create_mode = 0o666 if old is None else 0o600
    while True:
        tmp = os.path.join(parent, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, create_mode)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            os.chmod(tmp, old.st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(parent)
    return None if old is None else old.st_size


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_OS_ERRORS = (
    (FileNotFoundError, "no such file or directory"),
    (IsADirectoryError, "is a directory"),
    (NotADirectoryError, "a parent of this path is not a directory"),
    (PermissionError, "permission denied"),
    (NotRegularFile, "not a regular file"),
)


def describe_os_error(err: OSError) -> str:
    """Short wording for the usual file errors."""
    words = (text for kind, text in _OS_ERRORS if isinstance(err, kind))
    return next(words, None) or err.strerror or str(err)
