"""Mask secrets in text the plugin shows, writes into a chat, or sends to a model.

DESIGN §12 lists the formats: ``sk-…`` and ``sk-ant-…`` API keys, GitHub tokens
(``ghp_…`` and its siblings, ``github_pat_…``), AWS access key ids (``AKIA…``),
Slack tokens (``xox?-…``), PEM private keys, and the values of ``password=`` and
``token=`` (also ``secret=`` and ``api_key=``) assignments. Their ``=>``, JSON,
single-quoted, XML and YAML forms (``password => …``, ``"password": "…"``,
``'password': '…'``, ``<password>…</password>``, ``password: …``),
Authorization headers' credentials and a URL's password are masked too.

A masked secret keeps its recognisable prefix so a reader (or a model) still knows
what stood there: ``sk-ant-***``, ``ghp_***``, ``password=***``. Masking is pure,
deterministic and idempotent (``mask(mask(t)) == mask(t)``), so a chat re-read
after masking yields the same request bytes. The module is named so that it never
shadows the standard library's ``secrets``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from .text import clean

REPLACEMENT = "***"

# Each pattern: what stays visible in front of REPLACEMENT, then the secret's tail.
_TOKEN_PATTERNS = (
    # Anthropic before the generic sk- rule; both need a long tail so words like
    # "sk-learn" stay untouched.
    (r"sk-ant-", r"[A-Za-z0-9_\-]{16,}"),
    (r"sk-", r"[A-Za-z0-9][A-Za-z0-9_\-]{19,}"),
    (r"gh[pousr]_", r"[A-Za-z0-9]{20,}"),
    (r"github_pat_", r"[A-Za-z0-9_]{20,}"),
    (r"(?:AKIA|ASIA)", r"[0-9A-Z]{16}"),
    (r"xox[abposr]-", r"[A-Za-z0-9\-]{8,}"),
    # Stripe's secret and restricted keys, GitLab's, Hugging Face's and npm's
    # access tokens, Google's API keys
    (r"[sr]k_(?:live|test)_", r"[A-Za-z0-9]{16,}"),
    (r"glpat-", r"[A-Za-z0-9_\-]{20,}"),
    (r"hf_", r"[A-Za-z0-9]{30,}"),
    (r"npm_", r"[A-Za-z0-9]{36}"),
    (r"AIza", r"[0-9A-Za-z_\-]{35}"),
)
_KEEP_GROUPS = [f"keep{i}" for i in range(len(_TOKEN_PATTERNS))]
# Where a secret may start: not inside a word, or right after an escaped line
# break, tab, form feed or backspace of JSON text (a task tool's answer holds
# output lines as "\n"), or any `\uXXXX` escape (another control character, or
# any non-ASCII one: JSON text may be ASCII only): the escape's last letter or
# digit is no word the secret goes on.
_ESCAPE = r"(?:(?<=\\[nrtfb])|(?<=\\u[0-9A-Fa-f]{4}))"
_OUTSIDE_A_WORD = rf"(?:(?<![A-Za-z0-9_\-])|{_ESCAPE})"
# A token that runs to the end of its line may go on over the next ones, cut
# by a width (`fold`, base64 wrapping, a narrow log): each following line that
# is nothing but a run of key characters goes with it.
_WRAPPED = r"(?P<wrapped>(?:\r?\n[A-Za-z0-9_\-]{8,}(?=\r?\n|\Z))*)"
# Prefixes no word holds (`ghp_`, `github_pat_`, `xoxb-`, `glpat-`) start a
# token after anything, a letter too: a colour code written out before one
# (`\033[32mghp_…`) ends in one. The others (`sk-` in `task-…`) must start
# outside a word.
_ANYWHERE = ("gh[pousr]_", "github_pat_", "xox[abposr]-", "glpat-")
_TOKENS = re.compile(
    "(?:"
    + "|".join(
        ("" if keep in _ANYWHERE else _OUTSIDE_A_WORD) + f"(?P<{g}>{keep}){tail}"
        for (keep, tail), g in zip(_TOKEN_PATTERNS, _KEEP_GROUPS)
    )
    + ")"
    + _WRAPPED
)
_LINE = re.compile(r"[^\r\n]+")
# Every token starts with one of the kept prefixes: _TOKENS (whose look-behind
# costs at every character) runs only on a text where one occurs, with the
# same result.
_TOKEN_HINT = re.compile("|".join(keep for keep, _ in _TOKEN_PATTERNS))

# A PEM private key, to its END line (or to the end of the text when cut short).
# The line break after BEGIN is kept as it was written: a newline, or the two
# characters of an escaped one in JSON text (so masked JSON stays JSON). The
# key's kind ("RSA ", "OPENSSH ") is bounded: unbounded, each "BEGIN " of a
# long run of them scanned the whole run again (quadratic: seconds for 120 KB).
_KIND = r"[A-Z0-9 ]{0,100}"
_PEM = re.compile(
    rf"(-{{0,5}}BEGIN {_KIND}PRIVATE KEY-----)(\r?\n|(?:\\r)?\\n)?"
    rf"(?:.*?(-----END {_KIND}PRIVATE KEY-----)|.*\Z)",
    re.DOTALL,
)

# A key's body printed without its BEGIN line (`tail -n +2 key.pem`): the
# base64 lines right before an END line. They are read backwards from each END
# line (in the reversed text, anchored there): a search forwards tried every
# character of a long run of such lines with no END after it, and rescanned
# the run from each (an ordinary file of hashes with an END line anywhere held
# the host 50 s). Reversed, a line is its line break (a newline, or an escaped
# one), then 16 or more key characters; an "n" right before a backslash is
# the escaped break's, not the line's. The last line may be short (base64's
# last line often is: `AA==`); the others are 16 characters or more.
_PEM_END = re.compile(rf"-----END {_KIND}PRIVATE KEY-----")
PEM_BEGIN = re.compile(rf"-{{0,5}}BEGIN {_KIND}PRIVATE KEY-----")
PEM_END = _PEM_END
_BREAK_REVERSED = r"(?:\n\r?|n\\(?:r\\)?)"
_KEY_CHAR = r"(?:n(?!\\)|[A-Za-mo-z0-9+/=])"
_PEM_BODY_REVERSED = re.compile(
    rf"{_BREAK_REVERSED}{_KEY_CHAR}{{4,}}(?:{_BREAK_REVERSED}{_KEY_CHAR}{{16,}})*"
)

# Names whose value is a secret: a name ending so (DB_PASSWORD, GITHUB_TOKEN,
# AWS_SECRET_ACCESS_KEY, private_key, SMTP_PASS, db-pass); `max_tokens` or
# `token_count` do not, nor does a bare `pass` (`PASS: t/basic.sh` is a
# test's report) or `bypass`.
_NAME = (
    r"(?:password|passwd|(?<=[_\-])pass|token|secret|api_?key"
    r"|secret_?(?:access_?)?key|private_?key)"
)

# key=value assignments; quoted values keep their quotes; a bare value stops at
# a backslash, so masking JSON text (an escaped quote) keeps it valid JSON, and
# at a control character, as it stops at that character's escape in JSON text.
_ASSIGNMENT = re.compile(
    rf"(?i)({_NAME}\s*=(?![=>])\s*)"
    r"(\"[^\"\n]*\"|'[^'\n]*'|\\\"[^\"\\\n]*\\\"|[^\s\"'\\&;,\x00-\x1f]+)"
)
# PHP's and Ruby's `password => "…"`: a quoted value only (`token => token.key`
# is JavaScript's arrow function, no value); in JSON text its quotes escaped.
_ARROW = re.compile(
    rf"(?i)({_NAME}\s*=>\s*)"
    r"(\"[^\"\n]*\"|'[^'\n]*'|\\\"[^\"\\\n]*\\\")"
)

# The JSON form: a quoted name holding one of the words ("password",
# "client_secret", "apiKey"; `_json_sub` looks), a colon, a quoted value; in JSON
# text inside JSON, the quotes escaped. The name is matched whole and looked
# at afterwards: a pattern with the word inside the name tries every split of
# a long one, quadratic in its length.
_JSON_FIELD = re.compile(
    r"((\\)?\"([\w\-.]+)(?(2)\\)\"\s*:\s*(?(2)\\)\")"
    # a value's characters and escapes; in escaped JSON, the inner JSON's own
    # escaped backslash and escaped quote too (four backslashes, three and a quote)
    r"((?(2)(?:[^\"\\\n]|\\\\(?:\\\")?)*|(?:[^\"\\\n]|\\.)*))(?=(?(2)\\)\")"
)
_SECRET_WORD = re.compile(rf"(?i){_NAME}$")  # the name ends so, as for `=`

# A quoted name in single quotes, or before PHP's and Ruby's `=>`: a Python
# dict's `'password': '…'`, `'password' => '…'`, `"token" => "…"` (the JSON
# form is `_JSON_FIELD`'s). As there, the name is matched whole and looked at
# afterwards (`_named_sub`); the value runs to its closing quote on its line
# (an escaped quote of JSON text, `\"`, is in it; an escaped break ends it).
_QUOTED_VALUE = r"((?:(?!\4)(?:[^\n\\]|\\[^nrtfb]))*)(?=\4)"
_QUOTED_FIELD = re.compile(  # `'password': …`, `'password' : …` (double quotes: JSON's);
    # not a ternary's `? 'token' : 'password'`
    rf"(?:(?<!\w)|{_ESCAPE})(?<!\?)(?<!\?\s)([bu]?(')([\w\-.]+)\2\s*:\s*[bu]?(\\?['\"]))"
    + _QUOTED_VALUE
)
_QUOTED_ARROW = re.compile(  # `'password' => …`, `"password"=>…`, in JSON text `\"…\"`
    rf"(?:(?<!\w)|{_ESCAPE})([bu]?(\\?['\"])([\w\-.]+)\2\s*=>\s*[bu]?(\\?['\"]))" + _QUOTED_VALUE
)

# The XML form: `<password>…</password>` (Maven's settings.xml), also with
# attributes (`<password encrypted="true">…`), one line.
_XML_FIELD = re.compile(r"(<([\w.\-:]+)(?:\s[^<>\n]*)?>)([^<\n]*)(?=</\2>)")

# The YAML form, a name at the start of its line: `password: value` (to the end
# of the line; a quoted value keeps its quotes).
_YAML_FIELD = re.compile(
    rf"(?im)^([ \t]*(?:-[ \t]+)?[\w.\-]*{_NAME}[ \t]*:[ \t]+)"
    r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'][^\r\n]*)"  # a CRLF line keeps its CR
)

# The YAML form in JSON text (a task's output in a tool's answer): a line starts
# after an escaped break, or at a JSON value's opening quote (not at any quote:
# source code's `log("token: %s")` stays as it is); the value runs over escapes
# to the next escaped break or the string's end.
_YAML_ESCAPED = re.compile(
    rf"(?i)((?:\\n|:\s?\")(?:[ ]|\\t)*(?:-(?:[ ]|\\t)+)?[\w.\-]*{_NAME}(?:[ ]|\\t)*:(?:[ ]|\\t)+)"
    r"(\\\"[^\"\\\n]*\\\"|'[^'\\\n]*'|(?:[^\s\"'\\]|\\[^nrt\"\s])(?:[^\"\\\n]|\\[^nr\s])*)"
)

# Credentials in an Authorization header, and a password in a URL (user:pass@).
_AUTH_HEADER = re.compile(
    rf"(?i)((?:\b|{_ESCAPE})authorization\s*[:=]\s*(?:(?:bearer|basic|token|digest)\s+)?)"
    r"([A-Za-z0-9._~+/=\-]{8,})"
)
# (the scheme starts where no scheme character stands before it: from inside a
# long run of them every start would scan the run again)
_URL_PASSWORD = re.compile(
    rf"(?i)((?:(?<![a-z0-9+.\-])|{_ESCAPE})[a-z][a-z0-9+.\-]{{0,31}}://[^\s/:@\"'<>]*:)"
    r"([^\s/@\"'<>]+)(?=@)"
)


def _token_sub(match: re.Match[str]) -> str:
    # its wrapped lines are masked each, so that the text keeps its lines
    wrapped = _LINE.sub(REPLACEMENT, match.group("wrapped"))
    for group in _KEEP_GROUPS:
        keep = match.group(group)
        if keep is not None:
            return keep + REPLACEMENT + wrapped
    return REPLACEMENT + wrapped  # pragma: no cover - every alternative has a keep group


def _pem_sub(match: re.Match[str]) -> str:
    sep = match.group(2) or "\n"
    end = match.group(3)
    return (
        f"{match.group(1)}{sep}{REPLACEMENT}{sep}{end}"
        if end
        else match.group(1) + sep + REPLACEMENT
    )


def _mask_pem_tails(text: str) -> str:
    """`text` with the body before each END line masked (`_PEM_BODY_REVERSED`)."""
    backwards: str | None = None
    out: list[str] = []
    done = 0
    for end in _PEM_END.finditer(text):
        if backwards is None:
            backwards = text[::-1]
        body = _PEM_BODY_REVERSED.match(backwards, len(text) - end.start())
        if body is None:
            continue
        sep = "\n" if text[end.start() - 1] == "\n" else "\\n"
        out += (text[done : end.start() - len(body.group())], REPLACEMENT, sep, end.group())
        done = end.end()
    return "".join(out) + text[done:] if out else text


# A value that is code, not a secret (`password: str`, `token = os.environ[…]`,
# `login(password=password)`): source code read by a tool or pasted by the
# user stays as it is, so that a model editing it sees what the file holds.
# Masked, `password: Optional[str] = None` read `password: ***`, and a
# replace_in_file of that line never matched the file.
# keywords a value may be in code (`password=None`, `token = await …`), and
# the types an annotation gives (the YAML form only: `password: str`)
_CODE_WORDS = frozenset(
    ("None", "null", "nil", "undefined", "NULL", "True", "False", "true", "false", "await", "new")
)
_TYPE_WORDS = frozenset(
    "str int bytes bool string number boolean String SecretStr SecretBytes Optional Any".split()  # noqa: SIM905
)
# what a value `root.name` (or `root[…]`, `root(…)`) reads a secret from
_CODE_ROOTS = frozenset(
    "self this cls os process env environ settings config options opts args kwargs "  # noqa: SIM905
    "params request req ctx context getpass keyring secrets System ENV".split()
)
_IDENT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# after a type or keyword: the end, its brackets, a union, a default, an end of
# statement (`str | None = None`, `string;`), not another word (`new york`)
_AFTER_A_TYPE = re.compile(r"(?:$|[\[|;,)\]}?<]|\s*[=|]|\s*$)")
# a whole value that names where the secret is: `$DB_PASSWORD`, `${DB_PASSWORD}`
# (an environment variable's name: upper case), `{{ vault_password }}`,
# `${{ secrets.DB_PASSWORD }}`; not `${X:-default}`, whose default is one
_REFERENCE = re.compile(
    r"\$[A-Z_][A-Z0-9_]*|\$\{[A-Z_][A-Z0-9_]*(?::?-)?\}|\$?\{\{\s*[A-Za-z_][\w.]*\s*\}\}"
)
# after a reference: nothing, or an opening bracket (a bare value stops at a
# quote: `os.environ[`); or calls and subscripts, whole (`(max_length=128)`,
# `().hex`), or the last one open where the value was cut (by a quote, a
# comma, a blank: `jwt.encode(payload,`, `token.split(`)
_PART = r"(?:\((?:[^()\n]|\([^()\n]*\))*\)|\[[^\[\]\n]*\])"
_ACCESS = re.compile(rf"[\[(]?|{_PART}(?:\.[A-Za-z_]\w*{_PART}*)*[;,]?")
_ACCESS_CUT = re.compile(rf"(?:{_PART}(?:\.[A-Za-z_]\w*)?)*[\[(][^()\[\]\n]*")
# a command's output: `$(gh auth token)`, `$(cat /run/secrets/pw)` (its name
# a lower-case word), or its start where a bare value stops at a blank
_SUBSTITUTION = re.compile(r"\$\([a-z][\w.\-]*(?:[ \t][^()\n]*\))?")
_CUT = (",", ";", "&", '"', "'", " ", "\t", "\\")  # where a bare value stops
# a function that gives a secret: get_token(), readToken(path), make_password(…)
# (the verb a word of its own: `gettysburg(1863)` may be a password)
_GETTER = re.compile(
    r"(?i:get|read|load|fetch|input|prompt|generate|decrypt|decode|make|create|hash)"
    r"(?:$|_|[A-Z])"
)
# a module or object a dotted call is made on: a lower-case word (`jwt`,
# `models`, `crypto`, `serializers`), not a random run of letters and digits
_CALLED_ON = re.compile(r"[a-z_][a-z_]*[a-z](?:\.[A-Za-z_]\w*)+")
_CLOSERS = {")": "(", "]": "[", "}": "{"}
_WORD = re.compile(r"\w*")


def _code(value: str, names: tuple[str, ...], after: str, typed: bool) -> bool:
    """Is a bare value code rather than a secret: a keyword (a type, where the
    form is an annotation's: `typed`), where the secret comes from (an
    attribute or item of a known source, a getter's call, an environment
    variable or template naming it whole), or one of `names` (the field's
    name, its last word) passed on in a call's arguments (`after`: what
    follows the value)? A secret in one of these shapes is shown; each is
    narrow, so that a random password fits one about never."""
    if _REFERENCE.fullmatch(value) or _SUBSTITUTION.fullmatch(value):
        return True
    core = value[: len(value) - len(_open_tail(value))]
    m = _IDENT_PATH.match(core)
    if m is None:
        return False
    path, rest = m.group(), core[m.end() :]
    if (
        "." not in path
        and _AFTER_A_TYPE.match(rest)
        and (path in _CODE_WORDS or (typed and path in _TYPE_WORDS))
    ):
        return True
    head, _, _ = path.partition(".")
    tail = path.rpartition(".")[2]
    called = rest.startswith("(") and (_GETTER.match(tail) or _CALLED_ON.fullmatch(path))
    if (_ACCESS.fullmatch(rest) or after[:1] in _CUT and _ACCESS_CUT.fullmatch(rest)) and (
        (head in _CODE_ROOTS and ("." in path or rest)) or called
    ):
        return True
    return not rest and path.lower() in names and (core != value or after[:1] in (",", ")"))


def _open_tail(value: str) -> str:
    """The closing brackets at the end of a bare value that it did not open
    (`token=abc)` in a call): kept after the mask, so the code keeps its shape."""
    end = len(value)
    while end and value[end - 1] in _CLOSERS:
        c = value[end - 1]
        if value.count(c, 0, end) <= value.count(_CLOSERS[c], 0, end):
            break
        end -= 1
    return value[end:]


def _assignment_sub(match: re.Match[str]) -> str:
    value = match.group(2)
    quote = value[:2] if value.startswith('\\"') else value[:1]
    if quote and quote in ('"', "'", '\\"'):
        inner = value[len(quote) : -len(quote)]
        if not inner or _REFERENCE.fullmatch(inner):
            return match.group(0)  # nothing hidden there: "" or "${DB_PASSWORD}"
        return f"{match.group(1)}{quote}{REPLACEMENT}{quote}"
    after = match.string[match.end() : match.end() + 1]
    typed = match.re is _YAML_FIELD or match.re is _YAML_ESCAPED
    if _code(value, _names(match), after, typed):
        return match.group(0)
    return match.group(1) + REPLACEMENT + _open_tail(value)


def _names(match: re.Match[str]) -> tuple[str, ...]:
    """The name an assignment's value is given to, lower case: the word the
    pattern matched (`password` of `db_password=`) and the whole identifier."""
    words = re.findall(r"\w+", match.group(1))
    word = words[-1].lower() if words else ""
    start = match.start(1)
    while start and (match.string[start - 1].isalnum() or match.string[start - 1] == "_"):
        start -= 1
    # matched in place: a slice from `start` copied the rest of the text for
    # each assignment (quadratic in a long log of them)
    return (word, _WORD.match(match.string, start).group().lower())


def _value_sub(match: re.Match[str]) -> str:
    return match.group(1) + REPLACEMENT


def _named_sub(match: re.Match[str]) -> str:
    """A `_QUOTED_FIELD`, `_QUOTED_ARROW` or `_XML_FIELD` match: its value
    masked when its name (group 3 or 2) ends in one of the words; another
    quoted field's value may hold such fields itself (a dict's repr in it)."""
    if match.re is _XML_FIELD:
        return _value_sub(match) if _SECRET_WORD.search(match.group(2)) else match.group(0)
    if _SECRET_WORD.search(match.group(3)):
        return _value_sub(match)
    return match.group(1) + match.re.sub(_named_sub, match.group(5))


def _json_sub(match: re.Match[str]) -> str:
    if _SECRET_WORD.search(match.group(3)):
        # an empty value hides nothing ("password": "" in a form's defaults)
        return _value_sub(match) if match.group(4) else match.group(0)
    if match.group(2):  # an escaped value holds no further escaped JSON
        return match.group(0)
    # another field's string value may be JSON text itself (its quotes escaped)
    return match.group(1) + _JSON_FIELD.sub(_json_sub, match.group(4))


# A piece of a known key (`literals`) this long is masked as the key is: a
# provider echoing part of it, or a reply cut in the middle of it.
PIECE = 16


def mask_literals(text: str, literals: Iterable[str]) -> str:
    """``text`` with each of ``literals`` (resolved API keys: known values, not
    formats) replaced wherever it stands: whole, as a piece of PIECE characters
    or more, or URL-encoded. Literals shorter than 8 characters are ignored:
    masking every "abc" would do more harm than good, and no real key is that
    short."""
    for literal in literals:
        if not literal or len(literal) < 8 or not text:
            continue
        text = text.replace(literal, REPLACEMENT)
        least = min(PIECE, len(literal))
        if "%" in text:  # URL-encoded (any character may be: `-` as `%2D` too)
            text = _ENCODED.sub(lambda m, lit=literal, n=least: _encoded_sub(m, lit, n), text)
        spans = _shared(text, literal, least)
        if spans:  # one copy of the text, not one per piece (2 MB of pieces: minutes)
            parts, done = [], 0
            for lo, hi in spans:
                parts += (text[done:lo], REPLACEMENT)
                done = hi
            parts.append(text[done:])
            text = "".join(parts)
    return text


# a run of URL characters with an escape in it (`=`, `/`, `+` and `&` end it),
# from the run's start only: from each character of a long run without an
# escape, the run was scanned again (a reply line of 20 KB after a "%": 27 s
# of the host's loop, on every frame)
_ELEMENT = r"(?:[\w.~\-]|%[0-9A-Fa-f]{2})"
_ENCODED = re.compile(
    rf"(?<![\w.~\-])(?<!%[0-9A-Fa-f]{{2}}){_ELEMENT}*%[0-9A-Fa-f]{{2}}{_ELEMENT}*"
)


def _encoded_sub(match: re.Match[str], literal: str, least: int) -> str:
    run = match.group(0)
    return REPLACEMENT if _shared(unquote(run), literal, least) else run


def _shared(text: str, literal: str, least: int) -> list[tuple[int, int]]:
    """The spans of `text`, in order and apart, that `literal` holds too, each
    `least` characters or more. Each such span holds one of the literal's
    aligned halves (`least // 2` long): found by those, then grown both ways."""
    step = max(1, least // 2)
    spans: list[tuple[int, int]] = []
    # where a span was found: another half found inside one is not grown again
    # (what it would add past the span is shorter than `least`, or holds a
    # half of its own); a text of pieces of the key grew each once per half
    covered = bytearray(len(text))
    for i in range(0, len(literal) - step + 1, step):
        half = literal[i : i + step]
        at = text.find(half)
        while at != -1:
            if covered[at]:
                at = text.find(half, at + 1)
                continue
            a = _alike_before(text, at, literal, i)
            b = step + _alike_after(text, at + step, literal, i + step)
            if a + b >= least:
                spans.append((at - a, at + b))
                covered[at - a : at + b] = b"\x01" * (a + b)
            at = text.find(half, at + b)  # past what was found: linear in the text
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _alike_before(text: str, at: int, literal: str, i: int) -> int:
    """How many characters before text[at] are the ones before literal[i], by a
    binary search of slice comparisons (C speed: growing a piece a character
    at a time, 2 MB of pieces of a key cost seconds a frame)."""
    lo, hi = 0, min(at, i)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text[at - mid : at] == literal[i - mid : i]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _alike_after(text: str, at: int, literal: str, i: int) -> int:
    """How many characters from text[at] on are literal[i:]'s first ones."""
    lo, hi = 0, min(len(text) - at, len(literal) - i)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text[at : at + mid] == literal[i : i + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def mask_keys(text: str, literals: Iterable[str] = ()) -> str:
    """``text`` with what is a key by its form masked (the key formats, and
    ``literals``), not what a name calls one: for code, where `password: str`
    is a type and `token = request.headers[...]` no secret."""
    text = mask_literals(text, literals)
    if text and _TOKEN_HINT.search(text):
        text = _TOKENS.sub(_token_sub, text)
    return text


def mask(text: str, literals: Iterable[str] = ()) -> str:
    """``text`` with every secret replaced; ``literals`` (e.g. resolved API keys)
    too (`mask_literals`)."""
    if not text:
        return text
    text = mask_literals(text, literals)
    if "PRIVATE KEY-----" in text:
        text = _PEM.sub(_pem_sub, text)
        text = _mask_pem_tails(text)
    if _TOKEN_HINT.search(text):
        text = _TOKENS.sub(_token_sub, text)
    if "=" in text:
        text = _ASSIGNMENT.sub(_assignment_sub, text)
        if "=>" in text:
            text = _ARROW.sub(_assignment_sub, text)
    if "'" in text:
        text = _QUOTED_FIELD.sub(_named_sub, text)
    if "=>" in text:
        text = _QUOTED_ARROW.sub(_named_sub, text)
    if "</" in text:
        text = _XML_FIELD.sub(_named_sub, text)
    if ":" in text:
        text = _JSON_FIELD.sub(_json_sub, text)
        text = _YAML_FIELD.sub(_assignment_sub, text)
        if "\\n" in text or '"' in text:
            text = _YAML_ESCAPED.sub(_assignment_sub, text)
        text = _AUTH_HEADER.sub(_value_sub, text)
        if "://" in text:
            text = _URL_PASSWORD.sub(_value_sub, text)
    return text


def mask_value(value: Any, literals: Iterable[str] = ()) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string masked; keys kept."""
    literals = tuple(literals)
    if isinstance(value, str):
        return mask(value, literals)
    if isinstance(value, dict):
        return {key: mask_value(item, literals) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_value(item, literals) for item in value]
    return value


def key_body(line: str) -> tuple[str, bool]:
    """A line inside a private key's block (after its BEGIN line, shown a line
    at a time: a streamed reply, a log read by pieces) masked, and whether the
    block goes on after it: its END line ends it."""
    end = PEM_END.search(line)
    if end is None:
        return (REPLACEMENT if line.strip() else line), True
    before = line[: end.start()]
    return (REPLACEMENT if before.strip() else before) + line[end.start() :], False


def opens_key(text: str) -> bool:
    """Does `text` end inside a private key's block (a BEGIN line, no END after it)?"""
    if "PRIVATE KEY-----" not in text:
        return False
    begins = list(PEM_BEGIN.finditer(text))
    return bool(begins) and PEM_END.search(text, begins[-1].end()) is None


def mask_stream(lines: list[str], in_key: bool = False) -> tuple[list[str], bool]:
    """Lines of one output stream (a task's log, read by pieces) masked as one
    text, and whether the stream ends inside a private key's block; `in_key`:
    the piece before this one did (its body lines are masked to its END line).
    A line whose secret colour codes split (`grep --color`: `PASSWORD\\e[m=…`)
    is masked without them, shown as plain text."""
    head: list[str] = []
    while in_key and len(head) < len(lines):
        masked, in_key = key_body(lines[len(head)])
        head.append(masked)
    rest = lines[len(head) :]
    if not rest:
        return head, in_key
    text = "\n".join(rest)
    masked = mask(text).split("\n")
    if len(masked) == len(rest):
        for i, line in enumerate(masked):
            if "\x1b" in line or "\x9b" in line:
                plain = clean(line)
                if mask(plain) != plain:
                    masked[i] = mask(plain)
    return head + masked, opens_key(text)
