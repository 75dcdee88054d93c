"""The agent's pending input: the ``next-turn`` FIFO and the ``next-step`` list.

Every mutation is one durable ``agent/inbox/spliced`` event logged *before* the live lists
change, so the inbox can be rebuilt from the log (``Inbox.restore``) after a resume.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._event_names import AGENT_INBOX_SPLICED
from ..errors import InvalidTypeError, NotFoundError
from ..messages import CONTENT_ADAPTER, TextBlock, UserMessage
from ..session._frozen import FrozenDict, wrap_frozen
from ..session._user_log import user_dump, user_text_message

if TYPE_CHECKING:
    from ..session import Session

Target = Literal["next-turn", "next-step"]
TARGETS: tuple[Target, ...] = ("next-turn", "next-step")

InboxChange = Literal["inserted", "claimed", "discarded"]
Notify = Callable[[InboxChange, UserMessage, int], None]
"""``notify(change, message, turn)``: told after each change is logged (``turn`` is the
claiming turn for ``claimed``, else 0). The agent's owner turns it into hook events."""


def new_message_id() -> str:
    """``msg-`` and the first 16 hex digits of a random UUID (version 4: the 13th digit is
    always ``4``), from 8 random bytes without building the ``UUID`` (a Python ``__init__``
    with its checks, once per message)."""
    digits = os.urandom(8).hex()
    return f"msg-{digits[:12]}4{digits[13:]}"


def make_user_message(content: Any, source: Any) -> UserMessage:
    """Validate and snapshot ``content`` (str, blocks or a ``UserMessage``) and ``source``.

    Raises ``TypeError`` naming the problem before anything is logged."""
    if isinstance(content, UserMessage):
        if source is not None:
            return content.model_copy(update={"source": _source(source)})
        return content
    if type(content) is str:
        # fast path (docs/architecture.md "Turn, session 14"): the message validation would
        # build of these exact values, from its fields
        return user_text_message(new_message_id(), content, _source(source))
    if isinstance(content, str):
        blocks: tuple[Any, ...] = (TextBlock(text=content),)
    else:
        try:
            blocks = CONTENT_ADAPTER.validate_python(tuple(content))
        except Exception as exc:
            raise InvalidTypeError(
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
        raise InvalidTypeError(
            f"message source must be a str or a dict with a 'kind' string, got {source!r}"
        )
    # the standard library: allow_nan=False refuses NaN (orjson would write null)
    try:  # snapshot and check it is JSON once, here, not at log time
        return dict(json.loads(json.dumps(source, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"message source must be JSON data: {exc}") from None


class Inbox:
    """Read-only views ``next_turn`` / ``next_step`` plus ``remove`` and ``replace`` for pending
    input. The driver uses the mutators ``insert``, ``claim``, ``clear``, ``restore`` and the
    query ``has_pending``; they are not meant for plugins (use the agent's ``send`` family and
    ``cancel``)."""

    __slots__ = ("_lists", "_notify", "_owner", "_session")

    def __init__(self, session: Session, notify: Notify) -> None:
        self._session = session
        self._owner = session.id
        self._notify = notify
        self._lists: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        return tuple(self._lists["next-turn"])

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        return tuple(self._lists["next-step"])

    def __len__(self) -> int:
        return len(self._lists["next-turn"]) + len(self._lists["next-step"])

    def has_pending(self, target: Target) -> bool:
        return bool(self._lists[target])

    def _locate(self, message_id: str) -> tuple[Target, int]:
        for target in TARGETS:
            for i, m in enumerate(self._lists[target]):
                if m.id == message_id:
                    return target, i
        raise NotFoundError(
            f"no pending message with id {message_id!r} in agent {self._owner!r}'s inbox "
            "(it may already have been claimed by a turn)"
        )

    def remove(self, message_id: str) -> UserMessage:
        """Drop a pending message (logged as a canceled splice; emits ``agent/inbox/discarded``).

        Raises ``KeyError`` when no pending message has that id."""
        target, i = self._locate(message_id)
        old = self._lists[target][i]
        self._splice(target, i, 1, (), outcome="canceled")
        self._notify("discarded", old, 0)
        return old

    def replace(self, message_id: str, content: Any) -> UserMessage:
        """Replace a pending message's content, keeping its id, place and source.

        Emits ``agent/inbox/discarded`` (old) then ``agent/inbox/inserted`` (new)."""
        target, i = self._locate(message_id)
        old = self._lists[target][i]
        new = make_user_message(content, old.source).model_copy(update={"id": old.id})
        self._splice(target, i, 1, (new,), outcome="canceled")
        self._notify("discarded", old, 0)
        self._notify("inserted", new, 0)
        return new

    # -- the driver's API ---------------------------------------------------------------------

    def insert(self, target: Target, message: UserMessage) -> UserMessage:
        """Append ``message`` (re-id'd when its id is already pending); return what was queued."""
        if any(m.id == message.id for t in TARGETS for m in self._lists[t]):
            message = message.model_copy(update={"id": new_message_id()})
        self._splice(target, len(self._lists[target]), 0, (message,))
        self._notify("inserted", message, 0)
        return message

    def claim(self, target: Target, count: int | None, turn: int) -> list[UserMessage]:
        """Remove and return the first ``count`` pending messages of ``target`` (all of them
        when ``None``) for ``turn``."""
        pending = self._lists[target]
        count = len(pending) if count is None else min(count, len(pending))
        if count == 0:
            return []
        claimed = pending[:count]
        self._splice(target, 0, count, ())
        for m in claimed:
            self._notify("claimed", m, turn)
        return claimed

    def clear(self) -> None:
        """Drop everything pending (a canceled splice per non-empty list)."""
        for target in TARGETS:
            dropped = list(self._lists[target])
            if dropped:
                self._splice(target, 0, len(dropped), (), outcome="canceled")
                for m in dropped:
                    self._notify("discarded", m, 0)

    def restore(self, events: Iterable[Any]) -> None:
        """Rebuild the pending lists from logged splice events (resume). Emits nothing."""
        lists: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}
        for ev in events:
            if ev.type != AGENT_INBOX_SPLICED:
                continue
            d = ev.data
            new = [UserMessage.model_validate(m) for m in d["inserted"]]
            lists[d["target"]][d["start"] : d["start"] + d["removed_count"]] = new
        self._lists = lists

    def _splice(
        self,
        target: Target,
        start: int,
        removed: int,
        inserted: Sequence[UserMessage],
        *,
        outcome: str | None = None,
    ) -> None:
        # fast path (docs/architecture.md "Turn, session 14"): each message's frozen dump
        # built from its fields where they fix it; the data is then wrapped, not walked
        dumps: list[Any] = []
        frozen = True
        for m in inserted:
            dump = user_dump(m)
            if dump is None:
                dumps.append(m.model_dump(mode="json"))
                frozen = False
            else:
                dumps.append(dump)
        data: dict[str, Any] = {
            "target": target,
            "start": start,
            "removed_count": removed,
            "inserted": tuple(dumps) if frozen else dumps,
        }
        if outcome is not None:
            data["outcome"] = outcome
        record: FrozenDict | dict[str, Any] = wrap_frozen(data) if frozen else data
        self._session.append(AGENT_INBOX_SPLICED, record)  # durable first
        self._lists[target][start : start + removed] = list(inserted)
