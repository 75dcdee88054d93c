"""``Transcript``: session events folded into displayable items (rendered by ``_render``).

Pure Python (no IPython, no ipywidgets), so it is cheap to test and the same fold serves the
widgets, their ``repr`` and the benchmark. ``feed(event)`` is the hot path (called once per
streamed chunk). Streamed blocks are folded by the loop's own rules: each streamed item owns a
:class:`~agentloop_nb.llm.BlockAssembler` that is fed the logged chunks of its block, so the
view shows exactly what the model's message is assembled from (first non-empty tool-call id and
name win, a ``block-end`` carrying its block replaces the deltas, ...). A live view folds each
chunk as it streams (:meth:`Transcript.feed_chunk`, from ``session/chunk``) and skips the
``assistant/chunk`` events that log them later; a view built from the log folds those
(coalesced: the same blocks, a tool call as one ``block-end`` carrying it; in a version-1 log,
every chunk as streamed). Feeding only marks the
item dirty; building its text and rendering happen when a throttled view renders.

Tool calls are ``queued`` until their ``tool/call`` is logged (``running``); they are shown
finished when their ``tool/result`` is committed, or earlier through :meth:`Transcript.settle`
(a view calls it on the ``tools/settled`` hook: results are committed in model order, so a body
that finished early would otherwise look running). A call's duration spans ``tool/call`` to its
settling (or its result), less the time it waited for a person: between a ``tool/approval``
asking and the one answering, the call is ``awaiting approval`` and its clock stops (both
times come from the log). Calls whose body never ran show none.

A turn's usage item carries its tokens and, when every part of it has a price in the model
table, its cost (priced like ``agent.usage_by_turn``: each ``assistant/message`` at the model of
the ``request/header`` in effect, each ``compaction/summary`` at its own model). A
``compaction/summary`` event becomes a collapsible ``compaction`` marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ...llm import BlockAssembler
from ...models import DEFAULT_TABLE, ModelTable
from ...usage import UsageTotals
from ._item import CHUNK_TYPES, Item
from ._render import item_html, item_text

_DELTAS = frozenset({"text-delta", "reasoning-delta"})
"""Chunk types an open block only accumulates (``Item.feed`` takes every one)."""

# Result codes of calls whose body never ran (refused before dispatch, or never dispatched),
# with the state they are shown in. Their log times only measure the wait until the result was
# committed in model order, so no duration is shown for them.
_NOT_RUN_STATES = MappingProxyType(
    {
        "UNKNOWN_TOOL": "invalid",
        "INVALID_ARGS": "invalid",
        "DENIED": "denied",
        "ABORTED_BEFORE_DISPATCH": "aborted",
    }
)

_DELTA_KINDS = MappingProxyType(
    {"text-delta": "text", "reasoning-delta": "reasoning", "tool-call-delta": "tool-call"}
)


class Transcript:
    """Fold a session's events (``feed``) into ``items``.

    ``dirty`` holds the indices of items changed since the last ``take_dirty()`` (a streaming
    item that was marked and has not been read since is not marked again by a delta: see
    :meth:`feed_chunk`); ``pool`` is
    the tool-call items of the latest step that asked for tools (what ``ToolPoolView`` shows);
    ``pools`` every such step's calls by ``(turn, step)``; ``usage`` the token totals (a turn's own usage is one ``usage`` item at its end);
    ``turn`` / ``last_end`` the latest turn and end reason (its ``turn-end`` item's ``shown``
    says whether that end's error was already shown as an error item of its turn); ``turn_messages`` the ids of
    each turn's user messages (what a per-cell view recognises its turns by);
    ``turn_end_seqs`` the seq of each ended turn's ``turn/end`` event (where "fork from here"
    cuts). A tool call whose result meta names a ``session_id`` (a sub-agent's) keeps it in
    its item's ``data["session_id"]``.
    ``table`` prices the usage (default: the built-in model table).
    """

    def __init__(self, table: ModelTable | None = None) -> None:
        self.table = table if table is not None else DEFAULT_TABLE
        self._model: str | None = None  # the model of the request/header in effect
        self._turn_cost = UsageTotals()
        self.items: list[Item] = []
        self.dirty: set[int] = set()
        self.usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}
        self.turn = 0
        self.last_end: Mapping[str, Any] | None = None
        self.turn_messages: dict[int, list[str]] = {}
        self.turn_end_seqs: dict[int, int] = {}
        self.turn_items: dict[int, list[Item]] = {}
        self.turn_started: float | None = None
        self.turn_ended: float | None = None
        self.pool: list[Item] = []
        self.pool_key: tuple[int, int] = (0, 0)
        self.pools: dict[tuple[int, int], list[Item]] = {}
        self.events_seen = 0
        self._blocks: dict[int, Item] = {}
        self._block_step: tuple[int, int] = (0, 0)
        self._calls: dict[str, Item] = {}
        self._turn_usage: dict[str, int] = {}
        self._turn_errors: set[str] = set()

    # -- folding ----------------------------------------------------------------------------

    def feed_all(self, events: Iterable[Any]) -> None:
        for event in events:
            self.feed(event)

    def feed(self, event: Any, *, announced: bool = False) -> None:
        """Fold one ``SessionEvent``. Unknown types are ignored. ``announced``: the event was
        just logged and its chunk (an ``assistant/chunk``) was already folded live through
        :meth:`feed_chunk` (``session/chunk``), so it is skipped."""
        self.events_seen += 1
        kind = event.type
        data = event.data
        if kind == "assistant/chunk":
            chunk = data.get("chunk")
            if chunk is not None and not announced:
                self._chunk(data, chunk)
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data, event.time)
            seq = getattr(event, "seq", None)
            if kind == "turn/end" and isinstance(seq, int):
                self.turn_end_seqs[self.turn] = seq

    def turns_with(self, message_ids: Iterable[str]) -> list[int]:
        """The turns (in order) whose user messages include one of ``message_ids``."""
        wanted = set(message_ids)
        return sorted(n for n, ids in self.turn_messages.items() if not wanted.isdisjoint(ids))

    def take_dirty(self) -> set[int]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def _add(
        self,
        kind: str,
        data: dict[str, Any],
        turn: int | None = None,
        assembler: BlockAssembler | None = None,
    ) -> Item:
        item = Item(len(self.items), kind, self.turn if turn is None else turn, data, assembler)
        self.items.append(item)
        self.turn_items.setdefault(item.turn, []).append(item)
        self.dirty.add(item.index)
        return item

    def _touch(self, item: Item) -> None:
        item.html = None
        self.dirty.add(item.index)

    def feed_chunk(self, turn: int, step: int, chunk: Mapping[str, Any]) -> bool:
        """Fold one chunk of step ``step`` of turn ``turn`` as it streams (``session/chunk``;
        the batch that logs it later is fed with ``announced=True``).

        Returns ``False`` when nothing new needs telling: the chunk is a text or reasoning
        delta of an item marked changed (``dirty``) since its text was last read. Whoever took
        that mark has not read the item yet and will read all of it, so the mark is not set
        again (``dirty`` may lack the item: a streaming item is marked once per read)."""
        if chunk["type"] in _DELTAS:  # most of a stream: a delta of an open block
            item = self._blocks.get(chunk["index"])
            if item is not None:  # what ``_chunk`` does for it, without its other cases
                item.feed(chunk)
                if item.told:  # marked, not read since: nothing to tell
                    return False
                item.told = True
                item.html = None
                self.dirty.add(item.index)
                return True
        self._chunk({"turn": turn, "step": step}, chunk)
        return True

    def _chunk(self, data: Mapping[str, Any], chunk: Mapping[str, Any]) -> None:
        """Fold ``chunk``; ``data`` holds its ``turn`` and ``step``."""
        ctype = chunk["type"]
        if ctype not in CHUNK_TYPES:
            return  # usage and finish: summarised by assistant/message and assistant/attempt
        index = chunk["index"]
        item = self._blocks.get(index)
        if item is None:  # a chunk without block-start opens its block implicitly
            kind = _block_kind(chunk)
            if kind is None:
                return  # an end for a block that never started and carries nothing
            item = self._open_block(data, index, kind)
        if not item.feed(chunk):
            return
        if ctype == "block-end" and item.kind != "tool":
            item.data["streaming"] = False
        if item.html is not None:
            item.html = None
        item.told = True
        self.dirty.add(item.index)

    def _open_block(self, data: Mapping[str, Any], index: int, block_type: str) -> Item:
        key = (data.get("turn", self.turn), data.get("step", 0))
        if key != self._block_step:
            self._blocks = {}
            self._block_step = key
        if block_type == "tool-call":
            kind = "tool"
            fields: dict[str, Any] = {"state": "streaming", "call_id": "", "name": ""}
        else:
            kind = "reasoning" if block_type == "reasoning" else "assistant"
            fields = {"streaming": True}
        fields["step"] = key[1]
        item = self._blocks[index] = self._add(kind, fields, assembler=BlockAssembler())
        return item

    def _turn_start(self, data: Mapping[str, Any], time: float) -> None:
        self.turn = int(data.get("turn", self.turn + 1))
        self.turn_started, self.turn_ended = time, None
        self._blocks = {}
        self._turn_usage = {}
        self._turn_cost = UsageTotals()
        self._turn_errors = set()
        self._add("turn-start", {"turn": self.turn})

    def _turn_end(self, data: Mapping[str, Any], time: float) -> None:
        reason = data.get("reason") or {}
        self.turn_ended = time
        self.last_end = reason
        for item in self._blocks.values():
            if item.data.get("streaming"):
                item.data["streaming"] = False
                self._touch(item)
        self._blocks = {}
        if self._turn_usage:
            cost = self._turn_cost.cost_usd
            self._add("usage", {"usage": self._turn_usage, "cost_usd": cost})
            self._turn_usage = {}
            self._turn_cost = UsageTotals()
        shown = reason.get("kind") == "error" and str(reason.get("code")) in self._turn_errors
        self._add(
            "turn-end", {"turn": data.get("turn", self.turn), "reason": reason, "shown": shown}
        )

    def _user(self, data: Mapping[str, Any], _time: float) -> None:
        message = data.get("message") or {}
        source = message.get("source") or {}
        if message.get("id"):
            self.turn_messages.setdefault(self.turn, []).append(str(message["id"]))
        self._add(
            "user",
            {
                # Blocks apart: ``%%agent NAME --with VAR`` sends the variable, then the prompt.
                "text": content_text(message.get("content"), "\n\n"),
                "source": str(source.get("kind", "user")),
                "id": message.get("id"),
            },
        )

    def _assistant(self, data: Mapping[str, Any], _time: float) -> None:
        turn, step = data.get("turn", self.turn), data.get("step", 0)
        message = data.get("message") or {}
        content = message.get("content") or ()
        interrupted = bool(data.get("interrupted"))
        items = list(self._blocks.values()) if self._block_step == (turn, step) else []
        self._blocks = {}
        if not items:  # no chunks logged (seeded, forked or compacted history)
            items = self._from_content(content, step)
        kept = {b.get("id") for b in content if b.get("type") == "tool-call"}
        calls: list[Item] = []
        for item in items:
            if item.kind == "tool":
                item.fold()  # the call's id and name, as the assembler resolved them
                if item.data.get("call_id") in kept:
                    self._calls[item.data["call_id"]] = item
                    if item.data["state"] == "streaming":
                        item.data["state"] = "queued"
                    calls.append(item)
                else:  # cut off by an abort or a max-tokens finish: never executed
                    item.data["state"] = "dropped"
            else:
                item.data["streaming"] = False
                if interrupted:
                    item.data["interrupted"] = True
            self._touch(item)
        if calls:
            self.pool = sorted(calls, key=lambda i: i.index)
            self.pool_key = (turn, step)
            self.pools[self.pool_key] = self.pool
        self._count(data.get("usage"), self._model)

    def _count(self, usage: Any, model: str | None) -> None:
        if not usage or not isinstance(usage, Mapping):
            return
        for key in ("input_tokens", "output_tokens"):
            n = int(usage.get(key) or 0)
            self.usage[key] = self.usage.get(key, 0) + n
            self._turn_usage[key] = self._turn_usage.get(key, 0) + n
        self._turn_cost = self._turn_cost + UsageTotals.of(usage, self.table, model)

    def _header(self, data: Mapping[str, Any], _time: float) -> None:
        header = data.get("header")
        config = header.get("config") if isinstance(header, Mapping) else None
        model = config.get("model") if isinstance(config, Mapping) else None
        self._model = model if isinstance(model, str) else None

    def _compaction(self, data: Mapping[str, Any], _time: float) -> None:
        model = data.get("model")
        self._count(data.get("usage"), model if isinstance(model, str) else None)
        self._add(
            "compaction",
            {
                "summary": str(data.get("summary", "")),
                "start": data.get("start"),
                "end": data.get("end"),
                "tokens_before": data.get("tokens_before"),
                "tokens_after": data.get("tokens_after_estimate"),
                "reason": data.get("reason"),
            },
        )

    def _from_content(self, content: Any, step: int) -> list[Item]:
        items = []
        for block in content:
            btype = block.get("type")
            if btype in ("text", "reasoning"):
                item = self._add(
                    "assistant" if btype == "text" else "reasoning",
                    {"streaming": False, "step": step},
                )
                item.parts.append(str(block.get("text", "")))
            elif btype == "tool-call":
                item = self._add(
                    "tool",
                    {
                        "state": "queued",
                        "call_id": block.get("id", ""),
                        "name": block.get("name", ""),
                        "step": step,
                    },
                )
                item.parts.append(str(block.get("arguments", "")))
                self._calls[item.data["call_id"]] = item
            else:
                continue
            items.append(item)
        return items

    def _tool_call(self, data: Mapping[str, Any], time: float) -> None:
        call_id = str(data.get("call_id", ""))
        item = self._calls.get(call_id)
        if item is None:
            item = self._add(
                "tool",
                {
                    "state": "queued",
                    "call_id": call_id,
                    "name": data.get("name", ""),
                    "step": data.get("step", 0),
                },
            )
            item.parts.append(str(data.get("arguments", "")))
            self._calls[call_id] = item
            key = (data.get("turn", self.turn), data.get("step", 0))
            if key != self.pool_key:
                self.pool, self.pool_key = [], key
                self.pools[key] = self.pool
            self.pool.append(item)
        if item.data["state"] in ("queued", "streaming"):
            item.data["state"] = "running"
        item.data["started"] = time
        self._touch(item)

    def _approval(self, data: Mapping[str, Any], time: float) -> None:
        item = self._calls.get(str(data.get("call_id", "")))
        if item is None:
            return  # a question about a call this log never started: nothing to show
        d = item.data
        if data.get("state") == "asked":
            d["asked"] = time
            if d["state"] == "running":
                d["state"] = "awaiting approval"
        else:
            self._answered(d, time)
        self._touch(item)

    @staticmethod
    def _answered(d: dict[str, Any], at: float) -> None:
        """Close the call's wait for a person at ``at`` (no-op when it was not waiting)."""
        asked = d.pop("asked", None)
        if asked is None:
            return
        d["waited"] = d.get("waited", 0.0) + max(0.0, at - asked)
        d["answered"] = at
        if d["state"] == "awaiting approval":
            d["state"] = "running"

    def _tool_result(self, data: Mapping[str, Any], time: float) -> None:
        call_id = str(data.get("call_id", ""))
        item = self._calls.get(call_id)
        if item is None:
            self._tool_call(data, time)
            item = self._calls[call_id]
        code = (data.get("error") or {}).get("code")
        d = item.data
        self._finish(item, code, bool(data.get("is_error")), d.get("settled", time))
        content = data.get("content")
        d.update(result="" if content is None else content, code=code)
        meta = data.get("meta")
        child = meta.get("session_id") if isinstance(meta, Mapping) else None
        if isinstance(child, str) and child:
            d["session_id"] = child  # a sub-agent's session (the delegate tool's result meta)
        self._touch(item)

    def settle(self, call_id: str, at: float, *, is_error: bool, code: str | None) -> bool:
        """Show call ``call_id`` finished at ``at`` (epoch seconds) before its ``tool/result``
        is committed; the committed result still decides the final state, the span keeps
        ending at ``at``. Returns ``False`` (and changes nothing) for a call not logged as
        started yet or already committed."""
        item = self._calls.get(call_id)
        if item is None or item.data["state"] not in ("running", "awaiting approval"):
            return False
        item.data["settled"] = at
        self._finish(item, code, is_error, at)
        self._touch(item)
        return True

    @classmethod
    def _finish(cls, item: Item, code: Any, is_error: bool, at: float) -> None:
        d = item.data
        cls._answered(d, at)  # a log that never logged the answer (a crash while asking)
        not_run = _NOT_RUN_STATES.get(code) if isinstance(code, str) else None
        if not_run is not None:
            state = not_run
            d["ran"] = False
        elif code == "ABORTED":
            state = "aborted"
        elif code == "CANCELLED":  # the user cancelled this call alone (agent.cancel_tool)
            state = "cancelled"
        elif is_error:
            state = "failed"
        else:
            state = "done"
        d.update(state=state, ended=at)
        d.setdefault("started", at)

    def call(self, call_id: str) -> Item | None:
        """The item of tool call ``call_id`` (``None`` if not seen yet)."""
        return self._calls.get(call_id)

    def _attempt(self, data: Mapping[str, Any], _time: float) -> None:
        failure = data.get("failure") or {}
        for item in self._blocks.values():  # the failed attempt's partial output stays visible
            if item.kind == "tool":
                item.data["state"] = "dropped"
            else:
                item.data["streaming"] = False
                item.data["interrupted"] = True
            self._touch(item)
        self._blocks = {}
        self._turn_errors.add(str(failure.get("code", "UNKNOWN")))
        self._add(
            "error",
            {
                "code": failure.get("code", "UNKNOWN"),
                "message": failure.get("message", ""),
                "where": "request",
            },
        )

    def _retry(self, data: Mapping[str, Any], _time: float) -> None:
        self._add(
            "retry",
            {"code": data.get("code"), "attempt": data.get("attempt"), "delay": data.get("delay")},
        )

    # -- rendering --------------------------------------------------------------------------

    def text(self) -> str:
        """A readable plain-text transcript (what ``repr`` shows without a front end)."""
        return "\n".join(line for item in self.items if (line := item_text(item)))

    def turn_html(self, turn: int) -> str:
        """The HTML of every item of ``turn`` (cached per item)."""
        return "".join(item_html(i) for i in self.turn_items.get(turn, ()))

    @property
    def turns(self) -> list[int]:
        """The turn numbers that have items, in order (``0``: items before any turn)."""
        return sorted(self.turn_items)

    def turns_html(self, turns: Iterable[int]) -> str:
        """The HTML of every item of ``turns``, in turn order."""
        return "".join(self.turn_html(t) for t in sorted(set(turns)))

    def turns_text(self, turns: Iterable[int]) -> str:
        """The plain text of every item of ``turns``, in turn order."""
        return "\n".join(
            line
            for t in sorted(set(turns))
            for i in self.turn_items.get(t, ())
            if (line := item_text(i))
        )


_HANDLERS = MappingProxyType(
    {
        "turn/start": Transcript._turn_start,
        "turn/end": Transcript._turn_end,
        "user/message": Transcript._user,
        "assistant/message": Transcript._assistant,
        "tool/call": Transcript._tool_call,
        "tool/approval": Transcript._approval,
        "tool/result": Transcript._tool_result,
        "assistant/attempt": Transcript._attempt,
        "llm/retry": Transcript._retry,
        "request/header": Transcript._header,
        "compaction/summary": Transcript._compaction,
    }
)


def content_text(content: Any, separator: str = "") -> str:
    """The text of a message's content (a str or blocks, joined by ``separator``); images
    become ``[image]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for block in content:
        btype = block.get("type") if isinstance(block, Mapping) else None
        if btype == "text":
            out.append(str(block.get("text", "")))
        elif btype == "image":
            out.append("[image]")
    return separator.join(out)


def _block_kind(chunk: Mapping[str, Any]) -> str | None:
    """The block type a logged chunk opens (``None``: a bare ``block-end``)."""
    ctype = chunk["type"]
    if ctype == "block-start":
        return str(chunk["block_type"])
    if ctype == "block-end":
        block = chunk.get("block")
        return None if block is None else str(block.get("type"))
    return _DELTA_KINDS[ctype]


__all__ = ["Item", "Transcript", "content_text", "item_html", "item_text"]
