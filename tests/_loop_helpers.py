"""Shared helpers for the agent-loop tests: an App factory that loads the invariant companion,
a scripted-agent builder, log queries, event waits (never sleeps) and a parallel-safe probe
tool that records how many bodies overlap."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from agentloop_nb.app import App
from agentloop_nb.loop import Agent, AgentOptions
from agentloop_nb.messages import AssistantMessage, ToolResultMessage
from agentloop_nb.session import Session, SessionEvent
from agentloop_nb.testing import ScriptedModel
from agentloop_nb.tools import Tool, ToolExecution, tool

OPTIONS = AgentOptions(provider="scripted", model="m")
WAIT = 5.0  # seconds: only a guard against a hang, never a synchronisation point


def make_app(**kw: Any) -> App:
    """``App(**kw)`` with the invariant companion loaded (every request the loop sends must
    equal a rebuild from the log and extend the previous request of its turn)."""
    kw.setdefault("invariants", True)
    return App(**kw)


def scripted(app: App, *entries: Any) -> ScriptedModel:
    """Register a ``ScriptedModel`` under provider ``scripted`` and return it."""
    model = ScriptedModel(entries)
    app.ctx.llm.register_adapter(["scripted"], model)
    return model


def new_agent(app: App, *entries: Any, id: str = "a") -> tuple[Agent, ScriptedModel]:
    """A ``scripted`` model playing ``entries`` and an agent talking to it."""
    model = scripted(app, *entries)
    return app.ctx.agent_loop.create(id, OPTIONS), model


async def run(agent: Agent, content: Any = "hi") -> None:
    """Follow up and wait until idle (guarded against hangs)."""
    agent.followup(content)
    with anyio.fail_after(WAIT):
        await agent.when_idle()


async def idle(agent: Agent) -> None:
    with anyio.fail_after(WAIT):
        await agent.when_idle()


# -- log queries ---------------------------------------------------------------------------


def types(agent: Agent | Session, *, chunks: bool = False) -> list[str]:
    """Event types in log order (``assistant/chunk`` left out unless ``chunks``)."""
    session = agent.session if isinstance(agent, Agent) else agent
    return [e.type for e in session.events if chunks or e.type != "assistant/chunk"]


def events(agent: Agent, type: str) -> list[SessionEvent]:
    return [e for e in agent.session.events if e.type == type]


def logged_chunks(agent: Agent, step: int | None = None) -> list[Any]:
    """The logged chunks (the ``chunk`` of each ``assistant/chunk``), in log order, of every
    step or of ``step``."""
    return [
        e.data["chunk"]
        for e in events(agent, "assistant/chunk")
        if step is None or e.data["step"] == step
    ]


def data(agent: Agent, type: str) -> list[Any]:
    return [e.data for e in agent.session.events if e.type == type]


def reasons(agent: Agent) -> list[str]:
    """The ``turn/end`` reason kinds, in order."""
    return [d["reason"]["kind"] for d in data(agent, "turn/end")]


def user_texts(agent: Agent, turn: int | None = None) -> list[str]:
    """Texts of the logged ``user/message`` events (of one turn when ``turn`` is given)."""
    out: list[str] = []
    current = 0
    for e in agent.session.events:
        if e.type == "turn/start":
            current = e.data["turn"]
        elif e.type == "user/message" and (turn is None or current == turn):
            out.append("".join(b["text"] for b in e.data["message"]["content"]))
    return out


def request_texts(model: ScriptedModel, index: int) -> list[str]:
    """User-visible texts of request ``index`` (user messages only)."""
    return [
        "".join(getattr(b, "text", "") for b in m.content)
        for m in model.requests[index].messages
        if m.role == "user"
    ]


def dangling_calls(messages: Sequence[Any]) -> list[str]:
    """Tool calls of assistant messages not answered before the next assistant message (or the
    end): a provider rejects such a history."""
    open_ids: list[str] = []
    problems: list[str] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            problems.extend(open_ids)
            open_ids = [c.id for c in m.tool_calls]
        elif isinstance(m, ToolResultMessage):
            if m.call_id in open_ids:
                open_ids.remove(m.call_id)
            else:
                problems.append(f"orphan result {m.call_id}")
        elif open_ids:
            problems.extend(open_ids)
            open_ids = []
    return problems + open_ids


# -- waiting on the log ----------------------------------------------------------------------


async def _first_announced(
    agent: Agent, hook: str, field: str, already: Any, predicate: Callable[[Any], bool]
) -> Any:
    """The first of ``already`` matching ``predicate``, else the first ``payload.<field>`` of
    ``agent``'s session announced on ``hook`` that matches (within ``WAIT``)."""
    for item in already:
        if predicate(item):
            return item
    found: list[Any] = []
    done = anyio.Event()

    def on_payload(payload: Any) -> None:
        item = getattr(payload, field)
        if not found and payload.session is agent.session and predicate(item):
            found.append(item)
            done.set()

    off = agent.ctx.root.on(hook, on_payload)
    try:
        with anyio.fail_after(WAIT):
            await done.wait()
    finally:
        off()
    return found[0]


async def wait_for(agent: Agent, predicate: Callable[[SessionEvent], bool]) -> SessionEvent:
    """The first logged event of ``agent`` matching ``predicate`` (already logged or future)."""
    event: SessionEvent = await _first_announced(
        agent, "session/event", "event", agent.session.events, predicate
    )
    return event


async def wait_for_chunk(agent: Agent, predicate: Callable[[Any], bool]) -> Any:
    """The first chunk (frozen JSON) of ``agent``'s stream matching ``predicate``, as announced
    live on ``session/chunk`` (already announced and still held, or future): what a view
    sees, before the log holds it."""
    streaming = agent.session.streaming
    held = streaming.held() if streaming is not None else ()
    return await _first_announced(agent, "session/chunk", "chunk", held, predicate)


