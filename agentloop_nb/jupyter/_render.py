"""Rendering transcript items as plain text and as escaped HTML.

Every HTML fragment escapes all text it shows and carries stable CSS classes
(``agentloop-user``, ``agentloop-assistant``, ``agentloop-reasoning``, ``agentloop-tool-call``,
``agentloop-turn-start``, ``agentloop-turn-end``, ``agentloop-error``, ``agentloop-retry``,
``agentloop-usage``) that browser tests and user CSS can select.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import Any

from ._item import Item

RESULT_PREVIEW = 2000
"""Characters of a tool result shown (the log keeps all of it)."""


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
    """`` (1.23s)`` for a finished call whose body ran, else ``""``: from its ``tool/call``
    to its settling (or, without one, its ``tool/result``)."""
    d = item.data
    if d.get("ran") is False:
        return ""
    started, ended = d.get("started"), d.get("ended")
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
        args = pretty_args(item.text)  # first: a streamed call learns its name here
        result = d.get("result")
        tail = f" → {result[:200]}" if result is not None else ""
        return f"tool {d.get('name')}({args}) [{d['state']}]{_duration(item)}{tail}"
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
        args = pretty_args(item.text)  # first: a streamed call learns its name here
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
            f"<code>({escape(args)})</code> "
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
