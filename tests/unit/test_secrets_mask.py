"""Secret masking (DESIGN §12): every listed format, nothing else, idempotent."""

from __future__ import annotations

import pytest
from sidekick_tools.secrets_mask import REPLACEMENT, mask, mask_literals, mask_value

from tests.conftest import answers

SECRETS = [
    ("sk-ant-api03-AbCdEf0123456789_-xyzXYZ0123", "sk-ant-***"),
    ("sk-proj-AbCdEf0123456789abcdefXYZ", "sk-***"),
    ("sk-AbCdEf0123456789abcdefghij", "sk-***"),
    ("ghp_AbCdEf0123456789abcdefghijklmnopqrst", "ghp_***"),
    ("gho_AbCdEf0123456789abcdefghijklmnopqrst", "gho_***"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_***"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIA***"),
    ("xoxb-123456789012-abcdefABCDEF", "xoxb-***"),
    ("xoxp-1234-5678-90ab", "xoxp-***"),
    ("sk_live_51Habcdefghijklmnopqrstuvwxyz0123", "sk_live_***"),
    ("rk_test_4eC39HqLyjWDarjtT1zdp7dc", "rk_test_***"),
    ("glpat-AbCdEf0123456789_xyz-", "glpat-***"),
    ("hf_AbCdEf0123456789abcdefghijklmnop", "hf_***"),
    ("npm_AbCdEf0123456789abcdefghijklmnopqrst", "npm_***"),
    ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIza***"),
]


@pytest.mark.parametrize("secret,masked", SECRETS)
def test_key_formats_keep_their_prefix(secret, masked):
    assert mask(f"key: {secret} end") == f"key: {masked} end"
    assert mask(f'"{secret}"') == f'"{masked}"'


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn; sk-learn is a nickname",
        "max_tokens=8192 and tokens=5",
        "the token is in the env",
        "task-ask-1234567890abcdefghijklmnop",  # sk- inside a word is not a key
        "AKIAshort",
        "ghp_short",
        '{"max_tokens": 1024, "name": "token-less"}',
        '{"tokenizer_class": "LlamaTokenizer", "max_tokens": "1024", "secretary": "Bob"}',
        "max_tokens: 1024\ntokens_used: 5",
        "see https://example.com:443/path and git@github.com:org/repo.git",
        "def check(password: str) -> bool:",  # not at the start of a line: not YAML
        "Authorization: Bearer ***",
        "fields = ['password', 'username']  # names, not a name and its value",
        "{'max_tokens': 5, 'name': 'token'}",
        "<token_count>5</token_count> don't 'x'",
        "see http://:8080/ and <a>b</a>",
        "tokens.filter(token => token.key.indexOf(id) === 0)",  # an arrow function
        "kind = useOauth ? 'token' : 'password'",  # a ternary, no field
        "if password == other_password:",
        "bypass=1 compass: north\nbypass: true\nsurpass = 5",
        "PASS: t/basic.sh\nFAIL: t/other.sh\npass: 120",  # tests' reports
        '{"bypass": "on"}',
        "task_test_abcdefghijklmnopqrstuvwxyz disk_live_abcdefghijklmnopqrst",
        "sk_live_short hf_short npm_short",
        "",
    ],
)
def test_ordinary_text_is_untouched(text):
    assert mask(text) == text


def test_assignments_mask_the_value_only():
    assert mask("password=hunter2 user=bob") == f"password={REPLACEMENT} user=bob"
    assert mask("export GITHUB_TOKEN=abc123") == f"export GITHUB_TOKEN={REPLACEMENT}"
    assert mask("url?token=abc&x=1") == f"url?token={REPLACEMENT}&x=1"
    assert mask("Password = 'two words'") == f"Password = '{REPLACEMENT}'"
    assert mask('api_key="k"; secret=s') == f'api_key="{REPLACEMENT}"; secret={REPLACEMENT}'


