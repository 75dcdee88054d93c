"""A tool body can never harm the loop: every way a body can end (any ``BaseException``,
a stray ``CancelledError``, an unserialisable or endless result) becomes an error result, the
turn ends normally and the next request answers every call."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _loop_helpers import data, make_app, new_agent, reasons, register, run

from agentloop_nb.app import App
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


class CustomBase(BaseException):
    """A BaseException subclass a library might raise."""


BASE_EXCEPTIONS: list[Any] = [
    pytest.param(lambda: SystemExit(2), id="SystemExit"),
    pytest.param(lambda: KeyboardInterrupt(), id="KeyboardInterrupt"),
    pytest.param(lambda: GeneratorExit(), id="GeneratorExit"),
    pytest.param(lambda: CustomBase("odd"), id="custom-BaseException"),
    pytest.param(lambda: asyncio.CancelledError(), id="stray-CancelledError"),
]


@pytest.fixture
async def app() -> AsyncIterator[App]:
    app = make_app()
    yield app
    await app.aclose()


def _assert_tool_error_then_completed(agent: Any, model: Any, name: str) -> None:
    results = data(agent, "tool/result")
    assert len(results) == 1
    assert results[0]["is_error"] is True
    assert results[0]["error"]["code"] == "TOOL_ERROR"
    assert name in results[0]["error"]["message"]
    assert reasons(agent) == ["completed"]
    # The model's next request answered the call: no dangling tool call.
    second = model.requests[1].messages
    assert any(getattr(m, "role", None) == "tool" for m in second)


@pytest.mark.parametrize("make_exc", BASE_EXCEPTIONS)
async def test_async_tool_raising_base_exception_is_a_tool_error(app: App, make_exc: Any) -> None:
    @tool
    async def boom() -> str:
        """Raise."""
        raise make_exc()

    register(app, boom)
    agent, model = new_agent(app, tool_call("c1", "boom", {}), text("after"))
    await run(agent)
    _assert_tool_error_then_completed(agent, model, "boom")


@pytest.mark.parametrize("make_exc", BASE_EXCEPTIONS)
async def test_sync_tool_raising_base_exception_is_a_tool_error(app: App, make_exc: Any) -> None:
    @tool
    def boom() -> str:
        """Raise."""
        raise make_exc()

    register(app, boom)
    agent, model = new_agent(app, tool_call("c1", "boom", {}), text("after"))
    await run(agent)
    _assert_tool_error_then_completed(agent, model, "boom")


async def test_endless_iterator_result_is_a_clear_error_not_a_frozen_loop(app: App) -> None:
    @tool
    def forever() -> Any:
        """Return an endless iterator."""
        return itertools.count()

    register(app, forever)
    agent, model = new_agent(app, tool_call("c1", "forever", {}), text("after"))
    await run(agent)
    results = data(agent, "tool/result")
    assert results[0]["is_error"] is True
    assert results[0]["error"]["code"] == "TOOL_ERROR"
    assert reasons(agent) == ["completed"]
