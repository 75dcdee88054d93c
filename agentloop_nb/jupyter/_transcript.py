"""``Transcript``: session events folded into displayable items, rendered as text or HTML.

Pure Python (no IPython, no ipywidgets), so it is cheap to test and the same fold serves the
widgets, their ``repr`` and the benchmark. ``feed(event)`` is the hot path (called once per
streamed chunk): it appends a delta to a list and marks the item dirty; joining and rendering
happen only when a throttled view renders.

Every HTML fragment escapes all text it shows and carries stable CSS classes
(``agentloop-user``, ``agentloop-assistant``, ``agentloop-reasoning``, ``agentloop-tool-call``,
``agentloop-turn-start``, ``agentloop-turn-end``, ``agentloop-error``, ``agentloop-retry``,
``agentloop-usage``) that browser tests and user CSS can select.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

RESULT_PREVIEW = 2000
"""Characters of a tool result shown (the log keeps all of it)."""

# Result codes of calls whose body never ran (refused before dispatch, or never dispatched),
# with the state they are shown in. Their log times only measure the wait until the result was
# committed in model order, so no duration is shown for them.
_NOT_RUN_STATES = {
    "UNKNOWN_TOOL": "invalid",
    "INVALID_ARGS": "invalid",
    "DENIED": "denied",
    "ABORTED_BEFORE_DISPATCH": "aborted",
}


class Item:
    """One displayable thing: a message, a tool call, a turn boundary, an error...

    ``kind`` is one of ``turn-start``, ``user``, ``assistant``, ``reasoning``, ``tool``,
    ``usage``, ``error``, ``retry``, ``turn-end``; ``data`` holds its fields; ``parts`` the
    streamed text pieces (assistant/reasoning text, tool arguments).
    """

    __slots__ = ("data", "html", "index", "kind", "parts", "turn")

    def __init__(self, index: int, kind: str, turn: int, data: dict[str, Any]) -> None:
        self.index = index
        self.kind = kind
        self.turn = turn
        self.data = data
        self.parts: list[str] = []
        self.html: str | None = None  # render cache, cleared on change

    @property
    def text(self) -> str:
        parts = self.parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # amortise: later renders join only what is new
        return parts[0] if parts else ""

    def __repr__(self) -> str:
        return f"<Item {self.index} {self.kind} turn={self.turn} {self.data!r}>"


class Transcript:
    """Fold a session's events (``feed``) into ``items``.

    ``dirty`` holds the indices of items changed since the last ``take_dirty()``; ``pool`` is
    the tool-call items of the latest step that asked for tools (what ``ToolPoolView`` shows);
    ``usage`` the token totals; ``status_turn`` / ``last_end`` the latest turn and end reason.
    """

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.dirty: set[int] = set()
        self.usage: dict[str, int] = {"input_tokens": 0, "output_tokens": 0}
        self.turn = 0
        self.last_end: Mapping[str, Any] | None = None
        self.pool: list[Item] = []
        self.pool_key: tuple[int, int] = (0, 0)
        self.events_seen = 0
        self._blocks: dict[int, Item] = {}
        self._block_step: tuple[int, int] = (0, 0)
        self._calls: dict[str, Item] = {}

    # -- folding ----------------------------------------------------------------------------

    def feed_all(self, events: Iterable[Any]) -> None:
        for event in events:
            self.feed(event)

    def feed(self, event: Any) -> None:
        """Fold one ``SessionEvent``. Unknown types are ignored."""
        self.events_seen += 1
        kind = event.type
        data = event.data
        if kind == "assistant/chunk":
            self._chunk(data)
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data, event.time)

    def take_dirty(self) -> set[int]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def _add(self, kind: str, data: dict[str, Any], turn: int | None = None) -> Item:
        item = Item(len(self.items), kind, self.turn if turn is None else turn, data)
        self.items.append(item)
        self.dirty.add(item.index)
        return item

    def _touch(self, item: Item) -> None:
        item.html = None
        self.dirty.add(item.index)

    def _chunk(self, data: Mapping[str, Any]) -> None:
        chunk = data["chunk"]
        ctype = chunk["type"]
        if ctype == "text-delta" or ctype == "reasoning-delta":
            item = self._blocks.get(chunk["index"])
            if item is None:  # a delta without block-start: open the block implicitly
                item = self._open_block(data, chunk["index"], ctype[:-6])
            item.parts.append(chunk["text"])
            if item.html is not None:
                item.html = None
            self.dirty.add(item.index)
        elif ctype == "tool-call-delta":
            item = self._blocks.get(chunk["index"]) or self._open_block(
                data, chunk["index"], "tool-call"
            )
            d = item.data
            if chunk.get("id") and not d.get("call_id"):
                d["call_id"] = chunk["id"]
                self._calls[chunk["id"]] = item
            if chunk.get("name") and not d.get("name"):
                d["name"] = chunk["name"]
            item.parts.append(chunk.get("arguments_delta", ""))
            self._touch(item)
        elif ctype == "block-start":
            self._open_block(data, chunk["index"], chunk["block_type"])
        elif ctype == "block-end":
            item = self._blocks.get(chunk["index"])
            if item is not None and item.kind != "tool":
                item.data["streaming"] = False
                self._touch(item)
        # usage and finish are summarised by assistant/message and assistant/attempt

    def _open_block(self, data: Mapping[str, Any], index: int, block_type: str) -> Item:
        key = (data.get("turn", self.turn), data.get("step", 0))
        if key != self._block_step:
            self._blocks = {}
            self._block_step = key
        if block_type == "tool-call":
            item = self._add(
                "tool", {"state": "streaming", "call_id": "", "name": "", "step": key[1]}
            )
        else:
            item = self._add(
                block_type if block_type == "reasoning" else "assistant",
                {"streaming": True, "step": key[1]},
            )
        self._blocks[index] = item
        return item

    def _turn_start(self, data: Mapping[str, Any], _time: float) -> None:
        self.turn = int(data.get("turn", self.turn + 1))
        self._blocks = {}
        self._add("turn-start", {"turn": self.turn})

    def _turn_end(self, data: Mapping[str, Any], _time: float) -> None:
        reason = data.get("reason") or {}
        self.last_end = reason
        for item in self._blocks.values():
            if item.data.get("streaming"):
                item.data["streaming"] = False
                self._touch(item)
        self._blocks = {}
        self._add("turn-end", {"turn": data.get("turn", self.turn), "reason": reason})

    def _user(self, data: Mapping[str, Any], _time: float) -> None:
        message = data.get("message") or {}
        source = message.get("source") or {}
        self._add(
            "user",
            {
                "text": content_text(message.get("content")),
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
                if item.data.get("call_id") in kept:
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
        usage = data.get("usage")
        if usage:
            for key in ("input_tokens", "output_tokens"):
                self.usage[key] = self.usage.get(key, 0) + int(usage.get(key) or 0)
            self._add("usage", {"usage": dict(usage), "step": step})

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
            self.pool.append(item)
        if item.data["state"] in ("queued", "streaming"):
            item.data["state"] = "running"
        item.data["started"] = time
        self._touch(item)

    def _tool_result(self, data: Mapping[str, Any], time: float) -> None:
        call_id = str(data.get("call_id", ""))
        item = self._calls.get(call_id)
        if item is None:
            self._tool_call(data, time)
            item = self._calls[call_id]
        error = data.get("error") or {}
        code = error.get("code")
        not_run = _NOT_RUN_STATES.get(code) if isinstance(code, str) else None
        if not_run is not None:
            state = not_run
            item.data["ran"] = False
        elif code == "ABORTED":
            state = "aborted"
        elif data.get("is_error"):
            state = "failed"
        else:
            state = "done"
        item.data.update(state=state, result=str(data.get("content", "")), code=code, ended=time)
        item.data.setdefault("started", time)
        self._touch(item)

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
        return "".join(item_html(i) for i in self.items if i.turn == turn)


_HANDLERS = {
    "turn/start": Transcript._turn_start,
    "turn/end": Transcript._turn_end,
    "user/message": Transcript._user,
    "assistant/message": Transcript._assistant,
    "tool/call": Transcript._tool_call,
    "tool/result": Transcript._tool_result,
    "assistant/attempt": Transcript._attempt,
    "llm/retry": Transcript._retry,
}


def content_text(content: Any) -> str:
    """The text of a message's content (a str or blocks); images become ``[image]``."""
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
    return "".join(out)