@pytest.mark.parametrize(
    "text,masked",
    [
        (
            '{"password": "Hunter2", "api_key": "abcd-1234", "apiKey": "k", "n": 1}',
            '{"password": "***", "api_key": "***", "apiKey": "***", "n": 1}',
        ),
        ('{"client_secret":"a\\"b"}', '{"client_secret":"***"}'),
        # JSON text inside a JSON string: its quotes escaped
        (
            '{"content": "{\\"password\\": \\"Hunter2\\", \\"user\\": \\"bob\\"}"}',
            '{"content": "{\\"password\\": \\"***\\", \\"user\\": \\"bob\\"}"}',
        ),
        (
            "db:\n  password: Hunter2 two words\n  user: bob\n- token: 'quoted'\n",
            "db:\n  password: ***\n  user: bob\n- token: '***'\n",
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI\nAWS_SECRET_ACCESS_KEY=wJalr\nprivate_key=abc",
            "aws_secret_access_key = ***\nAWS_SECRET_ACCESS_KEY=***\nprivate_key=***",
        ),
        (
            'curl -H "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig" https://x',
            'curl -H "Authorization: Bearer ***" https://x',
        ),
        ("postgres://app:S3cretPw@db:5432/main", "postgres://app:***@db:5432/main"),
        ("redis://:S3cretPw@localhost:6379/0", "redis://:***@localhost:6379/0"),  # no user
        # a Python dict, PHP's and Ruby's `=>`, Maven's settings.xml
        ("{'PASSWORD': 'Hunter2', 'USER': 'bob'}", "{'PASSWORD': '***', 'USER': 'bob'}"),
        ("{'password': \"it's\"}", "{'password': \"***\"}"),
        ("$db = ['password' => 'Hunter2'];", "$db = ['password' => '***'];"),
        ('{"api_token" => "abc", "n" => "1"}', '{"api_token" => "***", "n" => "1"}'),
        ('password => "Hunter2"', 'password => "***"'),
        ("<s><password>Hunter2</password></s>", "<s><password>***</password></s>"),
        ('<password enc="1">Hunter2</password>', '<password enc="1">***</password>'),
        ("<db:token\tkind='x'>Hunter2</db:token>", "<db:token\tkind='x'>***</db:token>"),
        ("{b'password': b'Hunter2'}", "{b'password': b'***'}"),  # redis-py, Python 2
        ("    'PASSWORD' : 'Hunter2',", "    'PASSWORD' : '***',"),  # aligned by hand
        ("{u'password': u'Hunter2'}", "{u'password': u'***'}"),
        ('{"password"=>"Hunter2"}', '{"password"=>"***"}'),  # Ruby's Hash#inspect
        # escaped JSON whose secret holds the inner JSON's own escapes
        (
            '{"c": "{\\"accessToken\\": \\"a\\\\\\\\b\\\\\\"c\\", \\"n\\": \\"1\\"}"}',
            '{"c": "{\\"accessToken\\": \\"***\\", \\"n\\": \\"1\\"}"}',
        ),
    ],
)
def test_json_yaml_header_and_url_forms(text, masked):
    assert mask(text) == masked
    assert mask(masked) == masked


