"""The MCP face: the task engine served to MCP clients over stdio (DESIGN §11).

Run it with ``python -P -m sidekick_tools.mcp [--state-dir DIR] [--config FILE]``
(``:SidekickMcp`` prints the exact command). Only `server` imports the official
``mcp`` SDK, an optional extra; everything else here is plain Python, and this
file imports nothing so that ``__main__`` can clean ``sys.path`` first.
"""
