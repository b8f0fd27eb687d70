"""tools/schema.py: the JSON-schema subset, its messages, and the size guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sidekick_tools.config import Config
from sidekick_tools.mcp.face import SPECS
from sidekick_tools.tools import REGISTRY, check_call, specs
from sidekick_tools.tools.schema import (
    MAX_CONTENT,
    MAX_STRING,
    array,
    boolean,
    describe,
    number,
    object_schema,
    string,
    type_of,
    validate,
)

OBJ = {
    "type": "object",
    "properties": {
        "s": {"type": "string"},
        "i": {"type": "integer", "minimum": 1, "maximum": 10},
        "n": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 5},
        "b": {"type": "boolean"},
        "a": {"type": "array", "items": {"type": "string"}},
        "o": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        "e": {"enum": ["red", "green", 1]},
        "short": {"type": "string", "minLength": 2, "maxLength": 4},
        "nonempty": {"type": "string", "minLength": 1},
        "opt": {"type": ["string", "null"]},
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, "null"),
        (True, "boolean"),
        (False, "boolean"),
        (0, "integer"),
        (1.5, "number"),
        ("", "string"),
        ([], "array"),
        ({}, "object"),
    ],
)
def test_type_of_names_json_types(value, expected):
    assert type_of(value) == expected


def test_a_value_json_has_no_type_for_matches_no_json_type():
    """Named by its Python type, which is never taken for the JSON type of that name."""
    assert type_of(object()) == "object"
    problem = validate(object_schema({"a": {"type": "object"}}), {"a": object()})
    assert problem == 'parameter "a": expected object, got object'


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"s": "x"},
        {"i": 1},
        {"i": 10},
        {"n": 0.001},
        {"n": 4},
        {"b": False},
        {"a": []},
        {"a": ["x", "y"]},
        {"o": {"x": 3}},
        {"o": {"x": 3, "extra": "allowed: no additionalProperties on o"}},
        {"e": "red"},
        {"e": 1},
        {"e": 1.0},
        {"short": "ab"},
        {"short": "abcd"},
        {"nonempty": "x"},
        {"opt": None},
        {"opt": "x"},
    ],
)
def test_valid_params_pass(params):
    assert validate(OBJ, params) is None


@pytest.mark.parametrize(
    "params, message",
    [
        ({"s": 1}, 'parameter "s": expected string, got integer'),
        ({"s": None}, 'parameter "s": expected string, got null'),
        ({"s": ["x"]}, 'parameter "s": expected string, got array'),
        ({"i": True}, 'parameter "i": expected integer, got boolean'),
        ({"i": 2.5}, 'parameter "i": expected integer, got number'),
        ({"i": 3.0}, 'parameter "i": expected integer, got number'),
        ({"i": "3"}, 'parameter "i": expected integer, got string'),
        ({"n": False}, 'parameter "n": expected number, got boolean'),
        ({"n": "1"}, 'parameter "n": expected number, got string'),
        ({"b": 0}, 'parameter "b": expected boolean, got integer'),
        ({"b": "true"}, 'parameter "b": expected boolean, got string'),
        ({"a": "x"}, 'parameter "a": expected array of strings, got string'),
        ({"a": {"0": "x"}}, 'parameter "a": expected array of strings, got object'),
        ({"a": ["x", 2]}, 'parameter "a[1]": expected string, got integer'),
        ({"o": []}, 'parameter "o": expected object, got array'),
        ({"o": {"x": "1"}}, 'parameter "o.x": expected integer, got string'),
        ({"o": {}}, 'missing required parameter "o.x"'),
        ({"opt": 1}, 'parameter "opt": expected string or null, got integer'),
    ],
)
def test_wrong_types_name_parameter_and_both_types(params, message):
    assert validate(OBJ, params) == message


@pytest.mark.parametrize(
    "params, message",
    [
        ({"i": 0}, 'parameter "i": must be >= 1, got 0'),
        ({"i": 11}, 'parameter "i": must be <= 10, got 11'),
        ({"n": 0}, 'parameter "n": must be > 0, got 0'),
        ({"n": -1.5}, 'parameter "n": must be > 0, got -1.5'),
        ({"n": 5}, 'parameter "n": must be < 5, got 5'),
        ({"n": float("nan")}, 'parameter "n": must be a finite number, got NaN'),
        ({"n": float("inf")}, 'parameter "n": must be a finite number, got Infinity'),
        ({"short": "a"}, 'parameter "short": must be at least 2 characters long, got 1'),
        ({"short": "abcde"}, 'parameter "short": is too long: 5 characters (limit 4 characters)'),
        ({"nonempty": ""}, 'parameter "nonempty": must not be empty'),
        ({"e": "blue"}, 'parameter "e": must be one of "red", "green", 1; got "blue"'),
        ({"e": True}, 'parameter "e": must be one of "red", "green", 1; got true'),
        ({"e": "1"}, 'parameter "e": must be one of "red", "green", 1; got "1"'),
    ],
)
def test_bounds_lengths_and_enum(params, message):
    assert validate(OBJ, params) == message


def test_unknown_key_is_named_with_a_suggestion():
    err = validate(OBJ, {"bb": True})
    assert err is not None
    assert err.startswith('unknown parameter "bb" (did you mean "b"?')
    assert "expected: s, i, n" in err


def test_unknown_key_without_close_match_lists_known_keys():
    err = validate(
        {"type": "object", "properties": {"path": {}}, "additionalProperties": False}, {"zzz": 1}
    )
    assert err == 'unknown parameter "zzz" (expected: path)'


@pytest.mark.parametrize(
    "tool, params, meant",
    [
        ("run_terminal_command", {"command": "ls", "timeout": 1}, "timeout_seconds"),
        ("run_terminal_command", {"cmd": "ls"}, "command"),
        ("run_terminal_command", {"command": "ls", "asynch": True}, "async"),
        ("read_files", {"path": ["x"]}, "paths"),
        ("replace_in_file", {"path": "f", "old": "a", "neww": "b"}, "new"),
    ],
)
def test_unknown_key_suggestions(tool, params, meant):
    err = check_call(tool, params)
    assert err is not None and f'did you mean "{meant}"?' in err


def test_unknown_key_reported_before_missing_required():
    schema = REGISTRY["run_terminal_command"].schema
    err = validate(schema, {"comand": "ls"})
    assert err is not None and err.startswith('unknown parameter "comand" (did you mean "command"?')


@pytest.mark.parametrize(
    "params, expected",
    [
        ([], "parameters must be a JSON object, got array"),
        ("x", "parameters must be a JSON object, got string"),
        (None, "parameters must be a JSON object, got null"),
        (3, "parameters must be a JSON object, got integer"),
    ],
)
def test_top_level_must_be_object(params, expected):
    assert validate(OBJ, params) == expected


def test_array_item_bounds():
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}
    top = {"type": "object", "properties": {"v": schema}}
    assert validate(top, {"v": []}) == 'parameter "v": must not be an empty array'
    assert validate(top, {"v": [1, 2, 3]}) == 'parameter "v": must have at most 2 items, got 3'
    assert validate(top, {"v": [1, 2]}) is None
    schema["minItems"] = 2
    assert validate(top, {"v": [1]}) == 'parameter "v": must have at least 2 items, got 1'


def test_additional_properties_schema_applies_to_extra_keys():
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert validate(schema, {"a": 1, "b": 2}) is None
    assert validate(schema, {"a": "x"}) == 'parameter "a": expected integer, got string'


class TestSizeGuard:
    def test_default_limit_is_one_mib(self):
        schema = {"type": "object", "properties": {"s": {"type": "string"}}}
        assert validate(schema, {"s": "x" * MAX_STRING}) is None
        err = validate(schema, {"s": "x" * (MAX_STRING + 1)})
        assert err == (
            'parameter "s": is too long: 1048577 characters (limit 1048576 characters = 1 MiB)'
        )

    def test_guard_applies_to_untyped_and_unknown_strings(self):
        schema = {"type": "object"}  # no properties at all
        assert validate(schema, {"free": "x" * (MAX_STRING + 1)}) is not None
        assert validate(schema, {"deep": {"list": ["x" * (MAX_STRING + 1)]}}) == (
            'parameter "deep.list[0]": is too long: 1048577 characters '
            "(limit 1048576 characters = 1 MiB)"
        )

    def test_guard_applies_inside_arrays_of_real_tools(self):
        err = check_call("read_files", {"paths": ["ok", "p" * (MAX_STRING + 1)]})
        assert err is not None and err.startswith('parameter "paths[1]": is too long')

    @pytest.mark.parametrize("tool, key", [("write_file", "content"), ("replace_in_file", "new")])
    def test_write_contents_may_reach_ten_mib(self, tool, key):
        params = {"path": "f", "content": "", "old": "a", "new": ""}
        params = {k: v for k, v in params.items() if k in REGISTRY[tool].schema["properties"]}
        params[key] = "x" * MAX_CONTENT
        assert check_call(tool, params) is None
        params[key] += "x"
        err = check_call(tool, params)
        assert err is not None and "limit 10485760 characters = 10 MiB" in err

    def test_other_parameters_of_write_tools_keep_the_default_limit(self):
        err = check_call("write_file", {"path": "p" * (MAX_STRING + 1), "content": ""})
        assert err is not None and err.startswith('parameter "path": is too long')

    def test_command_is_limited(self):
        err = check_call("run_terminal_command", {"command": "x" * (MAX_STRING + 1)})
        assert err is not None and "1 MiB" in err


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "array", "items": {"type": "string"}}, "array of strings"),
        ({"type": "array", "items": {"type": "integer"}}, "array of integers"),
        ({"type": "array"}, "array"),
        ({"type": ["string", "null"]}, "string or null"),
        ({}, "any value"),
    ],
)
def test_describe(schema, words):
    assert describe(schema) == words


def test_builders_write_type_then_bounds_then_description():
    cases = [
        (string(), '{"type": "string"}'),
        (
            string("d", min_length=1, max_length=5),
            '{"type": "string", "minLength": 1, "maxLength": 5, "description": "d"}',
        ),
        (
            string("d", enum=("a", "b")),
            '{"type": "string", "enum": ["a", "b"], "description": "d"}',
        ),
        (number("d", minimum=0), '{"type": "number", "minimum": 0, "description": "d"}'),
        (
            number("d", exclusive_minimum=0),
            '{"type": "number", "exclusiveMinimum": 0, "description": "d"}',
        ),
        (boolean("d"), '{"type": "boolean", "description": "d"}'),
        (
            array(string(), "d", min_items=1, max_items=3),
            '{"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, '
            '"description": "d"}',
        ),
        (
            object_schema({"b": boolean("d")}),
            '{"type": "object", "properties": {"b": {"type": "boolean", "description": "d"}}, '
            '"required": [], "additionalProperties": false}',
        ),
    ]
    for built, text in cases:
        assert json.dumps(built) == text
        assert built == json.loads(text)  # lists, not tuples


def test_every_registered_schema_is_a_strict_object_schema():
    for name, tool in REGISTRY.items():
        schema = tool.schema
        assert schema["type"] == "object", name
        assert schema["additionalProperties"] is False, name
        assert set(schema["required"]) <= set(schema["properties"]), name
        # every schema accepts the minimal valid call it documents
        minimal = {k: _sample(schema["properties"][k]) for k in schema["required"]}
        assert validate(schema, minimal) is None, name


def _sample(prop):
    return {"string": "x", "array": ["x"], "number": 1, "integer": 1, "boolean": True}[prop["type"]]


# What the model and MCP clients are shown, byte for byte (key order included):
# a schema or description changes only together with these files.
DATA = Path(__file__).parent / "data"


def _load(name):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def _assert_same_bytes(actual, expected, what):
    assert actual == expected, what
    assert json.dumps(actual) == json.dumps(expected), what


def test_registered_schemas_match_the_snapshot():
    snapshot = _load("tool_schemas.json")
    assert list(snapshot) == list(REGISTRY)
    for name, tool in REGISTRY.items():
        _assert_same_bytes(tool.schema, snapshot[name], name)


def test_specs_with_default_config_match_the_snapshot():
    snapshot = _load("tool_specs.json")["chat"]
    shown = specs(Config.from_dict({}))
    assert [s.name for s in shown] == list(snapshot)
    for spec in shown:
        assert spec.description == snapshot[spec.name]["description"], spec.name
        _assert_same_bytes(spec.schema, snapshot[spec.name]["schema"], spec.name)


def test_mcp_schemas_match_the_snapshot():
    snapshot = _load("tool_specs.json")["mcp"]
    assert list(SPECS) == list(snapshot)
    for name, spec in SPECS.items():
        _assert_same_bytes(spec.schema, snapshot[name], name)
