"""Whether a run_terminal_command call may run without asking, and what then runs.

`check(command, cwd_param, root, table)` parses the command like /bin/sh
(`shell_words`), refuses anything but one plain program call, finds the form
of that program (and subcommand) in the table (`command_forms`), matches every
option against the form's allow-list and checks every path operand, every
path option value and the ``cwd`` parameter: after resolving symlinks each
must lie inside the working directory ``root`` and be neither a device, FIFO
or socket nor under /proc, /sys or /dev. The program itself is looked up on
PATH, skipping relative entries and directories inside the working directory,
so a repository cannot put its own ``ls`` first.

An approved command comes with a `Plan`: the shell line that runs exactly the
checked argv (every word quoted, the program by absolute path, git with
`git_hardening`). Pure: no pynvim, no task engine.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from . import _fs, git_guard, git_hardening, shell_words
from .command_forms import GIT_GLOBAL_OPTIONS, NEVER_SAFE, Form
from .command_table import Table

_SPECIAL_TREES = ("/proc", "/sys", "/dev")
_NUMERIC = re.compile(r"-[0-9]+")


@dataclass(frozen=True)
class Plan:
    """How an approved command runs: ``shell`` is handed to /bin/sh -c in ``cwd``."""

    argv: tuple[str, ...]
    cwd: str
    shell: str


@dataclass(frozen=True)
class Verdict:
    approved: bool
    reason: str = ""  # why not, for the log and the tests
    plan: Plan | None = None


class _No(Exception):
    pass


def check(
    command: str,
    cwd_param: str | None,
    root: str,
    table: Table,
    environ: Mapping[str, str] | None = None,
) -> Verdict:
    """Approve ``command`` for running in ``cwd_param`` (relative to ``root``) unasked?"""
    try:
        return Verdict(True, plan=_plan(command, cwd_param, root, table, environ or os.environ))
    except shell_words.Refused as exc:
        return Verdict(False, str(exc))
    except _No as exc:
        return Verdict(False, str(exc))
    except OSError as exc:  # a file vanished or cannot be read while checking
        return Verdict(False, f"could not check: {exc}")


def _plan(
    command: str, cwd_param: str | None, root_param: str, table: Table, environ: Mapping[str, str]
) -> Plan:
    root = os.path.realpath(os.path.abspath(root_param))
    cwd = _working_dir(cwd_param, root_param, root)
    words = shell_words.split(command)
    argv = [w.text for w in words]
    program = argv[0]
    if not words[0].plain:
        raise _No("the program name is quoted or escaped")
    if program in NEVER_SAFE:
        raise _No(f"{program} runs other programs")
    if "/" in program:
        raise _No("the program is given by a path")
    sub_index = _match(words, table, cwd, root)
    executable = _find_program(program, root, environ.get("PATH", ""))
    run = [executable, *argv[1:]]
    if program == "git":
        problem = git_guard.repository_problem(cwd, root)
        if problem:
            raise _No(problem)
        shell = git_hardening.shell_command(run, sub_index, root)
    else:
        shell = "exec " + shlex.join(run)
    return Plan(tuple(run), cwd, shell)


def _working_dir(cwd_param: str | None, root_param: str, root: str) -> str:
    """The real directory the command runs in; resolved the way the tool resolves it."""
    if not cwd_param:
        return root
    try:
        cwd = os.path.realpath(_fs.resolve(cwd_param, root_param))
    except (_fs.PathError, ValueError, OSError):
        raise _No("the cwd parameter is not a usable path") from None
    if not _inside(cwd, root):
        raise _No("the cwd parameter is outside the working directory")
    if not os.path.isdir(cwd) or _special(cwd):
        raise _No("the cwd parameter is not an ordinary directory")
    return cwd


def _match(words: list[shell_words.Word], table: Table, cwd: str, root: str) -> int:
    """Match the argv against its form; the index of the word after the program and
    git's global options (git's subcommand)."""
    argv = [w.text for w in words]
    program = argv[0]
    sub_index = 1
    if program == "git":
        while sub_index < len(argv) and argv[sub_index] in GIT_GLOBAL_OPTIONS:
            sub_index += 1
    if tuple(argv) in table.exact:
        return sub_index
    form = None
    if sub_index < len(argv) and table.has_subcommands(program):
        if words[sub_index].plain:
            form = table.forms.get(f"{program} {argv[sub_index]}")
        if form is None:
            raise _No(f"{program} {argv[sub_index]} is not a safe command")
        _match_args(form, argv[sub_index + 1 :], cwd, root)
        return sub_index
    form = table.forms.get(program)
    if form is None or program == "git":
        raise _No(f"{program} is not a safe command")
    _match_args(form, argv[1:], cwd, root)
    return 1


def _match_args(form: Form, args: list[str], cwd: str, root: str) -> None:
    if form.operands == "text":
        return
    operands: list[str] = []
    seen: set[str] = set()
    i, ended = 0, False
    while i < len(args):
        word = args[i]
        i += 1
        if ended or word == "-" or not word.startswith("-"):
            operands.append(word)
        elif word == "--":
            ended = True
        elif form.numeric and _NUMERIC.fullmatch(word):
            continue
        elif word.startswith("--"):
            i = _long_option(form, word, args, i, cwd, root, seen)
        else:
            i = _short_options(form, word, args, i, cwd, root, seen)
    _check_operands(form, operands, seen, cwd, root)


def _long_option(
    form: Form, word: str, args: list[str], i: int, cwd: str, root: str, seen: set[str]
) -> int:
    name, eq, value = word.partition("=")
    if name in form.flags:
        if eq:
            raise _No(f"{name} takes no value")
    elif name in form.optional_values:
        if eq:
            _check_value(form, name, value, cwd, root)
    elif name in form.values or name in form.path_values:
        i = _take_value(form, name, value if eq else None, args, i, cwd, root)
    else:
        raise _No(f"{name} is not an option {form.name} may run with unasked")
    seen.add(name)
    return i


def _short_options(
    form: Form, word: str, args: list[str], i: int, cwd: str, root: str, seen: set[str]
) -> int:
    for j in range(1, len(word)):
        option = "-" + word[j]
        seen.add(option)
        if option in form.flags:
            continue  # (the rest is cut off only for a value: per flag, `ls -llll…` was quadratic)
        rest = word[j + 1 :]
        if option in form.optional_values:
            if rest:
                _check_value(form, option, rest, cwd, root)
            return i
        if option in form.values or option in form.path_values:
            return _take_value(form, option, rest or None, args, i, cwd, root)
        raise _No(f"{option} is not an option {form.name} may run with unasked")
    return i


def _take_value(
    form: Form, option: str, attached: str | None, args: list[str], i: int, cwd: str, root: str
) -> int:
    """Check the value of an option that needs one: attached, else the next word."""
    if attached is None:
        if i >= len(args):
            raise _No(f"{option} needs a value")
        attached, i = args[i], i + 1
    _check_value(form, option, attached, cwd, root)
    return i


def _check_value(form: Form, option: str, value: str, cwd: str, root: str) -> None:
    if option in form.path_values:
        _check_path(value, cwd, root, f"the value of {option}")
    rule = form.denied_values.get(option)
    if rule and re.search(rule, value):
        raise _No(f"this value of {option} is not safe")


def _check_operands(form: Form, operands: list[str], seen: set[str], cwd: str, root: str) -> None:
    kind = form.operands
    if form.max_operands is not None and len(operands) > form.max_operands:
        raise _No(f"{form.name} takes at most {form.max_operands} operands here")
    if operands and form.list_flags and not (seen & form.list_flags):
        raise _No(f"{form.name} with operands changes things; only listing is safe")
    if kind == "none" and operands:
        raise _No(f"{form.name} takes no operands here")
    if kind == "names":
        if any(not op or "/" in op for op in operands):
            raise _No("an operand is not a program name")
        return
    if kind == "date":
        if len(operands) > 1 or any(not op.startswith("+") for op in operands):
            raise _No("date takes only a +FORMAT operand here (no setting the date)")
        return
    if kind == "pattern+paths" and operands and not (seen & form.pattern_options):
        operands = operands[1:]
    for op in operands:
        _check_path(op, cwd, root, "an operand")


def _check_path(word: str, cwd: str, root: str, what: str) -> None:
    """A path the program will open: inside ``root`` once resolved, and ordinary."""
    if not word:
        raise _No(f"{what} is empty")
    real = os.path.realpath(os.path.join(cwd, word))  # no ~ expansion: the shell does none
    if not _inside(real, root):
        raise _No(f"{what} ({word}) is outside the working directory")
    if _special(real):
        raise _No(f"{what} ({word}) is a device, FIFO, socket or system file")


def _special(real: str) -> bool:
    if any(real == top or real.startswith(top + "/") for top in _SPECIAL_TREES):
        return True
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return False  # does not exist: the program will say so
    except OSError:
        return True  # cannot tell (a loop, no permission): treat as unsafe
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return True
    return st.st_dev in _special_devices()


_special_devs: frozenset[int] | None = None


def _special_devices() -> frozenset[int]:
    """The file systems of /proc, /sys and /dev, wherever they are mounted again."""
    global _special_devs
    if _special_devs is None:
        devs = set()
        for top in _SPECIAL_TREES:
            try:
                devs.add(os.stat(top).st_dev)
            except OSError:
                pass
        _special_devs = frozenset(devs)
    return _special_devs


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


def _find_program(name: str, root: str, path: str) -> str:
    """The program's absolute path on PATH, ignoring entries the project could control."""
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if _inside(os.path.realpath(entry), root):
            continue
        candidate = os.path.join(entry, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            if _inside(os.path.realpath(candidate), root):
                continue
            return candidate
    raise _No(f"{name} is not found on PATH outside the working directory")
