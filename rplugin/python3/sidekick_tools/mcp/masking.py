"""Secrets masked in everything the MCP face answers (DESIGN §12).

One pure function, `mask_secrets`, so that it can be replaced by the plugin's
shared masking when there is one. The raw logs on disk are left alone (0600).

Masks common key formats (``sk-…``, ``sk-ant-…``, ``ghp_…`` and the other
GitHub token prefixes, ``github_pat_…``, ``AKIA…``, ``xox?-…``), PEM private
key blocks, and the value of ``password=``, ``token=``, ``secret=`` and
``api_key=`` assignments. A value stops at whitespace, a quote or a backslash,
so masking JSON text keeps it valid JSON.
"""

from __future__ import annotations

import re

MASK = "[masked]"

_KEYS = re.compile(
    r"""
    (?<![A-Za-z0-9_\-])                  # a key starts a word: not "disk-usage-..."
    (?:
      sk-ant-[A-Za-z0-9_\-]{8,}          # Anthropic
      | sk-[A-Za-z0-9_\-]{16,}           # OpenAI and compatible
      | gh[pousr]_[A-Za-z0-9]{20,}       # GitHub tokens
      | github_pat_[A-Za-z0-9_]{20,}     # GitHub fine-grained tokens
      | (?:AKIA|ASIA)[0-9A-Z]{16}        # AWS access key ids
      | xox[a-z]-[A-Za-z0-9\-]{8,}       # Slack
    )
    """,
    re.VERBOSE,
)

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)

# name=value: the name ends in one of these words (DB_PASSWORD=, GITHUB_TOKEN=, ...).
_ASSIGNED = re.compile(
    r"""(?ix)
    (\b[A-Za-z0-9_.\-]*(?:password|passwd|token|secret|api[_\-]?key)\s*=\s*)
    ([^\s"'\\&;,]+)
    """
)


def mask_secrets(text: str) -> str:
    """``text`` with every secret the patterns above recognise replaced by `MASK`."""
    if not text:
        return text
    text = _PEM.sub(MASK, text)
    text = _KEYS.sub(MASK, text)
    return _ASSIGNED.sub(lambda m: m.group(1) + MASK, text)