def is_type(type: str, **fields: Any) -> Callable[[SessionEvent], bool]:
    """Predicate: an event of ``type`` whose data has ``fields``."""
    return lambda e: e.type == type and all(e.data.get(k) == v for k, v in fields.items())


def chunk_text(text: str) -> Callable[[SessionEvent], bool]:
    """Predicate: an ``assistant/chunk`` holding a text delta ``text`` (a held chunk is logged
    within ``FLUSH_AFTER`` even while its stream hangs)."""
    return lambda e: e.type == "assistant/chunk" and e.data["chunk"].get("text") == text


# -- tools -----------------------------------------------------------------------------------


class Probe:
    """Tools whose bodies block until released, recording start order and peak overlap.

    ``probe(key)`` is parallel-safe, ``barrier(key)`` exclusive; ``started[key]`` is set when a
    body starts, ``release(key)`` lets it return ``"done:<key>"``."""

    def __init__(self, *, auto: Iterable[str] = ()) -> None:
        self.active = 0
        self.peak = 0
        self.log: list[str] = []
        self._started: dict[str, anyio.Event] = {}
        self._release: dict[str, anyio.Event] = {}
        for key in auto:
            self.release(key)
        self.probe: Tool = self._make("probe", True)
        self.barrier: Tool = self._make("barrier", False)

    def started(self, key: str) -> anyio.Event:
        return self._started.setdefault(key, anyio.Event())

    def release(self, key: str) -> None:
        self._release.setdefault(key, anyio.Event()).set()

    def is_started(self, key: str) -> bool:
        return key in self._started and self._started[key].is_set()

    async def wait_started(self, *keys: str) -> None:
        with anyio.fail_after(WAIT):
            for key in keys:
                await self.started(key).wait()

    def _make(self, name: str, safe: bool) -> Tool:
        async def body(key: str) -> str:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.log.append(f"start:{key}")
            self.started(key).set()
            try:
                await self._release.setdefault(key, anyio.Event()).wait()
            finally:
                self.active -= 1
                self.log.append(f"end:{key}")
            return f"done:{key}"

        body.__name__ = name
        body.__doc__ = f"Block until the test releases ``key`` ({name})."
        return tool(concurrency_safe=safe)(body)


def register(app: App, *tools: Tool | Callable[..., Any]) -> None:
    for t in tools:
        app.ctx.tools.register(t)


@tool
async def wait_for_abort(execution: ToolExecution) -> str:
    """Wait until the turn is cancelled, then report the cause."""
    reason = await execution.signal.wait()
    return f"stopped: {reason['kind']}"


class Swallower:
    """An async tool (``swallower`` unless named) that catches every cancellation and keeps
    waiting until released. ``cancelled`` is set at the first cancellation it swallows,
    ``finished`` once it returns; its ``finally`` appends to ``cleaned``, after awaiting
    again when ``await_when_closed`` (so it cannot be closed cleanly)."""

    def __init__(self, name: str = "swallower", *, await_when_closed: bool = False) -> None:
        self.started = anyio.Event()
        self.cancelled = anyio.Event()
        self.release = anyio.Event()
        self.finished = False
        self.cleaned: list[str] = []

        async def body() -> str:
            """Ignore cancellation until released."""
            self.started.set()
            try:
                while not self.release.is_set():
                    try:
                        await self.release.wait()
                    except asyncio.CancelledError:
                        self.cancelled.set()
                self.finished = True
                return "late"
            finally:
                if await_when_closed:
                    await self.release.wait()
                self.cleaned.append("finally ran")

        body.__name__ = name
        self.tool: Tool = tool(body)


def finished_turns(session: Session, turns: int) -> Session:
    """Append ``turns`` finished one-step turns (a question, an answer) to ``session``."""
    for turn in range(1, turns + 1):
        session.append("turn/start", {"turn": turn})
        message = {"role": "user", "id": f"m{turn}", "content": [{"type": "text", "text": "q"}]}
        session.append("user/message", {"message": message})
        answer = {"role": "assistant", "content": [{"type": "text", "text": f"answer {turn}"}]}
        session.append("assistant/message", {"turn": turn, "step": 1, "message": answer})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return session


class Shielded:
    """An async tool ``shielded`` (``concurrency_safe`` when ``safe``) that waits in a shielded
    section until released, then checks for a cancellation once outside it. ``inside`` is set
    once it waits; ``seen`` records "shielded part done" and, when cancelled after the shield,
    "cancelled after the shield"."""

    def __init__(self, *, safe: bool = False) -> None:
        self.inside = anyio.Event()
        self.release = anyio.Event()
        self.seen: list[str] = []

        async def shielded() -> str:
            """Wait in a shielded section, then once more outside it."""
            with anyio.CancelScope(shield=True):
                self.inside.set()
                await self.release.wait()
                self.seen.append("shielded part done")
            try:
                await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class():
                self.seen.append("cancelled after the shield")
                raise
            return "not cancelled"

        self.tool = tool(concurrency_safe=safe)(shielded)

    async def cancel_inside(self, agent: Agent, call_id: str) -> None:
        """Cancel call ``call_id`` (this tool) while it waits in its shield, check the shield
        holds the cancellation back, release it, and check the body is cancelled right after
        the shield once the agent is idle."""
        with anyio.fail_after(WAIT):
            await self.inside.wait()
        assert agent.cancel_tool(call_id) is True
        await anyio.wait_all_tasks_blocked()
        assert self.seen == []  # the shield holds the cancellation back
        self.release.set()
        await idle(agent)
        assert self.seen == ["shielded part done", "cancelled after the shield"]
