"""Tool definitions: the ``Tool`` class and the ``@tool`` decorator.

``@tool`` reads a typed function's signature once, at decoration time, and builds a private
pydantic model of its parameters. That model gives the JSON schema the provider sees and
validates the model's arguments before the body runs. Validation is lax (``"3"`` is accepted
for an ``int``) and unknown argument names are refused, so a misspelt optional argument is
reported to the model instead of being silently ignored.
"""

from __future__ import annotations

import inspect
import re
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..errors import InvalidTypeError, InvalidValueError, UsageError
from ._bodies import _Driven, run_sync
from ._decisions import ToolExecution, ToolResult, admitted_model

__all__ = [
    "ConcurrencySafe",
    "FinalizeContent",
    "Tool",
    "ToolExecute",
    "as_tool",
    "call_execute",
    "format_validation_error",
    "tool",
]

#: ``execute(args, execution)``; sync or async; returns a ``ToolResult``, a ``str`` or any
#: JSON-serialisable value.
ToolExecute = Callable[[dict[str, Any], ToolExecution], Any]
#: ``concurrency_safe``: a bool, or a callable of the parsed arguments returning one.
ConcurrencySafe = bool | Callable[[dict[str, Any]], Any]
#: Where a tool body runs: in the kernel, or on a Dask worker (``DaskToolsPlugin``).
Executor = Literal["local", "dask"]
#: ``finalize_content(result) -> str``: the model-visible content of a successful result.
FinalizeContent = Callable[[ToolResult], Any]

