"""``%agent sessions``: the persisted sessions as a table, listed off the event loop.

The listing reads every stored session's header (``agentloop_nb.session.list_sessions``), so
it runs on a worker thread and the cell returns at once. Its table replaces a placeholder
through a display handle (``display(..., display_id=True)`` then ``update_display``): every
front end applies ``update_display_data``, and so does nbconvert/nbclient saving a notebook
run headless (a widget's later state would be lost there).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Sequence
from html import escape
from typing import Any

import anyio
from IPython.display import display

from ...session import StoredSession, list_sessions
from .._state import KernelState, UserError

PLACEHOLDER = "listing sessions…"


class Listing:
    """The ``%agent sessions`` text: plain text, and HTML keeping its columns aligned."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_html_(self) -> str:
        return f"<pre>{escape(self.text)}</pre>"

    def __repr__(self) -> str:
        return self.text


def run_sessions(state: KernelState, shell: Any) -> None:
    """Show the sessions table of ``state``'s App: at once without a running loop (a plain
    shell), else a placeholder the listing replaces when it is ready."""
    persistence = state.app.persistence
    if persistence is None:
        raise UserError("%agent sessions: this App has no session persistence")
    live = {a.session.id: state.name_of(a) or "-" for a in state.app.agent_loop.list()}
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop to keep running: list right here
        print(sessions_table(list_sessions(persistence), live))
        return
    handle = display(Listing(PLACEHOLDER), display_id=True)

    async def listing() -> None:
        try:
            entries = await anyio.to_thread.run_sync(list_sessions, persistence)
        except Exception as exc:
            text = f"UsageError: %agent sessions: {exc}"
        else:
            text = sessions_table(entries, live)
        if handle is None:  # no display publisher at all
            print(text)
            return
        # Sent from a fresh context: ipykernel then stamps the message with the cell executing
        # now (not this task's finished cell), the one whose messages nbclient still reads;
        # front ends apply it whatever its parent.
        contextvars.Context().run(handle.update, Listing(text))
        if getattr(shell, "kernel", None) is not None:
            _resend_on_next_cell(shell, handle, Listing(text))

    state.spawn(listing())


def _resend_on_next_cell(shell: Any, handle: Any, shown: Listing) -> None:
    """Send the update once more when the next cell starts: one that left between two cells
    went under the finished cell, which nbclient no longer reads (the same update twice
    changes nothing in a front end)."""
    events = shell.events

    def resend(*_info: Any) -> None:
        events.unregister("pre_run_cell", resend)
        contextvars.Context().run(handle.update, shown)

    events.register("pre_run_cell", resend)


def sessions_table(entries: Sequence[StoredSession], live: dict[str, str]) -> str:
    """Newest first; a session whose header cannot be read is a row saying why."""
    if not entries:
        return "no persisted sessions"
    readable = [e for e in entries if e.header is not None]
    readable.sort(key=lambda e: e.header.created_at if e.header else 0.0, reverse=True)
    rows = [(e.id, _when(e.header.created_at), live.get(e.id, "")) for e in readable if e.header]
    rows += [(e.id, f"unreadable: {e.problem}", "") for e in entries if e.header is None]
    return format_table([("SESSION", "CREATED", "LIVE AS"), *rows])


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def format_table(rows: Sequence[tuple[str, ...]]) -> str:
    """``rows`` as left-aligned columns two spaces apart (the first row is the heading)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
