"""Tool descriptions carry the configured numbers, never a number of their own."""

from __future__ import annotations

import json
import re

from sidekick_tools.config import Config
from sidekick_tools.mcp.face import Face
from sidekick_tools.mcp.settings import CONFIG_NAME, ConfigSource, parse_args
from sidekick_tools.tools import REGISTRY, described, specs

PLACEHOLDER = re.compile(r"\{[a-z_]+(?:\.[a-z_]+)+\}")


def all_text(schema) -> str:
    return json.dumps(schema)


def test_every_placeholder_names_an_option():
    config = Config.from_dict({})
    for tool in REGISTRY.values():
        for text in (tool.description, all_text(tool.schema)):
            for name in PLACEHOLDER.findall(text):
                described.fill(name, config)  # raises AttributeError on a typo


def test_the_model_reads_the_configured_values():
    defaults = {s.name: s for s in specs(Config.from_dict({}))}
    mine = {
        s.name: s
        for s in specs(
            Config.from_dict(
                {"tasks": {"default_timeout": 42, "hybrid_threshold": 2.5, "await_timeout": 7}}
            )
        )
    }
    assert set(mine) == set(REGISTRY)
    for spec in mine.values():
        assert not PLACEHOLDER.search(spec.description + all_text(spec.schema)), spec.name
    run = mine["run_terminal_command"].schema["properties"]
    assert "(default 42)" in run["timeout_seconds"]["description"]
    assert "wait up to 2.5 s" in run["async"]["description"]
    assert (
        "(default 1800)"
        in defaults["run_terminal_command"].schema["properties"]["timeout_seconds"]["description"]
    )
    agent = mine["use_agent"].schema["properties"]
    assert "(default 42)" in agent["timeout_seconds"]["description"]
    assert mine["await_task"].description.startswith("Wait up to 7 s")
    assert (
        "capped at 7" in mine["await_task"].schema["properties"]["timeout_seconds"]["description"]
    )
    assert defaults["await_task"].description.startswith("Wait up to 55 s")
    # the schemas the tools validate with are left as they are
    assert "{tasks.default_timeout}" in all_text(REGISTRY["run_terminal_command"].schema)


def test_the_mcp_tools_read_the_servers_values(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / CONFIG_NAME).write_text(json.dumps({"tasks": {"default_timeout": 99}}))
    face = Face(None, ConfigSource(parse_args(["--state-dir", str(state)], {})), str(tmp_path))
    schemas = {name: schema for name, _, schema in face.tools()}
    for name, schema in schemas.items():
        assert not PLACEHOLDER.search(all_text(schema)), name
    assert "(default 99)" in schemas["run"]["properties"]["timeout_seconds"]["description"]
