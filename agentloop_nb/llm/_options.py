"""``GenerateOptions``: one model request, what every adapter's ``stream`` receives; and
``LlmStreamPayload``, the ``llm/stream`` waterfall's payload that carries it.

Its own module, loaded with the first request (the loop builds one per request): a dataclass
compiles its generated methods from source when the class is made (about 6 M instructions),
which ``import agentloop_nb`` and ``%load_ext`` would otherwise pay. ``agentloop_nb`` and
``agentloop_nb.llm`` export it lazily (and ``agentloop_nb.hooks`` the payload, whose type hints
resolve here).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._record import Record, set_field
from ..messages import Message

if TYPE_CHECKING:
    from ..signals import AbortSignal

__all__ = ["GenerateOptions", "LlmStreamPayload"]


@dataclass(frozen=True, slots=True)
class GenerateOptions:
    """One model request. Frozen: listeners that want a change build a new one
    (``dataclasses.replace``). ``tools`` are JSON-schema tool definitions
    (``{"name", "description", "parameters"}``); ``signal`` is the turn's abort signal."""

    provider: str
    model: str
    messages: Sequence[Message] = ()
    system: str | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    temperature: float | None = None
    stop: Sequence[str] | None = None
    session_id: str | None = None
    signal: "AbortSignal | None" = field(default=None, compare=False)


class LlmStreamPayload(Record):
    """Payload of the ``llm/stream`` waterfall. A listener returns an async iterator of chunks:
    ``await next()`` (the adapter's stream), a wrapper around it, or its own replacement."""

    __slots__ = ("options",)
    __match_args__ = ("options",)

    options: GenerateOptions

    def __init__(self, options: GenerateOptions) -> None:
        set_field(self, "options", options)


# The public path (``agentloop_nb.GenerateOptions``), as the package root's eager names report:
# reprs, docs and pickles name it (the root resolves it on first access).
GenerateOptions.__module__ = "agentloop_nb"


# The slots' own setters (a C call each; ``object.__setattr__``, which the frozen dataclass's
# ``__init__`` calls per field, first looks the name up on the type). A field added to the
# dataclass must be set in ``request_options`` too: tests/test_loop_request.py compares every
# field with the constructor's.
(
    _provider,
    _model,
    _messages,
    _system,
    _tools,
    _max_tokens,
    _reasoning_effort,
    _temperature,
    _stop,
    _session_id,
    _signal,
) = (
    GenerateOptions.__dict__[name].__set__
    for name in (
        "provider",
        "model",
        "messages",
        "system",
        "tools",
        "max_tokens",
        "reasoning_effort",
        "temperature",
        "stop",
        "session_id",
        "signal",
    )
)
_new = object.__new__


def request_options(
    provider: str,
    model: str,
    messages: Sequence[Message],
    system: str | None,
    tools: Sequence[Mapping[str, Any]],
    max_tokens: int | None,
    reasoning_effort: str | None,
    temperature: float | None,
    session_id: str | None,
    signal: "AbortSignal | None",
) -> GenerateOptions:
    """``GenerateOptions(provider=..., ..., signal=...)`` with ``stop`` unset, built as its
    ``__init__`` builds it (every slot set, nothing else runs): the loop's request, one per
    model call (benchmarks/README.md "Step (session 12)")."""
    options: GenerateOptions = _new(GenerateOptions)
    _provider(options, provider)
    _model(options, model)
    _messages(options, messages)
    _system(options, system)
    _tools(options, tools)
    _max_tokens(options, max_tokens)
    _reasoning_effort(options, reasoning_effort)
    _temperature(options, temperature)
    _stop(options, None)
    _session_id(options, session_id)
    _signal(options, signal)
    return options
