"""Property test: random interleavings of follow-ups, steering, injections and cancels against
random model behaviour keep the session log well formed and every request valid for a provider.

Tool bodies are generated too: ones that return at once, block until the turn is cancelled
(async, or sync in a worker thread), raise a ``BaseException`` subclass (``SystemExit``,
``KeyboardInterrupt``, ``GeneratorExit``, a custom one, a stray ``CancelledError``; async or
sync), or ignore cancellation altogether (abandoned after ``ctx.tools.disposal_grace``). A
raising body must always give a ``TOOL_ERROR`` result and never end the turn.

Interleaving points are driven by the log itself (wait for the N-th next ``session/event``, for
idle, or for the model/tool to be stalled on the turn signal), never by time. Each example runs
its own event loop (hypothesis drives a sync test)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, dangling_calls, make_app
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop_nb.llm import Aborted, BlockStart, Finish, GenerateOptions, StreamChunk, TextDelta
from agentloop_nb.session import SessionEvent
from agentloop_nb.testing import combine, error, max_tokens, text, tool_call
from agentloop_nb.tools import ToolExecution, tool

RESPONSES = (
    "text",
    "tool",
    "pair",
    "block",
    "sync_block",
    "raise",
    "stubborn",
    "hang",
    "hang_tool",
    "error",
    "max",
    "bad_args",
)
RAISED = ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "Custom", "CancelledError")
#: Codes a raising body's call may end with: its own error, or an abort that came first.
RAISE_CODES = {"TOOL_ERROR", "ABORTED", "ABORTED_BEFORE_DISPATCH"}
GRACE = 0.01  # seconds a body that ignores cancellation is waited for: keep examples cheap
SENDS = ("followup", "steer", "inject", "cancel", "cancel_keep")
SYNCS = ("now", "events", "idle")
END_KINDS = {"completed", "max-tokens", "rejected", "aborted", "error", "disposed"}


class Progress:
    """Wakes waiters on every log append, status change or stall change."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.stalled = 0

    def poke(self, *_: Any) -> None:
        event, self._event = self._event, anyio.Event()
        event.set()

    async def until(self, cond: Callable[[], bool]) -> None:
        while not cond():
            await self._event.wait()

    def enter(self) -> None:
        self.stalled += 1
        self.poke()

    def leave(self) -> None:
        self.stalled -= 1
        self.poke()

    async def stall(self, options_signal: Any) -> Any:
        self.enter()
        try:
            return await options_signal.wait()
        finally:
            self.leave()


class PlanModel:
    """Serves any number of requests: request ``i`` follows ``plan[i]``, then plain text."""

    def __init__(self, plan: list[str], progress: Progress) -> None:
        self.plan = plan
        self.progress = progress
        self.requests: list[GenerateOptions] = []

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        i = len(self.requests)
        self.requests.append(options)
        kind = self.plan[i] if i < len(self.plan) else "text"
        if kind in ("hang", "hang_tool"):
            prefix: list[StreamChunk] = [
                BlockStart(index=0, block_type="text"),
                TextDelta(index=0, text="partial"),
            ]
            if kind == "hang_tool":
                prefix = tool_call(f"h{i}", "fast", {"n": 1}, text="so")[:-4]
            for chunk in prefix:
                yield chunk
            await self.progress.stall(options.signal)
            yield Finish(reason=Aborted())
            return
        for chunk in _response(kind, i):
            yield chunk


def _response(kind: str, i: int) -> list[StreamChunk]:
    if kind == "tool":
        return tool_call(f"c{i}", "fast", {"n": i})
    if kind == "pair":
        return combine(tool_call(f"c{i}a", "fast", {"n": 1}), tool_call(f"c{i}b", "fast", {}))
    if kind == "block":
        return combine(tool_call(f"c{i}a", "block", {}), tool_call(f"c{i}b", "fast", {}))
    if kind == "sync_block":
        return combine(tool_call(f"c{i}a", "sync_block", {}), tool_call(f"c{i}b", "fast", {}))
    if kind == "raise":
        what = RAISED[i % len(RAISED)]
        name = "raiser" if i % 2 else "sync_raiser"
        return combine(tool_call(f"r{i}a", name, {"what": what}), tool_call(f"c{i}b", "fast", {}))
    if kind == "stubborn":
        return tool_call(f"c{i}", "stubborn", {})
    if kind == "error":
        return error("BAD_REQUEST", "scripted failure")
    if kind == "max":
        return max_tokens("cut")
    if kind == "bad_args":
        return tool_call(f"c{i}", "fast", "{not json")
    return text("ok")


class Custom(BaseException):
    """A BaseException subclass a library might raise."""


def _raise(what: str) -> None:
    if what == "Custom":
        raise Custom("odd")
    if what == "CancelledError":
        raise asyncio.CancelledError("stray")
    raise {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}.get(
        what, GeneratorExit
    )()


