"""Compaction plugin: keeps a long session inside its model's context window by replacing the
earlier conversation with a summary.

An ``App`` applies it by default (``App(compaction=False)`` turns it off, ``App(compaction={...})``
configures it); ``app.ctx.plugin(CompactionPlugin, config={...})`` replaces that instance. It
publishes itself as ``ctx.compaction``.

- **Window**: the config's ``context_window``, else a window an ``App(models=...)`` entry names
  for the agent's model, else the window the agent's provider reports (an adapter's
  ``context_window(model)`` coroutine: a local llama.cpp or vLLM server is asked once), else
  the built-in ``models`` table's. No window, no pressure.
- **Pressure** (``agent/pre-step``): the estimated request size is the latest
  ``assistant/message``'s ``input_tokens`` plus ~4 characters a token for every model-visible
  event logged since (that message included) and the input about to enter the step. When it
  reaches ``trigger_ratio × window`` or (unless ``trigger_ratio`` was set explicitly) leaves
  less room than the agent's output cap (the ``max_tokens`` of its last request, else of its
  options) before the window's end, the surface history before the last
  ``keep_recent_turns`` completed turns is summarised.
- **One summary call**: ``ctx.llm.stream`` with no tools and a transcript of the span (the
  request carries no ``session_id``, so it is a one-shot call, not one of the agent's turns).
- **The durable replace**: ``compaction/summary{start, end, summary, tokens_before,
  tokens_after_estimate, model, message, usage?, reason}`` with
  ``surface_op={"op": "replace", "start": s, "end": e}`` (surface indices, inclusive); its node
  (``data["message"]``) is a user message beginning ``Summary of the earlier conversation:``.
  A span never ends between a tool call and its result.
- **Overflow repair** (``agent/request-error``): a ``CONTEXT_WINDOW_EXCEEDED`` failure compacts
  (below the trigger too; when no completed turn can go, the running turn's earlier steps are
  summarised) and answers ``Retry()`` — once per step; a second overflow in the same step
  stands and the turn ends ``error``.
- **Forced**: ``await ctx.compaction.compact(agent)`` (and ``%agent compact NAME``).

A failed summary call under pressure is logged and the step runs uncompacted (an overflow then
gets its repair); a forced compaction raises ``LlmError`` instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

from ..context import Context
from ..events import ASSISTANT_MESSAGE, COMPACTION_SUMMARY, SURFACE_TYPES, TURN_START
from ..hooks import AGENT_DISPOSED, AGENT_PRE_STEP, AGENT_REQUEST_ERROR
from ..llm import LlmError
from ..messages import AssistantMessage, Message, TextBlock, ToolResultMessage, UserMessage
from ..models import DEFAULT_TABLE, ModelTable, model_table

if TYPE_CHECKING:
    from ..session import Session, SessionEvent
    from ..signals import AbortSignal

__all__ = ["SUMMARY_PREFIX", "CompactionConfig", "CompactionPlugin"]

_log = logging.getLogger(__name__)

SUMMARY_PREFIX = "Summary of the earlier conversation:"
CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"
CHARS_PER_TOKEN = 4
_ITEM_CAP = 4000  # characters of one message in the summary transcript

SUMMARY_SYSTEM = (
    "You summarise a conversation between a user and an AI assistant that uses tools, so the "
    "assistant can continue the work without the full history. Keep every fact, decision, "
    "file name, value and open task the assistant will need; drop pleasantries. Answer with "
    "the summary only."
)


class CompactionConfig(BaseModel):
    """``trigger_ratio``: the fraction of the window that triggers a compaction;
    ``keep_recent_turns``: completed turns kept verbatim before the running one;
    ``context_window``: tokens (default: from the ``models`` table); ``summary_provider`` /
    ``summary_model``: who writes the summary (default: the agent's own);
    ``summary_max_tokens``: the summary call's output limit (default: the agent's own, the
    ``max_tokens`` of its last request)."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    trigger_ratio: float = Field(0.8, gt=0)
    keep_recent_turns: NonNegativeInt = 2
    context_window: PositiveInt | None = None
    summary_provider: str | None = None
    summary_model: str | None = None
    summary_max_tokens: PositiveInt | None = None


