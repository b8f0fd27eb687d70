"""Auto-run git: the command line that actually runs (`shell_command`).

System and global configuration off, forced ``-c`` overrides, ``--no-ext-diff
--no-textconv --ignore-submodules=all``, no pager, no optional locks (so no
index write and no hook), no transport at all, discovery stopped at the working
directory. Which repositories it may run in is `git_guard`'s question, asked first.
"""

from __future__ import annotations

import os
import shlex

from .command_forms import words

#: Forced configuration (command-line -c wins over every file).
_NO_PROGRAM = "/dev/null/sidekick-no-program"  # can never exist: /dev/null is no directory
HARDENING_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.untrackedCache=false",
    "credential.helper=",
    # one thread reads the index in order, as git_index reads it: with more,
    # git reads entries and extensions where IEOT and EOIE extensions point
    "index.threads=1",
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
        "GIT_ATTR_SOURCE GIT_QUARANTINE_PATH GIT_TEST_INDEX_THREADS GIT_TEST_SPLIT_INDEX"
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
    if ceiling != root:  # (a path with ":" is refused by git_guard.repository_problem)
        env["GIT_CEILING_DIRECTORIES"] = ceiling
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"unset {' '.join(UNSET_ENV)}; export {exports}; exec {shlex.join(words)}"
