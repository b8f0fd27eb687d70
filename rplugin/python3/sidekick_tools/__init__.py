"""sidekick-tools.nvim: run LLM tool calls from a Neovim chat buffer as background tasks."""

__version__ = "0.1.0"