@pytest.mark.parametrize(
    "text",
    [
        '"' + "password" * 32_000 + '":x',  # a name made of the word, never a field
        '"a": "' * 100_000,
        "password" * 32_000 + " :\n",
        '{"a": "' + '\\"a\\": \\"' * 50_000 + '"}',
        "x:// " + "a." * 100_000,  # a URL's scheme could start at every word of the run
        "sk-" + "a" * 20 + "\n" + "b" * 1_000_000 + " ",  # a long wrapped line that is not one
        ("sk-" + "a" * 20 + "\nbbbbbbbbbbbbbbbb") * 20_000,
        # lines of key characters (hashes, say) and an END line: each line
        # start scanned the run again (a file of 340 KB: 50 s of the host's)
        "-----END RSA PRIVATE KEY-----\n" + ("A" * 16 + "\n") * 60_000,
        ("A" * 16 + "\n") * 60_000 + "-----END RSA PRIVATE KEY-----",
        ("A" * 16 + "\\n") * 60_000 + "x-----END RSA PRIVATE KEY-----",
        "PRIVATE KEY-----\n" + "BEGIN " * 100_000,  # each BEGIN scanned the run
        "PRIVATE KEY-----\n" + "-----END " * 100_000,
        "'" + "password" * 32_000 + "':'x",
        "'a': '" * 100_000,
        "<" + "password" * 32_000 + ">x",
        "<password>" * 100_000,
        "x://:" * 100_000,
    ],
)
def test_masking_a_hostile_text_never_holds_the_host(text):
    """Output chooses its text: masking it runs on the host's loop, so it must
    stay linear (every split of a long name tried was quadratic: minutes here)."""
    assert answers(lambda: mask(text), deadline=20) is not None


@pytest.mark.parametrize(
    "text",
    ["Done: 100% " + "a" * 200_000, "%2D" + "a" * 200_000, ("%" + "a" * 1000) * 200],
)
def test_masking_a_known_key_in_a_hostile_text_never_holds_the_host(text):
    """A known key is looked for URL-encoded in runs of URL characters: from
    each character of a long run with no escape in it, the run was scanned
    again (a streamed reply line of 20 KB after a "%": 27 s, every frame)."""
    literal = "sk-ant-api03-" + "Zx9_Qw-8" * 6
    assert answers(lambda: mask(text, [literal]), deadline=20) == text


KEY = "sk-ant-api03-" + "Zx9_Qw-8" * 12 + "AA"


@pytest.mark.parametrize("width", [40, 60, 76])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_key_wrapped_over_lines_is_masked_whole(width, eol):
    """A key cut by a width (`fold`, base64 wrapping, a narrow log) showed
    every line after its first: each line that goes on with nothing but key
    characters is masked too, and the text keeps its lines."""
    lines = [KEY[i : i + width] for i in range(0, len(KEY), width)]
    text = "before" + eol + eol.join(lines) + eol + "after the key" + eol
    masked = mask(text)
    expected = ["before", "sk-ant-" + REPLACEMENT] + [REPLACEMENT] * (len(lines) - 1)
    assert masked.split(eol) == [*expected, "after the key", ""]
    assert mask(masked) == masked


def test_only_a_key_that_reaches_the_end_of_its_line_goes_on_over_the_next():
    assert mask(KEY + " done\nabcdefghijkl\n") == f"sk-ant-{REPLACEMENT} done\nabcdefghijkl\n"
    assert mask(KEY + "\nshort\n") == f"sk-ant-{REPLACEMENT}\nshort\n"
    assert mask(KEY + "\nwords and more\n") == f"sk-ant-{REPLACEMENT}\nwords and more\n"


LITERAL = "prov-Q7d2LmX9pZr4Tn8sW1vYb6Hc"  # a key of no known format: known by its value


@pytest.mark.parametrize(
    "echoed",
    [
        LITERAL,
        LITERAL[:18],  # a piece of it
        LITERAL[-17:],
        LITERAL.replace("-", "%2D"),  # URL-encoded
        LITERAL[:20].replace("-", "%2D"),
    ],
)
@pytest.mark.parametrize("around", ['bad key "{}"!', "https://x/?key={}&b=1", "/path/{}/more"])
def test_a_known_key_is_masked_whole_in_pieces_and_url_encoded(echoed, around):
    text = around.format(echoed)
    masked = mask(text, [LITERAL])
    assert masked == around.format(REPLACEMENT), masked


def test_a_stray_percent_ends_a_url_encoded_run():
    """An encoded piece of the key is masked to its run's end; a "%" that is no
    escape ends the run, so what follows is masked by its own rule."""
    encoded = LITERAL[:20].replace("-", "%2D")
    assert mask(f"{encoded}%password=hunter2", [LITERAL]) == "***%password=***"


