"""The table of safe command forms: which argv run_terminal_command may run unasked.

A *form* says, for one program or one program and subcommand (``"git status"``),
which options are allowed (an allow-list: any other option refuses the command),
which of them take a value and which values are paths, and what the operands
are. This module holds the `Form` shape, the built-in forms and the lists no
form may break (wrappers, options that write or run programs);
`command_table` turns the user's configuration into the table in force and
`command_policy` matches a parsed command against it.

Options follow getopt: ``-x`` letters (clustered, ``-la``), ``--name`` and
``--name=value``; ``--`` ends the options. Exact names only, so abbreviations
(``--out`` for ``--output``) are refused like any option not listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def words(text: str) -> frozenset[str]:
    """The set of space-separated words of ``text`` (option lists written as data)."""
    return frozenset(text.split())


_s = words

#: What the operands (words that are not options) of a form may be.
OPERAND_KINDS = {
    "none": "no operand at all",
    "paths": "each operand is a path inside the working directory",
    "pattern+paths": "the first operand is a pattern (unless given by -e/-f), the rest paths",
    "names": "program names (no /)",
    "date": "at most one operand, a +FORMAT",
    "text": "every word is free text and no option is interpreted (echo)",
}

#: Programs that run other programs or commands: never safe, whatever the form.
NEVER_SAFE = words(
    "env xargs sudo doas su runuser pkexec sh bash dash zsh ksh mksh fish csh tcsh busybox "
    "exec command builtin eval source . nohup nice ionice chrt taskset timeout time watch "
    "setsid setpriv stdbuf unbuffer script chroot unshare nsenter flock strace ltrace gdb "
    "valgrind parallel ssh expect systemd-run firejail bwrap fakeroot find xdg-open"
)

#: Options that write, execute or read lists of other files; no form may allow them.
FORBIDDEN_OPTIONS: dict[str, frozenset[str]] = {
    "*": words(
        "--files0-from --exec -exec -execdir -ok -okdir --pre --pre-glob --hostname-bin "
        "--compress-program --use-compress-program --to-command --checkpoint-action "
        "--info-script --new-volume-script --rsh --rsh-command --rsync-path --pager --output "
        "--output-directory --upload-pack --receive-pack --config-env --exec-path --ext-diff "
        "--textconv --show-signature --no-index --git-dir --work-tree --open-files-in-pager "
        "--editor --paginate"
    ),
    "git": frozenset({"-c", "-O"}),  # -c looks like git -c; -O reads an order file
    "date": words("-s --set -f --file"),
    "rg": words("-z --search-zip -L --follow"),
    "grep": words("-R --dereference-recursive -D --devices"),
}

#: git options that may come before the subcommand.
GIT_GLOBAL_OPTIONS = frozenset({"--no-pager", "-P", "--no-optional-locks"})


@dataclass(frozen=True)
class Form:
    """One safe argv shape. Option sets hold exact spellings (``-n``, ``--lines``)."""

    name: str
    flags: frozenset[str] = frozenset()  # take no value
    values: frozenset[str] = frozenset()  # take a value: attached, or the next word
    optional_values: frozenset[str] = frozenset()  # a value only when attached (--color=auto)
    path_values: frozenset[str] = frozenset()  # take a value that is a path
    operands: str = "paths"
    max_operands: int | None = None
    numeric: bool = False  # -NUM is a count (head -5, git log -3)
    list_flags: frozenset[str] = frozenset()  # operands only with one of these (git branch -l)
    pattern_options: frozenset[str] = frozenset({"-e", "--regexp", "-f", "--file"})
    denied_values: Mapping[str, str] = field(default_factory=dict)  # option -> regex refused

    @property
    def program(self) -> str:
        return self.name.split(" ")[0]

    def options(self) -> frozenset[str]:
        return self.flags | self.values | self.optional_values | self.path_values


# --------------------------------------------------------------------- built-in forms
_HELP = "--help --version"
_GIT_DIFF_FLAGS = (
    "-p -u --patch -s --no-patch --raw --patch-with-raw --patch-with-stat --numstat "
    "--shortstat --compact-summary --summary --name-only --name-status --no-color "
    "--no-renames --rename-empty --no-rename-empty --check --full-index --binary "
    "--find-copies-harder -D --irreversible-delete --pickaxe-all --pickaxe-regex -R -a "
    "--text --ignore-cr-at-eol --ignore-space-at-eol -b --ignore-space-change -w "
    "--ignore-all-space --ignore-blank-lines -W --function-context --exit-code --quiet "
    "--no-ext-diff --no-textconv --no-prefix --minimal --patience --histogram "
    "--indent-heuristic --no-indent-heuristic --no-color-moved --no-relative -z"
)
_GIT_DIFF_OPTIONAL = (
    "-U --unified --stat --dirstat --color --word-diff --color-words --abbrev -B -M -C "
    "--find-renames --find-copies --break-rewrites --relative --color-moved"
)
_GIT_DIFF_VALUES = (
    "--diff-algorithm --word-diff-regex --diff-filter -S -G --find-object "
    "--inter-hunk-context --src-prefix --dst-prefix --color-moved-ws"
)
_GIT_LOG_FLAGS = (
    "--oneline --abbrev-commit --no-abbrev-commit --merges --no-merges --first-parent "
    "--reverse --graph --no-decorate --source --relative-date --parents --children "
    "--left-right --topo-order --date-order --author-date-order --full-history "
    "--simplify-by-decoration --simplify-merges --dense --sparse --boundary --cherry-pick "
    "--cherry-mark --cherry --left-only --right-only --do-walk --all-match --invert-grep "
    "-i --regexp-ignore-case -E --extended-regexp -F --fixed-strings -P --perl-regexp "
    "--basic-regexp --follow --walk-reflogs -g --show-pulls --cc -m --no-notes "
    "--no-expand-tabs --use-mailmap --no-use-mailmap --mailmap --no-mailmap --all --not "
    "--remove-empty --no-min-parents --no-max-parents"
)
_GIT_LOG_OPTIONAL = (
    "--decorate --pretty --format --no-walk --expand-tabs --branches --tags --remotes"
)
_GIT_LOG_VALUES = (
    "-n --max-count --skip --since --after --until --before --author --committer --grep "
    "--min-parents --max-parents --date --exclude"
)
# %G… placeholders make git verify signatures, which runs gpg.program.
_GIT_FORMAT_RULES = {"--format": r"%G", "--pretty": r"%G"}


def _git_log_like(name: str) -> Form:
    return Form(
        name,
        flags=_s(_GIT_DIFF_FLAGS + " " + _GIT_LOG_FLAGS),
        optional_values=_s(_GIT_DIFF_OPTIONAL + " " + _GIT_LOG_OPTIONAL),
        values=_s(_GIT_DIFF_VALUES + " " + _GIT_LOG_VALUES),
        numeric=True,
        denied_values=_GIT_FORMAT_RULES,
    )


_BUILTIN: tuple[Form, ...] = (
    Form(
        "ls",
        flags=_s(
            "-a -A -b -B -c -C -d -f -F -g -G -h -i -k -l -m -n -N -o -p -q -Q -r -R -s -S "
            "-t -u -U -v -x -X -Z -1 --all --almost-all --author --escape --ignore-backups "
            "--directory --dired --file-type --full-time --group-directories-first "
            "--no-group --human-readable --si --inode --kibibytes --literal "
            "--numeric-uid-gid --hide-control-chars --show-control-chars --quote-name "
            "--reverse --recursive --size --context --zero " + _HELP
        ),
        optional_values=_s("--color --classify --hyperlink"),
        values=_s(
            "-I --ignore --hide -w --width -T --tabsize --block-size --format --sort --time "
            "--time-style --quoting-style --indicator-style"
        ),
    ),
    Form("pwd", flags=_s("-L -P " + _HELP), operands="none"),
    Form(
        "cat",
        flags=_s(
            "-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --show-ends --number "
            "--squeeze-blank --show-tabs --show-nonprinting " + _HELP
        ),
    ),
    Form("echo", operands="text"),
    Form(
        "head",
        flags=_s("-q -v -z --quiet --silent --verbose --zero-terminated " + _HELP),
        values=_s("-c -n --bytes --lines"),
        numeric=True,
    ),
    Form(
        "tail",
        flags=_s("-f -F -q -v -z --quiet --silent --verbose --zero-terminated --retry " + _HELP),
        optional_values=_s("--follow"),
        values=_s("-c -n -s --bytes --lines --sleep-interval --max-unchanged-stats --pid"),
        numeric=True,
    ),
    Form(
        "wc",
        flags=_s("-c -m -l -L -w --bytes --chars --lines --max-line-length --words " + _HELP),
    ),
    Form("which", flags=_s("-a"), operands="names"),
    Form(
        "date",
        flags=_s("-u -R --utc --universal --rfc-email --debug " + _HELP),
        optional_values=_s("-I --iso-8601"),
        values=_s("-d --date --rfc-3339"),
        path_values=_s("-r --reference"),
        operands="date",
        # TZ="…" in a date string makes date open that file as a time zone
        denied_values={"-d": r"TZ", "--date": r"TZ"},
    ),
    Form("whoami", flags=_s(_HELP), operands="none"),
    Form(
        "grep",
        flags=_s(
            "-E -F -G -P -i -y -v -w -x -c -L -l -o -q -s -b -H -h -n -T -Z -z -a -I -r -U "
            "--extended-regexp --fixed-strings --basic-regexp --perl-regexp --ignore-case "
            "--no-ignore-case --invert-match --word-regexp --line-regexp --count "
            "--files-with-matches --files-without-match --only-matching --quiet --silent "
            "--no-messages --byte-offset --with-filename --no-filename --line-number "
            "--initial-tab --null --null-data --text --recursive --line-buffered --binary -V "
            + _HELP
        ),
        optional_values=_s("--color --colour"),
        values=_s(
            "-e --regexp -m --max-count -A -B -C --after-context --before-context --context "
            "--label --binary-files -d --directories --include --exclude --exclude-dir"
        ),
        path_values=_s("-f --file --exclude-from"),
        operands="pattern+paths",
        numeric=True,
    ),
    Form(
        "git status",
        flags=_s(
            "-s --short -b --branch --show-stash --long -z --ahead-behind --no-ahead-behind "
            "--renames --no-renames --no-column"
        ),
        optional_values=_s("--porcelain -u --untracked-files --ignored --find-renames --column"),
    ),
    Form(
        "git diff",
        flags=_s(_GIT_DIFF_FLAGS + " --cached --staged --merge-base"),
        optional_values=_s(_GIT_DIFF_OPTIONAL),
        values=_s(_GIT_DIFF_VALUES),
    ),
    _git_log_like("git log"),
    _git_log_like("git show"),
    Form(
        "git branch",
        flags=_s(
            "-a --all -r --remotes -v --verbose -l --list --show-current --no-color -i "
            "--ignore-case --no-abbrev"
        ),
        optional_values=_s("--color --abbrev"),
        values=_s("--contains --no-contains --merged --no-merged --points-at --sort"),
        list_flags=_s("-l --list"),
    ),
)

BUILTIN_FORMS: dict[str, Form] = {form.name: form for form in _BUILTIN}
