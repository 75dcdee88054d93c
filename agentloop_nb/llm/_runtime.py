"""``LlmRuntime``: the ``ctx.llm`` service. Routes a ``GenerateOptions`` to the adapter
registered for its provider through the ``llm/stream`` waterfall, and normalises whatever comes
back into a stream that always ends with exactly one ``Finish`` chunk.

Error policy (why it is split this way): problems of the *model call* (no adapter, an adapter
raising, a truncated stream, an abort) become terminal finish chunks, so the loop can log them and
run its request-error recovery. An exception raised by an ``llm/stream`` *listener* while the
waterfall runs is a plugin bug and propagates (a raising plugin ends the turn), except
``LlmError``, which by definition describes a failed model call and becomes an error finish.

Cancellation: awaits that run once per call (an awaitable adapter ``defaults``) use the
package's abort idiom (``signal.run``). The per-chunk stream guard is the one documented
exception: an :class:`~agentloop_nb.signals.AbortScope` per streamed chunk costs about 20 µs
(an anyio cancel scope entered and left per token, far more than the rest of a chunk's
ingest), so the guard instead registers one callback per stream (``AbortWatch``, in
``_abort_watch``) that cancels only the task parked in the adapter's ``__anext__`` await, and
only while it is parked there.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .._disposer import Disposer
from .._fiber import is_awaitable
from .._hook_names import LLM_STREAM
from .._scoped import BoundView
from ..context import EVERY_NAME, Lazy, listened
from ..errors import InvalidTypeError
from ..signals import AbortError
from ._errors import LlmError
from ._prepare import C, PreparedCall, RetryPolicy, as_retry_policy, restrict_defaults

if TYPE_CHECKING:
    from types import ModuleType

    from ..signals import AbortSignal
    from ._chunks import Finish, StreamChunk
    from ._options import GenerateOptions

# The stream guard with its finish constants (and so the chunk models), once the first stream
# has loaded it: ``import agentloop_nb`` and ``App()`` do not (start-up cost), a stream then
# pays one global read.
_G: ModuleType | None = None


def _guards() -> ModuleType:
    global _G
    from . import _guard

    _G = _guard
    return _guard


class Adapter(Protocol):
    """What ``register_adapter`` accepts: ``stream(options)`` returning an async iterator of
    chunks (usually an async generator method). ``aclose()`` on the iterator is optional.

    Optional members, read when the adapter is registered: ``defaults(config) -> dict`` (or an awaitable of one)
    names default values for request-config fields the proposal leaves unset, e.g.
    ``{"max_tokens": 4096}``; ``retry_policy`` (a :class:`RetryPolicy`) is the registration's
    policy when ``register_adapter`` is given none."""

    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]: ...


class _Registration:
    """One ``register_adapter`` call: the adapter, its policy, its ``defaults`` hook (read once,
    when registered) and the last prepared call (reused for the same config object and the
    same defaults, so a step that changes nothing costs no validation)."""

    __slots__ = ("adapter", "defaults", "last", "retry_policy")

    def __init__(self, adapter: Any, retry_policy: RetryPolicy | None) -> None:
        self.adapter = adapter
        self.retry_policy = retry_policy
        self.defaults: Callable[[Any], Any] | None = getattr(adapter, "defaults", None)
        self.last: tuple[Any, dict[str, Any], PreparedCall[Any]] | None = None


# An annotation only (a protocol class costs its creation at import): type checkers see it.
if TYPE_CHECKING:

    class _Dispatcher(Protocol):
        """The slice of ``Context`` this service uses."""

        async def waterfall(self, name: str, payload: Any, default: Callable[[], Any]) -> Any: ...


async def _single(chunk: Finish) -> AsyncIterator[StreamChunk]:
    yield chunk


class _Stream:
    """The iterator ``LlmRuntime.stream`` returns. The waterfall runs on the first
    ``__anext__``; afterwards ``__anext__`` is the guard's own, so the steady state costs no
    Python frame per chunk on top of the guard."""

    __slots__ = ("_adapter", "_ctx", "_inner", "_next", "_options", "_runtime")

    def __init__(
        self, runtime: LlmRuntime, ctx: _Dispatcher, options: GenerateOptions, adapter: Any
    ) -> None:
        self._runtime = runtime
        self._ctx = ctx
        self._options = options
        self._adapter = adapter
        self._inner: AsyncIterator[StreamChunk] | None = None
        self._next: Callable[[], Awaitable[StreamChunk]] = self._first

    def __aiter__(self) -> _Stream:
        return self

    if TYPE_CHECKING:

        def __anext__(self) -> Awaitable[StreamChunk]: ...
    else:
        # fast path (benchmarks/README.md "Step (session 11)"): ``__anext__`` is the current
        # ``_next`` itself, read by a C-level getter and called by ``async for`` (the type's
        # slot calls what the property answers): no Python frame per chunk.
        __anext__ = property(operator.attrgetter("_next"))

    def _first(self) -> Awaitable[StreamChunk]:
        """The first ``__anext__``. Unobserved (and not aborted), the stream is opened here and
        the awaitable handed out is the inner stream's own first one: no coroutine of this
        stream's own (docs/architecture.md "Step, session 13"); else :meth:`_start`'s."""
        options = self._options
        signal = options.signal
        # (``listened`` inlined: a frame a request)
        if (signal is not None and signal.aborted) or LLM_STREAM in getattr(
            self._ctx, "listened", EVERY_NAME
        ):
            return self._start()
        try:
            # fast path (benchmarks/README.md "Step (session 11)", unobserved hook): the
            # default itself, undispatched
            inner = self._runtime._dispatch(options, self._adapter)
        except BaseException:
            self._next = _closed  # as ``_start``: a failed open ends this stream
            raise
        self._inner = inner
        # fast path (benchmarks/bench_loop.py ingest): later chunks skip this frame
        anext_ = self._next = inner.__anext__
        return anext_()

    async def _start(self) -> StreamChunk:
        """The first ``__anext__`` through the ``llm/stream`` waterfall (see :meth:`_open`)."""
        try:
            inner = await self._open()
        except BaseException:
            self._next = _closed  # a raising listener ends this stream; never re-run the chain
            raise
        self._inner = inner
        self._next = inner.__anext__
        return await self._next()

    async def _open(self) -> AsyncIterator[StreamChunk]:
        g = _G or _guards()
        options = self._options
        signal = options.signal
        if signal is not None and signal.aborted:
            return _single(g.ABORTED)
        runtime = self._runtime
        adapter = self._adapter
        if LLM_STREAM not in listened(self._ctx):
            # fast path (benchmarks/bench_ab.py, unobserved hooks): the default itself, undispatched
            return runtime._dispatch(options, adapter)
        produced: list[AsyncIterator[StreamChunk]] = []

        async def default() -> AsyncIterator[StreamChunk]:
            guarded = runtime._dispatch(options, adapter)
            produced.append(guarded)
            return guarded

        try:
            # observed: the payload's class loaded with ``options``' (``_options``)
            from ._options import LlmStreamPayload

            source = await self._ctx.waterfall(LLM_STREAM, Lazy(LlmStreamPayload, options), default)
            if is_awaitable(source):  # a dispatcher that hands back default's coroutine
                source = await source
        except LlmError as exc:
            return _single(g.Finish(reason=exc.to_finish()))
        if produced and source is produced[-1]:
            return source  # already normalised: do not pay for a second guard
        if source is None or not hasattr(source, "__anext__"):
            return _single(
                g.error_finish(
                    "UNKNOWN",
                    f"an 'llm/stream' listener returned {type(source).__name__}, "
                    "not an async iterator of chunks",
                )
            )
        return g.guard(source, signal)

    async def aclose(self) -> None:
        """Stop early; closes the adapter's iterator."""
        inner, self._inner = self._inner, None
        self._next = _closed
        if inner is not None:
            await (_G or _guards()).aclose_quietly(inner)


