"""Results, payloads and the per-call ``ToolExecution`` of the tool pipeline (the decisions
are in ``_verdicts``: they load with the first call).

A ``ToolResult`` is what one call produced. Tool problems are results, never exceptions: an
error result has ``is_error=True``, ``error=ToolErrorInfo(code, message)`` and content
``"Error: <message>"`` so the model can read it.
"""

from collections.abc import Callable
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, TypeAdapter, field_validator

from .._model_slots import set_dict as _set_dict
from .._model_slots import set_extra as _set_extra
from .._model_slots import set_fields_set as _set_fields_set
from .._model_slots import set_private as _set_private
from .._record import Record, set_field
from ..messages import ToolResultBlock
from ..signals import AbortSignal

__all__ = [
    "ABORTED",
    "ABORTED_BEFORE_DISPATCH",
    "BLOCKED",
    "CALL_CANCELLED",
    "CANCELLED",
    "DENIED",
    "INVALID_ARGS",
    "TOOL_ERROR",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "PostExecutePayload",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolResult",
    "ToolResultPayload",
    "ToolSettledPayload",
    "aborted_before_dispatch",
    "error_result",
]

# Error codes carried by ``ToolResult.error.code``.
UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"
INVALID_ARGS: Final = "INVALID_ARGS"
DENIED: Final = "DENIED"
TOOL_ERROR: Final = "TOOL_ERROR"
TOOL_TIMEOUT: Final = "TOOL_TIMEOUT"
ABORTED: Final = "ABORTED"
ABORTED_BEFORE_DISPATCH: Final = "ABORTED_BEFORE_DISPATCH"
#: The user cancelled this one call (``agent.cancel_tool``); the turn and the other calls go on.
CANCELLED: Final = "CANCELLED"
#: The abort reason of a call cancelled alone by the user (its execution signal carries it).
CALL_CANCELLED: Final = "tool-cancelled-by-user"
#: A ``tools/post-execute`` listener withheld the result with ``Block(feedback)``.
BLOCKED: Final = "BLOCKED"


# Built on first validation, not at import (start-up cost).
_BLOCK: TypeAdapter[Any] = TypeAdapter(ToolResultBlock, config=ConfigDict(defer_build=True))


class _Frozen(BaseModel):
    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# -- results ---------------------------------------------------------------------------------


class ToolErrorInfo(_Frozen):
    """Why a result is an error: a machine-readable ``code`` and a human ``message``."""

    code: str
    message: str


