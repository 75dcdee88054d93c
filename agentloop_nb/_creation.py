"""The creation vocabulary: ``AgentOptions`` and the checks every door that makes an agent runs.

Every door (``ctx.agent_loop.create`` / ``acreate`` / ``resume`` / ``fork``, ``ctx.agents.create``
/ ``resume`` / ``fork``, the loop's factory) speaks one parameter set: ``options=``,
``session_id=``, ``meta=``, ``setup=``, ``signal=`` (plus ``seed=`` and ``at_seq=`` where they
mean something). ``agent_options=`` (and, for ``resume``, ``resume_session_id=``) are the names
the first contract used; they stay accepted as aliases. A leaf, so the services layer (the
``ctx.agents`` registry) and the loop share one definition without importing each other.
"""

from collections.abc import Iterable, Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, PositiveInt

from .errors import InvalidTypeError

T = TypeVar("T")

#: The keywords each kind of door accepts (the error for an unknown one lists them).
CREATE_KEYWORDS = ("session_id", "options", "meta", "seed", "setup", "signal", "agent_options")
RESUME_KEYWORDS = ("session_id", "options", "setup", "signal", "agent_options", "resume_session_id")
FORK_KEYWORDS = ("at_seq", "session_id", "options", "setup", "signal", "agent_options")
SYNC_CREATE_KEYWORDS = ("id", "options", "meta", "agent_options")


# No ``from __future__ import annotations`` here: pydantic evaluates a model's annotations when
# the class is made, and a string annotation is compiled first (see ``messages.py``).
class AgentOptions(BaseModel):
    """What an agent talks to. ``provider`` and ``model`` may be left out when an
    ``agent/request`` listener supplies them."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: str | None = None
    model: str | None = None
    max_tokens: PositiveInt | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None


def alias(
    door: str, name: str, value: "T | None", old_name: str, old_value: "T | None"
) -> "T | None":
    """The value of parameter ``name`` given either as ``name=`` or as its alias ``old_name=``.
    ``TypeError`` when both are given (``None`` counts as not given)."""
    if old_value is None:
        return value
    if value is not None:
        raise InvalidTypeError(
            f"{door}() got both {name}= and {old_name}=, which are one parameter under two "
            f"names; pass {name}= only"
        )
    return old_value


def reject_unknown(door: str, unknown: Mapping[str, object], accepted: Iterable[str]) -> None:
    """``TypeError`` naming the first keyword of ``unknown`` (with the accepted name it was
    probably meant to be) and every keyword ``door`` accepts; nothing when ``unknown`` is empty."""
    if not unknown:
        return
    names = list(accepted)
    bad = next(iter(unknown))
    # A misspelling (``agent_option``) or a shortening (``at`` for ``at_seq``).
    import difflib  # here: only a miss needs it (2.5 M instructions to import)

    close = difflib.get_close_matches(bad, names, n=1, cutoff=0.6) or [
        n for n in names if len(bad) > 1 and n.startswith(bad)
    ]
    hint = f" (did you mean {close[0]}=?)" if close else ""
    raise InvalidTypeError(
        f"{door}() got an unexpected keyword argument {bad!r}{hint}; it accepts "
        + ", ".join(f"{n}=" for n in names)
    )


__all__ = [
    "CREATE_KEYWORDS",
    "FORK_KEYWORDS",
    "RESUME_KEYWORDS",
    "SYNC_CREATE_KEYWORDS",
    "AgentOptions",
    "alias",
    "reject_unknown",
]
