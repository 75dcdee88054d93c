"""``GenerateOptions``: one model request, what every adapter's ``stream`` receives; and
``LlmStreamPayload``, the ``llm/stream`` waterfall's payload that carries it.

Its own module, loaded with the first request (the loop builds one per request): a dataclass
compiles its generated methods from source when the class is made (about 6 M instructions),
which ``import agentloop_nb`` and ``%load_ext`` would otherwise pay. ``agentloop_nb`` and
``agentloop_nb.llm`` export it lazily (and ``agentloop_nb.hooks`` the payload, whose type hints
resolve here).
"""

from collections.abc import Callable, Mapping, Sequence
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


class _Options:
    """``GenerateOptions``'s twin (``agentloop_nb._twin``): ``_Options(provider, ..., signal)``
    is ``GenerateOptions(provider=..., ..., signal=...)`` with ``stop`` unset, built as its
    ``__init__`` builds it (every slot set, nothing else runs), without a setter call per
    field: the loop's request, one per model call (benchmarks/README.md "Step (session 12)",
    "Step (session 14)"). A field added to the dataclass must be set here too:
    tests/test_loop_request.py compares every field with the constructor's."""

    __slots__ = (
        "max_tokens",
        "messages",
        "model",
        "provider",
        "reasoning_effort",
        "session_id",
        "signal",
        "stop",
        "system",
        "temperature",
        "tools",
    )

    def __init__(
        self,
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
    ) -> None:
        self.provider = provider
        self.model = model
        self.messages = messages
        self.system = system
        self.tools = tools
        self.max_tokens = max_tokens
        self.reasoning_effort = reasoning_effort
        self.temperature = temperature
        self.stop = None
        self.session_id = session_id
        self.signal = signal
        self.__class__ = GenerateOptions  # type: ignore[assignment]  # the twin's rule


request_options: Callable[..., GenerateOptions] = _Options  # type: ignore[assignment]
"""``request_options(provider, model, messages, system, tools, max_tokens, reasoning_effort,
temperature, session_id, signal)``: the request's ``GenerateOptions`` (see ``_Options``)."""