class ToolResult(_Frozen):
    """The outcome of one tool call.

    ``call_id`` is stamped by the pipeline (a body returning a ``ToolResult`` may leave it
    empty). ``meta`` is JSON for observers and the log, never shown to the model.
    ``content`` is a string, or blocks (``TextBlock`` / ``ImageBlock`` or their dicts, kept as
    JSON dicts) when the result carries images; ``text`` is its text either way.
    """

    content: str | tuple[dict[str, Any], ...]
    is_error: bool = False
    error: ToolErrorInfo | None = None
    meta: dict[str, Any] | None = None
    additional_contexts: tuple[str, ...] = ()
    call_id: str = ""

    @field_validator("content", mode="before")
    @classmethod
    def _blocks_as_json(cls, value: Any) -> Any:
        # Blocks (TextBlock/ImageBlock or their dicts) are kept as checked JSON dicts, so the
        # result can be logged as is.
        if isinstance(value, list | tuple):
            return tuple(
                _BLOCK.validate_python(b).model_dump(mode="json")
                if not isinstance(b, BaseModel)
                else _BLOCK.validate_python(b.model_dump()).model_dump(mode="json")
                for b in value
            )
        return value

    @property
    def text(self) -> str:
        """The content's text (the string itself, or the text blocks joined)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")

    def log_data(self) -> dict[str, Any]:
        """The ``tool/result`` event fields this result contributes:
        ``call_id, content, is_error`` and, when present, ``error{code, message}`` and ``meta``."""
        data: dict[str, Any] = {
            "call_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
        }
        if self.error is not None:
            data["error"] = {"code": self.error.code, "message": self.error.message}
        if self.meta is not None:
            data["meta"] = self.meta
        return data


_new_object = object.__new__
# One set for every such result: pydantic copies a model's field-name set before changing it
# (``model_copy``) and the model is frozen, so sharing it is safe, and it spares a set per call
# (an allocation, and a container the cyclic GC walks while the result lives).
_TEXT_FIELDS = {"content", "call_id"}


def text_result(content: str, call_id: str) -> ToolResult:
    """``ToolResult(content=content, call_id=call_id)`` for an exact ``str`` content and call
    id, built as ``model_construct`` builds it but without its generic Python (a body's
    ``str`` is every call's result: validating it cost ~2x this). The caller checks the types:
    validation would pass such values through unchanged, so the result is the same."""
    result = _new_object(ToolResult)
    _set_dict(
        result,
        {
            "content": content,
            "is_error": False,
            "error": None,
            "meta": None,
            "additional_contexts": (),
            "call_id": call_id,
        },
    )
    _set_fields_set(result, _TEXT_FIELDS)
    _set_extra(result, None)
    _set_private(result, None)
    return result


def error_result(
    code: str, message: str, *, call_id: str = "", meta: dict[str, Any] | None = None
) -> ToolResult:
    """An error result: content ``"Error: <message>"``, ``is_error=True``, ``error=(code, message)``."""
    return ToolResult(
        content=f"Error: {message}",
        is_error=True,
        error=ToolErrorInfo(code=code, message=message),
        meta=meta,
        call_id=call_id,
    )


def aborted_before_dispatch(call_id: str) -> ToolResult:
    """The synthetic result the loop logs for a call that cancellation stopped before it started."""
    return error_result(
        ABORTED_BEFORE_DISPATCH, "tool call aborted before dispatch", call_id=call_id
    )


# -- the execution and hook payloads ---------------------------------------------------------


class ToolDefinition(Protocol):
    """What a ``ToolExecution`` offers of its resolved tool; ``Tool`` satisfies it. Typed
    structurally so that the pipeline's payloads do not depend on the tool definitions."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> dict[str, Any]: ...
    @property
    def execute(self) -> Callable[[dict[str, Any], "ToolExecution"], Any]: ...
    @property
    def concurrency_safe(self) -> bool | Callable[[dict[str, Any]], Any]: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def finalize_content(self) -> Callable[[ToolResult], Any] | None: ...
    @property
    def fn(self) -> Callable[..., Any] | None: ...
    def schema(self) -> dict[str, Any]: ...
    def validate_args(self, args: dict[str, Any]) -> None: ...


class ToolExecution:
    """One tool call travelling through the pipeline; the payload of ``tools/pre-execute`` and
    ``tools/execute``.

    ``arguments`` is the raw JSON string the model produced; ``args`` is its parsed object
    (``None`` when it is not a JSON object); ``tool`` is the resolved definition (``None`` for an
    unknown tool); ``agent`` is the calling agent (or ``None``); ``signal`` is the call's abort
    signal (it aborts with the turn's, or alone when the user cancels this call), which tool
    bodies should observe; ``ctx`` is the context hooks dispatch through
    (``agent.ctx`` when there is an agent), so a body can reach services. ``edited_from`` is
    ``None`` unless the approver edited the arguments (``ApproveEdited``): then ``args`` and
    ``arguments`` are the edited ones and ``edited_from`` the model's parsed originals.
    ``on_approval`` (``None`` unless the caller sets it; the loop does, to log
    ``tool/approval``) is told an ``Ask``'s progress: ``on_approval("asked", reason)`` right
    before the approval service is asked, then ``on_approval(answer, None)`` with ``answer``
    one of ``approved``, ``edited``, ``denied``, ``aborted``, ``failed``.
    """

    __slots__ = (
        "_admitted",
        "_scope",
        "agent",
        "args",
        "args_error",
        "arguments",
        "call_id",
        "ctx",
        "edited_from",
        "name",
        "on_approval",
        "signal",
        "step",
        "tool",
        "turn",
    )

    def __init__(
        self,
        *,
        call_id: str,
        name: str,
        arguments: str,
        args: dict[str, Any] | None,
        tool: ToolDefinition | None,
        agent: Any,
        signal: AbortSignal,
        turn: int,
        step: int,
        ctx: Any,
        args_error: str | None = None,
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.args = args
        self.tool = tool
        self.agent = agent
        self.signal = signal
        self.turn = turn
        self.step = step
        self.ctx = ctx
        # Why ``args`` is None (a JSON problem), kept so pre_execute can name it.
        self.args_error = args_error
        self.edited_from: dict[str, Any] | None = None
        self.on_approval: Callable[[str, str | None], None] | None = None
        # The hand-off of validated arguments from admission to the body (see
        # ``want_admitted``): ``None`` unless the caller asked for it.
        self._admitted: Any = None
        # The cancel scope its body runs in when a pool worker hands one on (see
        # ``_dispatch.WorkerScope``); ``None``: the body gets a scope of its own.
        self._scope: Any = None

    def __repr__(self) -> str:
        return (
            f"<ToolExecution {self.name!r} call_id={self.call_id!r} "
            f"turn={self.turn} step={self.step}>"
        )


def new_execution(
    call_id: str,
    name: str,
    arguments: str,
    args: dict[str, Any] | None,
    tool: ToolDefinition | None,
    agent: Any,
    signal: AbortSignal,
    turn: int,
    step: int,
    ctx: Any,
    args_error: str | None,
) -> ToolExecution:
    """``ToolExecution(call_id=call_id, ...)``: the same fields, set in one plain call (the
    loop makes one per tool call, and a class call with eleven keywords builds a keyword
    dict and goes through the type's ``__init__`` slot, about twice this). A test compares
    every slot with the constructor's."""
    execution = _new_object(ToolExecution)
    execution.call_id = call_id
    execution.name = name
    execution.arguments = arguments
    execution.args = args
    execution.tool = tool
    execution.agent = agent
    execution.signal = signal
    execution.turn = turn
    execution.step = step
    execution.ctx = ctx
    execution.args_error = args_error
    execution.edited_from = None
    execution.on_approval = None
    execution._admitted = None
    execution._scope = None
    return execution


# The hand-off of validated arguments from admission to a ``@tool`` body. A caller that runs
# nothing between admission and the body (the loop) asks for it with ``want_admitted``;
# admission then keeps the model it validated ``execution.args`` into, and the body takes it
# instead of validating the same arguments a second time. Whatever could change the arguments
# in between (a ``tools/pre-execute`` or ``tools/execute`` listener, a guard, the approval
# service) drops it, and the body takes it only for the very ``args`` dict admission saw.
# Off by default: a direct ``pre_execute``/``dispatch`` caller may change ``args`` in place.


def want_admitted(execution: ToolExecution) -> None:
    """Ask admission to hand the validated arguments on to the body (see above)."""
    execution._admitted = True


def keep_admitted(execution: ToolExecution, args: dict[str, Any], model: Any) -> None:
    """Admission validated ``args`` into ``model``: keep it for the body, if asked to."""
    if execution._admitted is not None:
        execution._admitted = (args, model)


def drop_admitted(execution: ToolExecution) -> None:
    """Code that may change the arguments runs next: the body validates them again."""
    execution._admitted = None


def hand_scope(execution: ToolExecution, scope: Any) -> None:
    """A pool worker hands its body scope (``_dispatch.WorkerScope``, its task's current anyio
    scope) to the body it dispatches next: the dispatch phase takes it at once, and runs the
    body in it only on its straight path (no ``tools/execute`` waterfall, whose own scope
    would sit between the two)."""
    execution._scope = scope


def take_scope(execution: ToolExecution) -> Any:
    """The scope handed on by :func:`hand_scope` (``None`` if none), taken: a body's, once."""
    scope = execution._scope
    execution._scope = None
    return scope


def admitted_model(execution: Any, args: dict[str, Any]) -> Any:
    """The model admission validated ``args`` into, or ``None``. ``execution`` is whatever
    the body was given (``Tool.execute`` may be called directly with anything)."""
    admitted = getattr(execution, "_admitted", None)
    if type(admitted) is tuple and admitted[0] is args:
        return admitted[1]
    return None


class PostExecutePayload(Record):
    """Payload of the ``tools/post-execute`` waterfall."""

    __slots__ = ("execution", "result")
    __match_args__ = ("execution", "result")

    execution: ToolExecution
    result: ToolResult

    def __init__(self, execution: ToolExecution, result: ToolResult) -> None:
        set_field(self, "execution", execution)
        set_field(self, "result", result)


class ToolSettledPayload(Record):
    """Payload of the ``tools/settled`` emit (observe only), fired once per call that reached
    admission: ``result`` is the call's outcome as soon as it is known (the body's result, or
    the refusal when the call was not admitted), before the model-order
    ``tools/post-execute``, ``finalize_content`` and commit, so the committed result may still
    differ. A call stopped before admission (cancellation, a raising plugin) never settles:
    the log's ``tool/result`` is its only outcome."""

    __slots__ = ("execution", "result")
    __match_args__ = ("execution", "result")

    execution: ToolExecution
    result: ToolResult

    def __init__(self, execution: ToolExecution, result: ToolResult) -> None:
        set_field(self, "execution", execution)
        set_field(self, "result", result)


class ToolResultPayload(Record):
    """Payload of the ``tools/result`` emit (observe only): the call's final result."""

    __slots__ = ("execution", "result")
    __match_args__ = ("execution", "result")

    execution: ToolExecution
    result: ToolResult

    def __init__(self, execution: ToolExecution, result: ToolResult) -> None:
        set_field(self, "execution", execution)
        set_field(self, "result", result)


# The public paths (``agentloop_nb.ToolExecution``, ``agentloop_nb.ToolResult``), as the package
# root's eager names report: reprs, docs and pickles name them whichever home loads them.
ToolExecution.__module__ = ToolResult.__module__ = "agentloop_nb"
