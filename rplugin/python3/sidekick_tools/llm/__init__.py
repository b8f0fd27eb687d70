"""Talking to models: one module per provider wire protocol, the SSE reader, the
HTTP stream, API keys. See docs/architecture.md, "llm/ and the fake provider".

Only :mod:`.stream` needs httpx2 (Python 3.10+), and it imports it on first use;
nothing outside ``llm/`` imports this package at module level, so tools and tasks
keep working on Python 3.9 with pynvim alone.
"""
