"""``@tool`` / ``Tool`` definitions, decisions and results (agentloop_nb.tools)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

import pydantic
import pytest
from pydantic import BaseModel, Field

from agentloop_nb.context import Context
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.tools import (
    ABORTED_BEFORE_DISPATCH,
    INVALID_ARGS,
    TOOL_ERROR,
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    Tool,
    ToolExecution,
    ToolResult,
    ToolRuntime,
    aborted_before_dispatch,
    error_result,
    tool,
)


class Point(BaseModel):
    x: int
    y: int = 0


def _titles(schema: Any) -> list[str]:
    """Every ``title`` key used as schema metadata (not as a property name)."""
    found: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                found.append(value)
            elif key == "properties":
                for sub in value.values():
                    found.extend(_titles(sub))
            else:
                found.extend(_titles(value))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(_titles(item))
    return found


async def run(definition: Tool, arguments: Any = "") -> ToolResult:
    """Execute one call of ``definition`` through a fresh runtime."""
    runtime = ToolRuntime(Context())
    runtime.register(definition)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    execution = runtime.new_execution(ToolCallBlock(id="c1", name=definition.name, arguments=raw))
    return await runtime.execute(execution)


# -- schema generation -----------------------------------------------------------------------


def test_sync_function_schema_has_types_required_defaults_and_no_title_noise() -> None:
    @tool
    def search(query: str, limit: int = 5, exact: bool = False) -> str:
        """
        Search the corpus.

            Indented detail stays relative.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the corpus.\n\n    Indented detail stays relative."
    params = search.parameters
    assert params["type"] == "object"
    assert params["properties"]["query"] == {"type": "string"}
    assert params["properties"]["limit"] == {"type": "integer", "default": 5}
    assert params["properties"]["exact"] == {"type": "boolean", "default": False}
    assert params["required"] == ["query"]
    assert params["additionalProperties"] is False
    assert _titles(params) == []
    assert search.schema() == {
        "name": "search",
        "description": search.description,
        "parameters": params,
    }


def test_property_named_title_is_kept_while_title_metadata_is_dropped() -> None:
    @tool
    def rename(title: str) -> str:
        """Rename."""
        return title

    assert list(rename.parameters["properties"]) == ["title"]
    assert rename.parameters["required"] == ["title"]


def test_optional_parameter_allows_null_and_is_not_required() -> None:
    @tool
    def greet(name: str | None = None) -> str:
        return f"hi {name}"

    prop = greet.parameters["properties"]["name"]
    assert {"type": "null"} in prop["anyOf"] and {"type": "string"} in prop["anyOf"]
    assert prop["default"] is None
    assert "required" not in greet.parameters
    assert greet.description == ""


def test_annotated_field_description_reaches_the_schema() -> None:
    @tool
    def fetch(url: Annotated[str, Field(description="absolute http(s) URL")]) -> str:
        return url

    assert fetch.parameters["properties"]["url"] == {
        "type": "string",
        "description": "absolute http(s) URL",
    }


@pytest.mark.anyio
async def test_nested_model_parameter_is_a_ref_and_arrives_as_a_model_instance() -> None:
    seen: list[Any] = []

    @tool
    def plot(point: Point, label: str = "") -> str:
        seen.append(point)
        return f"{point.x},{point.y}{label}"

    schema = plot.parameters
    assert schema["properties"]["point"] == {"$ref": "#/$defs/Point"}
    assert schema["$defs"]["Point"]["properties"]["x"] == {"type": "integer"}
    assert schema["$defs"]["Point"]["required"] == ["x"]
    assert _titles(schema) == []

    result = await run(plot, {"point": {"x": 3}})
    assert result.content == "3,0"
    assert seen == [Point(x=3, y=0)]


def test_local_classes_in_hints_resolve_through_the_decorating_scope() -> None:
    class Local(BaseModel):
        n: int

    @tool
    def use(item: Local) -> int:
        return item.n

    assert use.parameters["$defs"]["Local"]["properties"]["n"] == {"type": "integer"}


