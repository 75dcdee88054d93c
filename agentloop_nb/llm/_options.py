"""``GenerateOptions``: one model request, what every adapter's ``stream`` receives.

Its own module, loaded with the first request (the loop builds one per request): a dataclass
compiles its generated methods from source when the class is made (about 6 M instructions),
which ``import agentloop_nb`` and ``%load_ext`` would otherwise pay. ``agentloop_nb`` and
``agentloop_nb.llm`` export it lazily.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..messages import Message

if TYPE_CHECKING:
    from ..signals import AbortSignal

__all__ = ["GenerateOptions"]


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


# The public path (``agentloop_nb.GenerateOptions``), as the package root's eager names report:
# reprs, docs and pickles name it (the root resolves it on first access).
GenerateOptions.__module__ = "agentloop_nb"
