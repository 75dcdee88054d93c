"""The same workload as ``bench_loop.py`` section (a), for the peer frameworks and a bare loop.

Workload: one turn in which a zero-latency model asks for one trivial async tool ``N`` times
(one call per step), then answers with a short text. Each contender exposes
``prepare(n)`` (untimed: build the scripted responses for one run) and ``run()`` (timed: the turn).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

# -- bare asyncio loop (the floor) ---------------------------------------------------------------


class BareLoop:
    """A hand-written agent loop: a message list, a fake async model, an async tool."""

    name = "bare asyncio loop"

    def __init__(self) -> None:
        self._responses: list[dict[str, Any]] = []

    def prepare(self, n: int) -> None:
        self._responses = [
            {"role": "assistant", "tool_call": {"id": f"c{i}", "name": "noop", "arguments": "{}"}}
            for i in range(n)
        ]
        self._responses.append({"role": "assistant", "text": "done"})

    async def run(self) -> None:
        responses = iter(self._responses)

        async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
            return next(responses)

        async def noop() -> str:
            return "ok"

        tools = {"noop": noop}
        messages: list[dict[str, Any]] = [{"role": "user", "text": "go"}]
        while True:
            reply = await model(messages)
            messages.append(reply)
            call = reply.get("tool_call")
            if call is None:
                break
            result = await tools[call["name"]](**json.loads(call["arguments"]))
            messages.append({"role": "tool", "call_id": call["id"], "content": result})


# -- pydantic-ai ---------------------------------------------------------------------------------


class PydanticAI:
    """``pydantic_ai.Agent`` driven by a ``FunctionModel`` (an *async* function, so pydantic-ai
    does not hop to a thread; usage is supplied so it does not estimate tokens per request)."""

    name = "pydantic-ai"

    def __init__(self) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        self._responses: list[Any] = []
        self._cursor: Any = iter(())

        async def respond(messages: list[Any], info: AgentInfo) -> Any:
            return next(self._cursor)

        self.agent = agent = Agent(FunctionModel(respond))

        @agent.tool_plain
        async def noop() -> str:
            """Do nothing."""
            return "ok"

    def prepare(self, n: int) -> None:
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.usage import RequestUsage

        usage = RequestUsage(input_tokens=10, output_tokens=5)
        self._responses = [
            ModelResponse(
                parts=[ToolCallPart(tool_name="noop", args="{}", tool_call_id=f"c{i}")],
                usage=usage,
            )
            for i in range(n)
        ]
        self._responses.append(ModelResponse(parts=[TextPart(content="done")], usage=usage))
        self._n = n

    async def run(self) -> None:
        from pydantic_ai.usage import UsageLimits

        self._cursor = iter(self._responses)
        result = await self.agent.run(
            "go", usage_limits=UsageLimits(request_limit=self._n + 5, tool_calls_limit=None)
        )
        assert result.output == "done", result.output


# -- openai-agents -------------------------------------------------------------------------------


class OpenAIAgents:
    """``agents.Runner.run`` with a custom ``Model`` returning a function call until ``N``
    (tracing disabled)."""

    name = "openai-agents"

    def __init__(self) -> None:
        from agents import Agent, Model, ModelResponse, Usage, function_tool, set_tracing_disabled

        set_tracing_disabled(True)
        self._outputs: list[Any] = []
        self._cursor: Any = iter(())
        bench = self

        class ScriptModel(Model):
            async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
                return ModelResponse(
                    output=next(bench._cursor),
                    usage=Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15),
                    response_id=None,
                )

            async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                raise NotImplementedError("the benchmark does not stream")
                yield  # pragma: no cover - makes this an async generator

        @function_tool
        async def noop() -> str:
            """Do nothing."""
            return "ok"

        self.agent = Agent(name="bench", model=ScriptModel(), tools=[noop])

    def prepare(self, n: int) -> None:
        from openai.types.responses import (
            ResponseFunctionToolCall,
            ResponseOutputMessage,
            ResponseOutputText,
        )

        self._outputs = [
            [
                ResponseFunctionToolCall(
                    arguments="{}",
                    call_id=f"c{i}",
                    name="noop",
                    type="function_call",
                    id=f"fc{i}",
                    status="completed",
                )
            ]
            for i in range(n)
        ]
        self._outputs.append(
            [
                ResponseOutputMessage(
                    id="m-final",
                    role="assistant",
                    status="completed",
                    type="message",
                    content=[ResponseOutputText(text="done", type="output_text", annotations=[])],
                )
            ]
        )
        self._n = n

    async def run(self) -> None:
        from agents import Runner

        self._cursor = iter(self._outputs)
        result = await Runner.run(self.agent, "go", max_turns=self._n + 5)
        assert result.final_output == "done", result.final_output


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in ("pydantic-ai-slim", "openai-agents", "pydantic", "anyio"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out
