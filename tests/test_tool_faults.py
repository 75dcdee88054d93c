"""A tool body can never harm the loop: every way a body can end (any ``BaseException``,
a stray ``CancelledError``, an unserialisable or endless result) becomes an error result, the
turn ends normally and the next request answers every call."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import (
    WAIT,
    Swallower,
    data,
    idle,
    make_app,
    new_agent,
    reasons,
    register,
    run,
)

from agentloop_nb.app import App
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import MAX_RESULT_CHARS, MAX_RESULT_DEPTH, MAX_RESULT_ITEMS, tool

ROOT = Path(__file__).resolve().parent.parent

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
    assert "iterator" in results[0]["error"]["message"]
    assert reasons(agent) == ["completed"]
    assert any(getattr(m, "role", None) == "tool" for m in model.requests[1].messages)


async def test_a_cancelled_error_a_body_raises_is_a_tool_error_but_the_turn_abort_aborts(
    app: App,
) -> None:
    """A ``CancelledError`` the body raises is a tool error; the turn's abort still aborts."""
    started = anyio.Event()

    @tool
    async def stray() -> str:
        """Raise a CancelledError of its own."""
        raise asyncio.CancelledError("mine")

    @tool
    async def waits() -> str:
        """Wait to be cancelled."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    register(app, stray)
    register(app, waits)
    script = combine(tool_call("c1", "stray", {}), tool_call("c2", "waits", {}))
    agent, _ = new_agent(app, script, text("never"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started.wait()
    agent.cancel()
    await idle(agent)
    codes = [d["error"]["code"] for d in data(agent, "tool/result")]
    assert codes == ["TOOL_ERROR", "ABORTED"]
    assert "CancelledError: mine" in data(agent, "tool/result")[0]["error"]["message"]
    assert reasons(agent) == ["aborted"]


async def test_aclose_returns_while_an_async_body_swallows_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Swallower()
    register(app, body.tool)
    agent, _ = new_agent(app, tool_call("c1", "swallower", {}), text("never"))
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    agent.followup("go")
    try:
        with anyio.fail_after(WAIT):
            await body.started.wait()
            await app.aclose()
        assert body.cancelled.is_set() and not body.finished
        assert "abandoning tool body 'swallower'" in caplog.text
        assert "disposal_grace" in caplog.text
    finally:
        body.release.set()


async def test_a_cancelled_turn_ends_after_the_grace_when_a_body_swallows_cancellation(
    app: App,
) -> None:
    app.ctx.tools.disposal_grace = 0.05
    body = Swallower()
    register(app, body.tool)
    agent, _ = new_agent(app, tool_call("c1", "swallower", {}), text("after"))
    agent.followup("go")
    try:
        with anyio.fail_after(WAIT):
            await body.started.wait()
        agent.cancel()
        await idle(agent)
        assert reasons(agent) == ["aborted"]
        assert data(agent, "tool/result")[0]["error"]["code"] == "ABORTED"
        assert not body.finished
        await run(agent, "again")  # the agent is usable at once
        assert reasons(agent) == ["aborted", "completed"]
    finally:
        body.release.set()


async def test_a_timeout_ends_a_body_that_swallows_cancellation_after_the_grace(app: App) -> None:
    app.ctx.tools.disposal_grace = 0.05
    body = Swallower()
    register(app, tool(name="slow", timeout=0.01)(body.tool.fn))
    agent, _ = new_agent(app, tool_call("c1", "slow", {}), text("after"))
    try:
        await run(agent)
        result = data(agent, "tool/result")[0]
        assert result["error"]["code"] == "TOOL_TIMEOUT"
        assert reasons(agent) == ["completed"]
    finally:
        body.release.set()


async def test_a_shielded_async_body_keeps_the_result_it_finishes_with_after_the_abort(
    app: App,
) -> None:
    release = anyio.Event()
    started = anyio.Event()

    @tool
    async def careful() -> str:
        """Finish a shielded step even when cancelled."""
        started.set()
        with anyio.CancelScope(shield=True):
            await release.wait()
        return "done"

    register(app, careful)
    agent, _ = new_agent(app, tool_call("c1", "careful", {}), text("never"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started.wait()
    agent.cancel()
    release.set()
    await idle(agent)
    assert data(agent, "tool/result")[0]["content"] == "done"
    assert reasons(agent) == ["aborted"]


CAPPED: list[Any] = [
    pytest.param(lambda: list(range(MAX_RESULT_ITEMS + 1)), "values", id="too-many-values"),
    pytest.param(lambda: {"rows": ["x" * 1000] * 3000}, "characters", id="too-large"),
    pytest.param(lambda: _nested(MAX_RESULT_DEPTH + 5), "levels deep", id="too-deep"),
    pytest.param(lambda: {"rows": (i for i in range(3))}, "iterator", id="generator-inside"),
    pytest.param(lambda: iter([1, 2]), "iterator", id="list-iterator"),
]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("make_value", "cap"), CAPPED)
async def test_results_beyond_a_cap_are_a_tool_error_naming_the_cap_and_the_fix(
    app: App, make_value: Any, cap: str
) -> None:
    @tool
    def big() -> Any:
        """Return something too big."""
        return make_value()

    register(app, big)
    agent, _ = new_agent(app, tool_call("c1", "big", {}), text("after"))
    await run(agent)
    error = data(agent, "tool/result")[0]["error"]
    assert error["code"] == "TOOL_ERROR"
    assert cap in error["message"] and "big" in error["message"]
    assert "return a str" in error["message"] or "return a list" in error["message"]
    assert reasons(agent) == ["completed"]


async def test_a_large_str_result_is_not_capped_and_small_structures_serialise(app: App) -> None:
    @tool
    def text_result() -> str:
        """A long text."""
        return "y" * (MAX_RESULT_CHARS + 10)

    @tool
    def rows() -> Any:
        """Structured rows."""
        return {"rows": [{"i": i, "s": "v"} for i in range(3)], "ok": (True, None, 1.5)}

    register(app, text_result)
    register(app, rows)
    script = combine(tool_call("c1", "text_result", {}), tool_call("c2", "rows", {}))
    agent, _ = new_agent(app, script, text("after"))
    await run(agent)
    first, second = data(agent, "tool/result")
    assert len(first["content"]) == MAX_RESULT_CHARS + 10 and not first["is_error"]
    assert json.loads(second["content"]) == {
        "rows": [{"i": 0, "s": "v"}, {"i": 1, "s": "v"}, {"i": 2, "s": "v"}],
        "ok": [True, None, 1.5],
    }


SCRIPT = """
import asyncio

from agentloop_nb.app import App
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import ScriptedModel, combine, text, tool_call
from agentloop_nb.tools import tool


@tool
async def parse() -> str:
    \"\"\"Exit like argparse does.\"\"\"
    raise SystemExit(2)


@tool
def parse_sync() -> str:
    \"\"\"Interrupt like a Ctrl-C inside a library.\"\"\"
    raise KeyboardInterrupt


async def main() -> None:
    app = App()
    script = [combine(tool_call("c1", "parse", {}), tool_call("c2", "parse_sync", {})), text("ok")]
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
    app.ctx.tools.register(parse)
    app.ctx.tools.register(parse_sync)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))
    agent.followup("go")
    await agent.when_idle()
    codes = [e.data["error"]["code"] for e in agent.session.events if e.type == "tool/result"]
    print(codes, agent.session.events[-1].data["reason"]["kind"], flush=True)
    await app.aclose()


asyncio.run(main())
print("exited normally")
"""


def test_in_a_script_asyncio_run_survives_tools_raising_system_exit() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['TOOL_ERROR', 'TOOL_ERROR'] completed", "exited normally"]
