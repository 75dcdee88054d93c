"""The Agents panel's kernel side: the roster of a kernel's agents and the panel's actions.

The JupyterLab extension's Agents panel (and ``%agent panel`` where there is no extension)
shows every agent of the kernel with its state, model, turns, tokens and cost, and sends
actions back over the notebook bridge (docs/notebook-bridge.md):

- ``list`` — the kernel answers with ``{"type": "agents", "agents": [row, ...]}``; it also
  pushes that message after any change of an agent (created, disposed, bound to a name, a turn
  started or ended, a step's usage, an approval asked or answered), coalesced to one push per
  event-loop iteration and only when the rows changed;
- ``create`` — a new agent with the kernel's default provider and model (``configure``),
  the kernel tools and the notebook tools (both asking before they run or edit), bound to the
  first free name ``agent``, ``agent2``, ...;
- ``prompt`` — a follow-up, steer or inject, sent exactly as ``%%agent`` / ``%agent steer`` /
  ``%agent inject`` send theirs; each attached reference (a cell's lines, an output) becomes a
  text block before the prompt, as ``%%agent NAME --with`` attaches variables;
- ``cancel`` — cancel the running turn (cause ``user``).

:class:`AgentsPanel` is owned by the kernel state (which hands itself over as the
:class:`PanelHost`); an action that cannot be done (an unknown agent, an empty prompt) raises
:class:`PanelError` to a direct caller and is logged when it came over the comm (a comm
message has no cell to show an error in).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._disposer import Disposer
from .._event_names import (
    ASSISTANT_MESSAGE,
    BUDGET_REACHED,
    COMPACTION_SUMMARY,
    TURN_END,
    TURN_START,
)
from .._record import Record, field_values, set_field
from ..errors import AgentloopError
from ..messages import TextBlock

if TYPE_CHECKING:
    # The actions' rooms load with the first action, not with %load_ext (the bridge, when
    # there is one, has loaded the message models by then).
    from ..loop import AgentOptions
    from .notebook import CellRef, NotebookBridge
    from .view import AgentView, WidgetApproval

_log = logging.getLogger("agentloop_nb.notebook")

Mode = Literal["followup", "steer", "inject"]
MODES: tuple[Mode, ...] = ("followup", "steer", "inject")
#: The states a row shows, in the words the panel uses.
STATES = ("idle", "running", "awaiting approval", "paused by budget")
#: The name the panel's Create button binds (then ``agent2``, ``agent3``, ...).
CREATE_BASE = "agent"
#: At most this many characters of a reference's selected text reach the model.
REF_MAX_CHARS = 4000

# Session events that change a row (turns, usage, a budget pause): the roster ignores the rest
# (every streamed chunk is a session event).
_ROW_EVENTS = frozenset(
    {TURN_START, TURN_END, ASSISTANT_MESSAGE, BUDGET_REACHED, COMPACTION_SUMMARY}
)


class PanelError(AgentloopError):
    """A panel action that cannot be done; the message says what to do instead."""


class PanelHost(Protocol):
    """What the panel needs of the kernel state (``KernelState`` is one)."""

    app: Any
    approval: WidgetApproval
    shell: Any
    names: dict[str, Any]

    def name_of(self, agent: Any) -> str | None: ...

    def bind(self, name: str, agent: Any) -> None: ...

    def view(self, agent: Any) -> AgentView: ...

    def default_options(self) -> AgentOptions: ...


# A Record, not a frozen dataclass: %load_ext imports this module (the panel's comm) and
# ``dataclass`` compiles the class's methods from source at import.
class AgentRow(Record):
    """One agent as the panel lists it. ``name`` is the variable it is bound to (its id when it
    has none), ``state`` one of :data:`STATES`, ``model`` ``provider/model``, ``cost`` in USD
    (``None``: unknown, a model without a price), ``view`` the widget model id of its cached
    ``AgentView`` (``""`` when not asked for)."""

    __slots__ = ("cost", "model", "name", "state", "tokens", "turns", "view")
    __match_args__ = ("name", "state", "model", "turns", "tokens", "cost", "view")

    name: str
    state: str
    model: str
    turns: int
    tokens: int
    cost: float | None
    view: str

    def __init__(
        self,
        name: str,
        state: str,
        model: str,
        turns: int,
        tokens: int,
        cost: float | None,
        view: str = "",
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "state", state)
        set_field(self, "model", model)
        set_field(self, "turns", turns)
        set_field(self, "tokens", tokens)
        set_field(self, "cost", cost)
        set_field(self, "view", view)

    def to_wire(self) -> dict[str, Any]:
        return field_values(self)  # scalars only: nothing for ``asdict`` to copy


def agent_state(agent: Any, approval: WidgetApproval) -> str:
    """``agent``'s state in the panel's words: ``idle``, ``running``, ``awaiting approval``
    (a tool call waits for a person) or ``paused by budget`` (the budgets plugin asks to go
    past a limit)."""
    if str(agent.status) != "running":
        return "idle"
    pending = approval.pending_for(agent)
    if any(p.name == "budget" and p.call_id.startswith("budget-") for p in pending):
        return "paused by budget"
    return "awaiting approval" if pending else "running"


def ref_text(ref: CellRef, secrets: Sequence[str] = ()) -> str:
    """The context block one reference becomes: where the selection is (cell position and id,
    line range or output) and the selected text, cut at :data:`REF_MAX_CHARS`, with each of
    ``secrets`` masked (as ``read_cell`` masks the values of the kernel's secret names)."""
    where = f"cell {ref.position}" if ref.position is not None else "a cell"
    where += f" (id {ref.cell_id})"
    if ref.output is not None:
        where = f"output {ref.output + 1} of {where}"
    elif ref.lines is not None:
        first, last = ref.lines
        where += f", line {first}" if first == last else f", lines {first}-{last}"
    from .kernel import mask

    text = mask(ref.text, secrets)
    if len(text) > REF_MAX_CHARS:
        text = text[:REF_MAX_CHARS] + f"\n… ({len(text) - REF_MAX_CHARS} more characters)"
    head = f"The user selected this in {where} of the notebook"
    if not text.strip():
        return f"{head} (read_cell shows the whole cell)."
    return f"{head} (read_cell shows the whole cell):\n```\n{text}\n```"


def prompt_content(
    text: str, refs: Sequence[CellRef] = (), secrets: Sequence[str] = ()
) -> str | list[TextBlock]:
    """What a panel prompt sends: the text alone, or one text block per reference (``secrets``
    masked in it) and then the text (the shape ``%%agent NAME --with`` sends; the prompt stays
    the last block). What the user typed is theirs and is sent as typed."""
    if not refs:
        return text
    return [*(TextBlock(text=ref_text(r, secrets)) for r in refs), TextBlock(text=text)]


def _is_subagent(agent: Any) -> bool:
    meta = getattr(agent.session.header, "meta", None)
    return isinstance(meta, dict) and "parent_session_id" in meta


class AgentsPanel:
    """The roster of ``host``'s agents and the handler of the panel's actions.

    ``AgentsPanel(host, bridge)`` listens to the App's agent events and the approval service;
    with a ``bridge`` it also handles the front end's ``list``/``create``/``prompt``/``cancel``
    actions and pushes the ``agents`` message. :meth:`rows` lists the agents,
    :meth:`on_change` calls back with the rows after a change (coalesced), :meth:`create`,
    :meth:`prompt` and :meth:`cancel` are the actions, :meth:`close` stops it all.
    """

    def __init__(self, host: PanelHost, bridge: NotebookBridge | None = None) -> None:
        self.host = host
        self.bridge = bridge
        self._listeners: list[Callable[[list[AgentRow]], None]] = []
        self._scheduled = False
        self._closed = False
        self._last_push: list[dict[str, Any]] | None = None
        ctx = host.app.ctx
        self._offs: list[Disposer] = [
            ctx.on("agent/created", self._on_agent),
            ctx.on("agent/disposed", self._on_agent),
            ctx.on("agent/status", self._on_agent),
            ctx.on("session/event", self._on_event),
            host.approval.subscribe(self.changed),
        ]
        if bridge is not None:
            self._offs.append(bridge.on_action(self.handle))

    # -- the roster -------------------------------------------------------------------------

    def agents(self) -> list[Any]:
        """The agents the panel lists: every live agent except sub-agents (their parent's
        view shows them), in creation order."""
        return [a for a in self.host.app.agent_loop.list() if not _is_subagent(a)]

    def rows(self, *, views: bool = False) -> list[AgentRow]:
        """One :class:`AgentRow` per listed agent; ``views`` fills in the view ids (creating
        each agent's cached ``AgentView`` on first use)."""
        host = self.host
        out = []
        for agent in self.agents():
            usage = agent.usage
            out.append(
                AgentRow(
                    name=host.name_of(agent) or str(agent.id),
                    state=agent_state(agent, host.approval),
                    model=f"{agent.options.provider}/{agent.options.model}",
                    turns=int(agent.turn),
                    tokens=usage.total_tokens,
                    cost=usage.cost_usd,
                    view=str(host.view(agent).model_id) if views else "",
                )
            )
        return out

    def agent(self, name: str) -> Any:
        """The listed agent called ``name`` (its bound name, else its id). Raises
        :class:`PanelError` naming the known ones."""
        agents = self.agents()
        for agent in agents:
            if self.host.name_of(agent) == name:
                return agent
        for agent in agents:
            if str(agent.id) == name:
                return agent
        known = ", ".join(self.host.name_of(a) or str(a.id) for a in agents) or "none"
        raise PanelError(f"no agent named {name!r} in this kernel (known: {known})")

    def on_change(self, callback: Callable[[list[AgentRow]], None]) -> Disposer:
        """Call ``callback(rows)`` after agents change (at most once per event-loop
        iteration). Returns the :class:`Disposer` that stops it."""
        self._listeners.append(callback)

        def off() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return Disposer(off)

    def changed(self) -> None:
        """Note that something a row shows may have changed; the listeners and the front end
        hear of it once, at the end of this event-loop iteration (at once without a loop)."""
        if self._closed or self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._scheduled = True
        loop.call_soon(self._flush)

    def _on_agent(self, _payload: Any) -> None:
        self.changed()

    def _on_event(self, payload: Any) -> None:
        if payload.event.type in _ROW_EVENTS:
            self.changed()

    def _flush(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        if self._listeners:
            rows = self.rows()
            for listener in list(self._listeners):
                try:
                    listener(rows)
                except Exception:
                    _log.exception("agents panel: a roster listener failed")
        self.push()

    def push(self, *, force: bool = False) -> None:
        """Send the ``agents`` message to the connected front ends: when the rows differ
        from the last push, or always with ``force`` (a ``list`` action)."""
        bridge = self.bridge
        if bridge is None or not bridge.connected or self._closed:
            return
        agents = [row.to_wire() for row in self.rows(views=True)]
        if not force and agents == self._last_push:
            return
        self._last_push = agents
        bridge.push({"type": "agents", "agents": agents})

    # -- actions ----------------------------------------------------------------------------

    def create(self) -> str:
        """Create an agent with the kernel's default provider and model, give it the kernel
        tools and the notebook tools (both ask first), bind it to a free name and return the
        name. Raises :class:`PanelError` when the App refuses."""
        host = self.host
        name = self._free_name()
        options = host.default_options()
        try:
            agent = host.app.agent_loop.create(name, options)
        except Exception as exc:
            raise PanelError(f"creating an agent failed: {exc}") from exc
        from .kernel import add_kernel_tools
        from .notebook import notebook_tools

        add_kernel_tools(agent, run="ask")
        notebook_tools(agent, edit="ask")
        host.bind(name, agent)
        self.changed()
        return name

    def _free_name(self) -> str:
        taken = self.host.names
        user_ns = getattr(self.host.shell, "user_ns", None) or {}
        name, n = CREATE_BASE, 1
        while name in taken or name in user_ns:
            n += 1
            name = f"{CREATE_BASE}{n}"
        return name

    def prompt(
        self, name: str, text: str, *, mode: Mode = "followup", refs: Iterable[CellRef] = ()
    ) -> Any:
        """Send ``text`` (with ``refs`` as context) to agent ``name`` as a ``followup`` (a new
        turn), ``steer`` (into the running turn; wakes an idle agent) or ``inject`` (context
        for the next step; does not wake). Returns the queued ``UserMessage``. Raises
        :class:`PanelError` for an unknown agent or mode, or an empty prompt."""
        if mode not in MODES:
            raise PanelError(f"unknown prompt mode {mode!r}: use followup, steer or inject")
        refs = list(refs)
        if not text.strip() and not refs:
            raise PanelError("the prompt is empty: type a message first")
        from .kernel import secret_values

        agent = self.agent(name)
        secrets = secret_values(self.host.shell.user_ns) if refs else ()
        content = prompt_content(text.strip(), refs, secrets)
        try:
            return getattr(agent, mode)(content)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise PanelError(f"{mode} to {name} failed: {exc}") from exc

    def cancel(self, name: str) -> bool:
        """Cancel agent ``name``'s running turn (cause ``user``); ``False`` when it is idle.
        Raises :class:`PanelError` for an unknown agent."""
        return bool(self.agent(name).cancel("user"))

    def handle(self, action: Any) -> None:
        """Do what the front end asked (``list``, ``create``, ``prompt``, ``cancel``; ``fix``
        belongs to another listener). A failure is logged, never raised into the comm."""
        from .notebook import CancelAction, CreateAction, ListAction, PromptAction

        try:
            if isinstance(action, ListAction):
                self.push(force=True)
            elif isinstance(action, CreateAction):
                self.create()
            elif isinstance(action, PromptAction):
                self.prompt(action.agent, action.text, mode=action.mode, refs=action.refs)
            elif isinstance(action, CancelAction):
                self.cancel(action.agent)
        except PanelError as exc:
            _log.warning("agents panel: %s", exc)

    def close(self) -> None:
        """Stop listening (idempotent); the front end keeps its last list."""
        self._closed = True
        offs, self._offs = self._offs, []
        for off in offs:
            off()
        self._listeners.clear()


__all__ = [
    "CREATE_BASE",
    "MODES",
    "REF_MAX_CHARS",
    "STATES",
    "AgentRow",
    "AgentsPanel",
    "PanelError",
    "PanelHost",
    "agent_state",
    "prompt_content",
    "ref_text",
]