def test_short_pieces_and_other_runs_are_left_alone():
    text = f"prefix {LITERAL[:12]} and {LITERAL[-12:]}: a%2Db%2Dc and nothingwhatsoeverhere"
    assert mask_literals(text, [LITERAL]) == text


def test_private_key_blocks():
    pem = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\nAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----"
    )
    out = mask(f"before\n{pem}\nafter")
    assert out == (
        "before\n-----BEGIN OPENSSH PRIVATE KEY-----\n***\n-----END OPENSSH PRIVATE KEY-----\nafter"
    )
    cut = mask("x\n-----BEGIN PRIVATE KEY-----\nMIIE partial")
    assert cut == "x\n-----BEGIN PRIVATE KEY-----\n***"
    # two keys: each masked, the text between kept
    two = mask(f"{pem}\nmiddle\n{pem}")
    assert two.count("***") == 2 and "middle" in two and "b3Bl" not in two


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("x\nAAAAAAAAAAAAAAAA\nBBBBBBBBBBBBBBBB\n{end}\n", "x\n***\n{end}\n"),
        ("x\r\nAAAAAAAAAAAAAAAA\r\n{end}", "x\r\n***\n{end}"),
        # the first line's key characters only; a short line is no key's
        ("key: AAAAAAAAAAAAAAAA\n{end}", "key: ***\n{end}"),
        ("a b\n{end}", "a b\n{end}"),
        # base64's last line is often short; the others are not
        ("AAAAAAAAAAAAAAAA\nAA==\n{end}", "***\n{end}"),
        ("AA==\nAA==\n{end}", "AA==\n***\n{end}"),
        ('"x\\nABCDEFGHIJKLMNO\\n{end}"', '"x\\n***\\n{end}"'),
        ("AAAAAAAAAAAAAAAA {end}", "AAAAAAAAAAAAAAAA {end}"),
        # in JSON text: escaped line breaks, kept as they were
        ('"foo\\nAAAAAAAAAAAAAAAA\\nnBBBBBBBBBBBBBBB\\n{end}"', '"foo\\n***\\n{end}"'),
        ('"foo\\r\\nAAAAAAAAAAAAAAAA\\r\\n{end}"', '"foo\\r\\n***\\n{end}"'),
        # two keys' bodies, and the text between kept
        ("AAAAAAAAAAAAAAAA\n{end}\nmid\nBBBBBBBBBBBBBBBB\n{end}", "***\n{end}\nmid\n***\n{end}"),
    ],
)
def test_a_key_body_before_its_end_line_is_masked(text, masked):
    end = "-----END RSA PRIVATE KEY-----"
    assert mask(text.format(end=end)) == masked.format(end=end)
    assert mask(masked.format(end=end)) == masked.format(end=end)


def test_literals_are_masked_when_long_enough():
    assert mask("my key is pa55word-long", ["pa55word-long"]) == "my key is ***"
    assert mask("abc abc", ["abc"]) == "abc abc"


def test_idempotent():
    text = " ".join(s for s, _ in SECRETS) + " password=x\n-----BEGIN RSA PRIVATE KEY-----\nA\n"
    once = mask(text)
    assert mask(once) == once
    for secret, _ in SECRETS:
        assert secret not in once


def test_mask_value_walks_json():
    value = {"cmd": "curl -H 'x: sk-ant-api03-AbCdEf0123456789_-x'", "n": 3, "l": ["token=t", 1]}
    assert mask_value(value) == {"cmd": "curl -H 'x: sk-ant-***'", "n": 3, "l": ["token=***", 1]}


