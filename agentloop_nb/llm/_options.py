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
