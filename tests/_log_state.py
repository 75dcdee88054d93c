"""What a stored session log derives: its model messages after crash repair and the state of
its view (the transcript fold), as plain JSON so two versions of the code can be compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentloop_nb.jupyter.fold import Transcript
from agentloop_nb.session import JsonlPersistence, SessionStore
from agentloop_nb.session._repair import repair


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def derived_state(root: Path, session_id: str) -> dict[str, Any]:
    """Load ``root/<session_id>.jsonl``, repair it as a resume does, and return
    ``{"messages", "repaired", "items", "text", "usage"}``."""
    header, events = JsonlPersistence(root).load(session_id)
    session = SessionStore().prepare(header=header, events=events)
    repaired = [(e.type, _plain(e.data)) for e in repair(session)]
    messages = [m.model_dump(mode="json", exclude={"id"}) for m in session.derive_messages()]
    transcript = Transcript()
    transcript.feed_all(session.events)
    items = [
        {"kind": i.kind, "turn": i.turn, "data": _plain(i.data), "text": i.text}
        for i in transcript.items
    ]
    return {
        "messages": messages,
        "repaired": repaired,
        "items": items,
        "text": transcript.text(),
        "usage": dict(transcript.usage),
    }
