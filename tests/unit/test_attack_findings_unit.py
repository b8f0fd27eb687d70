"""Findings of an attacker's review shown without Neovim (see
tests/integration/test_attack_findings.py for the others). Each test asserts the
promise and is ``xfail(strict=True)`` while the hole is open."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sidekick_tools.defaults import default
from sidekick_tools.llm.errors import StreamError
from sidekick_tools.llm.sse import MAX_LINE, SSEDecoder
from sidekick_tools.secrets_mask import mask
from sidekick_tools.tools import command_policy, command_table

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}
TABLE = command_table.table_for(tuple(default("auto_accept.safe_commands")), {})


def _repo(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=GIT_ENV)
    (path / "a.txt").write_text("a\n")
    subprocess.run(["git", "add", "a.txt"], cwd=path, check=True, env=GIT_ENV)
    subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "one"],
        cwd=path,
        check=True,
        env=GIT_ENV,
    )


def _run_approved(command: str, root: Path) -> str:
    """Run `command` as an auto-approved call would; its output, or "" if refused."""
    verdict = command_policy.check(command, None, str(root), TABLE)
    if not verdict.approved:
        return ""
    assert verdict.plan is not None
    done = subprocess.run(
        ["/bin/sh", "-c", verdict.plan.shell],
        cwd=verdict.plan.cwd,
        capture_output=True,
        text=True,
        timeout=30,
        env=GIT_ENV,
    )
    return done.stdout + done.stderr


# --------------------------------------------------------------------------- finding 1
@pytest.mark.parametrize(
    "name, command",
    [
        ("info/grafts", "git log --oneline"),  # every line of the file
        ("info/grafts", "git status"),
        ("shallow", "git log --oneline"),  # its first line
        ("packed-refs", "git status"),  # one line
    ],
)
def test_f1_git_directory_files_read_through_a_symlink(tmp_path, name, command):
    """git_guard checks a repository's config, objects, alternates and index, but
    git reads more from the git directory and quotes what it cannot parse:
    `error: bad graft data: <line>` (every line of info/grafts), `fatal: bad
    shallow line: <line>`, `fatal: unexpected line in .git/packed-refs: <line>`.
    A symlink there (an unpacked archive, a copied folder) makes an approved
    git command print a file from outside the working directory."""
    work = tmp_path / "work"
    work.mkdir()
    _repo(work)
    secret = tmp_path / "secret.txt"
    secret.write_text("db_pass Hunter2-outside\n")
    target = work / ".git" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    target.symlink_to(os.path.relpath(secret, target.parent))
    out = _run_approved(command, work)
    assert "Hunter2-outside" not in out, out


# --------------------------------------------------------------------------- finding 8
@pytest.mark.parametrize(
    "text",
    [
        # `tail -n +2 key.pem` / `grep -v BEGIN key.pem`: body and END line
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n-----END OPENSSH PRIVATE KEY-----",
        # `tail -c +6 key.pem`: the BEGIN line without its dashes
        "BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretsecretsecret\n"
        "-----END RSA PRIVATE KEY-----",
    ],
)
def test_f8_a_private_key_without_its_begin_line_is_not_masked(text):
    assert "AAAAB" not in mask(text) and "secretsecret" not in mask(text), mask(text)


# --------------------------------------------------------------------------- finding 11
def test_f11_an_event_stream_line_without_end_is_buffered_without_bound_and_quadratically():
    """A model server (hostile, or a proxy gone wrong) that sends one `data:` line
    and never ends it: SSEDecoder keeps every byte (no limit; only 120 s of
    silence ends a stream, not size) and re-joins and re-scans the whole
    pending line on every chunk: 4 MiB in 16 KiB chunks cost ~4 s of the host's
    event loop, 8 MiB ~15 s (quadratic), and memory grows with the line."""
    decoder = SSEDecoder()
    chunk = b"x" * 16384
    decoder.feed(b"data: ")
    with pytest.raises(StreamError, match="line longer than"):
        for _ in range((4 << 20) // len(chunk)):
            decoder.feed(chunk)
            assert len(decoder._pending) <= MAX_LINE  # never holds more than the limit
