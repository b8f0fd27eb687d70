"""A small git repository for tests, made without the user's git configuration."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git_repo(path: Path) -> None:
    """`path` becomes a repository with one commit of a.txt."""
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=GIT_ENV)
    (path / "a.txt").write_text("a\n")
    for args in (
        ["add", "a.txt"],
        ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "first"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True, env=GIT_ENV)
