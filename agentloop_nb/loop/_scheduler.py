"""Tool scheduling for one step.

Calls are grouped in model order: an exclusive call is its own group (a barrier); a run of
consecutive parallel-safe calls is one group run as a rolling pool of at most
``max_parallel_tool_calls`` bodies. A pooled call is classified again right before it starts: one
whose ``concurrency_safe`` now says otherwise waits for the running bodies and runs alone.
``tools/pre-execute`` and ``tools/post-execute`` run in model order; each started call logs its own
``tool/call`` (and, for an ``Ask``, a ``tool/approval`` when the approval service is asked and
another when it answers); ``tool/result`` events are committed in model order (``tools/settled``
fires earlier, as each call's outcome is known). Calls that never start (abort, scheduler failure)
get a synthetic ``tool/call`` + ``ABORTED_BEFORE_DISPATCH`` pair, so no tool call is ever left
dangling. That holds when the step's task is cancelled without an abort too (App teardown by the
supervisor, ``asyncio.run`` cancelling what is left): before the cancellation propagates, each
started call without a result gets an ``ABORTED`` one and each unstarted call its synthetic pair.

Each call gets its own abort controller, linked to the turn's signal: its execution's signal
aborts with the turn, or alone when ``Agent.cancel_tool`` aborts it (reason ``CALL_CANCELLED``,
giving a ``CANCELLED`` result). A started call is in the ``running`` registry (call id →
controller) until its body has settled.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import anyio

from ..messages import ToolCallBlock
from ..signals import AbortController, AbortError, controller_following
from ..tools import (
    ToolExecution,
    ToolResult,
    aborted_before_dispatch,
)
from ..tools._decisions import hand_scope, want_admitted
from ..tools._runtime import registry_of
from ._call_log import (
    ApprovalNote,
    answer_open,
    commit,
    failed_result,
    log_call,
    log_synthetic,
    new_note,
)
from ._pool import Running, Slots, StartLock

if TYPE_CHECKING:
    from ..signals import AbortSignal
    from ..tools._dispatch import WorkerScope
    from ._agent import Agent

    #: What :func:`open_body_scope` opens (for annotations outside the tools room).
    BodyScope = WorkerScope


class _StepTools:
    # A plain slotted class, not a dataclass: no generated code to compile at import.
    __slots__ = (
        "agent",
        "calls",
        "failure",
        "gate",
        "links",
        "prepared",
        "registry",
        "results",
        "running",
        "scope",
        "signal",
        "started",
        "step",
        "table",
        "tools",
        "turn",
    )

    def __init__(
        self,
        agent: Agent,
        tools: Any,
        turn: int,
        step: int,
        signal: AbortSignal,
        calls: tuple[ToolCallBlock, ...],
        running: dict[str, AbortController],
        gate: Any,
        scope: WorkerScope | None,
    ) -> None:
        self.agent = agent
        self.tools = tools  # ``agent.ctx.tools``, resolved once per step
        # the registry the phases are handed (as the facade hands it) and its tool table
        self.registry = registry_of(tools)
        self.table = self.registry.tools
        self.turn = turn
        self.step = step
        self.signal = signal
        self.calls = calls
        self.running = running
        self.gate = gate  # the loop's global tool gate (``max_parallel_tool_calls_total``)
        # executions made when the calls were grouped, so a call's arguments are parsed once;
        # its tool and signal are set again when it starts (see ``_execution``)
        self.prepared: dict[int, ToolExecution] = {}
        # each committed call's ``additional_contexts`` (all the step needs of its result:
        # keeping a thousand results alive to the step's end made the cyclic GC walk them)
        self.results: dict[int, tuple[str, ...]] = {}
        self.started: set[int] = set()
        self.links: dict[int, AbortController] = {}
        self.failure: BaseException | None = None
        # the turn's body scope (its task's current anyio scope here), or None: a scope of
        # its own for each call run alone
        self.scope = scope


async def run_tool_calls(
    agent: Agent,
    calls: tuple[ToolCallBlock, ...],
    turn: int,
    step: int,
    signal: AbortSignal,
    running: dict[str, AbortController] | None = None,
    scope: WorkerScope | None = None,
) -> list[tuple[str, ...]]:
    """Run the step's tool calls; return, in model order, the ``additional_contexts`` of
    their final results (the results themselves are logged: ``tool/result``).

    ``running`` (the agent's registry of cancellable calls) holds each started call's controller
    until its body settles. ``scope`` (from :func:`open_body_scope`) is where the calls run alone
    in this task run their bodies; without it each gets an ``AbortScope`` of its own (the same
    cancellation either way). Raises the first plugin failure (a raising ``tools/*`` listener)
    after every started call has drained and every unstarted call has its synthetic result. A
    cancellation (or any other exception out of the scheduler) propagates after every call left
    without a result has one (``answer_open``)."""
    ctx = agent.ctx
    st = _StepTools(
        agent,
        ctx.tools,
        turn,
        step,
        signal,
        calls,
        running if running is not None else {},
        ctx.agent_loop.limits.tool_calls,
        scope,
    )
    try:
        return await _run_groups(st)
    except BaseException:
        # Cancelled without an abort, the workers stop at their next await: inside a body, in
        # pre-execute, or (asyncio's lock takes a free lock without one) right after logging one
        # more ``tool/call``. Answer them here, synchronously, as the abort path would have.
        answer_open(st)
        raise
    finally:
        if st.links:  # (every settled call left it: empty unless a body did not settle)
            for i in list(st.links):
                _settled(st, i)


def open_body_scope() -> WorkerScope:
    """A body scope (``WorkerScope``) for the calls a task runs alone one after another: hand
    it to each step's :func:`run_tool_calls` (``scope``) and close it (``close()``, from the
    same task, with whatever propagates) when the steps end. Its anyio scope is entered in the
    calling task when the first body starts (a turn that runs no call alone enters none);
    from then until ``close`` it must be the task's current anyio scope whenever a call's body
    starts and ends (nothing opened around a step may stay open across its calls). One anyio
    scope then serves a turn's lone calls, not one each (an anyio scope entered and left is
    about 25 k instructions)."""
    if _PHASES is None:
        _load_phases()  # (``WorkerScope`` loads with the phases)
    return _WORKER_SCOPE()


async def _run_groups(st: _StepTools) -> list[tuple[str, ...]]:
    agent, calls, signal = st.agent, st.calls, st.signal
    if len(calls) == 1:
        # fast path (benchmarks/bench_ab.py, one call a step): a lone call runs alone
        # whatever its mode, as the groups below would run it (no groups, no loops)
        if signal.aborted:
            log_synthetic(st, 0)
        else:
            await _run_one(st, 0)
        if st.failure is not None:
            raise st.failure
        return [st.results[0]]
    for mode, idxs in _groups(st):
        if signal.aborted or st.failure is not None:
            break
        cap = 1 if mode == "exclusive" else agent.ctx.agent_loop.settings.max_parallel_tool_calls
        if len(idxs) == 1 or cap == 1:
            for i in idxs:
                if signal.aborted or st.failure is not None:
                    break
                await _run_one(st, i)
        else:
            await _run_pool(st, idxs, cap)
    for i in range(len(calls)):
        if i not in st.started:
            log_synthetic(st, i)
    if st.failure is not None:
        raise st.failure
    return [st.results[i] for i in range(len(calls))]


def _groups(st: _StepTools) -> list[tuple[str, list[int]]]:
    # (two calls or more: a lone call runs alone whatever its mode, see _run_groups)
    calls, tools = st.calls, st.tools
    groups: list[tuple[str, list[int]]] = []
    prepared = st.prepared
    for i, call in enumerate(calls):
        # The turn's signal stands in until the call starts under its own controller.
        execution = prepared[i] = tools.new_execution(
            call, agent=st.agent, signal=st.signal, turn=st.turn, step=st.step
        )
        tool = execution.tool
        # an exact ``True`` is classify's "parallel" without its two frames (as in the pool)
        if tool is not None and execution.args is not None and tool.concurrency_safe is True:
            mode = "parallel"
        else:
            mode = tools.execution_mode(execution)
        if mode == "parallel" and groups and groups[-1][0] == "parallel":
            groups[-1][1].append(i)
        else:
            groups.append((mode, [i]))
    return groups


def _execution(st: _StepTools, i: int) -> ToolExecution:
    """The call's execution, under its own controller linked to the turn's signal."""
    controller = st.links.get(i)
    if controller is None:
        controller = st.links[i] = controller_following(st.signal)
    # Taken out, not read: the step keeps no execution it no longer needs (an execution's
    # ``on_approval`` refers to the step, so one kept here would hold the call's whole graph
    # in a reference cycle, freed only by the cyclic GC at the step's end).
    execution = st.prepared.pop(i, None)
    if execution is None:
        execution = st.tools.new_execution(
            st.calls[i], agent=st.agent, signal=controller.signal, turn=st.turn, step=st.step
        )
    else:
        # Resolved again at the start, as an unprepared call is: an earlier call's body may
        # have registered (or removed) the tool since the calls were grouped. (The shared
        # registry's table, as ``ctx.tools.lookup`` reads it for an agent: a frame fewer.)
        execution.tool = st.table.lookup(execution.name, st.agent)
        execution.signal = controller.signal
    note = new_note(ApprovalNote)  # (its two fields set here: no __init__ frame a call)
    note.st = st
    note.i = i
    execution.on_approval = note
    want_admitted(execution)  # nothing runs between its admission and its body here
    return execution


def _settled(st: _StepTools, i: int) -> None:
    """The call's body is over (or never ran): no longer cancellable, unlinked from the turn."""
    controller = st.links.pop(i, None)
    if controller is None:
        return
    controller.unfollow(st.signal)
    call_id = st.calls[i].id
    if st.running.get(call_id) is controller:
        del st.running[call_id]


def _mark_started(st: _StepTools, i: int) -> None:
    st.started.add(i)
    st.running[log_call(st, i)] = st.links[i]


async def _run_one(st: _StepTools, i: int) -> None:
    """A call run alone in the step's task (a lone call, or an exclusive one): the phases as
    ``ctx.tools.pre_execute``/``dispatch``/``post_execute`` run them, admitted and settled
    without a coroutine where nothing is to be awaited (as in the pool)."""
    PENDING, admit_now, _, settle_now = _PHASES or _load_phases()  # (dispatch: _dispatch)
    tools = st.tools
    execution = _execution(st, i)
    _mark_started(st, i)
    try:
        try:
            # without a coroutine when nothing is to be awaited (no pre-execute listener, no
            # guard)
            result = admit_now(execution, st.registry)
            if result is PENDING:
                result = await tools.pre_execute(execution)
            if result is None:
                # in the turn's body scope when the caller holds one (else a scope of its own)
                result = await _dispatch(st, execution, st.scope)
        finally:
            _settled(st, i)
        # post-execute sees every result (denials too), so tools/result observers see them all
        settled = settle_now(execution, result)
        result = settled if settled is not None else await tools.post_execute(execution, result)
    except Exception as exc:  # a raising tools/* listener: a plugin failure
        st.failure = exc
        result = failed_result(exc)
    commit(st, i, result)


# The phases a call runs without the facade's frames (``PENDING``, ``admit_now``,
# ``dispatch_now``, ``settle_now``), loaded with the first call: ``import agentloop_nb``
# loads no phase (start-up cost); one global read per call after, not three imports.
_PHASES: tuple[Any, Any, Any, Any] | None = None


# ``tools._dispatch.WorkerScope``, loaded with the phases: an ``import`` statement in a
# function costs about 8 k instructions each time it runs (once a turn, once a pooled step).
_WORKER_SCOPE: Any = None


def _load_phases() -> tuple[Any, Any, Any, Any]:
    global _PHASES, _WORKER_SCOPE
    from ..tools._admit import PENDING, admit_now
    from ..tools._dispatch import WorkerScope, dispatch_now
    from ..tools._settle import settle_now

    _WORKER_SCOPE = WorkerScope
    _PHASES = (PENDING, admit_now, dispatch_now, settle_now)
    return _PHASES


async def _run_pool(st: _StepTools, idxs: list[int], cap: int) -> None:
    """Rolling pool of ``cap`` workers: each takes the next call in model order, logs its
    ``tool/call`` and runs ``tools/pre-execute`` under a shared lock (so those stay in model
    order), then runs the body outside it; a settled body goes straight on to the next call.
    A call reclassified as exclusive waits (holding the lock, so nothing else starts) for the
    running bodies, then runs its body still holding the lock: alone.
    ``tools/post-execute`` and the durable commit run in model order in a separate task."""
    PENDING, admit_now, dispatch_now, settle_now = _PHASES or _load_phases()
    new_scope = _WORKER_SCOPE  # (``WorkerScope``, loaded with the phases)

    tools, gate, signal = st.tools, st.gate, st.signal
    registry = registry_of(tools)
    slots = Slots()
    queue = deque(idxs)
    # The start lock (see StartLock): a free one is taken without an await or a frame of
    # asyncio's lock; an abort of the turn is seen once it is taken.
    in_order = StartLock()
    running = Running()

    async def body(execution: ToolExecution, scope: WorkerScope) -> ToolResult:
        try:
            return await _dispatch(st, execution, scope)
        except Exception as exc:
            if st.failure is None:
                st.failure = exc
            return failed_result(exc)

    async def worker() -> None:
        # One cancel scope for the bodies this worker runs (not one per body; see WorkerScope)
        scope: WorkerScope = new_scope()
        scope.open()
        try:
            while True:
                # (``in_order.try_take()`` and ``release()``'s common case, inlined: the
                # lock's flag, a frame each a call)
                if in_order.held:
                    await in_order.take()
                else:
                    in_order.held = True
                try:
                    # stop when the turn aborted or a plugin failed (tested inline, as below:
                    # a frame here runs once per call)
                    if not queue or signal.aborted or st.failure is not None:
                        return
                    i = queue[0]
                    execution = _execution(st, i)
                    tool = execution.tool
                    # an exact ``True`` is classify's "parallel" without its two frames; a
                    # callable is asked again right before its call starts, as is any other
                    alone = (
                        tool is None or execution.args is None or tool.concurrency_safe is not True
                    ) and tools.execution_mode(execution) == "exclusive"
                    if alone:
                        await running.wait_idle()
                        # left in the queue if stopped: it gets its synthetic result
                        if signal.aborted or st.failure is not None:
                            return
                    queue.popleft()
                    _mark_started(st, i)
                    running.count += 1  # (see Running)
                    # (admission and the body awaited here, not through wrappers: each
                    # coroutine frame between the worker and the body costs, once per call)
                    try:
                        # without a coroutine when nothing is to be awaited (no pre-execute
                        # listener, no guard)
                        result = admit_now(execution, registry)
                        if result is PENDING:
                            result = await tools.pre_execute(execution)
                    except Exception as exc:
                        st.failure = exc
                        result = failed_result(exc)
                    if alone and result is None:
                        result = await body(execution, scope)
                finally:
                    if in_order.waiters:
                        in_order.release()  # handed to the first waiter
                    else:
                        in_order.held = False
                if result is None:
                    try:
                        if gate.try_acquire():
                            # _dispatch's common case inlined: a free slot of the global
                            # gate, taken without an await (one coroutine frame fewer a call)
                            try:
                                # the phase itself for a resolved tool (the facade's
                                # ``dispatch`` is a frame around it; it refuses the rest),
                                # on its straight path the body's coroutine alone
                                if execution.tool is not None:
                                    result = await dispatch_now(execution, registry, scope)
                                else:
                                    hand_scope(execution, scope)
                                    result = await tools.dispatch(execution)
                            finally:
                                gate.release()
                        else:
                            result = await _dispatch(st, execution, scope)
                    except Exception as exc:
                        if st.failure is None:
                            st.failure = exc
                        result = failed_result(exc)
                _settled(st, i)
                # (``running.leave()`` and ``slots.put`` inlined where they only count and
                # store, a frame each a call)
                if running.count == 1 and running.idle is not None:
                    running.leave()  # the last one out: wakes a call waiting to run alone
                else:
                    running.count -= 1
                if i == slots.wanted:
                    slots.put(i, (execution, result))  # wakes the commit task
                else:
                    slots.settled[i] = (execution, result)
        finally:
            scope.close()

    async def commit_in_order() -> None:
        settled = slots.settled
        for i in idxs:
            # a call settled already is taken at once, without the wait's coroutine
            slot = settled.pop(i) if i in settled else await slots.take(i)
            if slot is None:  # never started: the workers stopped before it
                return
            execution, result = slot
            if st.failure is None:
                try:
                    # without a coroutine when nothing is to be awaited (no post-execute
                    # listener, no finalize_content to run)
                    settled_now = settle_now(execution, result)
                    if settled_now is None:
                        result = await tools.post_execute(execution, result)
                    else:
                        result = settled_now
                except Exception as exc:
                    st.failure = exc
            commit(st, i, result)

    async with anyio.create_task_group() as tg:
        tg.start_soon(commit_in_order)
        try:
            async with anyio.create_task_group() as workers:
                for _ in range(min(cap, len(idxs))):
                    workers.start_soon(worker)
        finally:
            for i in queue:
                slots.put(i, None)


async def _dispatch(
    st: _StepTools, execution: ToolExecution, scope: WorkerScope | None = None
) -> ToolResult:
    """Run the body inside the loop's global tool gate (``max_parallel_tool_calls_total``),
    in ``scope`` (a pool worker's, or the turn's body scope: its task's current anyio scope)
    or, ``None``, a scope of its own.
    A call whose turn aborts while it waits for a slot never starts its body: it ends
    ``ABORTED_BEFORE_DISPATCH``."""
    gate = st.gate
    if not gate.try_acquire():  # the common case takes a free slot without an await
        try:
            await gate.acquire(st.signal)
        except AbortError:
            return aborted_before_dispatch(execution.call_id)
    try:
        if execution.tool is not None:
            # the phase itself for a resolved tool (the facade's ``dispatch`` is a frame
            # around it): on its straight path the body's own coroutine
            dispatch_now = (_PHASES or _load_phases())[2]
            return await dispatch_now(execution, st.registry, scope)
        hand_scope(execution, scope)  # dispatch takes it for the body, or drops it
        return await st.tools.dispatch(execution)
    finally:
        gate.release()