async def _closed() -> StreamChunk:
    raise StopAsyncIteration


def _pinned(prepared: PreparedCall[Any] | None) -> Any:
    return None if prepared is None else prepared.adapter


class LlmRuntime:
    """The ``ctx.llm`` service.

    ``register_adapter`` raises ``LlmError("DUPLICATE_ADAPTER")`` naming a provider that already
    has an adapter. ``stream`` never raises for model-call problems (see the module docstring).
    Reached through a context (``ctx.llm``) it is a :class:`BoundLlmRuntime` whose registrations
    are owned by that context's scope and whose ``llm/stream`` dispatch goes through it.
    """

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._adapters: dict[str, _Registration] = {}
        #: Bumped whenever a route is registered or removed: what :meth:`adapter_for` answers
        #: for any provider is unchanged while this is (a per-step reader keeps its answer).
        self.adapters_generation = 0

    def __bind__(self, ctx: Any) -> BoundLlmRuntime:
        return BoundLlmRuntime(self, ctx)

    def register_adapter(
        self,
        providers: Iterable[str],
        adapter: Any,
        *,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
    ) -> Disposer:
        """Route each of ``providers`` to ``adapter``. All-or-nothing: a provider that is already
        registered (or listed twice) raises ``LlmError("DUPLICATE_ADAPTER")`` and registers none.
        The disposer removes exactly these routes (a later replacement is left alone).

        ``retry_policy`` (a :class:`RetryPolicy` or a mapping of its fields) is the policy
        prepared calls on these routes carry; without one the adapter's own ``retry_policy``
        attribute is used, if any. Raises ``TypeError`` (or pydantic's ``ValidationError``) for
        a malformed policy."""
        if isinstance(providers, str):
            providers = [providers]
        names = list(providers)
        if not hasattr(adapter, "stream"):
            raise InvalidTypeError(
                f"adapter for {names} has no stream(options) method; an adapter is any object "
                "whose stream(options) returns an async iterator of StreamChunks"
            )
        seen: set[str] = set()
        for name in names:
            if name in self._adapters or name in seen:
                raise LlmError(
                    "DUPLICATE_ADAPTER",
                    f"provider {name!r} already has an adapter; dispose the earlier "
                    "registration first",
                )
            seen.add(name)
        policy = as_retry_policy(retry_policy, label=f"retry_policy for {names}")
        if policy is None:
            policy = as_retry_policy(
                getattr(adapter, "retry_policy", None),
                label=f"{type(adapter).__name__}.retry_policy",
            )
        registration = _Registration(adapter, policy)
        for name in names:
            self._adapters[name] = registration
        self.adapters_generation += 1

        def remove() -> None:
            for name in names:
                if self._adapters.get(name) is registration:
                    del self._adapters[name]
                    self.adapters_generation += 1

        return Disposer(remove)

    def providers(self) -> list[str]:
        """The registered provider names, sorted."""
        return sorted(self._adapters)

    def adapter_for(self, provider: str) -> Any | None:
        """The adapter registered for ``provider``, or ``None``."""
        registration = self._adapters.get(provider)
        return None if registration is None else registration.adapter

    async def prepare_call(
        self, config: C, *, signal: AbortSignal | None = None
    ) -> PreparedCall[C]:
        """Resolve ``config`` (a frozen pydantic request config with ``provider`` and
        ``model`` fields) against the adapter registered for its provider.

        The adapter's ``defaults(config)`` fill the fields ``config`` leaves unset (``None``);
        explicit settings always win. The result keeps the registration's retry policy and the
        exact adapter object. No adapter for the provider: the config is returned unchanged
        with no policy and ``adapter=None`` (an ``llm/stream`` listener may still serve it).

        Raises ``AbortError`` when ``signal`` aborts before or while an awaitable ``defaults``
        runs (the await is cancelled), ``TypeError`` when ``defaults`` answers something other
        than a mapping of config fields, pydantic's ``ValidationError`` when a default does not
        fit its field, and whatever ``defaults`` itself raises. A synchronous ``defaults`` (or
        none) never suspends."""
        registration = self._adapters.get(str(getattr(config, "provider", None) or ""))
        if registration is None:
            return PreparedCall(config)
        update: dict[str, Any] = {}
        defaults = registration.defaults
        if defaults is not None:
            if signal is not None and signal.aborted:
                raise AbortError(signal.reason)
            proposed = defaults(config)
            if is_awaitable(proposed):
                proposed = await (proposed if signal is None else signal.run(proposed))
            update = restrict_defaults(registration.adapter, config, proposed)
        last = registration.last
        if last is not None and last[0] is config and last[1] == update:
            return last[2]  # frozen: the same inputs may share one prepared call
        effective = config
        if update:  # validated: a default must fit its field
            effective = type(config).model_validate({**config.__dict__, **update})
        prepared = PreparedCall(
            effective, frozenset(update), registration.retry_policy, registration.adapter
        )
        registration.last = (config, update, prepared)
        return prepared

    def stream(
        self, options: GenerateOptions, *, prepared: PreparedCall[Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Stream one model call through the ``llm/stream`` waterfall.

        The result ends with exactly one ``Finish``: ``NO_ADAPTER`` when no adapter serves
        ``options.provider``; the ``LlmError``'s code (or ``UNKNOWN``) when the adapter raises;
        ``TRANSPORT`` when it stops without a finish; ``Finish(Aborted())`` as soon as
        ``options.signal`` aborts (the adapter's iterator is closed). Chunks after a finish are
        dropped. ``aclose()`` the result to stop early.

        With ``prepared`` (from :meth:`prepare_call`) the waterfall's default dispatches to
        ``prepared.adapter``, the object the call was prepared against, even if the provider's
        registration changed since; a prepared call without an adapter looks the provider up
        at dispatch time.
        """
        return _Stream(self, self._ctx, options, _pinned(prepared))

    def _dispatch(
        self, options: GenerateOptions, adapter: Any = None
    ) -> AsyncIterator[StreamChunk]:
        """The waterfall's default: the adapter's stream, already normalised. ``adapter`` is
        the prepared call's pinned adapter; ``None`` looks the provider up now."""
        g = _G or _guards()
        if adapter is None:
            adapter = self.adapter_for(options.provider)
        if adapter is None:
            known = ", ".join(repr(p) for p in sorted(self._adapters)) or "none"
            return _single(
                g.error_finish(
                    "NO_ADAPTER",
                    f"no adapter is registered for provider {options.provider!r} "
                    f"(registered: {known}); register one with ctx.llm.register_adapter",
                )
            )
        try:
            source = adapter.stream(options)
        except Exception as exc:
            return _single(g.exception_finish(exc))
        return g.guard(source, options.signal)


class BoundLlmRuntime(BoundView["LlmRuntime"]):
    """``ctx.llm`` seen from one context: adapters registered here are disposed with that
    context's scope, and ``stream`` dispatches ``llm/stream`` through that context (so an
    agent's own listeners apply when the loop streams through ``agent.ctx.llm``)."""

    __slots__ = ()

    @property
    def runtime(self) -> LlmRuntime:
        return self.service

    if TYPE_CHECKING:

        @property
        def adapters_generation(self) -> int:
            """:attr:`LlmRuntime.adapters_generation`."""

        def adapter_for(self, provider: str) -> Any | None: ...

        def prepare_call(
            self, config: C, *, signal: AbortSignal | None = None
        ) -> Coroutine[Any, Any, PreparedCall[C]]: ...
    else:
        # C-level (no delegation frame): compaction compares it once a step.
        adapters_generation = property(operator.attrgetter("service.adapters_generation"))
        # The service's own methods, read by a C-level getter: a delegating method costs a
        # frame per call, and every request prepares a call (benchmarks/README.md "Step
        # (session 11)"); nothing about them depends on this view's context.
        adapter_for = property(operator.attrgetter("service.adapter_for"))
        prepare_call = property(operator.attrgetter("service.prepare_call"))

    def register_adapter(
        self,
        providers: Iterable[str],
        adapter: Any,
        *,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
    ) -> Disposer:
        runtime = self.service
        names = [providers] if isinstance(providers, str) else list(providers)
        return self.own(lambda: runtime.register_adapter(names, adapter, retry_policy=retry_policy))

    def providers(self) -> list[str]:
        return self.service.providers()

    def stream(
        self, options: GenerateOptions, *, prepared: PreparedCall[Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        # (the stream itself, no delegation frames: the loop opens one per request)
        return _Stream(
            self.service, self.ctx, options, None if prepared is None else prepared.adapter
        )

    def __repr__(self) -> str:
        return f"<LlmRuntime providers={self.service.providers()}>"