class CompactionPlugin:
    """Class plugin; see the module docstring. Applying it again (it is named ``compaction``)
    replaces the earlier instance."""

    name = "compaction"
    Config = CompactionConfig

    def __init__(self, ctx: Context, config: CompactionConfig) -> None:
        self.ctx = ctx
        self.config = config
        self._locks: dict[str, anyio.Lock] = {}
        self._repaired: dict[str, tuple[int, int]] = {}  # agent id -> (turn, step) repaired
        self._reported: dict[tuple[str, str], int] = {}  # (provider, model) -> reported window
        # agent id -> what made its last step pass with no window: (header, options, service
        # generation, ``ctx.llm``, adapters generation, the route read from the header and
        # options); see ``_on_pre_step``.
        self._passing: dict[str, tuple[Any, Any, int, Any, int, tuple[Any, Any]]] = {}
        # ``passes``: while an agent's verdict stands, its steps skip this listener (the bus
        # steps over it without building the payload or the ``next()`` coroutine)
        ctx.on(AGENT_PRE_STEP, self._on_pre_step, passes=self._passes)
        ctx.on(AGENT_REQUEST_ERROR, self._on_request_error)
        ctx.on(AGENT_DISPOSED, self._forget)
        ctx.provide("compaction", self)

    # -- public -------------------------------------------------------------------------------

    def window(self, agent: Any) -> int | None:
        """The context window used for ``agent`` (see the module docstring): the config's,
        else an ``App(models=...)`` entry's for its effective model, else the one its provider
        reported (once :meth:`resolve_window` asked), else the built-in table's, else
        ``None``."""
        known, key, table = self._lookup(agent)
        if known is not None:
            return known
        reported = self._reported.get(key)
        return reported if reported is not None else table.context_window(key[1])

    async def resolve_window(self, agent: Any) -> int | None:
        """:meth:`window`, after asking the agent's provider for the model's window when
        nothing configured names one and it has not answered yet (an adapter without a
        ``context_window(model)`` coroutine is not asked)."""
        known, key, table = self._lookup(agent)
        if known is not None:
            return known
        provider, model = key
        reported = self._reported.get(key)
        if reported is None and provider and model:
            adapter = agent.ctx.llm.adapter_for(provider)
            ask = getattr(adapter, "context_window", None)
            answer = await ask(model) if callable(ask) else None
            if isinstance(answer, int) and answer > 0:
                self._reported[key] = reported = answer
                self._passing.clear()
        return reported if reported is not None else table.context_window(model)

    def _lookup(self, agent: Any) -> tuple[int | None, tuple[str, str], ModelTable]:
        """``(configured window or None, (provider, model), table)`` for ``agent``: the route
        and the table are read once and serve both the configured window and the rest."""
        if self.config.context_window is not None:
            return self.config.context_window, ("", ""), DEFAULT_TABLE
        provider, model = _route(agent)
        table = model_table(agent.ctx)
        key = (str(provider or ""), str(model or ""))
        return table.configured_window(model), key, table

    def estimate(self, agent: Any, pending: Sequence[Message] = ()) -> int:
        """The estimated size in tokens of ``agent``'s next request with ``pending`` input
        added (see the module docstring)."""
        chars = sum(_text_len(m.model_dump(mode="json")) for m in pending)
        events = agent.session.events
        for i in range(len(events) - 1, -1, -1):
            event = events[i]
            if event.type == COMPACTION_SUMMARY:
                break  # the last reported size predates the summary: count from scratch
            if event.type in SURFACE_TYPES:
                chars += _text_len(event.data.get("message", event.data.get("content")))
            if event.type == ASSISTANT_MESSAGE:
                usage = event.data.get("usage")
                reported = usage.get("input_tokens") if isinstance(usage, Mapping) else None
                if isinstance(reported, int) and reported > 0:
                    return reported + math.ceil(chars / CHARS_PER_TOKEN)
        chars = sum(_text_len(m.model_dump(mode="json")) for m in pending)
        chars += sum(_text_len(m.model_dump(mode="json")) for m in agent.session.derive_messages())
        return math.ceil(chars / CHARS_PER_TOKEN)

    async def compact(
        self, agent: Any, *, signal: AbortSignal | None = None
    ) -> SessionEvent | None:
        """Summarise ``agent``'s earlier conversation now and return the logged
        ``compaction/summary`` event (``None`` when there is nothing to summarise). The running
        turn, if any, is kept verbatim. Raises ``LlmError`` when the summary call fails."""
        return await self._compact(agent, "forced", signal=signal, fallback=True, raising=True)

    # -- hooks --------------------------------------------------------------------------------

    def _passes(self, agent: Any) -> bool:
        """Whether ``agent``'s step passes with no window for the reasons its last passing
        step did: nothing the verdict was read from changed. The route (the last request
        header, the options: frozen, replaced whole), the model table and ``ctx.llm``
        (services: their generation), the provider's adapter (its routes' generation) and
        what providers reported (clears the verdicts) (benchmarks/README.md "Step (session
        11)"). Also the pre-step listener's ``passes`` test (the bus asks it with the
        dispatching context's agent: the loop dispatches ``agent/pre-step`` through the
        stepping agent's own context), so it never raises."""
        passing = self._passing.get(getattr(agent, "id", ""))  # (no agent: no verdict)
        if (
            passing is None
            or passing[1] is not agent.options
            or passing[2] != agent.ctx.service_generation
            or passing[4] != passing[3].adapters_generation
            or self.config.context_window is not None
        ):
            return False
        header = agent.session.request_header()
        if passing[0] is header:
            return True
        # A new header naming the same route (the first request's, which names the options'
        # route) leaves the verdict as it was: it was read from the route.
        route = _route_of(header, agent.options)
        if route != passing[5]:
            return False
        self._passing[agent.id] = (header, *passing[1:5], route)
        return True

    def _on_pre_step(self, payload: Any, next: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        # Synchronous while it knows the window without asking the provider: with no window
        # there is nothing to check, and the listener only passes the step on, returning
        # ``next()`` unawaited, which the bus steps over without a cancel scope or a frame of
        # ours (benchmarks/README.md "Step and pool (session 8)").
        agent = payload.agent
        if self._passes(agent):
            return next()
        ctx = agent.ctx
        header = agent.session.request_header()
        window, key, table = self._lookup(agent)
        if window is None:
            provider, model = key
            reported = self._reported.get(key)
            llm = ctx.llm
            if reported is None and provider and model:
                ask = getattr(llm.adapter_for(provider), "context_window", None)
                if callable(ask):
                    return self._pre_step(payload, next, None)  # the provider is asked
            window = reported if reported is not None else table.context_window(model)
            if window is None:
                self._passing[agent.id] = (
                    header,
                    agent.options,
                    ctx.service_generation,
                    llm,
                    llm.adapters_generation,
                    _route_of(header, agent.options),
                )
                return next()
        return self._pre_step(payload, next, window)

    async def _pre_step(
        self, payload: Any, next: Callable[[], Awaitable[Any]], window: int | None
    ) -> Any:
        agent = payload.agent
        if window is None:
            window = await self.resolve_window(agent)
        if window is not None:
            before = self.estimate(agent, payload.messages)
            limit = self.config.trigger_ratio * window
            cap = await _output_cap(agent)
            # The default trigger also leaves the answer room; a ratio the person set is kept.
            if (
                cap is not None
                and cap < window
                and "trigger_ratio" not in self.config.model_fields_set
            ):
                limit = min(limit, window - cap)
            if before >= limit:
                await self._compact(
                    agent,
                    "pressure",
                    signal=payload.signal,
                    where=(payload.turn, payload.step),
                    tokens_before=before,
                )
        return await next()

    async def _on_request_error(self, payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        if payload.failure.code != CONTEXT_WINDOW_EXCEEDED:
            return await next()
        agent = payload.agent
        where = (payload.turn, payload.step)
        if self._repaired.get(agent.id) == where:
            return await next()  # once per step: a second overflow stands
        self._repaired[agent.id] = where
        event = await self._compact(
            agent, "overflow", signal=payload.signal, where=where, fallback=True, in_turn=True
        )
        if event is None:
            return await next()
        from ..loop import Retry  # the loop's decisions load with the first agent

        return Retry()

    def _forget(self, payload: Any) -> None:
        agent_id = payload.agent.id
        self._repaired.pop(agent_id, None)
        self._passing.pop(agent_id, None)
        lock = self._locks.get(agent_id)
        if lock is not None and not lock.locked():
            del self._locks[agent_id]

    # -- the work -----------------------------------------------------------------------------

    async def _compact(
        self,
        agent: Any,
        reason: str,
        *,
        signal: AbortSignal | None,
        where: tuple[int, int] | None = None,
        fallback: bool = False,
        in_turn: bool = False,
        raising: bool = False,
        tokens_before: int | None = None,
    ) -> SessionEvent | None:
        lock = self._locks.setdefault(agent.id, anyio.Lock())
        async with lock:
            session: Session = agent.session
            messages = session.derive_messages()
            running = agent.turn if agent.status == "running" else None
            cut = self._cut(session, messages, running, fallback=fallback, in_turn=in_turn)
            if cut is None:
                return None
            before = tokens_before if tokens_before is not None else self.estimate(agent)
            try:
                provider, model = self._summary_route(agent)
                summary, usage = await self._summarise(
                    agent, messages[:cut], provider, model, signal
                )
            except LlmError:
                if raising:
                    raise
                _log.warning("compaction of %r failed", agent.id, exc_info=True)
                return None
            if signal is not None and signal.aborted:
                return None
            return _append(session, messages, cut, summary, usage, model, reason, before, where)

    def _cut(
        self,
        session: Session,
        messages: list[Message],
        running: int | None,
        *,
        fallback: bool,
        in_turn: bool,
    ) -> int | None:
        """How many leading surface messages to summarise (``None``: nothing worth it)."""
        turns = _surface_turns(session)
        if len(turns) != len(messages):  # a log this plugin cannot map: leave it alone
            return None
        keeps = [self.config.keep_recent_turns]
        if fallback and keeps[0] > 0:
            keeps.append(0)
        for keep in keeps:
            cut = _safe(messages, _turn_cut(turns, running, keep))
            if _worth(messages, cut):
                return cut
        if in_turn:  # keep only the latest step of the running turn
            last = max(
                (i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=0
            )
            cut = _safe(messages, last)
            if _worth(messages, cut):
                return cut
        return None

    def _summary_route(self, agent: Any) -> tuple[str, str]:
        provider, model = _route(agent)
        provider = self.config.summary_provider or provider
        model = self.config.summary_model or model
        if not provider or not model:
            raise LlmError(
                "BAD_REQUEST",
                f"compaction of agent {agent.id!r}: no provider/model for the summary call "
                "(set summary_provider/summary_model or the agent's options)",
            )
        return provider, model

    async def _summarise(
        self,
        agent: Any,
        span: Sequence[Message],
        provider: str,
        model: str,
        signal: AbortSignal | None,
    ) -> tuple[str, dict[str, Any] | None]:
        window = self.window(agent)
        transcript = _transcript(span, window * CHARS_PER_TOKEN // 2 if window else None)
        request = UserMessage(
            id=f"compaction-request-{uuid4().hex[:12]}",
            content=(TextBlock(text=transcript),),
        )
        # imported here: the App installs this plugin at start, the options class loads with
        # the first request and the assembler (with the chunk models) with the first stream
        from ..llm import BlockAssembler, GenerateOptions

        options = GenerateOptions(
            provider=provider,
            model=model,
            messages=(request,),
            system=SUMMARY_SYSTEM,
            tools=(),
            # Unset: the agent's own output cap (a local model would otherwise write on until
            # its window is full).
            max_tokens=self.config.summary_max_tokens or await _output_cap(agent),
            signal=signal,
        )
        asm = BlockAssembler()
        async for chunk in agent.ctx.llm.stream(options):
            asm.feed(chunk)
        finish = asm.finish
        kind = getattr(finish, "kind", None)
        if kind == "error":
            raise LlmError(str(getattr(finish, "code", "UNKNOWN")), getattr(finish, "message", ""))
        text = asm.message().text.strip()
        if kind not in ("stop", "max-tokens") or not text:
            raise LlmError("EMPTY_RESPONSE", f"the summary call ended {kind!r} without text")
        usage = asm.usage.model_dump(exclude_none=True) if asm.usage is not None else None
        return text, usage


# -- helpers ----------------------------------------------------------------------------------


def _route(agent: Any) -> tuple[str | None, str | None]:
    """The agent's effective provider and model: the last logged request header's, else its
    options'."""
    return _route_of(agent.session.request_header(), agent.options)


def _route_of(header: Any, options: Any) -> tuple[str | None, str | None]:
    """:func:`_route` of a request header (or ``None``) and an agent's options."""
    config = header.get("config", {}) if header else {}
    return config.get("provider") or options.provider, config.get("model") or options.model


async def _output_cap(agent: Any) -> int | None:
    """The output cap of the agent's requests: its last request's ``max_tokens`` (adapter
    defaults included), else its options', else what its provider's adapter would default it
    to (before its first request)."""
    header = agent.session.request_header()
    config = header.get("config", {}) if header else {}
    cap = config.get("max_tokens") or getattr(agent.options, "max_tokens", None)
    if cap is None:
        provider, model = _route(agent)
        if provider and model and agent.ctx.llm.adapter_for(provider) is not None:
            from ..loop import RequestConfig  # loaded with the first agent

            request = RequestConfig(provider=provider, model=model)
            cap = (await agent.ctx.llm.prepare_call(request)).config.max_tokens
    return cap if isinstance(cap, int) and cap > 0 else None


def _text_len(value: Any) -> int:
    """Characters of every string inside a JSON value (keys excluded)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_text_len(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_text_len(v) for v in value)
    return 0


def _surface_turns(session: Session) -> list[int]:
    """For each derived surface message, the turn it was logged in (0 for a summary node and
    anything logged before the first turn), folded exactly like the session folds nodes."""
    turns: list[int] = []
    turn = 0
    for event in session.events:
        kind = event.type
        if kind == TURN_START:
            turn = int(event.data.get("turn", turn))
            continue
        if kind not in SURFACE_TYPES:
            continue
        op = event.surface_op
        if isinstance(op, Mapping):
            turns[op["start"] : op["end"] + 1] = [0]
        elif kind != ASSISTANT_MESSAGE or event.data["message"].get("content"):
            turns.append(turn)  # an empty assistant message derives no node
    return turns


def _turn_cut(turns: list[int], running: int | None, keep: int) -> int:
    """The index of the first surface message of the kept turns: the last ``keep`` completed
    turns and the running one."""
    completed = sorted({t for t in turns if t > 0 and t != running})
    kept = set(completed[-keep:]) if keep else set()
    if running is not None:
        kept.add(running)
    return next((i for i, t in enumerate(turns) if t in kept), len(turns))


def _safe(messages: Sequence[Message], cut: int) -> int:
    """Move ``cut`` back until it does not separate a tool call from its result."""
    while 0 < cut < len(messages) and isinstance(messages[cut], ToolResultMessage):
        cut -= 1
    return cut


def _is_summary(message: Message) -> bool:
    return isinstance(message, UserMessage) and message.source.get("kind") == "compaction"


def _worth(messages: Sequence[Message], cut: int) -> bool:
    """Whether the span ``0..cut-1`` holds more than an earlier summary."""
    return cut > 1 or (cut == 1 and not _is_summary(messages[0]))


def _transcript(span: Sequence[Message], cap: int | None) -> str:
    lines = [_line(m) for m in span]
    body = "\n\n".join(lines)
    if cap is not None and len(body) > cap:
        body = "[... earliest part omitted ...]\n" + body[-cap:]
    return f"Summarise this conversation:\n\n{body}"


def _line(message: Message) -> str:
    if isinstance(message, ToolResultMessage):
        label = "Tool error" if message.is_error else "Tool result"
        return f"{label} ({message.name or message.call_id}): {_clip(message.text)}"
    if isinstance(message, AssistantMessage):
        parts = [message.text] if message.text else []
        parts += [f"[called {c.name}({_clip(c.arguments)})]" for c in message.tool_calls]
        return "Assistant: " + _clip(" ".join(parts))
    if _is_summary(message):
        return "Earlier summary: " + _clip(message.text)
    return "User: " + _clip(message.text)


def _clip(text: str) -> str:
    return text if len(text) <= _ITEM_CAP else text[:_ITEM_CAP] + " [...]"


def _append(
    session: Session,
    messages: Sequence[Message],
    cut: int,
    summary: str,
    usage: dict[str, Any] | None,
    model: str,
    reason: str,
    before: int,
    where: tuple[int, int] | None,
) -> SessionEvent:
    node = UserMessage(
        id=f"compaction-{uuid4().hex[:12]}",
        content=(TextBlock(text=f"{SUMMARY_PREFIX}\n{summary}"),),
        source={"kind": "compaction"},
    )
    removed = sum(_text_len(m.model_dump(mode="json")) for m in messages[:cut])
    after = max(0, before - math.ceil((removed - len(node.text)) / CHARS_PER_TOKEN))
    data: dict[str, Any] = {
        "start": 0,
        "end": cut - 1,
        "summary": summary,
        "tokens_before": before,
        "tokens_after_estimate": after,
        "model": model,
        "message": node.model_dump(mode="json"),
        "reason": reason,
    }
    if usage is not None:
        data["usage"] = usage
    if where is not None:
        data["turn"], data["step"] = where
    return session.append(
        COMPACTION_SUMMARY, data, surface_op={"op": "replace", "start": 0, "end": cut - 1}
    )