# Providers accept this alphabet for function names (OpenAI and Anthropic agree on it).
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Tool:
    """A tool definition: what the model sees (``name``, ``description``, ``parameters``) and
    what runs (``execute``).

    ``execute(args, execution)`` receives the parsed argument object and the
    :class:`ToolExecution`. An ``async`` execute is awaited on the loop (and is cancelled when
    the call is aborted or times out; closed after ``ctx.tools.cancel_grace`` if it ignores
    that); a sync one runs in a daemon worker thread, which cannot be interrupted: on abort or
    timeout it is abandoned and finishes in the background, its late result dropped (disposing
    the agent waits for it up to ``ctx.tools.disposal_grace`` seconds).

    ``concurrency_safe`` is ``True``/``False`` or a callable of the parsed arguments; only an
    exact ``True`` lets the loop overlap this call with others. ``timeout`` (seconds) bounds the
    body; exceeding it yields a ``TOOL_TIMEOUT`` result.

    ``finalize_content(result)`` (sync or async) receives the call's :class:`ToolResult` after
    ``tools/post-execute`` (so an ``Accept(content=...)`` replacement is already applied) and
    returns the ``str`` content the model sees; it runs in model order, only for results that
    are not errors, before ``tools/result``. A raising finalizer, or one returning anything but
    a ``str``, turns the result into a ``TOOL_ERROR`` error result.

    For a hand-written ``parameters`` schema, the pipeline checks that the arguments form a
    JSON object carrying every ``required`` property; anything finer is ``execute``'s job.

    ``executor`` is ``"local"`` or ``"dask"`` (see :func:`tool`).

    Raises ``ValueError`` for a name providers would refuse, a non-object schema, a
    non-positive timeout or an unknown executor.
    """

    __slots__ = (
        "_args_model",
        "_async_execute",
        "_fields",
        "_schema",
        "_start",
        "_threaded_execute",
        "concurrency_safe",
        "description",
        "execute",
        "executor",
        "finalize_content",
        "fn",
        "name",
        "parameters",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        execute: ToolExecute,
        *,
        concurrency_safe: ConcurrencySafe = False,
        timeout: float | None = None,
        finalize_content: FinalizeContent | None = None,
        executor: Executor = "local",
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidValueError(
                f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-'"
            )
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise InvalidValueError(
                f"tool {name!r}: parameters must be a JSON schema with type 'object', "
                f"got {parameters!r}"
            )
        if timeout is not None and not timeout > 0:
            raise InvalidValueError(f"tool {name!r}: timeout must be a positive number of seconds")
        if not callable(execute):
            raise InvalidValueError(f"tool {name!r}: execute must be callable")
        if executor not in ("local", "dask"):
            raise InvalidValueError(
                f"tool {name!r}: executor must be 'local' or 'dask', got {executor!r}"
            )
        if finalize_content is not None and not callable(finalize_content):
            raise InvalidValueError(f"tool {name!r}: finalize_content must be callable")
        self.name = name
        self.description = description
        self.parameters: dict[str, Any] = dict(parameters)
        self.execute = execute
        self.concurrency_safe = concurrency_safe
        self.timeout = timeout
        self.finalize_content = finalize_content
        #: Where the body runs: ``"local"`` (the kernel) or ``"dask"`` (a Dask worker).
        self.executor: Executor = executor
        #: The decorated function, for ``@tool`` definitions (``None`` otherwise).
        self.fn: Callable[..., Any] | None = None
        self._args_model: type[BaseModel] | None = None
        self._schema: dict[str, Any] | None = None  # ``schema()``'s last answer
        # (model field name, function parameter name) pairs, for @tool definitions.
        self._fields: tuple[tuple[str, str], ...] = ()
        # The ``execute`` last seen to be a coroutine function (``execute`` may be reassigned):
        # spares ``inspect.iscoroutinefunction`` on every call.
        self._async_execute: Any = None
        # The ``execute`` @tool built around a sync function: it only awaits ``run_sync``,
        # which already isolates the body in a thread, so it needs no task of its own.
        self._threaded_execute: Any = None
        # (execute, keywords, function) of the ``execute`` @tool built around an ``async``
        # function: while ``execute`` is still that one, ``call_execute`` drives the
        # function's own coroutine (one coroutine per call, not two).
        self._start: tuple[Any, Callable[..., Any], Callable[..., Any]] | None = None

    def schema(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` as sent to providers (do not mutate): the
        same dict while the three attributes are the objects it holds (assigning one makes a
        new dict), so an unchanged tool offers the same schema at every request."""
        # fast path (benchmarks/README.md "Step (session 12)"): the prompt's collection asks
        # every step; the same dict lets it hand out the same assembly
        cached = self._schema
        if (
            cached is None
            or cached["name"] is not self.name
            or cached["description"] is not self.description
            or cached["parameters"] is not self.parameters
        ):
            cached = self._schema = {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        return cached

    def validate_args(self, args: dict[str, Any]) -> None:
        """Check ``args`` against the definition; raise ``ValueError`` naming each problem."""
        checked_args(self, args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the decorated function directly (handy in a notebook); no validation, no hooks."""
        if self.fn is None:
            raise InvalidTypeError(
                f"tool {self.name!r} was not built from a function; use execute()"
            )
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name!r}>"


def checked_args(definition: Tool, args: dict[str, Any]) -> BaseModel | None:
    """``definition.validate_args(args)`` returning the validated argument model of a
    ``@tool`` definition (``None`` for one without), which admission hands on to the body
    (see ``_decisions.want_admitted``) so the arguments are validated once per call."""
    model = definition._args_model
    if model is not None:
        try:
            # (the validator itself: ``model_validate`` is a Python frame around it that
            # passes seven defaults, once per call)
            return model.__pydantic_validator__.validate_python(args)
        except ValidationError as exc:
            raise InvalidValueError(format_validation_error(exc)) from None
    required = definition.parameters.get("required") or ()
    missing = [key for key in required if key not in args]
    if missing:
        raise InvalidValueError("; ".join(f"{key}: Field required" for key in missing))
    return None


def format_validation_error(exc: ValidationError) -> str:
    """``"a: Field required; b: Input should be a valid integer"``, without input echoes."""
    parts: list[str] = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        msg = "unexpected argument" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: ConcurrencySafe = False,
    timeout: float | None = None,
    finalize_content: FinalizeContent | None = None,
    executor: Executor = "local",
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency_safe: ConcurrencySafe = False,
    timeout: float | None = None,
    finalize_content: FinalizeContent | None = None,
    executor: Executor = "local",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Build a :class:`Tool` from a typed function; usable bare (``@tool``) or with options.

    - ``name`` defaults to the function's name, ``description`` to its cleaned docstring.
    - ``parameters`` is the JSON schema of the parameters' type hints (pydantic), without
      ``title`` noise; parameters without a default are ``required``; ``Annotated[T,
      Field(description=...)]`` documents one.
    - A parameter annotated ``ToolExecution`` receives the execution (``signal``, ``agent``,
      ``ctx``) and is left out of the schema.
    - The body gets validated values (nested pydantic models arrive as model instances).
      ``async def`` bodies are awaited; plain functions run in a daemon worker thread so they
      never block the kernel loop (such a body cannot be interrupted, only abandoned on
      abort/timeout).
    - ``concurrency_safe``, ``timeout`` and ``finalize_content``: see :class:`Tool`.
    - ``executor="dask"`` runs the body on a Dask worker through ``ctx.dask`` (the
      ``DaskToolsPlugin`` of ``agentloop_nb.plugins.dask``): arguments and result are pickled;
      such a body cannot take a ``ToolExecution``.
    - Return values: ``str`` as is, a ``ToolResult`` passes through, anything else is dumped as
      JSON (pydantic models, dataclasses, lists, dicts, ...) within the caps of
      ``MAX_RESULT_CHARS``, ``MAX_RESULT_ITEMS`` and ``MAX_RESULT_DEPTH`` (no iterators).

    Raises ``TypeError`` for ``*args``/``**kwargs``/positional-only parameters or a type hint
    that cannot be resolved or turned into a schema.
    """
    # Hints naming classes local to the caller (a notebook cell function, a test) resolve
    # through the caller's namespace, captured now because decoration happens there.
    localns = dict(sys._getframe(1).f_locals)

    def build(f: Callable[..., Any]) -> Tool:
        return _build_tool(
            f,
            name=name,
            description=description,
            concurrency_safe=concurrency_safe,
            timeout=timeout,
            finalize_content=finalize_content,
            localns=localns,
            executor=executor,
        )

    return build if fn is None else build(fn)


def as_tool(obj: Tool | Callable[..., Any], localns: Mapping[str, Any] | None = None) -> Tool:
    """``obj`` if it is already a ``Tool``; otherwise ``@tool`` applied to the function."""
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise InvalidTypeError(f"expected a Tool or a function, got {obj!r}")
    return _build_tool(
        obj,
        name=None,
        description=None,
        concurrency_safe=False,
        timeout=None,
        finalize_content=None,
        localns=localns,
    )


def _build_tool(
    f: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    concurrency_safe: ConcurrencySafe,
    timeout: float | None,
    finalize_content: FinalizeContent | None,
    localns: Mapping[str, Any] | None,
    executor: Executor = "local",
) -> Tool:
    tool_name = name or getattr(f, "__name__", None) or type(f).__name__
    if description is None:
        description = inspect.getdoc(f) or ""  # getdoc already cleans indentation
    try:
        hints = typing.get_type_hints(f, localns=dict(localns or {}), include_extras=True)
    except Exception as exc:  # NameError for an unknown name, TypeError for bad syntax
        raise InvalidTypeError(f"@tool {tool_name!r}: cannot resolve type hints: {exc}") from exc

    field_defs: dict[str, Any] = {}
    pairs: list[tuple[str, str]] = []
    execution_param: str | None = None
    for i, param in enumerate(inspect.signature(f).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise InvalidTypeError(
                f"@tool {tool_name!r}: parameter {param.name!r} must be a plain or "
                "keyword-only parameter (no *args, **kwargs or positional-only)"
            )
        annotation = hints.get(param.name, Any)
        if _is_execution_hint(annotation):
            execution_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        # Field names are synthetic and the real name is the alias: a parameter called
        # ``json`` or ``model_x`` would otherwise shadow BaseModel attributes (a warning).
        field_name = f"p{i}"
        field_defs[field_name] = (annotation, Field(default, alias=param.name))
        pairs.append((field_name, param.name))

    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **field_defs,
        )
        parameters = _strip_titles(model.model_json_schema())
    except Exception as exc:
        raise InvalidTypeError(
            f"@tool {tool_name!r}: cannot build an argument schema: {exc}"
        ) from exc

    is_async = inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(
        getattr(f, "__call__", None)  # noqa: B004 - async callable objects
    )
    fields = tuple(pairs)

    if executor == "dask" and execution_param is not None:
        raise InvalidTypeError(
            f"@tool {tool_name!r}: a Dask body runs in another process and cannot take "
            f"the ToolExecution parameter {execution_param!r}"
        )

    def keywords(args: dict[str, Any], execution: ToolExecution) -> dict[str, Any]:
        # The model admission validated these very ``args`` into, when the loop handed it on
        # (nothing that could change them ran in between): one validation per call, not two.
        admitted = admitted_model(execution, args)
        if type(admitted) is model:
            values = admitted.__dict__
        else:
            values = model.model_validate(args).__dict__
        # (a loop, not a comprehension: on 3.11 that is a function object and a frame a call)
        kwargs: dict[str, Any] = {}
        for field, param in fields:
            kwargs[param] = values[field]
        if execution_param is not None:
            kwargs[execution_param] = execution
        return kwargs

    async def execute(args: dict[str, Any], execution: ToolExecution) -> Any:
        kwargs = keywords(args, execution)
        if executor == "dask":  # (never with the execution parameter: refused above)
            return await _dask_service(execution, tool_name).submit(f, kwargs, name=tool_name)
        if is_async:
            return await f(**kwargs)
        # An abort or timeout returns at once; the daemon thread runs to its end.
        return await run_sync(partial(f, **kwargs))

    built = Tool(
        tool_name,
        description,
        parameters,
        execute,
        concurrency_safe=concurrency_safe,
        timeout=timeout,
        finalize_content=finalize_content,
        executor=executor,
    )
    built.fn = f
    if not is_async and executor == "local":
        built._threaded_execute = execute
    elif executor == "local":
        built._start = (execute, keywords, f)
    built._args_model = model
    built._fields = fields
    return built


def _is_execution_hint(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is ToolExecution


# Keys whose value maps *names* to schemas (a property may itself be called "title").
_NAME_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in _NAME_MAPS and isinstance(value, dict):
                out[key] = {k: _strip_titles(v) for k, v in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def call_execute(tool: Tool, args: dict[str, Any], execution: ToolExecution) -> Awaitable[Any]:
    """Run ``tool.execute`` (await the result): an async body in the calling task through
    ``_bodies.run_async``, a sync one in a daemon worker thread.

    Raises the body's ``Exception``, or ``BodyRaised`` wrapping any other ``BaseException``
    it ended with; cancelling the caller cancels the body (closed after the grace period when
    it ignores that). (Not itself a coroutine: it runs for every call, and each delegating
    frame costs.)"""
    execute = tool.execute
    if execute is tool._threaded_execute:  # a sync @tool body: run_sync isolates it already
        return execute(args, execution)
    start = tool._start
    if start is not None and execute is start[0]:
        # An async @tool body: its function's coroutine, driven directly (what ``execute``
        # would await; its keyword arguments are built here, and raise here, as they would
        # at the coroutine's first step)
        body = start[2](**start[1](args, execution))
    else:
        # A known coroutine function is driven directly; anything else is sorted by
        # ``_execute``.
        body = execute(args, execution) if execute is tool._async_execute else None
    # (``run_async``'s awaitable made directly: a frame and a keyword call fewer per call)
    return _Driven(
        body if body is not None else _execute(tool, args, execution),
        execution.signal,
        tool.timeout,
    )


async def _execute(tool: Tool, args: dict[str, Any], execution: ToolExecution) -> Any:
    execute = tool.execute
    if execute is tool._async_execute:
        return await execute(args, execution)
    if inspect.iscoroutinefunction(execute):
        tool._async_execute = execute
        return await execute(args, execution)
    value = await run_sync(partial(execute, args, execution))
    if inspect.isawaitable(value):
        return await value
    return value


def _dask_service(execution: ToolExecution, tool: str) -> Any:
    """The ``ctx.dask`` service (published by the optional ``DaskToolsPlugin``) a Dask tool call
    runs through, looked up on the call's context so this layer never imports the plugin.
    Raises ``RuntimeError`` naming the tool when no such plugin is applied."""
    service = getattr(execution.ctx, "dask", None)
    if service is None:
        raise UsageError(
            f"tool {tool!r} runs on Dask: apply the plugin first "
            "(app.ctx.plugin(DaskToolsPlugin) from agentloop_nb.plugins.dask)"
        )
    return service


# The public paths (``agentloop_nb.Tool``, ``agentloop_nb.tool``), as the package root's eager
# names report: reprs, docs and pickles name them whichever home loads them.
Tool.__module__ = tool.__module__ = "agentloop_nb"
