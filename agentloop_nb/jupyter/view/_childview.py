"""Sub-agent views: the collapsible live view of a ``delegate`` call's child session.

A child session is recognised by its header meta alone (``parent_session_id`` and
``parent_call_id``, what the sub-agents plugin writes), through public lookups:

- while it runs, the session store announces it (``session/created``); one listener per
  dispatcher (:func:`watch_children`) hands each new session to the views of its parent, and a
  view built later scans the store's live sessions (:func:`live_children`);
- once the call finished, its ``tool/result`` meta names the child's ``session_id``; the session
  is taken from the store when still live, else loaded read-only from the session persistence
  (:func:`find_child`), so a view built after a restart or a resume still shows it.

:class:`Subagents` is a view's bookkeeping (which calls have a child, their sections, the
descendants seen born); :class:`ChildSection` is what a parent view puts under the call: a toggle and, once opened, the
child's own view (built lazily by the factory the parent passes, so a closed section of a long
history costs two widgets and no subscription). Views of children nest the same way
(grandchildren inside children).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from html import escape
from typing import Any

import ipywidgets as widgets

from ..._disposer import Disposer
from ...errors import NotFoundError
from ..fold import Item

__all__ = [
    "CHILD_TOOL",
    "ChildSection",
    "Subagents",
    "child_call_id",
    "find_child",
    "live_children",
    "watch_children",
]

_log = logging.getLogger("agentloop_nb.jupyter")

CHILD_TOOL = "delegate"
"""The tool whose calls get a child section from their result's ``session_id`` alone."""

_CREATED = "session/created"
_TASK_SHOWN = 80  # characters of the task in a section's toggle
# Tool-call states after which a call has its result (or never will run).
_CALL_OVER = frozenset({"done", "failed", "invalid", "denied", "aborted", "cancelled", "dropped"})
ChildCallback = Callable[[Any], None]


def child_call_id(header: Any, parent_session_id: str) -> str | None:
    """The ``parent_call_id`` of a session header whose ``parent_session_id`` is
    ``parent_session_id`` (``None`` for any other session)."""
    meta = getattr(header, "meta", None)
    if not isinstance(meta, Mapping) or meta.get("parent_session_id") != parent_session_id:
        return None
    call_id = meta.get("parent_call_id")
    return call_id if isinstance(call_id, str) and call_id else None


def live_children(store: Any, parent_session_id: str) -> dict[str, Any]:
    """The live sessions of ``store`` that are children of ``parent_session_id``, by the call
    that created them."""
    found: dict[str, Any] = {}
    for session in store.list():
        call_id = child_call_id(session.header, parent_session_id)
        if call_id is not None:
            found[call_id] = session
    return found


def find_child(store: Any, root: Any, parent_session_id: str, call_id: str, session_id: str) -> Any:
    """The child session ``session_id`` of call ``call_id``: the live one, else the stored one
    loaded read-only (an unpublished snapshot: nothing is announced, nothing written, no lock
    taken). Raises ``LookupError`` with a one-line reason when it is neither, or when its header
    does not name ``parent_session_id`` / ``call_id`` as its parent."""
    session = store.get(session_id)
    if session is None:
        persistence = getattr(root, "session_persistence", None)
        if persistence is None:
            raise NotFoundError(
                f"sub-agent session {session_id} is gone (not live, and session persistence is off)"
            )
        try:
            header, events = persistence.load(session_id)
        except Exception as exc:  # not found, corrupt: said in the section, never raised
            raise NotFoundError(f"sub-agent session {session_id} cannot be loaded: {exc}") from None
        session = store.prepare(header=header, events=events)
    if child_call_id(session.header, parent_session_id) != call_id:
        raise NotFoundError(f"session {session_id} is not the sub-agent of call {call_id}")
    return session


