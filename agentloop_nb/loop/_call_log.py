"""What a step logs for its tool calls: each call's ``tool/call``, an ``Ask``'s
``tool/approval`` pair, each result's ``tool/result`` (in model order: the scheduler calls
:func:`commit` in that order), and the results of calls a step leaves without one
(:func:`answer_open`: a synthetic ``tool/call`` + ``ABORTED_BEFORE_DISPATCH`` pair for a call
that never started, ``ABORTED`` for one that did). Called by ``_scheduler`` on the step's
task only; each function appends to ``st.agent.session`` and, for a result, records the
call's ``additional_contexts`` in ``st.results``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._event_names import TOOL_APPROVAL, TOOL_CALL, TOOL_RESULT
from ..session._frozen import FrozenDict
from ..session._nodes import tool_result_node
from ..tools import ABORTED, TOOL_ERROR, ToolResult, aborted_before_dispatch, error_result

if TYPE_CHECKING:
    from ..messages import ToolCallBlock
    from ._agent import Agent

__all__ = [
    "ApprovalNote",
    "answer_open",
    "commit",
    "failed_result",
    "log_call",
    "log_synthetic",
    "new_note",
]


class StepTools(Protocol):
    """What these functions read and write of the scheduler's step (``_scheduler._StepTools``;
    a protocol, so this module does not import the scheduler)."""

    agent: Agent
    calls: tuple[ToolCallBlock, ...]
    turn: int
    step: int
    results: dict[int, tuple[str, ...]]  # written: a committed call's additional_contexts
    started: set[int]


def log_call(st: StepTools, i: int) -> str:
    """Log the call's ``tool/call``; its id."""
    call = st.calls[i]
    # (each field read once: a model's attribute goes through pydantic's ``__getattr__`` hook)
    call_id, name, arguments = call.id, call.name, call.arguments
    data = {
        "turn": st.turn,
        "step": st.step,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    # fast path (benchmarks/bench_loop.py pool): exact strs and ints are frozen as they are
    # (no walk; ``wrap_frozen`` inlined); a str subclass (an enum) takes the walk, which
    # normalises it
    if type(call_id) is str and type(name) is str and type(arguments) is str:
        frozen: FrozenDict = _new_dict(FrozenDict)
        _init_dict(frozen, data)
        st.agent.session.append(TOOL_CALL, frozen)
    else:
        st.agent.session.append(TOOL_CALL, data)
    return call_id


class ApprovalNote:
    """A call's ``on_approval``: logs an ``Ask``'s question and answer (views time the wait
    for a person from these). One object per call: a ``partial`` was three (its arguments
    tuple and keyword dict), each a container the cyclic GC tracks."""

    __slots__ = ("i", "st")

    st: StepTools
    i: int  # (both set by ``_execution``, which makes it without an ``__init__`` frame)

    def __call__(self, state: str, reason: str | None) -> None:
        st = self.st
        data: dict[str, Any] = {
            "turn": st.turn,
            "step": st.step,
            "call_id": st.calls[self.i].id,
            "state": state,
        }
        if reason:
            data["reason"] = reason
        st.agent.session.append(TOOL_APPROVAL, data)


new_note = object.__new__


def commit(st: StepTools, i: int, result: ToolResult) -> None:
    call = st.calls[i]
    # (each field read once: a model's attribute goes through pydantic's ``__getattr__`` hook)
    call_id, name = call.id, call.name
    content, is_error, error, meta = result.content, result.is_error, result.error, result.meta
    st.results[i] = result.additional_contexts
    data: dict[str, Any] = {
        "turn": st.turn,
        "step": st.step,
        "call_id": call_id,
        "name": name,
        "content": content,
        "is_error": is_error,
    }
    if error is not None:
        code, message = error.code, error.message
        data["error"] = {"code": code, "message": message}
    if meta:
        data["meta"] = dict(meta)
    elif (
        type(call_id) is str
        and type(name) is str
        and type(content) is str
        and type(is_error) is bool
        and (error is None or (type(code) is str and type(message) is str))
    ):
        # fast path (benchmarks/bench_loop.py pool): every value is an exact str/int/bool, so
        # the data is frozen as it is (``wrap_frozen`` inlined) and its message built from
        # the same values; blocks, meta and str subclasses take the walk and the parse
        if error is not None:
            nested: FrozenDict = _new_dict(FrozenDict)
            _init_dict(nested, data["error"])
            data["error"] = nested
        frozen: FrozenDict = _new_dict(FrozenDict)
        _init_dict(frozen, data)
        node = tool_result_node(call_id, name, content, is_error)
        st.agent.session.append(TOOL_RESULT, frozen, _node=node)
        return
    st.agent.session.append(TOOL_RESULT, data)


_new_dict = dict.__new__
_init_dict = dict.__init__

_CANCELLED_RUNNING = (
    "tool call aborted: its agent's task was cancelled before the result was logged "
    "(it may or may not have taken effect)"
)


def answer_open(st: StepTools) -> None:
    """Log a result, in model order, for every call of the step that has none: ``ABORTED`` for
    a started one (its ``tool/call`` is logged; its outcome, even a finished body's, was not
    through post-execute), a synthetic pair for one that never started."""
    for i in range(len(st.calls)):
        if i in st.results:
            continue
        if i in st.started:
            commit(st, i, error_result(ABORTED, _CANCELLED_RUNNING, call_id=st.calls[i].id))
        else:
            log_synthetic(st, i)


def log_synthetic(st: StepTools, i: int) -> None:
    log_call(st, i)
    commit(st, i, aborted_before_dispatch(st.calls[i].id))


def failed_result(exc: BaseException) -> ToolResult:
    return error_result(TOOL_ERROR, f"a tools/* plugin raised {type(exc).__name__}: {exc}")