def test_the_prefix_hint_never_hides_a_token():
    """mask() runs the token patterns only where a kept prefix occurs: on texts
    made of those prefixes and secret-like tails, every token the patterns find
    is still masked."""
    import random

    from sidekick_tools import secrets_mask

    pieces = ["sk-", "ant-", "gh", "p_", "u_", "github_pat_", "AKIA", "ASIA", "xox", "b-"]
    pieces += ["A" * 16, "Ab0_" * 5, "0123456789", "-", "_", " ", "word", "\n", "="]
    rng = random.Random(17)
    found = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if secrets_mask._TOKENS.search(text):
            found += 1
            assert secrets_mask._TOKEN_HINT.search(text), text
            assert mask(text) != text
    assert found > 100  # the texts did hold tokens


# What a task tool's answer (JSON) holds of a task's output: a key on a line of
# its own comes after an escaped line break, "\n", whose letter stood where a
# key may not start (inside a word).
AFTER_A_BREAK = [
    *(secret for secret, _ in SECRETS),
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig",
    "https://app:S3cretPw@db.example/main",
    "password=hunter2secret",
    "'password': 'hunter2secret'",
    "<password>hunter2secret</password>",
    '<password enc="no">hunter2secret</password>',
    "redis://:hunter2secret@db",
    '{"password"=>"hunter2secret"}',
    'password => "hunter2secret"',
    "{'password': \"it's-hunter2secret\"}",
]


# what each of AFTER_A_BREAK must not show
SENSITIVE = [secret for secret, _ in SECRETS] + ["eyJhbGciOiJIUzI1NiJ9", "S3cretPw", "hunter2"]


@pytest.mark.parametrize("text", AFTER_A_BREAK)
# an escaped break, tab, form feed or backspace; another control character, or a
# character JSON text writes as \uXXXX (ensure_ascii)
@pytest.mark.parametrize("brk", ["\n", "\r\n", "\t", "\f", "\b", "\x0b", "\u201c", "\xa0"])
def test_a_secret_after_an_escaped_break_in_json_text_is_masked(text, brk):
    import json

    value = {"output": f"first line{brk}{text}", "more": [f"x{brk}{text}{brk}end"]}
    for indent in (None, 2):
        encoded = json.dumps(value, indent=indent)
        decoded = json.loads(mask(encoded))
        shown = json.dumps(decoded, ensure_ascii=False)
        assert not [x for x in SENSITIVE if x in shown], shown  # no secret is left
        if brk.isascii():  # and it is masked alike (a bare value after a
            # character written \uXXXX runs on over it in the text itself)
            assert decoded == mask_value(value)


def test_many_pieces_of_a_known_key_are_masked_in_linear_time():
    """A provider knows the key it is sent, and streamed a reply made of 16-character
    pieces of it: each piece masked copied the whole text again (2 MB held the host,
    and the editor waiting on it, for minutes)."""
    literal = "sk-ant-api03-" + "Zx9_Qw-8" * 6
    text = (literal[:16] + " ") * 120_000
    masked = answers(lambda: mask(text, [literal]), deadline=20)
    assert masked == (REPLACEMENT + " ") * 120_000


@pytest.mark.parametrize(
    "line",
    [
        "password: hunter2secret",
        "  db_token: 'hunter2secret'",
        '- api_key: "hunter2secret and more"',
        "\tsecret_key:\thunter2secret",
        'password: it\'s "hunter2secret"',
    ],
)
@pytest.mark.parametrize("brk", ["\n", "\r\n"])
def test_a_yaml_secret_in_json_text_is_masked_alike(line, brk):
    """A YAML line of a command's output (`cat config.yml`) inside JSON text (a
    JSON value, or a line after an escaped break) is masked as in the text itself."""
    import json

    value = {"output": f"first line{brk}{line}{brk}end", "first": line}
    for indent in (None, 2):
        decoded = json.loads(mask(json.dumps(value, indent=indent)))
        assert "hunter2" not in json.dumps(decoded), decoded
        assert decoded == mask_value(value)


def test_a_yaml_like_string_in_source_code_is_left_alone():
    assert mask('log.info("token: %s", token)') == 'log.info("token: %s", token)'


