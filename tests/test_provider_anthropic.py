"""AnthropicAdapter over real loopback HTTP: llmock (tool loop, request journal), aimock
(thinking + signature) and hand-written streams (in-stream errors, request details)."""

from __future__ import annotations

from typing import Any

import pytest
from peers.aimock import aimock_url  # noqa: F401  (pytest fixture)
from peers.loopback import sse_events, sse_reply
from peers.streams import (
    WEATHER_TOOL,
    Assembled,
    options_for,
    run,
    run_closing,
    run_served,
    run_sse,
    user,
)
from peers.wire import (
    anthropic_text_stream,
    anthropic_tool_result,
    anthropic_tool_use,
    block_delta,
    block_start,
    block_stop,
    message_delta,
    message_start,
    message_stop,
    text_delta,
)

from agentloop_nb import RequestConfig
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.messages import (
    AssistantMessage,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)

pytestmark = pytest.mark.anyio

MODEL = "claude-sonnet-4-5"


KEY_FOR_DEFAULTS = "sk-ant-test-defaults-0123"


def options(*messages: Any, **kw: Any) -> GenerateOptions:
    return options_for("anthropic", MODEL, *messages, **kw)


async def served(body: bytes) -> Assembled:
    """One request to a server streaming ``body``."""
    return await run_sse(body, lambda url: AnthropicAdapter(url, "sk-ant-test"), options())


# -- llmock -------------------------------------------------------------------------------------


@pytest.mark.peer
async def test_tool_loop_sends_tool_use_and_merged_tool_results_back(llmock: Any) -> None:
    llmock.call_tool("get_weather", {"city": "Paris"})
    llmock.reply("Sunny in Paris, rainy in Oslo.")
    adapter = AnthropicAdapter()
    try:
        first = await run(adapter, options(user("weather in Paris?"), tools=[WEATHER_TOOL]))
        assert first.kind == "tool-calls"
        assert [c["name"] for c in first.calls] == ["get_weather"]
        assert first.call_args() == {"city": "Paris"}
        call_id = first.calls[0]["id"]
        history = (
            user("weather in Paris?"),
            AssistantMessage(
                content=(
                    ToolCallBlock(
                        id=call_id, name="get_weather", arguments=first.calls[0]["arguments"]
                    ),
                    ToolCallBlock(id="toolu_2", name="get_weather", arguments='{"city": "Os'),
                )
            ),
            ToolResultMessage(call_id=call_id, content="sunny"),
            ToolResultMessage(call_id="toolu_2", content="invalid arguments", is_error=True),
        )
        second = await run(adapter, options(*history, tools=[WEATHER_TOOL]))
    finally:
        await adapter.aclose()
    assert second.text == "Sunny in Paris, rainy in Oslo."
    sent = llmock.requests[-1].body
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER_TOOL["parameters"],
        }
    ]
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                anthropic_tool_use(call_id, "get_weather", {"city": "Paris"}),
                # Invalid JSON arguments are sent as an empty input object.
                anthropic_tool_use("toolu_2", "get_weather", {}),
            ],
        },
        {
            "role": "user",
            "content": [
                anthropic_tool_result(call_id, "sunny"),
                anthropic_tool_result("toolu_2", "invalid arguments", is_error=True),
            ],
        },
    ]


# -- aimock: thinking ---------------------------------------------------------------------------


@pytest.mark.peer
async def test_thinking_block_ends_with_its_signature(aimock_url: str) -> None:  # noqa: F811
    result = await run_closing(
        AnthropicAdapter(aimock_url, "sk-ant-test"),
        options(user("claude: what is 6 times 7?"), reasoning_effort="low"),
    )
    assert result.block_types == ["reasoning", "text"]
    assert result.reasoning == "Six sevens make forty-two."
    assert result.signature == "EqQBCkYIBxgCKkDsig-aimock-42"
    assert result.text == "6 times 7 is 42."
    assert result.kind == "stop"


