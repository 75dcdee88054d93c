"""OfflineModel: the deterministic, key-less demo model the notebooks use."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from peers.streams import Assembled, check_contract, collect, run, user

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import Aborted, TextDelta
from agentloop_nb.llm.offline import OfflineModel, evaluate
from agentloop_nb.llm.providers import build_adapters
from agentloop_nb.messages import AssistantMessage, Message, ToolCallBlock, ToolResultMessage
from agentloop_nb.signals import AbortController

pytestmark = pytest.mark.anyio


def tool(name: str, **props: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"the {name} tool",
        "parameters": {
            "type": "object",
            "properties": {k: {"type": t} for k, t in props.items()},
            "required": list(props),
        },
    }


TOOLS = [
    tool("calculate", expression="string"),
    tool("now"),
    tool("list_files", path="string"),
    tool("read_file", path="string"),
    tool("echo", text="string"),
]


async def ask(text: str, tools: list[dict[str, Any]] | None = None, *history: Any) -> Assembled:
    messages = (*history, user(text)) if history else (user(text),)
    options = GenerateOptions(
        provider="offline", model="demo", messages=messages, tools=tools or []
    )
    return await run(OfflineModel(token_delay=0), options)


async def test_greeting_says_it_is_the_offline_demo_model() -> None:
    result = await ask("Hello there")
    assert "offline demo model" in result.text
    assert result.finish is not None and result.finish.kind == "stop"


async def test_text_streams_word_by_word_with_usage() -> None:
    result = await ask("hi")
    deltas = [c for c in result.chunks if isinstance(c, TextDelta)]
    assert len(deltas) == len(result.text.split()) > 5
    assert all(len(d.text.split()) == 1 for d in deltas)
    assert result.usage is not None and result.usage.output_tokens == len(deltas)


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("what is 2+3*4", "calculate", {"expression": "2+3*4"}),
        ("Calculate 17 * 23", "calculate", {"expression": "17 * 23"}),
        ("what time is it?", "now", {}),
        ("list files", "list_files", {"path": "."}),
        ("ls src", "list_files", {"path": "src"}),
        ("read notes.txt", "read_file", {"path": "notes.txt"}),
        ("echo Hello World", "echo", {"text": "Hello World"}),
    ],
)
async def test_requests_become_calls_to_the_matching_tool(
    text: str, name: str, args: dict[str, Any]
) -> None:
    result = await ask(text, TOOLS)
    assert [c["name"] for c in result.calls] == [name]
    assert result.call_args() == args
    assert result.finish is not None and result.finish.kind == "tool-calls"


async def test_add_tool_gets_both_numbers_from_its_schema() -> None:
    result = await ask("what is 2 + 40", [tool("add", x="number", y="integer")])
    assert result.calls[0]["name"] == "add" and result.call_args() == {"x": 2, "y": 40}


async def test_tool_call_then_result_then_answer() -> None:
    model = OfflineModel(token_delay=0)
    first = await run(
        model,
        GenerateOptions(
            provider="offline", model="demo", messages=[user("what is 2+3*4")], tools=TOOLS
        ),
    )
    call = first.calls[0]
    history: list[Message] = [
        user("what is 2+3*4"),
        AssistantMessage(
            content=(ToolCallBlock(id=call["id"], name=call["name"], arguments=call["arguments"]),)
        ),
        ToolResultMessage(call_id=call["id"], name="calculate", content="14"),
    ]
    second = await run(
        model, GenerateOptions(provider="offline", model="demo", messages=history, tools=TOOLS)
    )
    assert second.text == "The result is 14"
    assert second.calls == [] and second.finish is not None and second.finish.kind == "stop"


async def test_failed_tool_result_is_reported_as_a_failure() -> None:
    history: list[Message] = [
        user("read missing.txt"),
        AssistantMessage(
            content=(ToolCallBlock(id="c1", name="read_file", arguments='{"path": "missing.txt"}'),)
        ),
        ToolResultMessage(call_id="c1", content="No such file", is_error=True),
    ]
    result = await run(
        OfflineModel(token_delay=0),
        GenerateOptions(provider="offline", model="demo", messages=history),
    )
    assert result.text == "The tool call failed: No such file"


async def test_without_tools_it_computes_arithmetic_itself() -> None:
    assert (await ask("what is 2+3*4?")).text == "2+3*4 = 14"
    assert (await ask("(1 + 2) / 4")).text == "(1 + 2) / 4 = 0.75"
    assert "can't compute" in (await ask("what is 1/0")).text


async def test_without_a_matching_tool_it_explains_what_it_needs() -> None:
    result = await ask("read notes.txt", [tool("calculate", expression="string")])
    assert result.calls == [] and "read_file" in result.text and "offline demo model" in result.text
    assert (await ask("echo plain words")).text == "plain words"


async def test_unknown_requests_get_the_help_text() -> None:
    result = await ask("write me a sonnet")
    assert "offline demo model" in result.text and "what is 2+3*4" in result.text


async def test_same_request_gives_the_same_stream() -> None:
    a = await collect(
        OfflineModel(token_delay=0),
        GenerateOptions(provider="offline", model="m", messages=[user("ls")], tools=TOOLS),
    )
    b = await collect(
        OfflineModel(token_delay=0),
        GenerateOptions(provider="offline", model="m", messages=[user("ls")], tools=TOOLS),
    )
    assert a == b


async def test_abort_mid_stream_ends_with_aborted() -> None:
    controller = AbortController()
    model = OfflineModel(token_delay=0.001)
    chunks = []
    async for chunk in model.stream(
        GenerateOptions(
            provider="offline", model="m", messages=[user("hi")], signal=controller.signal
        )
    ):
        chunks.append(chunk)
        if isinstance(chunk, TextDelta):
            controller.abort("user")
    result = check_contract(chunks)
    assert isinstance(result.finish, Aborted)
    assert len([c for c in chunks if isinstance(c, TextDelta)]) == 1


async def test_token_delay_makes_streaming_visible() -> None:
    model = OfflineModel(token_delay=0.01)
    options = GenerateOptions(provider="offline", model="m", messages=[user("echo one two three")])
    with anyio.fail_after(5):
        start = anyio.current_time()
        result = await run(model, options)
        elapsed = anyio.current_time() - start
    assert result.text == "one two three"
    assert elapsed >= 0.03  # one delay per word


def test_evaluate_rejects_anything_but_arithmetic() -> None:
    assert evaluate("2**10 - 24 // 5 % 3") == 1024 - (24 // 5 % 3)
    for bad in ("__import__('os')", "2**1000", "a + 1", "True + 1"):
        with pytest.raises(ValueError):
            evaluate(bad)


def test_build_adapters_offers_the_offline_model_with_config() -> None:
    model = build_adapters({"offline": {"token_delay": 0}})["offline"]
    assert isinstance(model, OfflineModel) and model.token_delay == 0
    with pytest.raises(ValueError, match="token_delay"):
        OfflineModel(token_delay=-1)


async def test_the_answer_to_variables_is_a_sentence_with_secrets_last() -> None:
    listing = "API_KEY: str (secret: value hidden)\ndf: DataFrame — 3 rows × 2 columns\nn: int — 42"
    history: list[Message] = [
        user("variables"),
        AssistantMessage(content=(ToolCallBlock(id="c1", name="list_variables", arguments="{}"),)),
        ToolResultMessage(call_id="c1", name="list_variables", content=listing),
    ]
    result = await run(
        OfflineModel(token_delay=0),
        GenerateOptions(provider="offline", model="demo", messages=history),
    )
    assert result.text == (
        "The notebook has 2 variables: df (DataFrame) and n (int). "
        "Also API_KEY (str), which looks like a secret: its value is hidden."
    )
    assert result.text.index("API_KEY") > result.text.index("n (int)")