def test_options_override_name_description_and_carry_policy() -> None:
    def safe(args: dict[str, Any]) -> bool:
        return True

    @tool(name="read_file", description="Read one file.", concurrency_safe=safe, timeout=2.5)
    def read(path: str) -> str:
        """Ignored docstring."""
        return path

    assert (read.name, read.description) == ("read_file", "Read one file.")
    assert read.concurrency_safe is safe
    assert read.timeout == 2.5


def test_parameters_named_like_basemodel_attributes_work_without_warnings() -> None:
    # pytest turns warnings into errors, so a shadowing warning would fail this test.
    @tool
    def convert(json: str, model_name: str = "m", schema: int = 1) -> str:
        return json + model_name + str(schema)

    assert set(convert.parameters["properties"]) == {"json", "model_name", "schema"}
    assert convert.parameters["required"] == ["json"]


@pytest.mark.anyio
async def test_parameters_named_like_basemodel_attributes_are_passed_through() -> None:
    @tool
    def convert(json: str, model_name: str = "m") -> str:
        return json + model_name

    assert (await run(convert, {"json": "j", "model_name": "x"})).content == "jx"


@pytest.mark.anyio
async def test_execution_parameter_is_excluded_from_schema_and_receives_the_execution() -> None:
    got: list[ToolExecution] = []

    @tool
    async def whoami(execution: ToolExecution, greeting: str = "hi") -> str:
        got.append(execution)
        return f"{greeting} {execution.call_id}"

    assert list(whoami.parameters["properties"]) == ["greeting"]
    result = await run(whoami, "")
    assert result.content == "hi c1"
    assert got[0].name == "whoami" and got[0].signal.aborted is False


def test_variadic_and_positional_only_parameters_are_refused() -> None:
    def variadic(*items: str) -> str:
        return ""

    def positional(a: int, /) -> int:
        return a

    with pytest.raises(TypeError, match="'items'"):
        tool(variadic)
    with pytest.raises(TypeError, match="'a'"):
        tool(positional)


def test_unresolvable_hint_is_a_type_error_naming_the_tool() -> None:
    def broken(x: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(TypeError, match=r"'broken'.*NoSuchType"):
        tool(broken)


def test_decorated_function_stays_directly_callable() -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5


# -- validation ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_invalid_arguments_name_each_field_and_problem_and_skip_the_body() -> None:
    calls: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        calls.append(1)
        return a + b

    result = await run(add, {"a": "x"})
    assert result.is_error and result.error is not None
    assert result.error.code == INVALID_ARGS
    assert "a: Input should be a valid integer" in result.content
    assert "b: Field required" in result.content
    assert "'x'" not in result.content  # no input echo
    assert result.content.startswith("Error: invalid arguments for tool 'add'")
    assert calls == []


@pytest.mark.anyio
async def test_unexpected_argument_is_reported_by_name() -> None:
    @tool
    def ping() -> str:
        return "pong"

    result = await run(ping, {"verbose": True})
    assert result.error is not None and result.error.code == INVALID_ARGS
    assert "verbose: unexpected argument" in result.content


@pytest.mark.anyio
async def test_lax_coercion_accepts_numeric_strings() -> None:
    @tool
    async def double(n: int) -> int:
        return n * 2

    assert (await run(double, {"n": "21"})).content == "42"


# -- explicit Tool ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_explicit_tool_gets_parsed_args_and_execution() -> None:
    seen: list[tuple[dict[str, Any], str]] = []

    async def execute(args: dict[str, Any], execution: ToolExecution) -> str:
        seen.append((args, execution.call_id))
        return args["text"].upper()

    echo = Tool(
        "echo",
        "Echo text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        execute,
        concurrency_safe=True,
    )
    assert echo.schema()["parameters"]["required"] == ["text"]
    assert (await run(echo, {"text": "hi"})).content == "HI"
    assert seen == [({"text": "hi"}, "c1")]


@pytest.mark.anyio
async def test_explicit_tool_missing_required_property_is_invalid_args() -> None:
    echo = Tool(
        "echo",
        "",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        lambda args, execution: args["text"],
    )
    result = await run(echo, {})
    assert result.error is not None and result.error.code == INVALID_ARGS
    assert "text: Field required" in result.content


@pytest.mark.anyio
async def test_explicit_sync_execute_runs_and_its_return_is_converted() -> None:
    counter = Tool("count", "", {"type": "object"}, lambda args, execution: {"n": len(args)})
    assert json.loads((await run(counter, {"a": 1, "b": 2})).content) == {"n": 2}


@pytest.mark.parametrize(
    ("name", "parameters", "timeout", "match"),
    [
        ("bad name", {"type": "object"}, None, "invalid tool name"),
        ("", {"type": "object"}, None, "invalid tool name"),
        ("ok", {"type": "string"}, None, "type 'object'"),
        ("ok", {"type": "object"}, 0, "timeout"),
    ],
)
def test_explicit_tool_refuses_bad_definitions(
    name: str, parameters: dict[str, Any], timeout: float | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        Tool(name, "", parameters, lambda args, execution: "", timeout=timeout)


def test_calling_an_explicit_tool_directly_is_a_type_error() -> None:
    t = Tool("t", "", {"type": "object"}, lambda args, execution: "")
    with pytest.raises(TypeError, match="execute"):
        t()


# -- return values ---------------------------------------------------------------------------


@dataclass
class Row:
    id: int
    tags: list[str]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        (Point(x=1, y=2), '{"x":1,"y":2}'),
        (Row(1, ["t"]), '{"id":1,"tags":["t"]}'),
        (None, "null"),
        (3.5, "3.5"),
    ],
)
async def test_return_values_become_content(value: Any, content: str) -> None:
    @tool
    def produce() -> Any:
        return value

    result = await run(produce)
    assert (result.content, result.is_error) == (content, False)


