"""Image blocks in tool results reach the providers as images, over real loopback HTTP:
Anthropic inside the ``tool_result`` block, OpenAI (whose tool messages take text only) in one
user turn right after the step's tool messages."""

from __future__ import annotations

from typing import Any

import pytest
from peers.loopback import LoopbackServer, json_reply
from peers.streams import run_closing, user

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter
from agentloop_nb.messages import (
    AssistantMessage,
    ImageBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="
CONVERSATION = (
    user("plot it"),
    AssistantMessage(
        content=(
            ToolCallBlock(id="c1", name="run_python", arguments='{"code": "plot()"}'),
            ToolCallBlock(id="c2", name="list_variables", arguments="{}"),
        )
    ),
    ToolResultMessage(
        call_id="c1",
        name="run_python",
        content=(
            TextBlock(text="images: 1 image/png"),
            ImageBlock(media_type="image/png", data=PNG),
        ),
    ),
    ToolResultMessage(call_id="c2", name="list_variables", content="df: DataFrame"),
)


async def _sent_body(adapter: Any, server: LoopbackServer, model: str) -> Any:
    options = GenerateOptions(provider="p", model=model, messages=CONVERSATION)
    await run_closing(adapter, options)  # the error reply is irrelevant: the request counts
    return server.requests[0].json()


async def test_anthropic_sends_the_image_inside_the_tool_result() -> None:
    with LoopbackServer(json_reply(400, {"error": {"message": "stop"}})) as server:
        body = await _sent_body(
            AnthropicAdapter(server.url, "sk-ant-test"), server, "claude-sonnet-4-5"
        )
    results = body["messages"][-1]["content"]
    assert results[0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": [
            {"type": "text", "text": "images: 1 image/png"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
    }
    assert results[1] == {"type": "tool_result", "tool_use_id": "c2", "content": "df: DataFrame"}


async def test_openai_sends_the_image_in_a_user_turn_after_the_tool_messages() -> None:
    with LoopbackServer(json_reply(400, {"error": {"message": "stop"}})) as server:
        body = await _sent_body(OpenAIAdapter(server.url + "/v1", "sk-test"), server, "gpt-4o")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    assert body["messages"][2]["content"] == "images: 1 image/png"
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "Images returned by tool call c1:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]


def test_a_tool_result_with_blocks_round_trips_through_its_log_shape() -> None:
    from agentloop_nb.tools import ToolResult

    result = ToolResult(content=(TextBlock(text="t"), ImageBlock(media_type="image/png", data=PNG)))
    assert result.text == "t"
    assert result.log_data()["content"] == (
        {"type": "text", "text": "t"},
        {"type": "image", "media_type": "image/png", "data": PNG},
    )
    message = ToolResultMessage(call_id="c", content=result.log_data()["content"])
    assert message.text == "t" and message.images[0].data == PNG
