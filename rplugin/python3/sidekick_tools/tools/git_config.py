"""Auto-run git: which keys of a repository's config file are known to be harmless
(an allow-list; a line this parser does not understand counts as a problem)."""

from __future__ import annotations

import re

from .command_forms import words

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
