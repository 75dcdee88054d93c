"""Helpers to drive an adapter's ``stream`` and check the chunk contract."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import (
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageChunk,
)
from agentloop_nb.messages import ReasoningBlock, TextBlock, UserMessage
from peers.loopback import LoopbackServer, Reply, sse_reply


async def collect(adapter: Any, options: GenerateOptions) -> list[StreamChunk]:
    return [chunk async for chunk in adapter.stream(options)]


@dataclass
class Assembled:
    """What a stream said, assembled the simple way (for assertions)."""

    chunks: list[StreamChunk]
    text: str = ""
    reasoning: str = ""
    signature: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage | None = None
    finish: FinishReason | None = None
    block_types: list[str] = field(default_factory=list)

    @property
    def error(self) -> ErrorFinish:
        assert isinstance(self.finish, ErrorFinish), (
            f"expected an error finish, got {self.finish!r}"
        )
        return self.finish

    @property
    def kind(self) -> str | None:
        """The finish kind (``"stop"``, ``"tool-calls"``, ...), ``None`` without a finish."""
        return self.finish.kind if self.finish is not None else None

    def call_args(self, i: int = 0) -> Any:
        return json.loads(self.calls[i]["arguments"])


def check_contract(chunks: list[StreamChunk]) -> Assembled:
    """Assert the stream contract and assemble the result.

    Exactly one ``Finish``, last; deltas only for open blocks of the matching type; every
    started block ends exactly once before a non-error finish; ``id``/``name`` of a tool call
    never change once set.
    """
    assert chunks, "empty stream"
    finishes = [c for c in chunks if isinstance(c, Finish)]
    assert len(finishes) == 1 and chunks[-1] is finishes[0], f"bad finish placement: {chunks!r}"
    out = Assembled(chunks=chunks, finish=finishes[0].reason)
    open_blocks: dict[int, str] = {}
    ended: set[int] = set()
    calls: dict[int, dict[str, Any]] = {}
    for c in chunks[:-1]:
        if isinstance(c, BlockStart):
            assert c.index not in open_blocks and c.index not in ended, f"block {c.index} reused"
            open_blocks[c.index] = c.block_type
            out.block_types.append(c.block_type)
            if c.block_type == "tool-call":
                calls[c.index] = {"id": None, "name": None, "arguments": ""}
        elif isinstance(c, TextDelta):
            assert open_blocks.get(c.index) == "text", f"text delta for {c.index}: {open_blocks}"
            out.text += c.text
        elif isinstance(c, ReasoningDelta):
            assert open_blocks.get(c.index) == "reasoning", f"reasoning delta for {c.index}"
            out.reasoning += c.text
        elif isinstance(c, ToolCallDelta):
            assert open_blocks.get(c.index) == "tool-call", f"tool delta for {c.index}"
            call = calls[c.index]
            if call["id"] is None:
                call["id"] = c.id
            assert c.id == call["id"], "tool call id changed mid-call"
            if c.name:
                assert call["name"] is None, f"name sent twice: {call['name']!r} then {c.name!r}"
                call["name"] = c.name
            call["arguments"] += c.arguments_delta
        elif isinstance(c, BlockEnd):
            assert c.index in open_blocks, f"block-end for a block not open: {c.index}"
            del open_blocks[c.index]
            ended.add(c.index)
            if isinstance(c.block, ReasoningBlock):
                assert c.block.text == out.reasoning
                out.signature = c.block.signature
        elif isinstance(c, UsageChunk):
            out.usage = c.usage
    if (
        not isinstance(out.finish, ErrorFinish)
        and out.finish is not None
        and out.finish.kind != "aborted"
    ):
        assert not open_blocks, f"blocks left open at finish: {open_blocks}"
    out.calls = [calls[i] for i in sorted(calls)]
    return out


async def run(adapter: Any, options: GenerateOptions) -> Assembled:
    return check_contract(await collect(adapter, options))


def assert_answered(result: Assembled, text: str) -> None:
    """One text block saying ``text``, a ``stop`` finish and non-zero usage both ways."""
    assert (result.text, result.block_types, result.kind) == (text, ["text"], "stop"), result
    usage = result.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0, usage


async def run_closing(adapter: Any, options: GenerateOptions) -> Assembled:
    """:func:`run`, then close the adapter (also when the run fails)."""
    try:
        return await run(adapter, options)
    finally:
        await adapter.aclose()


async def run_served(
    reply: Reply, make_adapter: Callable[[str], Any], options: GenerateOptions
) -> tuple[Assembled, LoopbackServer]:
    """Run an adapter built by ``make_adapter(server_url)`` against a :class:`LoopbackServer`
    answering ``reply``; returns the result and the (stopped) server, for its ``requests``."""
    with LoopbackServer(reply) as server:
        result = await run_closing(make_adapter(server.url), options)
    return result, server


async def run_sse(
    body: bytes, make_adapter: Callable[[str], Any], options: GenerateOptions
) -> Assembled:
    """:func:`run_served` with a server streaming the SSE ``body``; only the result."""
    result, _ = await run_served(sse_reply(body), make_adapter, options)
    return result


def options_for(provider: str, default_model: str, /, *messages: Any, **kw: Any) -> GenerateOptions:
    """``GenerateOptions`` for ``provider``: ``default_model`` unless ``kw`` names a ``model``,
    the ``messages`` or else one user message "hi"."""
    kw.setdefault("model", default_model)
    return GenerateOptions(provider=provider, messages=messages or (user("hi"),), **kw)


def user(text: str, id: str = "u1") -> UserMessage:
    return UserMessage(id=id, content=(TextBlock(text=text),))


WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