@pytest.mark.anyio
async def test_returned_tool_result_passes_through_with_call_id_stamped() -> None:
    @tool
    async def rich() -> ToolResult:
        return ToolResult(content="ok", meta={"rows": 3}, additional_contexts=("note",))

    result = await run(rich)
    assert result == ToolResult(
        content="ok", meta={"rows": 3}, additional_contexts=("note",), call_id="c1"
    )


@pytest.mark.anyio
async def test_unserialisable_return_value_is_a_tool_error() -> None:
    @tool
    def leak() -> Any:
        return object()

    result = await run(leak)
    assert result.error is not None and result.error.code == TOOL_ERROR
    assert "not JSON serialisable" in result.content


# -- decisions and results -------------------------------------------------------------------


def test_decisions_are_frozen_models_with_literal_kinds() -> None:
    assert [d.kind for d in (Allow(), Deny(reason="r"), Ask(), Accept(), Block(feedback="f"))] == [
        "allow",
        "deny",
        "ask",
        "accept",
        "block",
    ]
    assert Accept(additional_contexts=["a"]).additional_contexts == ("a",)
    with pytest.raises(pydantic.ValidationError):
        Deny(reason="r").reason = "other"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        Block()  # type: ignore[call-arg]


def test_error_results_read_as_error_text_and_carry_code() -> None:
    result = error_result("X", "went wrong", call_id="c9", meta={"k": 1})
    assert result.content == "Error: went wrong"
    assert result.is_error and result.error is not None and result.error.code == "X"
    assert result.log_data() == {
        "call_id": "c9",
        "content": "Error: went wrong",
        "is_error": True,
        "error": {"code": "X", "message": "went wrong"},
        "meta": {"k": 1},
    }
    assert ToolResult(content="ok", call_id="c").log_data() == {
        "call_id": "c",
        "content": "ok",
        "is_error": False,
    }


def test_aborted_before_dispatch_has_the_loop_code_and_text() -> None:
    result = aborted_before_dispatch("c7")
    assert result.call_id == "c7"
    assert result.content == "Error: tool call aborted before dispatch"
    assert result.error is not None and result.error.code == ABORTED_BEFORE_DISPATCH
