"""What a turn does once, done without repeated work (docs/architecture.md "Turn, session 16"),
with the same events, hooks and flushes: the turn end skips its shield only while its flushes
cannot suspend (nobody listens to ``session/flush``), and a listener that appears on the way
is still awaited, under the shield; the package's cancel scopes are anyio's own."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _loop_helpers import new_agent, reasons, run

from agentloop_nb.app import App
from agentloop_nb.signals import cancel_scope
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio


async def test_a_flush_listener_added_at_turn_end_is_awaited_by_the_second_flush() -> None:
    # Nobody listens to session/flush when the turn ends, so the first flush cannot suspend;
    # a turn/end listener then starts listening: the second flush must dispatch to it.
    app = App(None)
    try:
        agent, _ = new_agent(app, text("one"), text("two"))
        flushed: list[int] = []

        async def on_flush(payload: Any) -> None:
            await anyio.lowlevel.checkpoint()  # a listener that suspends
            flushed.append(len(payload.session.events))

        def on_event(payload: Any) -> None:
            if payload.event.type == "turn/end" and not flushed:
                app.ctx.on("session/flush", on_flush)

        app.ctx.on("session/event", on_event)
        await run(agent)
        assert flushed == [len(agent.session.events)]  # after turn/end, once
        await run(agent, "again")  # from the start now: both flushes reach it
        assert len(flushed) == 3 and flushed[-1] == len(agent.session.events)
        assert reasons(agent) == ["completed", "completed"]
    finally:
        await app.aclose()


async def test_session_flush_waits_says_whether_a_flush_would_dispatch() -> None:
    app = App(None)
    try:
        agent, _ = new_agent(app, text("one"))
        assert not agent.session.flush_waits()

        async def on_flush(payload: Any) -> None:
            return None

        dispose = app.ctx.on("session/flush", on_flush)
        assert agent.session.flush_waits()
        dispose()
        assert not agent.session.flush_waits()
    finally:
        await app.aclose()


async def test_the_package_cancel_scope_is_anyios_own_with_its_shield() -> None:
    made = anyio.CancelScope(shield=True)
    scope = cancel_scope(shield=True)
    assert type(scope) is type(made) and scope.shield and not cancel_scope().shield
    with cancel_scope() as outer:
        with cancel_scope(shield=True):
            outer.cancel()
            await anyio.lowlevel.checkpoint()  # shielded: not cancelled here
        await anyio.lowlevel.checkpoint()  # cancelled here
        pytest.fail("the outer scope was cancelled")
    assert outer.cancelled_caught


# -- the request header's data ---------------------------------------------------------------


def _walked(header: dict[str, Any], reason: str) -> Any:
    from agentloop_nb.session._events import freeze_data

    return freeze_data("request/header", {"header": header, "reason": reason})


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (what the log would hold either way)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (a != a and b != b)


def _header(*schemas: Any, marks: list[str] | None = None) -> dict[str, Any]:
    from agentloop_nb.session._frozen import wrap_frozen

    header: dict[str, Any] = {
        "config": wrap_frozen({"provider": "p", "model": "m"}),
        "system": "be brief",
        "tools": list(schemas),
    }
    if marks is not None:
        header["adapter_defaults"] = marks
    return header


def test_a_header_is_frozen_as_the_append_would_freeze_it() -> None:
    from agentloop_nb.loop._header import frozen_header

    schema = {"name": "t", "parameters": {"type": "object", "required": ["i"], "n": -0.0}}
    for header in (_header(schema), _header(schema, dict(schema), marks=["max_tokens"])):
        for _ in range(2):  # the second time from what the first kept
            built = frozen_header(header, "initial")
            assert built is not None and _same(built, _walked(header, "initial"))


def test_a_tool_schema_changed_in_place_is_frozen_again() -> None:
    from agentloop_nb.loop._header import frozen_header

    params: dict[str, Any] = {"type": "object", "properties": {"i": {"default": 1}}}
    schema = {"name": "t", "parameters": params}
    assert frozen_header(_header(schema), "initial") is not None
    # each change keeps the dict (and what == says of it) but not what the walk builds
    for value in (True, 1.0, "1", None, [1], {"a": 1}, 2):
        params["properties"]["i"]["default"] = value
        built = frozen_header(_header(schema), "change")
        assert built is not None and _same(built, _walked(_header(schema), "change")), value


@pytest.mark.parametrize(
    "bad",
    [float("nan"), float("inf"), {1: "x"}, {"x"}, b"x", object()],
    ids=["nan", "inf", "int-key", "set", "bytes", "object"],
)
def test_a_header_the_walk_refuses_is_left_to_the_append(bad: Any) -> None:
    from agentloop_nb.loop._header import frozen_header

    schema: dict[str, Any] = {"name": "t", "default": None}
    assert frozen_header(_header(schema), "initial") is not None  # kept with ``None``
    schema["default"] = bad  # (NaN encodes as the ``null`` kept: the copy tells them apart)
    assert frozen_header(_header(schema), "change") is None
    with pytest.raises(TypeError):
        _walked(_header(schema), "change")


def test_a_header_not_of_the_loops_shape_is_left_to_the_append() -> None:
    from agentloop_nb.loop._header import frozen_header

    assert frozen_header({**_header(), "config": {"model": "m"}}, "initial") is None
    assert frozen_header(_header(("not", "a", "dict")), "initial") is None
    assert frozen_header(_header(marks=[1]), "initial") is None  # type: ignore[list-item]
    big = _header({"name": "t", "default": 2**70})  # JSON, but not orjson's: the walk's
    assert frozen_header(big, "initial") is None and _walked(big, "initial") is not None


async def test_a_turn_runs_with_its_agent_as_initiator_and_going_idle_without() -> None:
    from agentloop_nb.agents import current_initiator
    from agentloop_nb.testing import tool_call
    from agentloop_nb.tools import tool

    app = App(None)
    try:
        seen: list[tuple[str, Any]] = []

        @tool
        def who() -> str:
            """Who started this?"""
            seen.append(("body", current_initiator()))
            return "ok"

        app.ctx.tools.register(who)
        agent, _ = new_agent(app, tool_call("c1", "who", {}), text("done"))
        app.ctx.on(
            "agent/status", lambda p: seen.append((f"status {p.status}", current_initiator()))
        )
        await run(agent)
        assert seen == [("status running", None), ("body", agent), ("status idle", None)]
    finally:
        await app.aclose()


async def test_inbox_and_status_hooks_added_after_the_agent_exists_are_dispatched() -> None:
    # Unobserved, the driver builds no payload for them; its test is the agent context's live
    # ``listened`` view, so a listener added at any time is reached.
    app = App(None)
    try:
        agent, _ = new_agent(app, text("one"), text("two"))
        await run(agent)  # nobody listens yet
        seen: list[str] = []
        for name in ("agent/inbox/inserted", "agent/inbox/claimed", "agent/status"):
            app.ctx.on(name, lambda p, name=name: seen.append(name))
        await run(agent, "again")
        assert seen == [
            "agent/inbox/inserted",
            "agent/status",
            "agent/inbox/claimed",
            "agent/status",
        ]
    finally:
        await app.aclose()
