"""A tool call's fast path in the loop: its arguments parsed once (as ``json`` reads them)
and validated once, again only when something that could change them ran between admission
and the body; a body's ``str`` becomes its result without a second validation."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from _loop_helpers import data, new_agent, register, run
from pydantic import AfterValidator

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import Allow, Ask, ToolResult, ToolRuntime, tool
from agentloop_nb.tools._admit import parse_arguments
from agentloop_nb.tools._results import to_result

pytestmark = pytest.mark.anyio


def counted_tool(seen: list[int]) -> Any:
    """A ``@tool`` whose argument validator records every validation of ``n``."""

    def record(n: int) -> int:
        seen.append(n)
        return n

    @tool(concurrency_safe=True)
    async def count(n: Annotated[int, AfterValidator(record)]) -> str:
        """Echo n."""
        return f"n={n}"

    return count


def calls(n: int) -> list[Any]:
    return combine(*(tool_call(f"c{i}", "count", {"n": i}) for i in range(n)))


async def test_the_loop_validates_each_calls_arguments_once(app: App) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))
    agent, _ = new_agent(app, calls(3), text("ok"))  # a pool of three
    await run(agent)
    assert sorted(seen) == [0, 1, 2]
    assert [d["content"] for d in data(agent, "tool/result")] == ["n=0", "n=1", "n=2"]


async def test_a_lone_call_is_validated_once_too(app: App) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))
    agent, _ = new_agent(app, calls(1), text("ok"))
    await run(agent)
    assert seen == [0]


async def test_arguments_a_pre_execute_listener_changes_in_place_are_validated_again(
    app: App,
) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))

    def bump(execution: Any, next: Any) -> Any:
        execution.args["n"] = "7"  # lax validation makes it the int 7, at the body too
        return Allow()

    app.ctx.on("tools/pre-execute", bump)
    agent, _ = new_agent(app, calls(1), text("ok"))
    await run(agent)
    assert seen == [0, 7]
    assert [d["content"] for d in data(agent, "tool/result")] == ["n=7"]


async def test_arguments_a_guard_changes_in_place_are_validated_again(app: App) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))

    def guard(execution: Any) -> None:
        execution.args["n"] = 5

    app.ctx.tools.guard(guard)
    agent, _ = new_agent(app, calls(1), text("ok"))
    await run(agent)
    assert seen == [0, 5]
    assert [d["content"] for d in data(agent, "tool/result")] == ["n=5"]


async def test_arguments_an_execute_listener_changes_in_place_are_validated_again(
    app: App,
) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))

    def swap(execution: Any, next: Any) -> Any:
        execution.args["n"] = 9
        return next()

    app.ctx.on("tools/execute", swap)
    agent, _ = new_agent(app, calls(1), text("ok"))
    await run(agent)
    assert seen == [0, 9]
    assert [d["content"] for d in data(agent, "tool/result")] == ["n=9"]


async def test_arguments_an_approver_changes_in_place_are_validated_again(app: App) -> None:
    seen: list[int] = []
    register(app, counted_tool(seen))

    class Approver:
        async def request(self, execution: Any, reason: Any) -> bool:
            execution.args["n"] = 4
            return True

    app.ctx.provide("approval", Approver())
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask("sure?"))
    agent, _ = new_agent(app, calls(1), text("ok"))
    await run(agent)
    assert seen == [0, 4]
    assert [d["content"] for d in data(agent, "tool/result")] == ["n=4"]


async def test_direct_callers_of_the_phases_get_their_changed_arguments_validated() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    seen: list[int] = []
    ctx.tools.register(counted_tool(seen))
    execution = ctx.tools.new_execution(ToolCallBlock(id="c1", name="count", arguments='{"n": 1}'))
    assert await ctx.tools.pre_execute(execution) is None
    execution.args["n"] = 2  # between the public phases: not handed on, so seen
    result = await ctx.tools.dispatch(execution)
    assert seen == [1, 2] and result.content == "n=2"


@pytest.mark.parametrize(
    "text_",
    [
        '{"i": 3, "s": "x", "f": 0.1, "l": [1, 2.5, null, true], "o": {"k": "v"}}',
        '{"big": 123456789012345678901234567890}',  # orjson would read a float
        '{"neg": -9999999999999999999}',  # beyond int64: orjson would read a float
        '{"u": 18446744073709551615, "s": "1234567890123456789012"}',
        '{"nan": NaN, "inf": Infinity, "ninf": -Infinity}',  # json accepts, orjson refuses
        '{"huge": 1e400}',
        '{"lone": "\\ud800"}',
        '{"a": 1, "a": 2}',
        ' \n{"x": 1}\t',
    ],
)
def test_parsed_arguments_are_what_json_loads_reads(text_: str) -> None:
    args, problem = parse_arguments(text_)
    expected = json.loads(text_)
    assert problem is None
    assert repr(args) == repr(expected)  # repr: NaN != NaN, and int vs float shows
    assert [type(v) for v in args.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize(
    ("text_", "problem"),
    [
        ('{"x": }', "arguments are not valid JSON (Expecting value at position 6)"),
        ("[1, 2]", "arguments must be a JSON object, got list"),
        ('"text"', "arguments must be a JSON object, got str"),
        ("{'x': 1}", "arguments are not valid JSON (Expecting property name enclosed in"),
    ],
)
def test_unparsable_arguments_are_named_with_the_json_parsers_message(
    text_: str, problem: str
) -> None:
    args, found = parse_arguments(text_)
    assert args is None and found is not None and found.startswith(problem)


@pytest.mark.parametrize("content", ["ok", "", "x" * 10_000, "ünï\u2028"])
def test_a_str_result_equals_the_validated_result_in_every_respect(content: str) -> None:
    fast = to_result(content, "c1")
    validated = ToolResult(content=content, call_id="c1")
    # __dict__: a field added to ToolResult with a default shows up here first
    assert fast.__dict__ == validated.__dict__
    assert fast.model_fields_set == validated.model_fields_set
    assert fast == validated and hash(fast) == hash(validated)
    assert fast.model_dump(mode="json") == validated.model_dump(mode="json")
    assert repr(fast) == repr(validated) and fast.text == content
    changed = fast.model_copy(update={"is_error": True})
    assert changed.model_fields_set == {"content", "call_id", "is_error"}
    assert fast.model_fields_set == {"content", "call_id"}  # the shared set is copied first
    assert to_result("other", "c2").model_fields_set == {"content", "call_id"}


def test_a_str_subclass_result_is_validated_as_before() -> None:
    class Name(str):
        pass

    result = to_result(Name("x"), "c1")
    assert result == ToolResult(content=Name("x"), call_id="c1")


@pytest.mark.parametrize(
    "fields",
    [
        {"call_id": "c1", "name": "count", "content": "n=1", "is_error": False},
        {"call_id": "c1", "name": "count", "content": "", "is_error": True},
        {"call_id": "c1", "content": "no name"},  # an old log: name and is_error left out
    ],
)
def test_a_committed_plain_result_derives_the_message_validation_would(
    fields: dict[str, Any],
) -> None:
    from agentloop_nb.messages import ToolResultMessage
    from agentloop_nb.session import FrozenDict
    from agentloop_nb.session._session import parse_node

    node = parse_node("tool/result", FrozenDict(fields), 0)
    validated = ToolResultMessage(
        call_id=fields["call_id"],
        name=fields.get("name"),
        content=fields["content"],
        is_error=fields.get("is_error", False),
    )
    assert type(node) is ToolResultMessage
    assert node.__dict__ == validated.__dict__  # a new field shows up here first
    assert node.model_fields_set == validated.model_fields_set
    assert node == validated and hash(node) == hash(validated)
    assert node.model_dump(mode="json") == validated.model_dump(mode="json")


@pytest.mark.parametrize("is_error", [False, True])
def test_the_node_the_loop_logs_with_a_result_is_the_message_its_data_parses_into(
    is_error: bool,
) -> None:
    # the loop hands its committed plain result's message to append (no parse of the data)
    from agentloop_nb.session import FrozenDict
    from agentloop_nb.session._nodes import parse_node, tool_result_node

    fields = {"call_id": "c1", "name": "count", "content": "n=1", "is_error": is_error}
    node = tool_result_node("c1", "count", "n=1", is_error)
    parsed = parse_node("tool/result", FrozenDict(fields), 0)
    assert type(node) is type(parsed)
    assert node.__dict__ == parsed.__dict__
    assert node.model_fields_set == parsed.model_fields_set
    assert node == parsed and hash(node) == hash(parsed)
    assert node.model_dump(mode="json") == parsed.model_dump(mode="json")


def test_a_result_that_is_not_plain_is_still_validated_into_its_message() -> None:
    from agentloop_nb.errors import InvalidValueError
    from agentloop_nb.session import FrozenDict
    from agentloop_nb.session._session import parse_node

    blocks = ({"type": "text", "text": "hi"},)
    node = parse_node("tool/result", FrozenDict({"call_id": "c1", "content": blocks}), 0)
    assert node is not None and node.text == "hi"
    with pytest.raises(InvalidValueError, match="does not describe a message"):
        parse_node("tool/result", FrozenDict({"call_id": 3, "content": "x"}), 7)