def _tools(progress: Progress, release: anyio.Event) -> list[Any]:
    @tool(concurrency_safe=True)
    async def fast(n: int = 0) -> str:
        """Return at once."""
        await anyio.lowlevel.checkpoint()
        return f"fast {n}"

    @tool
    async def block(execution: ToolExecution) -> str:
        """Wait for the turn to be cancelled."""
        await progress.stall(execution.signal)
        return "stopped"

    @tool
    def sync_block(execution: ToolExecution) -> str:
        """Block a worker thread until the turn is cancelled."""
        stopped = threading.Event()
        execution.signal.add_callback(lambda _reason: stopped.set())
        loop.call_soon_threadsafe(progress.enter)
        stopped.wait(10)  # bounded: a guard, the abort sets it
        loop.call_soon_threadsafe(progress.leave)
        return "stopped"

    @tool(concurrency_safe=True)
    async def raiser(what: str) -> str:
        """Raise the named BaseException."""
        await anyio.lowlevel.checkpoint()
        _raise(what)
        return "unreachable"

    @tool(concurrency_safe=True)
    def sync_raiser(what: str) -> str:
        """Raise the named BaseException in a worker thread."""
        _raise(what)
        return "unreachable"

    @tool
    async def stubborn(execution: ToolExecution) -> str:
        """Ignore cancellation until the example ends (abandoned after the grace)."""
        progress.enter()
        execution.signal.add_callback(lambda _reason: progress.leave())
        with anyio.CancelScope(shield=True):
            await release.wait()
        return "released"

    loop = asyncio.get_running_loop()
    return [fast, block, sync_block, raiser, sync_raiser, stubborn]


async def scenario(plan: list[str], actions: list[tuple[str, str, int]]) -> None:
    progress = Progress()
    release = anyio.Event()
    app = make_app(retry=False)
    app.ctx.tools.disposal_grace = GRACE
    model = PlanModel(plan, progress)
    app.ctx.llm.register_adapter(["scripted"], model)
    for t in _tools(progress, release):
        app.ctx.tools.register(t)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2
    agent = app.ctx.agent_loop.create("p", OPTIONS)
    app.ctx.on("session/event", progress.poke)
    app.ctx.on("agent/status", progress.poke)
    events = agent.session.events

    def settled() -> bool:
        return agent.status == "idle" or progress.stalled > 0

    try:
        with anyio.fail_after(10):
            for n, (send, sync, k) in enumerate(actions):
                _act(agent, send, n)
                if sync == "events":
                    await progress.until(_reached(events, len(events) + k, settled))
                elif sync == "idle":
                    await progress.until(settled)
            if agent.status != "idle":
                agent.cancel()
            await agent.when_idle()
            check_log(list(events))
            assert dangling_calls(agent.session.derive_messages()) == []
            for request in model.requests:
                assert dangling_calls(request.messages) == []
    finally:
        with anyio.fail_after(10):
            await app.aclose()  # returns although a stubborn body may still be running
        release.set()
    check_log(list(events))  # disposal closes cleanly too


def _reached(events: Any, target: int, settled: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: len(events) >= target or settled()


def _act(agent: Any, send: str, n: int) -> None:
    if send == "followup":
        agent.followup(f"f{n}")
    elif send == "steer":
        agent.steer(f"s{n}")
    elif send == "inject":
        agent.inject(f"i{n}")
    else:
        agent.cancel(keep_inbox=send == "cancel_keep")


def check_log(events: list[SessionEvent]) -> None:
    assert [e.seq for e in events] == list(range(len(events)))
    turn: int | None = None
    step: int | None = None  # 0 between steps
    last_turn = 0
    open_calls: dict[str, tuple[int | None, int | None]] = {}
    answered: set[str] = set()
    for e in events:
        d = e.data
        if e.type == "turn/start":
            assert turn is None, f"turn {d['turn']} opened inside turn {turn}"
            assert d["turn"] == last_turn + 1
            turn, last_turn, step = d["turn"], d["turn"], 0
        elif e.type == "turn/end":
            assert d["turn"] == turn and step == 0, f"turn/end {d} with step {step} open"
            assert d["reason"]["kind"] in END_KINDS
            assert not open_calls, f"turn ended with unanswered calls {open_calls}"
            turn = None
        elif e.type == "step/start":
            assert turn == d["turn"] and step == 0
            step = d["step"]
        elif e.type == "step/end":
            assert (d["turn"], d["step"]) == (turn, step)
            assert not open_calls, f"step ended with unanswered calls {open_calls}"
            step = 0
        elif e.type == "tool/call":
            assert (d["turn"], d["step"]) == (turn, step)
            assert d["call_id"] not in open_calls and d["call_id"] not in answered
            open_calls[d["call_id"]] = (turn, step)
        elif e.type == "tool/result":
            assert open_calls.pop(d["call_id"]) == (d["turn"], d["step"])
            answered.add(d["call_id"])
            if d["name"] in ("raiser", "sync_raiser"):
                assert d["is_error"] and d["error"]["code"] in RAISE_CODES, d
        elif e.type in ("user/message", "assistant/message", "assistant/chunk", "request/header"):
            assert turn is not None and step, f"{e.type} outside a step"
    assert turn is None and step in (None, 0)


plans = st.lists(st.sampled_from(RESPONSES), min_size=1, max_size=8)
action_lists = st.lists(
    st.tuples(st.sampled_from(SENDS), st.sampled_from(SYNCS), st.integers(1, 8)),
    min_size=1,
    max_size=10,
)


@pytest.mark.timeout(180)
@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plan=plans, actions=action_lists)
def test_random_interleavings_keep_the_log_well_formed_and_requests_valid(
    plan: list[str], actions: list[tuple[str, str, int]]
) -> None:
    asyncio.run(scenario(plan, actions))
