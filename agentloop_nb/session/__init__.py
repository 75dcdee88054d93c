"""Sessions: the append-only, durable event log of one agent.

``SessionStore`` (``ctx.sessions``) builds and publishes ``Session``s; a ``Session`` appends
immutable ``SessionEvent``s (``data`` deep-frozen as ``FrozenDict``/tuples) and derives the
model-visible messages incrementally. ``Persistence`` is the storage seam and
``JsonlPersistence`` its embedded write-behind backend (``PostgresPersistence`` the shared
one); ``repair`` closes what a crash left open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports
from ._events import HEADER_VERSION, SURFACE_TYPES, SessionEvent, SessionHeader
from ._frozen import FrozenDict, freeze_json
from ._nodes import EventLog, parse_node
from ._persistence import (
    Persistence,
    PersistenceError,
    SessionCorruptError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
)
from ._session import (
    Session,
    SessionChunkPayload,
    SessionDispatch,
    SessionEventPayload,
    SessionOwner,
    SessionPayload,
    SessionState,
)
from ._store import SessionStore

if TYPE_CHECKING:
    from ._jsonl import JsonlPersistence
    from ._listing import StoredSession, list_sessions
    from ._postgres import PostgresPersistence
    from ._repair import TOOL_OUTCOME_UNKNOWN, repair

# The storage backends, the listing and the repair load on first use, not with the package
# (start-up cost: ``import agentloop_nb`` builds an App's core, which keeps no log until it is
# given persistence; the JSONL stack alone is eight modules).
_EXPORTS = LazyExports(
    __name__,
    {
        "._jsonl": ("JsonlPersistence",),
        "._listing": ("StoredSession", "list_sessions"),
        "._postgres": ("PostgresPersistence",),
        "._repair": ("TOOL_OUTCOME_UNKNOWN", "repair"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()


__all__ = [
    "HEADER_VERSION",
    "SURFACE_TYPES",
    "TOOL_OUTCOME_UNKNOWN",
    "EventLog",
    "FrozenDict",
    "JsonlPersistence",
    "Persistence",
    "PersistenceError",
    "PostgresPersistence",
    "Session",
    "SessionChunkPayload",
    "SessionCorruptError",
    "SessionDispatch",
    "SessionEvent",
    "SessionEventPayload",
    "SessionExistsError",
    "SessionHeader",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionOwner",
    "SessionPayload",
    "SessionState",
    "SessionStore",
    "StoredSession",
    "freeze_json",
    "list_sessions",
    "parse_node",
    "repair",
]