@pytest.mark.peer
async def test_thinking_tool_loop_round_trips_the_signed_thinking_block(aimock_url: str) -> None:  # noqa: F811
    adapter = AnthropicAdapter(aimock_url, "sk-ant-test")
    try:
        first = await run(adapter, options(user("claude: weather in Paris?"), tools=[WEATHER_TOOL]))
        assert first.block_types == ["reasoning", "tool-call"]
        assert first.signature == "EqQBCkYIBxgCKkDsig-aimock-tool"
        call = first.calls[0]
        history = (
            user("claude: weather in Paris?"),
            AssistantMessage(
                content=(
                    ReasoningBlock(text=first.reasoning, signature=first.signature),
                    ToolCallBlock(id=call["id"], name=call["name"], arguments=call["arguments"]),
                )
            ),
            ToolResultMessage(call_id=call["id"], content="sunny"),
        )
        second = await run(adapter, options(*history, tools=[WEATHER_TOOL]))
    finally:
        await adapter.aclose()
    assert second.text == "It is sunny in Paris."


async def test_request_headers_path_thinking_and_signed_reasoning() -> None:
    history = (
        user("look").model_copy(
            update={
                "content": (
                    TextBlock(text="look"),
                    TextBlock(text=""),
                    ImageBlock(media_type="image/png", data="AAAA"),
                )
            }
        ),
        AssistantMessage(
            content=(
                ReasoningBlock(text="unsigned, from another provider"),
                ReasoningBlock(text="signed", signature="sig-1"),
                TextBlock(text="A square."),
            )
        ),
        user("and now?", id="u2"),
    )
    _, server = await run_served(
        sse_reply(anthropic_text_stream()),
        lambda url: AnthropicAdapter(url, "sk-ant-api03-secret", anthropic_version="2023-06-01"),
        options(*history, reasoning_effort="medium", temperature=0.3, stop=["END"]),
    )
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == "sk-ant-api03-secret"
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = request.json()
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert body["max_tokens"] > 4096 and "temperature" not in body
    assert body["stop_sequences"] == ["END"]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig-1"},
                {"type": "text", "text": "A square."},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
    ]


async def test_base_url_ending_in_v1_is_not_doubled() -> None:
    _, server = await run_served(
        sse_reply(anthropic_text_stream()),
        lambda url: AnthropicAdapter(url + "/v1/", "sk-ant-test"),
        options(),
    )
    assert server.requests[0].path == "/v1/messages"


# -- hand-written streams -----------------------------------------------------------------------


async def test_redacted_thinking_unknown_events_and_pings_are_ignored() -> None:
    body = sse_events(
        [
            message_start(),
            block_start(0, {"type": "redacted_thinking", "data": "Enc0ded"}),
            ("ping", {"type": "ping"}),
            block_stop(0),
            ("brand_new_event", {"type": "brand_new_event", "whatever": 1}),
            block_start(1),
            block_delta(1, {"type": "citations_delta", "citation": {}}),
            text_delta(1, "Done."),
            block_stop(1),
            message_delta("end_turn", 4),
            message_stop(),
        ]
    )
    result = await served(body)
    assert result.block_types == ["text"] and result.text == "Done."
    assert result.chunks[0].type == "block-start" and result.chunks[0].index == 0
    assert result.usage is not None and result.usage.output_tokens == 4


# -- defaults offered to prepare_call ----------------------------------------------------------


@pytest.mark.parametrize("effort", [None, "off", "low", "medium", "high"])
def test_defaults_report_the_max_tokens_the_body_would_send_anyway(effort: str | None) -> None:
    adapter = AnthropicAdapter(api_key=KEY_FOR_DEFAULTS)
    config = RequestConfig(provider="anthropic", model="claude", reasoning_effort=effort)
    filled = adapter.defaults(config)
    assert set(filled) == {"max_tokens"}
    implicit = adapter.build_body(options(reasoning_effort=effort))
    explicit = adapter.build_body(options(reasoning_effort=effort, **filled))
    assert explicit == implicit  # logging the default changes nothing on the wire


def test_defaults_leave_explicit_settings_alone_and_offer_a_configured_effort() -> None:
    adapter = AnthropicAdapter(
        api_key=KEY_FOR_DEFAULTS, default_max_tokens=1000, default_reasoning_effort="low"
    )
    assert adapter.defaults(RequestConfig(max_tokens=5, reasoning_effort="high")) == {}
    assert adapter.defaults(RequestConfig()) == {"reasoning_effort": "low", "max_tokens": 2024}
    assert adapter.defaults(RequestConfig(reasoning_effort="off")) == {"max_tokens": 1000}