class _Births:
    """One ``session/created`` listener per dispatcher, handing each new child session to the
    callbacks waiting for its parent (an event costs one dictionary lookup however many views
    are open)."""

    def __init__(self, dispatch: Any) -> None:
        self.dispatch = dispatch
        self.waiting: dict[str, list[ChildCallback]] = {}
        self.off = dispatch.on(_CREATED, self.route)

    def route(self, payload: Any) -> None:
        # ``session/created`` is emitted strictly (a raising listener vetoes the creation):
        # a view must never stop a sub-agent from starting.
        try:
            meta = payload.session.header.meta
            parent = meta.get("parent_session_id") if isinstance(meta, Mapping) else None
            callbacks = self.waiting.get(parent) if isinstance(parent, str) else None
            for callback in tuple(callbacks or ()):
                callback(payload.session)
        except Exception:
            _log.exception("agentloop_nb view: a sub-agent view failed to follow its child")

    def add(self, parent_session_id: str, callback: ChildCallback) -> Disposer:
        self.waiting.setdefault(parent_session_id, []).append(callback)

        def remove() -> None:
            callbacks = self.waiting.get(parent_session_id, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                self.waiting.pop(parent_session_id, None)
            if not self.waiting:  # nobody left: stop listening
                self.off()
                _BIRTHS.pop(id(self.dispatch), None)

        return Disposer(remove)


_BIRTHS: dict[int, _Births] = {}


def watch_children(dispatch: Any, parent_session_id: str, callback: ChildCallback) -> Disposer:
    """Call ``callback(session)`` for each session created through ``dispatch`` whose header
    names ``parent_session_id`` as its parent; the returned ``Disposer`` stops. The callback
    runs inside the creation: it must be quick, and what it raises is logged, never raised."""
    births = _BIRTHS.get(id(dispatch))
    if births is None:
        births = _BIRTHS[id(dispatch)] = _Births(dispatch)
    return births.add(parent_session_id, callback)


class ChildSection(widgets.VBox):
    """The collapsible section under one ``delegate`` call: a toggle (``toggle``; its label
    shows the call's ``task``, its tooltip the child's session id) and, once opened, the
    child's view (``view``), built by ``make_view(session)``. ``session`` is the live child
    when known, else ``load()`` finds it when the section is first opened (a failure is shown
    as ``notice``, never raised: a toggle has no cell to raise into).

    ``opened`` is the initial state: open while the call runs, closed once it finished.
    :meth:`call_finished` closes a section the reader did not toggle and freezes its view (the
    child is disposed by then: nothing more will come). ``close()`` closes the child's view.
    """

    def __init__(
        self,
        call_id: str,
        *,
        make_view: Callable[[Any], Any],
        load: Callable[[], Any],
        session: Any = None,
        session_id: str | None = None,
        opened: bool = False,
        task: str = "",
    ) -> None:
        super().__init__()
        self.add_class("agentloop-child")
        self.call_id = call_id
        self.task = task
        self.session = session
        self.session_id = session_id if session is None else str(session.id)
        self.view: Any = None
        self.notice: widgets.HTML | None = None
        self._make_view = make_view
        self._load = load
        self._touched = False  # the reader toggled it: no automatic collapse any more
        self._frozen = False
        self._shown: tuple[Any, ...] = ()
        self.toggle = widgets.ToggleButton(
            value=opened, layout=widgets.Layout(width="auto", align_self="flex-start")
        )
        self.toggle.add_class("agentloop-child-toggle")
        self.toggle.observe(self._toggled, "value")
        self._show(opened)

    @property
    def opened(self) -> bool:
        return bool(self.toggle.value)

    def expand(self, value: bool = True) -> None:
        """Open (or, with ``False``, close) the section, as a click on its toggle does."""
        self.toggle.value = value

    def attach(self, session: Any) -> None:
        """The live child session was found (it is shown from now on)."""
        if self.session is None:
            self.session = session
            self.session_id = str(session.id)
            if self.opened:
                self._show(True)
            else:
                self._label()

    def call_finished(self) -> None:
        """The delegate call has its result: collapse unless the reader toggled, and freeze
        the child's view once it rendered everything."""
        if not self._touched and self.opened:
            self.toggle.unobserve(self._toggled, "value")
            self.toggle.value = False
            self.toggle.observe(self._toggled, "value")
            self._show(False)
        self.freeze()

    def _toggled(self, change: Any) -> None:
        self._touched = True
        self._show(bool(change["new"]))

    def _show(self, opened: bool) -> None:
        if opened and self.view is None and self.notice is None:
            self._build()
        shown: list[Any] = [self.toggle]
        if opened:
            shown.append(self.view if self.view is not None else self.notice)
        children = tuple(w for w in shown if w is not None)
        if self._shown != children:
            self._shown = self.children = children
        self._label()

    def _build(self) -> None:
        session = self.session
        if session is None and self.session_id is None:
            return  # a running call whose child is not created yet: built when attached
        try:
            if session is None:
                session = self.session = self._load()
            self.view = self._make_view(session)
        except LookupError as exc:
            self._say(str(exc))
            return
        except Exception as exc:  # a broken child log must not break the parent's view
            _log.exception("agentloop_nb view: cannot show sub-agent %s", self.session_id)
            self._say(f"cannot show sub-agent session {self.session_id}: {exc}")
            return
        self.view.add_class("agentloop-child-view")
        if self._frozen:
            self._freeze_view()

    def _say(self, text: str) -> None:
        self.notice = widgets.HTML(
            value=f'<div class="agentloop-notice agentloop-child-missing">{escape(text)}</div>'
        )

    @property
    def title(self) -> str:
        """``sub-agent: TASK`` (the task cut to a line), what the toggle says."""
        task = " ".join(self.task.split())
        task = task if len(task) <= _TASK_SHOWN else task[: _TASK_SHOWN - 1] + "…"
        return f"sub-agent: {task}" if task else "sub-agent"

    def _label(self) -> None:
        label = f"{'▾' if self.opened else '▸'} {self.title}"
        if self.toggle.description != label:
            self.toggle.description = label
        tooltip = f"session {self.session_id}" if self.session_id else "starting…"
        if self.toggle.tooltip != tooltip:
            self.toggle.tooltip = tooltip

    def freeze(self) -> None:
        """Stop following the child (its view keeps what it showed; a later open shows the
        session as it is then, without following it). Idempotent."""
        if self._frozen:
            return
        self._frozen = True
        if self.view is not None:
            self._freeze_view()

    def _freeze_view(self) -> None:
        self.view.flush()
        self.view.close_subscriptions()

    def flush(self) -> None:
        if self.view is not None:
            self.view.flush()

    async def settled(self) -> None:
        if self.view is not None:
            await self.view.settled()

    @property
    def text(self) -> str:
        """The child's transcript (``""`` until the section was opened)."""
        if self.view is not None:
            return str(self.view.text)
        return "" if self.notice is None else str(self.notice.value)

    def close(self) -> None:
        if hasattr(self, "toggle"):  # Widget.__del__ may call close on a half-built section
            if self.view is not None:
                self.view.close()
            if self.notice is not None:
                self.notice.close()
            self.toggle.close()
        super().close()


class Subagents:
    """The child sections of one view of ``session``: which tool calls have a child, the
    sections (made on first need), and the sessions seen born under it.

    ``make_view(session)`` builds a child's view; ``noted(call_id)`` is told when a child of
    call ``call_id`` was born (the view re-renders that call). ``family``: every descendant
    session seen born under the view, by id (shared by the views of a tree, see :meth:`join`):
    the delegate tool disposes its child before answering, so a child view built later finds
    its own children there even without persistence.
    """

    def __init__(
        self,
        session: Any,
        root: Any,
        make_view: Callable[[Any], Any],
        noted: Callable[[str], None],
    ) -> None:
        self.parent_id = str(session.id)
        self.store = getattr(session, "store", None)
        self.root = root
        self.sections: dict[str, ChildSection] = {}
        self.live: dict[str, Any] = (
            live_children(self.store, self.parent_id) if self.store is not None else {}
        )
        self.family: dict[str, Any] = {}
        self._watches: dict[str, Disposer] = {}
        self._make_view = make_view
        self._noted = noted
        self._watch(self.parent_id, self._child_born)

    def join(self, parent: Subagents) -> None:
        """Share ``parent``'s record of descendants (one record for a whole tree of views)."""
        parent.family.update(self.family)
        self.family = parent.family

    # -- which calls ----------------------------------------------------------------------------

    def has_child(self, item: Item) -> bool:
        """Whether tool call ``item`` has a child: one seen live, or a ``delegate`` result
        naming its ``session_id``."""
        if item.kind != "tool":
            return False
        d = item.data
        call_id = d.get("call_id")
        return bool(call_id) and (
            call_id in self.live
            or (d.get("name") == CHILD_TOOL and isinstance(d.get("session_id"), str))
        )

    def due(self, item: Item) -> bool:
        """Whether ``item`` gets a child section it does not have yet."""
        return self.has_child(item) and item.data["call_id"] not in self.sections

    def section_for(self, item: Item) -> ChildSection | None:
        """The child section under tool call ``item`` (made on first need), or ``None``."""
        if not self.has_child(item):
            return None
        d = item.data
        call_id = str(d["call_id"])
        section = self.sections.get(call_id)
        if section is None:
            over = d.get("state") in _CALL_OVER
            section = self.sections[call_id] = ChildSection(
                call_id,
                make_view=self._make_view,
                load=lambda: self.load(call_id, str(d.get("session_id"))),
                session=self.live.get(call_id),
                session_id=d.get("session_id"),
                opened=not over,
                task=_task_of(item),
            )
            if over:
                section.freeze()
        return section

    def load(self, call_id: str, session_id: str) -> Any:
        """Child ``session_id`` of call ``call_id``: seen born, else :func:`find_child`."""
        seen = self.family.get(session_id)
        if seen is not None and child_call_id(seen.header, self.parent_id) == call_id:
            return seen
        return find_child(self.store, self.root, self.parent_id, call_id, session_id)

    def sync(self, items: Iterable[Item]) -> None:
        """After a render: hand live children to their sections; collapse and freeze the
        sections of calls that have their result."""
        for item in items:
            if item.kind != "tool":
                continue
            section = self.sections.get(item.data.get("call_id", ""))
            if section is None:
                continue
            live = self.live.get(section.call_id)
            if live is not None:
                section.attach(live)
            if item.data.get("state") in _CALL_OVER:
                section.call_finished()

    # -- births -----------------------------------------------------------------------------------

    def _watch(self, parent_id: str, callback: ChildCallback) -> None:
        if parent_id in self._watches or self.root is None or self.store is None:
            return
        self._watches[parent_id] = watch_children(self.root, parent_id, callback)

    def _descendant_born(self, session: Any) -> None:
        self.family[str(session.id)] = session
        self._watch(str(session.id), self._descendant_born)

    def _child_born(self, session: Any) -> None:
        # Runs inside the child's creation: only note it; the next render builds its view.
        call_id = child_call_id(session.header, self.parent_id)
        if call_id is None:
            return
        self._descendant_born(session)
        self.live[call_id] = session
        self._noted(call_id)

    # -- lifetime ---------------------------------------------------------------------------------

    def flush(self) -> None:
        for section in tuple(self.sections.values()):
            section.flush()

    async def settled(self) -> None:
        for section in tuple(self.sections.values()):
            await section.settled()

    def stop(self) -> None:
        """Stop watching for children and freeze every section."""
        watches, self._watches = self._watches, {}
        for off in watches.values():
            off()
        for section in tuple(self.sections.values()):
            section.freeze()

    def close(self) -> None:
        self.stop()
        for section in self.sections.values():
            section.close()


def _task_of(item: Item) -> str:
    """The ``task`` argument of a delegate call (``""`` when its arguments do not parse)."""
    try:
        args = json.loads(item.text or "{}")
    except ValueError:
        return ""
    task = args.get("task") if isinstance(args, dict) else None
    return task if isinstance(task, str) else ""