def test_an_output_stream_read_by_pieces_keeps_a_key_masked_across_them():
    """The output view masks each read of a log: a private key printed a line
    at a time showed its whole body (no BEGIN or END line in a read)."""
    from sidekick_tools.secrets_mask import mask_stream

    body = ["b3BlbnNzaC1rZXktdjEAAAAA" * 2, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"]
    lines, inside = mask_stream(["before", "-----BEGIN OPENSSH PRIVATE KEY-----"])
    assert lines[0] == "before" and inside
    lines, inside = mask_stream([body[0]], inside)
    assert lines == [REPLACEMENT] and inside
    lines, inside = mask_stream([body[1], "-----END OPENSSH PRIVATE KEY-----", "after"], inside)
    assert lines == [REPLACEMENT, "-----END OPENSSH PRIVATE KEY-----", "after"] and not inside
    assert mask_stream(["plain"], False) == (["plain"], False)


def test_a_secret_split_by_colour_codes_is_masked_in_output():
    """`grep --color` puts codes between a name and its `=`, and `\\e[32m`
    ends in a letter a token may not follow: masked without the codes."""
    from sidekick_tools.secrets_mask import mask_stream

    ghp = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123"
    grep = "DB_\x1b[01;31m\x1b[KPASSWORD\x1b[m\x1b[K=hunter2hunter2"
    lines, _ = mask_stream([f"\x1b[32m{ghp}\x1b[0m", grep, "\x1b[31mred\x1b[0m plain"])
    assert lines == ["\x1b[32mghp_***\x1b[0m", "DB_PASSWORD=***", "\x1b[31mred\x1b[0m plain"]


def test_a_token_whose_prefix_no_word_holds_is_masked_after_a_letter():
    """A colour code written out in a command (`printf '\\033[32mghp_…'`) ends
    in a letter: the token after it showed whole in the task's label."""
    ghp = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123"
    assert mask(f"printf '\\033[32m{ghp}\\033[0m'") == "printf '\\033[32mghp_***\\033[0m'"
    assert mask("mxoxb-12345678-abcdef") == "mxoxb-***"
    # `sk-` and AKIA still start outside a word only
    assert mask("task-" + "a" * 30) == "task-" + "a" * 30
    assert mask("XAKIAABCDEFGHIJKLMNOP") == "XAKIAABCDEFGHIJKLMNOP"


@pytest.mark.parametrize(
    "code",
    [
        "    password: str",
        "    api_key: Optional[str] = None",
        "    token: str | None = None",
        "  apiKey: string;",
        "password: true",
        "secret: null",
        "token = os.environ['GITHUB_TOKEN']",
        'password = os.getenv("DB_PASSWORD")',
        "token = self.token",
        "password = getpass.getpass()",
        "token = get_token()",
        "token = readToken(path)",
        "const token = await getToken();",
        "password=None",
        "login(user=user, password=password)",
        "client(api_key=api_key, timeout=5)",
        "PASSWORD=$DB_PASSWORD",
        'password: "${DB_PASSWORD}"',
        "password: ${{ secrets.DB_PASSWORD }}",
        'token = ""',
        '{"password": "", "user": "bob"}',
        # calls on a module or object, whole or cut where the value stops
        "password = models.CharField(max_length=128)",
        "password = serializers.CharField(write_only=True)",
        'token = jwt.encode(payload, key, algorithm="HS256")',
        "const token = jwt.sign({ id: user.id }, process.env.JWT_SECRET)",
        "password = make_password(password)",
        "password = password.strip()",
        'token = token.split(" ")[1]',
        "access_token = create_access_token(identity=user.id)",
        "token = uuid.uuid4().hex",
        "secret = crypto.randomBytes(32).toString('hex')",
        "private_key = serialization.load_pem_private_key(data, password=None)",
        # a command's output, an empty default
        "TOKEN=$(gh auth token)",
        "password: $(cat /run/secrets/db_password)",
        "export GITHUB_TOKEN=${GITHUB_TOKEN:-}",
    ],
)
def test_code_that_names_a_secret_is_left_as_it_is(code):
    """Source code read by a tool stays what the file holds: masked, a model
    editing `api_key: Optional[str] = None` saw `api_key: ***`, and its
    replace_in_file of that line could never match the file."""
    assert mask(code) == code


@pytest.mark.parametrize(
    "text,masked",
    [
        ("password=hunter2", "password=***"),
        ("POSTGRES_PASSWORD=password", "POSTGRES_PASSWORD=***"),  # a weak one, still one
        ("password: new year 2024", "password: ***"),  # a word after a keyword: a passphrase
        ("token: abc.def.ghi", "token: ***"),
        ("password=Hunter(2)", "password=***"),
        ("password=$ecret", "password=***"),  # no environment variable's name
        # a default in a reference is a secret
        ("POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-Sup3rS3cret!}", "POSTGRES_PASSWORD=***"),
        ('  POSTGRES_PASSWORD: "${POSTGRES_PASSWORD:-Sup3rS3cret!}"', '  POSTGRES_PASSWORD: "***"'),
        ('export PGPASSWORD="${PGPASSWORD:-Sup3rS3cret}"', 'export PGPASSWORD="***"'),
        ("ansible_password=\"{{ vault_pw | default('Hunter2xyz') }}\"", 'ansible_password="***"'),
        ('    password: {{ .Values.password | default "Hunter2xyz" }}', "    password: ***"),
        ("GRAFANA_TOKEN: ${{ secrets.TOKEN || 'glsa_x1' }}", "GRAFANA_TOKEN: ***"),
        ("DB_PASSWORD=${PREFIX}hunter2xyz", "DB_PASSWORD=***"),
        # passwords that only look a little like code
        ("REDIS_PASSWORD=wKs(zIN[G5v(T!1p", "REDIS_PASSWORD=***"),
        ("password: hG7(kL2#pQ9!", "password: ***"),
        ("password=gettysburg(1863)", "password=***"),
        ("API_KEY=app.Sk2024", "API_KEY=***"),
        ("password=Object", "password=***"),
        ("login(u, password=hunter2xyz_password)", "login(u, password=***)"),
        ("DB_PASSWORD=$(MB[V)v", "DB_PASSWORD=***"),
        # a name ending in the word pass after `_` or `-`
        ("RABBITMQ_DEFAULT_PASS=s3cr3tRabbitMQ", "RABBITMQ_DEFAULT_PASS=***"),
        ("SMTP_PASS=Hq2Lx9Zt!mail", "SMTP_PASS=***"),
        ("  DB_PASS: 'x1'", "  DB_PASS: '***'"),
        ("--db-pass=x1", "--db-pass=***"),
        ('{"db_pass": "x1"}', '{"db_pass": "***"}'),
        ("secret=s", "secret=***"),
        # in a call: the secret masked, the call's brackets kept
        ("login(token=abc123)", "login(token=***)"),
        ("f(g(password=pw))", "f(g(password=***))"),
        ("{token=x1}", "{token=***}"),
    ],
)
def test_a_secret_beside_code_is_masked_and_the_code_keeps_its_shape(text, masked):
    assert mask(text) == masked
    assert mask(masked) == masked


def test_random_passwords_are_never_taken_for_code():
    """The code shapes are narrow: 20,000 random passwords (the characters a
    password generator uses), each the value of `DB_PASSWORD=`, of a YAML
    field and of a quoted one, are all masked."""
    import random
    import string

    rng = random.Random(2026)
    alphabet = string.ascii_letters + string.digits + "!@#$%^*()-_+[]{}.?~"
    shown = []
    for _ in range(20_000):
        pw = "".join(rng.choice(alphabet) for _ in range(rng.choice((8, 12, 16, 24))))
        for text in (f"DB_PASSWORD={pw}", f"password: {pw}", f'password = "{pw}"'):
            if pw in mask(text):
                shown.append(text)
    assert shown == []
