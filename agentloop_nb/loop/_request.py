"""The request path of one agent: from the ``agent/request`` proposal to a settled model reply.

One attempt: build the proposal → ``agent/request`` waterfall → ``ctx.llm.prepare_call`` (the
adapter's defaults, its retry policy and the exact adapter object) → ``request/header`` when it
changed → stream through ``ctx.llm.stream(..., prepared=...)``, each chunk announced live on
``session/chunk`` and logged coalesced as ``assistant/chunk`` events (``Session.open_chunks``:
a text block's deltas joined, a tool-call block once, when it ends, as the block the assembler
built). A terminal error finish logs ``assistant/attempt`` and runs the
``agent/request-error`` waterfall; ``Retry()`` starts another attempt of the same step, any
other answer raises the failure as an :class:`LlmError`. The system prompt is rendered once the
attempt's config is prepared, so the loop's ``provider``/``model`` variables name the request
actually sent (see :func:`effective_assembly`).

Between requests the path remembers the proposal: the config the last ``agent/request``
waterfall returned, so explicit settings persist from step to step and across route changes.
Fields the adapter supplied are never part of it (they are filled again by whichever adapter
serves the next request), which is what the header's ``adapter_defaults`` list records. A
new ``agent.options`` object restarts the proposal from the options.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from .._creation import AgentOptions
from .._event_names import ASSISTANT_ATTEMPT, REQUEST_HEADER
from .._hook_names import AGENT_REQUEST, AGENT_REQUEST_ERROR
from .._model_slots import built
from .._step_decisions import RequestConfig, RequestPayload, Retry
from ..context import Lazy, listened
from ..errors import InvalidTypeError
from ..llm import LlmError, PreparedCall, RequestFacts
from ..session import FrozenDict, freeze_json
from ..session._frozen import Fallback, freeze_fields, wrap_frozen
from ..signals import AbortError
from ._header import frozen_header
from ._prompt_vars import CWD_NOT_SHARED, configured_model, configured_provider, shared_cwd

if TYPE_CHECKING:
    from .._request_error import RequestErrorPayload
    from ..context import Context
    from ..llm import BlockAssembler, GenerateOptions
    from ..prompt import Assembly
    from ..session import Session
    from ..signals import AbortSignal


# Annotations only (a protocol class costs its creation at import): type checkers see them.
if TYPE_CHECKING:

    class _Options(Protocol):
        @property
        def provider(self) -> str | None: ...
        @property
        def model(self) -> str | None: ...
        @property
        def max_tokens(self) -> int | None: ...
        @property
        def temperature(self) -> float | None: ...
        @property
        def reasoning_effort(self) -> str | None: ...

    class _Agent(Protocol):
        """The slice of ``Agent`` the request path reads (a Protocol, so this module does not
        import the agent module that owns it)."""

        @property
        def id(self) -> str: ...
        @property
        def options(self) -> _Options: ...
        @property
        def ctx(self) -> Context: ...
        @property
        def session(self) -> Session: ...


class Reply:
    """A settled model reply: the folded chunks, the finish kind (``None`` when the stream
    ended without one) and the seqs of the ``assistant/chunk`` events it was logged in.

    It also keeps what the chunk log froze that the ``assistant/message`` event holds again,
    so that event shares it instead of freezing the same fields twice (session 14; equal
    content either way): ``block_dumps``, each ``(block, frozen)`` a tool-call block's
    ``block-end`` logged, in the order they were logged, and ``usage_dump``, ``(usage,
    frozen)`` of the last ``usage`` chunk (what its chunk data holds of the usage, logged or
    left out as implied: the usage's ``flat_dump``, equal either way)."""

    __slots__ = ("assembler", "block_dumps", "chunk_seqs", "kind", "usage_dump")

    def __init__(self, assembler: BlockAssembler) -> None:
        self.assembler = assembler
        self.kind: str | None = None
        self.chunk_seqs: list[int] = []
        self.block_dumps: list[tuple[Any, FrozenDict]] = []
        self.usage_dump: tuple[Any, FrozenDict] | None = None


_PROMPT_VARIABLES = (
    ("provider", configured_provider, "provider"),
    ("model", configured_model, "model"),
)


def effective_assembly(assembly: Assembly, agent: Any, config: RequestConfig) -> Assembly:
    """``assembly`` with the loop's ``provider``/``model`` variables naming the request that
    is actually sent (``config``: after ``agent/request`` and the adapter's defaults), not the
    agent's options. The assembly is built before the step's ``agent/request`` runs, so a
    variable still holding what the loop's own variable gave at assembly time is replaced; a
    value that differs from it (a plugin's own variable of that name, or an assemble listener's
    edit) is kept."""
    options = agent.options
    if config.provider == options.provider and config.model == options.model:
        return assembly  # the common case: the request is what the agent is configured for
    variables = assembly.variables
    updates: dict[str, str | None] = {}
    for name, configured, field in _PROMPT_VARIABLES:
        value = variables.get(name)
        wanted = getattr(config, field, None)
        if wanted and value != wanted and value == configured(agent):
            updates[name] = wanted
    cwd = variables.get("cwd")
    if config.provider != options.provider and cwd is not None and cwd == shared_cwd(agent):
        # Rerouted: the working directory goes only where the request actually goes.
        adapter = agent.ctx.llm.adapter_for(config.provider) if config.provider else None
        if not getattr(adapter, "is_local", False):
            updates["cwd"] = CWD_NOT_SHARED
    if not updates:
        return assembly
    return assembly.replace(variables=MappingProxyType({**variables, **updates}))


def seed_config(options: _Options) -> RequestConfig:
    """The first proposal of an agent: its options as a request config."""
    if type(options) is AgentOptions and not options.__pydantic_extra__:
        # fast path (docs/architecture.md "Turn, session 14"): validated options hold exact
        # values of the config's own types, which validation would pass through unchanged;
        # the config is built from them as its constructor builds it (every field named)
        fields = options.__dict__
        if tuple(fields) == _CONFIG_FIELDS and all(
            value is None or type(value) is kind
            for value, kind in zip(fields.values(), _CONFIG_TYPES, strict=True)
        ):
            config: RequestConfig = built(RequestConfig, dict(fields), set(_CONFIG_FIELDS))
            return config
    return RequestConfig(
        provider=options.provider,
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        reasoning_effort=options.reasoning_effort,
    )


# ``AgentOptions`` and ``RequestConfig`` declare the same fields in the same order (checked
# per call: an options object with others takes the constructor); a value of its field's
# exact type (or ``None``) is what validation passes through unchanged (an ``int``
# temperature would become a ``float``, so it takes the constructor).
_CONFIG_FIELDS = tuple(RequestConfig.model_fields)
_CONFIG_TYPES = (str, str, int, float, str)


def explicit_config(header: dict[str, Any] | None) -> dict[str, Any]:
    """A logged ``request/header``'s config without the fields its adapter supplied: what a
    resumed agent may take as its explicit settings."""
    if not header:
        return {}
    marked = set(header.get("adapter_defaults", ()))
    config = header.get("config", {})
    return {k: v for k, v in config.items() if k not in marked and v is not None}


class RequestPath:
    """Owns one agent's request state: the next proposal and the last logged header.

    :meth:`request` runs the attempt loop of one step (see the module docstring). It raises
    ``LlmError`` for a failure no ``agent/request-error`` listener retried, ``TypeError`` for
    a listener answering the wrong type, ``LlmError("BAD_REQUEST")`` for a config without
    provider or model, ``AbortError`` when the turn's signal interrupts a hook or the preparation, and whatever
    a listener or ``prepare_call`` raises. Cancellation: every hook and the preparation run
    under the turn's signal; the stream ends ``aborted`` on its own when the signal fires.
    """

    __slots__ = (
        "_agent",
        "_header_inputs",
        "_last_header",
        "_names",
        "_options",
        "_proposal",
        "_resumed",
        "_services",
    )

    def __init__(self, agent: _Agent, *, resumed: bool = False) -> None:
        self._agent = agent
        self._resumed = resumed
        self._options: _Options | None = None
        self._proposal: RequestConfig | None = None
        self._last_header: dict[str, Any] | None = None
        # ``listened(agent.ctx)``, a live container, once the first request asked
        self._names: Container[str] | None = None
        # The inputs that built ``_last_header``: (config, adapter_defaults, system, tools).
        self._header_inputs: tuple[RequestConfig, frozenset[str], str, Any] | None = None
        # (service generation, ctx.llm, ctx.system_prompt, ctx.agent_loop) as last resolved.
        self._services: tuple[int, Any, Any, Any] = (-1, None, None, None)

    async def request(self, turn: int, step: int, assembly: Any, signal: AbortSignal) -> Reply:
        """Run step ``step`` of turn ``turn``'s model request until a reply settles that is not
        an error (an aborted or truncated one included); raises as the class docstring says."""
        agent = self._agent
        ctx = agent.ctx
        session = agent.session
        attempt = 0
        while True:
            attempt += 1
            # fast path (benchmarks/README.md "Step (session 12)"): unobserved, the proposal
            # without the waterfall's coroutine
            config = self._config_now(signal)
            if config is None:
                config = await self._config(turn, step, signal)
            # fast path (benchmarks/README.md "Step (session 11)"): the services as last
            # resolved while none was provided or withdrawn since (a frame per read saved)
            services = self._services
            if services[0] != ctx.service_generation:
                services = self._services = (
                    ctx.service_generation,
                    ctx.llm,
                    ctx.system_prompt,
                    ctx.agent_loop,
                )
            _, llm, system_prompt, agent_loop = services
            # Bounded by the signal inside (AbortError); a sync adapter never suspends here.
            prepared: PreparedCall[RequestConfig] = await llm.prepare_call(config, signal=signal)
            system = system_prompt.render(effective_assembly(assembly, agent, prepared.config))
            tools = assembly.tools
            if type(tools) is not tuple:
                tools = tuple(tools)
            self._log_header(prepared, system, tools)
            effective = prepared.config
            # fast path (benchmarks/README.md "Step (session 12)"): the frozen dataclass's
            # slots set directly, what its ``__init__`` does
            options = (_OPTIONS or _options_maker())(
                effective.provider or "",
                effective.model or "",
                session.derive_messages_tuple(),
                system,
                tools,
                effective.max_tokens,
                effective.reasoning_effort,
                effective.temperature,
                session.id,
                signal,
            )
            # The loop-wide model gate (``max_concurrent_model_calls``): waiting for a slot
            # is bounded by the signal (AbortError), like the preparation above.
            gate = agent_loop.limits.model_calls
            if not gate.try_acquire():
                await gate.acquire(signal)
            try:
                reply = await self._stream(llm, options, prepared, turn, step)
            finally:
                gate.release()
            if reply.kind != "error":
                return reply
            await self._recover(reply, prepared, options, turn, step, attempt, signal)

    def _config_now(self, signal: AbortSignal) -> RequestConfig | None:
        """The step's config when no ``agent/request`` listener can change it (the usual
        case): the proposal, checked as :meth:`_config` checks its answer. ``None`` when the
        waterfall must run (then :meth:`_config`, which finds the proposal up to date)."""
        agent = self._agent
        options = agent.options
        if self._proposal is None or self._options is not options:
            self._options, self._proposal = options, seed_config(options)
        names = self._names
        if names is None:  # live: asked once, tested at every request
            names = self._names = listened(agent.ctx)
        if AGENT_REQUEST in names:
            return None
        if signal.aborted:  # the waterfall's answer, without dispatching (a C-level getter)
            raise AbortError(signal.reason)
        config = self._proposal
        if not config.provider or not config.model:
            raise _no_route(agent.id)
        return config

    async def _config(self, turn: int, step: int, signal: AbortSignal) -> RequestConfig:
        """The ``agent/request`` waterfall's answer to the proposal (see :meth:`_config_now`),
        checked; it is the next step's proposal."""
        agent = self._agent
        proposal = self._proposal
        assert proposal is not None, "_config_now set the proposal"
        config = await agent.ctx.waterfall(
            AGENT_REQUEST,
            Lazy(RequestPayload, _facade(agent), turn, step, proposal, signal),
            partial(_same, proposal),
            signal=signal,
        )
        if not isinstance(config, RequestConfig):
            raise InvalidTypeError(
                f"an agent/request listener returned {config!r}; return a RequestConfig "
                "(e.g. payload.config.model_copy(update={...}))"
            )
        if not config.provider or not config.model:
            raise _no_route(agent.id)
        # The waterfall's answer, before any adapter default: the next step's proposal.
        self._proposal = config
        return config

    def _log_header(
        self, prepared: PreparedCall[RequestConfig], system: str, tools: tuple[Any, ...]
    ) -> None:
        config, marks = prepared.config, prepared.adapter_defaults
        last = self._header_inputs
        if (
            last is not None
            and self._last_header is not None
            and (config is last[0] or config == last[0])
            and marks == last[1]
            and system == last[2]
            and tools == last[3]
        ):
            return  # the same inputs build the same header: nothing to log, nothing to dump
        self._header_inputs = (config, marks, system, tools)
        header: dict[str, Any] = {
            "config": _config_dump(config),
            "system": system,
            "tools": list(tools),
        }
        if marks:  # absent when the adapter supplied nothing: such headers stay as they were
            header["adapter_defaults"] = sorted(marks)
        if self._last_header is None:
            reason = "resume" if self._resumed else "initial"
        elif header != self._last_header:
            reason = "change"
        else:
            return
        # fast path (docs/architecture.md "Turn, session 16"): frozen here, each tool schema
        # once while its dict and content stand, not walked by the append at every header
        data = frozen_header(header, reason)
        self._agent.session.append(
            REQUEST_HEADER, {"header": header, "reason": reason} if data is None else data
        )
        self._last_header = header

    async def _stream(
        self,
        llm: Any,
        options: GenerateOptions,
        prepared: PreparedCall[RequestConfig],
        turn: int,
        step: int,
    ) -> Reply:
        asm = (_ASSEMBLER or _assembler_class())()
        reply = Reply(asm)
        log = self._agent.session.open_chunks(turn, step, partial(_block_json, reply))
        add, feed, hold, end = log.add, asm.feed, log.add_tool_part, log.end_tool_block
        # The finish the message implies, once the stream has ended normally: the log leaves
        # out a tail (usage, finish) that message stands for (log version 3, ``ChunkLog``).
        implied: str | None = None
        try:
            async for chunk in llm.stream(options, prepared=prepared):
                feed(chunk)  # first: a tool-call block's end is resolved from the assembler
                kind = chunk.type
                if kind in _FLAT_CHUNKS:
                    # fast path (benchmarks/README.md "Step (session 11)"): a tool-call
                    # block's parts are held unfrozen (the block is logged once assembled)
                    if kind == "tool-call-delta" or (
                        kind == "block-start" and chunk.block_type == "tool-call"
                    ):
                        hold(kind, chunk.index, chunk, _chunk_data)
                        continue
                    # ... and so is its end (session 14), unless it carries its own block
                    if (
                        kind == "block-end"
                        and chunk.block is None
                        and end(chunk.index, chunk, _chunk_data)
                    ):
                        continue
                    # fast path (benchmarks/README.md "Step (session 10)"): a flat chunk
                    # (every streamed token) is frozen here, without ``_chunk_data``'s frame
                    try:
                        data = freeze_fields(chunk.__dict__)
                    except Fallback:
                        data = _chunk_data(chunk)
                elif kind == "usage":
                    # kept: the message's ``usage`` shares this chunk's frozen usage (session
                    # 14), also when the log leaves the chunk out as implied by the message
                    data = _chunk_data(chunk)
                    reply.usage_dump = (chunk.usage, data["usage"])
                else:
                    data = _chunk_data(chunk)
                add(data)
            implied = "tool-calls" if asm.calls_tools() else "stop"
        finally:
            reply.chunk_seqs = log.close(implied)
        reply.kind = getattr(asm.finish, "kind", None)
        return reply

    async def _recover(
        self,
        reply: Reply,
        prepared: PreparedCall[RequestConfig],
        options: GenerateOptions,
        turn: int,
        step: int,
        attempt: int,
        signal: AbortSignal,
    ) -> None:
        """Log the failed attempt and ask ``agent/request-error``; return to retry, else raise
        the failure."""
        agent = self._agent
        failure: Any = reply.assembler.finish
        agent.session.append(
            ASSISTANT_ATTEMPT,
            {
                "turn": turn,
                "step": step,
                "chunks": reply.chunk_seqs,
                "failure": failure.model_dump(mode="json", exclude_none=True),
            },
        )
        decision = await agent.ctx.waterfall(
            AGENT_REQUEST_ERROR,
            Lazy(
                _request_error_payload,
                agent,
                turn,
                step,
                failure,
                signal,
                attempt,
                prepared,
                options,
            ),
            None,
            signal=signal,
        )
        if not isinstance(decision, Retry):
            raise LlmError.from_finish(failure)


def _same(value: Any) -> Any:
    return value


def _no_route(agent_id: str) -> LlmError:
    return LlmError(
        "BAD_REQUEST",
        f"agent {agent_id!r} has no provider/model: pass AgentOptions(provider=..., "
        "model=...) or supply them from an agent/request listener",
    )


# ``request_options`` (a ``GenerateOptions``), once the first request has loaded it (``import
# agentloop_nb`` does not: a dataclass compiles its methods when the class is made); a global
# read per request after.
_OPTIONS: Callable[..., GenerateOptions] | None = None


def _options_maker() -> Callable[..., GenerateOptions]:
    global _OPTIONS
    from ..llm._options import request_options

    _OPTIONS = request_options
    return request_options


# ``BlockAssembler``, once the first stream has loaded it with the chunk models (a dozen pydantic
# classes ``import agentloop_nb`` does not build); a global read per request after.
_ASSEMBLER: type[BlockAssembler] | None = None


def _assembler_class() -> type[BlockAssembler]:
    global _ASSEMBLER
    from ..llm import BlockAssembler

    _ASSEMBLER = BlockAssembler
    return BlockAssembler


def _request_error_payload(
    agent: _Agent,
    turn: int,
    step: int,
    failure: Any,
    signal: AbortSignal,
    attempt: int,
    prepared: PreparedCall[RequestConfig],
    options: GenerateOptions,
) -> RequestErrorPayload:
    from .._request_error import RequestErrorPayload  # a failed request: the chunks loaded

    facts = RequestFacts.of(options.provider, options.model, failure)
    return RequestErrorPayload(
        _facade(agent), turn, step, failure, signal, attempt, prepared.retry_policy, facts
    )


def _facade(agent: _Agent) -> Any:
    """The agent as hook payloads carry it (typed there as the public ``Agent``)."""
    return agent


_FLAT_CHUNKS = frozenset(
    {"text-delta", "reasoning-delta", "tool-call-delta", "block-start", "block-end"}
)


def flat_dump(model: Any) -> dict[str, Any]:
    """``model.model_dump(mode="json", exclude_none=True)`` of a flat model (scalar fields,
    e.g. ``Usage``), frozen straight from its validated fields when they are plain scalars."""
    try:
        return freeze_fields(model.__dict__)
    except Fallback:
        dumped: dict[str, Any] = model.model_dump(mode="json", exclude_none=True)
        return dumped


def _config_dump(config: RequestConfig) -> dict[str, Any]:
    """``config.model_dump(exclude_none=True)``, frozen from its fields by :func:`flat_dump`
    (so logging the header does not walk it again) unless it holds extra values, which its
    fields do not."""
    if config.__pydantic_extra__:
        dumped: dict[str, Any] = config.model_dump(exclude_none=True)
        return dumped
    return flat_dump(config)


def _block_json(reply: Reply, index: int) -> FrozenDict | None:
    """Block ``index`` of ``reply``'s assembler as logged JSON (the form a ``block-end``
    carrying it has), kept in ``reply.block_dumps``."""
    block = reply.assembler.block(index)
    if block is None:
        return None
    try:  # fast path: a tool-call block's fields are plain strings
        data = freeze_fields(block.__dict__)
    except Fallback:
        data = freeze_json(
            block.model_dump(mode="json", exclude_none=True), label="block", root="block"
        )
    reply.block_dumps.append((block, data))
    return data


# The logged ``finish`` chunk of each reason that holds nothing but its kind, one frozen value
# shared by every response that ends so (session 14: two tracked objects a step fewer for
# the cyclic GC to walk while the session lives; frozen values are shared as a load shares
# them, ``freeze_trusted``).
_FINISHED = {
    kind: wrap_frozen({"type": "finish", "reason": wrap_frozen({"kind": kind})})
    for kind in ("stop", "tool-calls", "max-tokens", "aborted")
}


def _chunk_data(chunk: Any) -> FrozenDict:
    """The chunk as logged (frozen) JSON: ``chunk.model_dump(mode="json", exclude_none=True)``.
    Every chunk model is flat or holds one flat model (usage, finish reason), so the common
    chunks are frozen straight from their validated fields, skipping pydantic's serializer and
    a second walk (this runs once per streamed token). Anything else (a ``block-end`` carrying
    its ``block``, a field that is not a plain scalar) is dumped and checked normally."""
    kind = chunk.type
    try:  # fast path (benchmarks/bench_loop.py ingest): fields frozen, no serializer
        if kind in _FLAT_CHUNKS:
            return freeze_fields(chunk.__dict__)
        if kind == "usage":
            return wrap_frozen({"type": kind, "usage": freeze_fields(chunk.usage.__dict__)})
        if kind == "finish":
            reason = chunk.reason.__dict__
            if len(reason) == 1:  # a reason that is only its kind: one shared chunk each
                shared = _FINISHED.get(reason.get("kind"))
                if shared is not None:
                    return shared
            return wrap_frozen({"type": kind, "reason": freeze_fields(reason)})
    except Fallback:
        pass
    data: FrozenDict = freeze_json(
        chunk.model_dump(mode="json", exclude_none=True), label=f"chunk {kind!r}", root="chunk"
    )
    return data
