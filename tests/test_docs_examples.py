"""The retention page's example request: `arguments` built from the tool's input schema.

Property tests: for random pydantic models (what FastMCP / MCPServer derive tool schemas from)
and for random hand-written JSON Schemas, the generated arguments validate against the schema
(jsonschema, and pydantic itself). Then the page's example is sent to a real server.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any, Literal

import jsonschema
import pydantic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemtools.docs import describe, example_arguments, load_server, render_markdown
from idemtools.server.installation import installation_of
from tests.budget import examples
from tests.e2e.harness import App, error_type, memory_wire

FIXTURE = "tests.fixtures_docs.server:server"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Leaf(pydantic.BaseModel):
    n: int = pydantic.Field(ge=3, le=9)
    tags: list[str] = pydantic.Field(min_length=2)


class Tree(pydantic.BaseModel):
    label: str
    children: list[Tree] = pydantic.Field(default_factory=list)


def _has_email() -> bool:
    try:
        import email_validator  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


FIELD_TYPES: list[Any] = [
    int,
    float,
    str,
    bool,
    Any,
    int | None,
    int | str,
    list[int],
    dict[str, float],
    tuple[int, str],
    Literal["a", "b"],
    Literal[7],
    Color,
    Leaf,
    Tree,
    list[Leaf],
    Leaf | None,
    pydantic.conint(gt=10, multiple_of=7),
    pydantic.conint(lt=-5),
    pydantic.confloat(gt=0, lt=0.5),
    pydantic.confloat(ge=2.5, multiple_of=0.25),
    pydantic.constr(min_length=12, max_length=12),
    pydantic.constr(pattern=r"^[A-Z]+$"),
    pydantic.constr(pattern=r"^\d{3}$"),
    pydantic.conlist(int, min_length=3),
    set[int],
]

fields = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    st.tuples(st.sampled_from(FIELD_TYPES), st.booleans()),  # (type, required?)
    max_size=6,
)


def _model(spec: dict[str, tuple[Any, bool]]) -> type[pydantic.BaseModel]:
    definitions: dict[str, Any] = {
        name: (kind, ... if required else None) for name, (kind, required) in spec.items()
    }
    model: type[pydantic.BaseModel] = pydantic.create_model("Args", **definitions)
    return model


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields)
def test_arguments_from_pydantic_schemas_validate(spec: dict[str, tuple[Any, bool]]) -> None:
    model = _model(spec)
    schema = model.model_json_schema()
    arguments = example_arguments(schema)
    jsonschema.validate(arguments, schema)
    model.model_validate_json(json.dumps(arguments))  # what the server's tool will accept
    required = {name for name, (_, needed) in spec.items() if needed}
    assert set(arguments) == required  # minimal: the required properties only


# Hand-written schemas: the keywords pydantic never emits (type lists, const, draft-4
# exclusive bounds, allOf, minProperties, uniqueItems, examples...).
_integer = st.builds(
    lambda low, span, step, exclusive: {
        "type": "integer",
        **({"minimum": low} if low is not None and not exclusive else {}),
        **({"exclusiveMinimum": low} if low is not None and exclusive else {}),
        **({"maximum": low + span} if low is not None and span is not None else {}),
        **({"multipleOf": step} if step else {}),
    },
    st.none() | st.integers(-1000, 1000),
    st.none() | st.integers(30, 100),
    st.none() | st.integers(1, 12),
    st.booleans(),
)
_number = st.sampled_from([None, 0.5, 0.25, 2, 10]).flatmap(
    lambda step: st.builds(
        lambda low, span: {
            "type": "number",
            **({"exclusiveMinimum": low} if low is not None else {}),
            **({"exclusiveMaximum": low + span} if low is not None and span else {}),
            **({"multipleOf": step} if step else {}),
        },
        st.none() | st.floats(-1e6, 1e6, allow_nan=False),
        # wide enough to hold a multiple of the step: the schema must be satisfiable
        st.none() | st.floats(3.0 * (step or 1), 60.0 * (step or 1)),
    )
)
_string = st.builds(
    lambda low, extra, fmt: {
        "type": "string",
        **({"minLength": low} if low is not None else {}),
        **({"maxLength": low + extra} if low is not None and extra is not None else {}),
        **({"format": fmt} if fmt and low is None else {}),  # a date has its own length
    },
    st.none() | st.integers(0, 40),
    st.none() | st.integers(0, 5),
    st.none() | st.sampled_from(["date-time", "date", "email", "uri", "uuid", "ipv4"]),
)
_leaf = st.one_of(
    _integer,
    _number,
    _string,
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.just({"type": ["null", "integer"], "minimum": 5}),
    st.builds(lambda v: {"const": v}, st.integers() | st.text(max_size=4)),
    st.builds(lambda v: {"enum": v}, st.lists(st.integers() | st.text(), min_size=1, max_size=3)),
    st.builds(lambda v: {"type": "string", "examples": [v]}, st.text(max_size=5)),
    st.just({}),
)


def _compound(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def objects(prefix: str) -> st.SearchStrategy[dict[str, Any]]:
        names = st.from_regex(rf"{prefix}[a-z]{{1,4}}", fullmatch=True)
        return st.builds(
            lambda props, required, at_least: {
                "type": "object",
                "properties": props,
                "required": [n for n in props if n in required],
                **({"minProperties": at_least} if at_least else {}),
            },
            st.dictionaries(names, inner, max_size=4),
            st.sets(names, max_size=4),
            st.none() | st.integers(0, 3),
        )

    arrays = st.builds(
        lambda items, least: {"type": "array", "items": items, "minItems": least},
        inner,
        st.integers(0, 3),
    ) | st.builds(  # unique items: of the kinds the generator promises to tell apart
        lambda items, least: {
            "type": "array",
            "items": items,
            "minItems": least,
            "uniqueItems": True,
        },
        st.sampled_from([{"type": "integer"}, {"type": "string"}, {"enum": [3, "x", None, 4]}]),
        st.integers(0, 4),
    )
    # allOf parts with their own property names: shared names could contradict each other
    combined = st.builds(lambda a, b: {"allOf": [a, b]}, objects("a"), objects("b")) | st.builds(
        lambda a, b: {"anyOf": [{"type": "null"}, a, b]}, inner, inner
    )
    return objects("") | arrays | combined


schemas = st.recursive(_leaf, _compound, max_leaves=8)


def _with_defs(body: dict[str, Any]) -> dict[str, Any]:
    """The generated schema reached through a $ref into $defs, as pydantic nests models."""
    return {
        "type": "object",
        "properties": {"value": {"$ref": "#/$defs/Body"}},
        "required": ["value"],
        "$defs": {"Body": body},
    }


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas)
def test_arguments_from_handwritten_schemas_validate(schema: dict[str, Any]) -> None:
    root = _with_defs(schema)
    arguments = example_arguments(root)
    jsonschema.Draft202012Validator(
        root, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(arguments)


def test_examples_default_and_enum_are_preferred() -> None:
    schema = {
        "type": "object",
        "properties": {
            "currency": {"type": "string", "enum": ["usd", "eur"]},
            "amount": {"type": "integer", "examples": [4200]},
            "note": {"type": "string", "default": "thanks"},
            "kind": {"const": "card"},
            "optional": {"type": "string"},
        },
        "required": ["currency", "amount", "note", "kind"],
    }
    assert example_arguments(schema) == {
        "currency": "usd",
        "amount": 4200,
        "note": "thanks",
        "kind": "card",
    }
    assert example_arguments(None) == {} and example_arguments({}) == {}


def test_a_recursive_required_schema_ends() -> None:
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/Node"}},
                "required": ["next"],
            }
        },
    }
    value = example_arguments(schema)
    depth = 0
    while isinstance(value, dict) and value.get("next") is not None:
        value, depth = value["next"], depth + 1
    assert depth < 20


async def test_the_pages_example_request_is_accepted_by_the_server() -> None:
    """The JSON on the page, sent as it stands, runs the tool (no argument validation error)."""
    server = load_server(FIXTURE)
    text = render_markdown(await describe(server, source=FIXTURE))
    block = re.search(r"```json\n(\{.*?\n\})\n```", text, re.S)
    assert block is not None
    request = json.loads(block.group(1))
    params = request["params"]
    assert params["arguments"], "the fixture's example tool has required arguments"
    installation = installation_of(server)
    assert installation is not None
    async with memory_wire(App(server=server, installation=installation)) as wire:
        reply = await wire.call(params)
        again = await wire.call(params)
    assert error_type(reply) is None and "result" in reply, reply
    assert reply["result"].get("isError") is not True, reply
    # and the key replays it (the fixture marks replays)
    assert again["result"]["_meta"] == {"io.github.idemtools/replayed": True}
    assert {**again["result"], "_meta": None} == {**reply["result"], "_meta": None}
