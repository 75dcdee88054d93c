"""The agent's pending input: the ``next-turn`` FIFO and the ``next-step`` list.

Every mutation is one durable ``agent/inbox/spliced`` event logged *before* the live lists
change, so the inbox can be rebuilt from the log (``Inbox.restore``) after a resume.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal
from uuid import uuid4

from ..hooks import ClaimedPayload, InboxPayload
from ..messages import CONTENT_ADAPTER, TextBlock, UserMessage

if TYPE_CHECKING:
    from ._agent import Agent

Target = Literal["next-turn", "next-step"]
TARGETS: tuple[Target, ...] = ("next-turn", "next-step")


def new_message_id() -> str:
    return f"msg-{uuid4().hex[:16]}"


def make_user_message(content: Any, source: Any) -> UserMessage:
    """Validate and snapshot ``content`` (str, blocks or a ``UserMessage``) and ``source``.

    Raises ``TypeError`` naming the problem before anything is logged."""
    if isinstance(content, UserMessage):
        if source is not None:
            return content.model_copy(update={"source": _source(source)})
        return content
    if isinstance(content, str):
        blocks: tuple[Any, ...] = (TextBlock(text=content),)
    else:
        try:
            blocks = CONTENT_ADAPTER.validate_python(tuple(content))
        except Exception as exc:
            raise TypeError(
                "message content must be a str, a list of content blocks "
                f"(TextBlock, ImageBlock, ...) or a UserMessage; got {type(content).__name__}: {exc}"
            ) from None
    return UserMessage(id=new_message_id(), content=blocks, source=_source(source))


def _source(source: Any) -> dict[str, Any]:
    if source is None:
        return {"kind": "user"}
    if isinstance(source, str):
        return {"kind": source}
    if not isinstance(source, dict) or not isinstance(source.get("kind"), str):
        raise TypeError(
            f"message source must be a str or a dict with a 'kind' string, got {source!r}"
        )
    import json

    try:  # snapshot and check it is JSON once, here, not at log time
        return dict(json.loads(json.dumps(source, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"message source must be JSON data: {exc}") from None


class Inbox:
    """Read-only views ``next_turn`` / ``next_step`` plus ``remove`` and ``replace`` for pending
    input; the loop uses the private mutators."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._lists: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        return tuple(self._lists["next-turn"])

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        return tuple(self._lists["next-step"])

    def __len__(self) -> int:
        return len(self._lists["next-turn"]) + len(self._lists["next-step"])

    def _locate(self, message_id: str) -> tuple[Target, int]:
        for target in TARGETS:
            for i, m in enumerate(self._lists[target]):
                if m.id == message_id:
                    return target, i
        raise KeyError(
            f"no pending message with id {message_id!r} in agent {self._agent.id!r}'s inbox "
            "(it may already have been claimed by a turn)"
        )

    def remove(self, message_id: str) -> UserMessage:
        """Drop a pending message (logged as a canceled splice; emits ``agent/inbox/discarded``).

        Raises ``KeyError`` when no pending message has that id."""
        target, i = self._locate(message_id)
        old = self._lists[target][i]
        self._splice(target, i, 1, (), outcome="canceled")
        self._agent._emit("agent/inbox/discarded", InboxPayload(self._agent, old))
        return old

    def replace(self, message_id: str, content: Any) -> UserMessage:
        """Replace a pending message's content, keeping its id, place and source.

        Emits ``agent/inbox/discarded`` (old) then ``agent/inbox/inserted`` (new)."""
        target, i = self._locate(message_id)
        old = self._lists[target][i]
        new = make_user_message(content, old.source).model_copy(update={"id": old.id})
        self._splice(target, i, 1, (new,), outcome="canceled")
        self._agent._emit("agent/inbox/discarded", InboxPayload(self._agent, old))
        self._agent._emit("agent/inbox/inserted", InboxPayload(self._agent, new))
        return new

    # -- loop-private -----------------------------------------------------------------------

    def _insert(self, target: Target, message: UserMessage) -> UserMessage:
        """Append ``message`` (re-id'd when its id is already pending); return what was queued."""
        if any(m.id == message.id for t in TARGETS for m in self._lists[t]):
            message = message.model_copy(update={"id": new_message_id()})
        self._splice(target, len(self._lists[target]), 0, (message,))
        self._agent._emit("agent/inbox/inserted", InboxPayload(self._agent, message))
        return message

    def _claim(self, target: Target, count: int, turn: int) -> list[UserMessage]:
        pending = self._lists[target]
        count = min(count, len(pending))
        if count == 0:
            return []
        claimed = pending[:count]
        self._splice(target, 0, count, ())
        for m in claimed:
            self._agent._emit("agent/inbox/claimed", ClaimedPayload(self._agent, m, turn))
        return claimed

    def _clear(self) -> None:
        for target in TARGETS:
            dropped = list(self._lists[target])
            if dropped:
                self._splice(target, 0, len(dropped), (), outcome="canceled")
                for m in dropped:
                    self._agent._emit("agent/inbox/discarded", InboxPayload(self._agent, m))

    def _splice(
        self,
        target: Target,
        start: int,
        removed: int,
        inserted: Sequence[UserMessage],
        *,
        outcome: str | None = None,
    ) -> None:
        data: dict[str, Any] = {
            "target": target,
            "start": start,
            "removed_count": removed,
            "inserted": [m.model_dump(mode="json") for m in inserted],
        }
        if outcome is not None:
            data["outcome"] = outcome
        self._agent.session.append("agent/inbox/spliced", data)  # durable first
        self._lists[target][start : start + removed] = list(inserted)

    def _restore(self, events: Iterable[Any]) -> None:
        """Rebuild the pending lists from logged splice events (resume)."""
        lists: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}
        for ev in events:
            if ev.type != "agent/inbox/spliced":
                continue
            d = ev.data
            new = [UserMessage.model_validate(m) for m in d["inserted"]]
            lists[d["target"]][d["start"] : d["start"] + d["removed_count"]] = new
        self._lists = lists
