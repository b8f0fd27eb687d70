"""Auto-run git: whether a repository's index lists only paths inside the work tree."""

from __future__ import annotations

import struct

_NAME_MASK = 0x0FFF  # a name's length in an entry's flags; longer names: this value


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
        if flags & _NAME_MASK != min(len(name), _NAME_MASK):
            # git takes a name's length from the flags and steps on by it: a
            # name it reads otherwise than up to the NUL is not read alike here
            return "the index is malformed (a name's length disagrees with its flags)"
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
