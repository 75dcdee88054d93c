"""Helpers shared by the LLM-runtime tests: a context with only the runtime, options for a
scripted provider, and collecting a stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentloop_nb.context import Context
from agentloop_nb.llm import GenerateOptions, LlmRuntime, StreamChunk


def make_ctx() -> Context:
    """A bare ``Context`` providing only ``llm`` (an :class:`LlmRuntime`)."""
    ctx = Context()
    ctx.provide("llm", LlmRuntime(ctx))
    return ctx


def opts(provider: str = "scripted", **kw: Any) -> GenerateOptions:
    """``GenerateOptions`` for ``provider`` with model ``"m"``."""
    return GenerateOptions(provider=provider, model="m", **kw)


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]