def reason_text(reason: Mapping[str, Any] | None) -> str:
    """``completed``, ``aborted (user)``, ``error AUTH: ...`` from a ``turn/end`` reason."""
    if not reason:
        return "unknown"
    kind = str(reason.get("kind", "unknown"))
    if kind == "aborted":
        cause = reason.get("cause") or {}
        return f"aborted ({cause.get('kind', '?')})"
    if kind == "error":
        return f"error {reason.get('code', 'UNKNOWN')}: {reason.get('message', '')}"
    return kind


def pretty_args(raw: str) -> str:
    """Tool arguments for display: compact JSON when valid, the raw string otherwise."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False) if raw else "{}"
    except ValueError:
        return raw


def _duration(item: Item) -> str:
    """`` (1.23s)`` for a finished call whose body ran, else ``""``.

    Prefers the exact body span (``data["body"]``, recorded by a live ``ToolPoolView``) over
    the log times: ``tool/result`` is committed in model order, so it can lag a body that
    finished early."""
    d = item.data
    if d.get("ran") is False:
        return ""
    body = d.get("body")
    started, ended = body if body is not None else (d.get("started"), d.get("ended"))
    if started is None or ended is None:
        return ""
    return f" ({ended - started:.2f}s)"


def item_text(item: Item) -> str:
    d = item.data
    k = item.kind
    if k == "turn-start":
        return f"── turn {d['turn']} ──"
    if k == "turn-end":
        return f"── turn {d['turn']} ended: {reason_text(d['reason'])} ──"
    if k == "user":
        label = "user" if d["source"] == "user" else f"user/{d['source']}"
        return f"[{label}] {d['text']}"
    if k == "assistant":
        cut = " [interrupted]" if d.get("interrupted") else ""
        return f"assistant: {item.text}{cut}"
    if k == "reasoning":
        return f"(reasoning) {item.text}"
    if k == "tool":
        result = d.get("result")
        tail = f" → {result[:200]}" if result is not None else ""
        return (
            f"tool {d.get('name')}({pretty_args(item.text)}) [{d['state']}]{_duration(item)}{tail}"
        )
    if k == "usage":
        u = d["usage"]
        return f"(tokens in {u.get('input_tokens', 0)}, out {u.get('output_tokens', 0)})"
    if k == "error":
        return f"! {d['where']} error {d['code']}: {d['message']}"
    if k == "retry":
        return f"! retry {d['attempt']} after {d['code']} in {d['delay']}s"
    return ""


_BOX = "margin:2px 0;padding:2px 6px;border-radius:4px;white-space:pre-wrap;"
_STATE_COLOURS = {
    "streaming": "#999",
    "queued": "#999",
    "running": "#1f77b4",
    "done": "#2ca02c",
    "failed": "#d62728",
    "denied": "#8c564b",
    "invalid": "#d62728",
    "aborted": "#ff7f0e",
    "dropped": "#bbb",
}


def item_html(item: Item) -> str:
    """The escaped HTML fragment of one item (cached until the item changes)."""
    cached = item.html
    if cached is not None:
        return cached
    html = _render(item)
    # A streaming item changes again soon: caching it would only cost memory churn.
    if not item.data.get("streaming") and item.data.get("state") not in ("streaming", "running"):
        item.html = html
    return html


def _render(item: Item) -> str:
    d = item.data
    k = item.kind
    if k == "turn-start":
        return (
            f'<div class="agentloop-turn-start" style="border-top:1px solid #ccc;'
            f'color:#888;font-size:85%;margin-top:6px">turn {d["turn"]}</div>'
        )
    if k == "turn-end":
        kind = escape(str((d["reason"] or {}).get("kind", "unknown")))
        return (
            f'<div class="agentloop-turn-end agentloop-turn-end-{kind}" '
            f'style="color:#888;font-size:85%">turn {d["turn"]} ended: '
            f"{escape(reason_text(d['reason']))}</div>"
        )
    if k == "user":
        source = escape(d["source"])
        return (
            f'<div class="agentloop-user agentloop-source-{source}" style="{_BOX}'
            f'background:#eef3fb"><b>{source}</b>: {escape(d["text"])}</div>'
        )
    if k == "assistant":
        classes = "agentloop-assistant"
        if d.get("streaming"):
            classes += " agentloop-streaming"
        cut = (
            ' <span class="agentloop-interrupted" style="color:#ff7f0e">[interrupted]</span>'
            if d.get("interrupted")
            else ""
        )
        return f'<div class="{classes}" style="{_BOX}">{escape(item.text)}{cut}</div>'
    if k == "reasoning":
        opened = " open" if d.get("streaming") else ""
        return (
            f'<details class="agentloop-reasoning"{opened} style="color:#777;{_BOX}">'
            f"<summary>reasoning</summary>{escape(item.text)}</details>"
        )
    if k == "tool":
        state = d["state"]
        colour = _STATE_COLOURS.get(state, "#999")
        result = d.get("result")
        body = ""
        if result is not None:
            shown = result if len(result) <= RESULT_PREVIEW else result[:RESULT_PREVIEW] + "…"
            body = f'<div class="agentloop-tool-result">{escape(shown)}</div>'
        return (
            f'<div class="agentloop-tool-call agentloop-tool-{state}" style="{_BOX}'
            f'border-left:3px solid {colour}"><b>{escape(str(d.get("name")))}</b>'
            f"<code>({escape(pretty_args(item.text))})</code> "
            f'<span class="agentloop-tool-state">{state}</span>'
            f"{escape(_duration(item))}{body}</div>"
        )
    if k == "usage":
        u = d["usage"]
        return (
            f'<div class="agentloop-usage" style="color:#999;font-size:80%">tokens in '
            f"{int(u.get('input_tokens', 0))}, out {int(u.get('output_tokens', 0))}</div>"
        )
    if k == "error":
        return (
            f'<div class="agentloop-error" style="{_BOX}color:#d62728">{escape(d["where"])} '
            f"error {escape(str(d['code']))}: {escape(str(d['message']))}</div>"
        )
    if k == "retry":
        return (
            f'<div class="agentloop-retry" style="color:#ff7f0e;font-size:85%">retry '
            f"{escape(str(d['attempt']))} after {escape(str(d['code']))} in "
            f"{escape(str(d['delay']))}s</div>"
        )
    return ""


__all__ = ["Item", "Transcript", "content_text", "item_html", "item_text", "reason_text"]
