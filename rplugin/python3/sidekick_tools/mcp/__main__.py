"""``python -P -m sidekick_tools.mcp [--state-dir DIR] [--config FILE]``

MCP clients start the server in the user's project, so the working directory
must never be on ``sys.path``: a ``logging.py`` or ``mcp.py`` there would be
imported instead of the real module. ``:SidekickMcp`` prints a command that
starts the server the way Lua starts the host (``host.command``: ``-E`` and a
bootstrap that keeps only absolute ``sys.path`` entries, on any Python).
Started by hand with ``-m``, ``-P`` (Python 3.11+) keeps the directory off;
without it the entry is dropped here, before anything else is imported
(``sys`` and ``os`` are loaded at start-up, never read from disk), which
protects from everything but a ``sidekick_tools/`` folder there.
"""

import os
import sys


def _drop_cwd_from_path() -> None:
    if sys.flags.safe_path if hasattr(sys.flags, "safe_path") else False:
        return
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != cwd]


_drop_cwd_from_path()

MISSING_SDK = (
    "sidekick_tools.mcp needs the official `mcp` Python package (2.x, Python 3.10 or "
    "later), which {python} (Python {version}) lacks.\n"
    "Install it: run :SidekickInstall in Neovim (the plugin's own venv), or\n"
    "  {python} -m pip install 'sidekick-tools-nvim[mcp]'   (or: 'mcp>=2.3,<3')\n"
)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):
        python_ok = False
    else:
        try:
            import mcp.server.lowlevel  # noqa: F401  (the SDK, not this package)

            python_ok = True
        except ImportError:
            python_ok = False
    if not python_ok:
        version = ".".join(map(str, sys.version_info[:3]))
        sys.stderr.write(MISSING_SDK.format(python=sys.executable, version=version))
        return 2

    import asyncio

    from .server import serve
    from .settings import SettingsError, parse_args

    try:
        options = parse_args(argv)
        return asyncio.run(serve(options))
    except SettingsError as e:
        sys.stderr.write(f"sidekick_tools.mcp: {e}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
