"""The kernel's extension state: the one place that holds the kernel-wide ``App``.

A leaf of the notebook layer's import graph: the extension, the magics and plugin cells all
import it, and it imports none of them. It owns

- :func:`configure` — what the next ``%load_ext agentloop_nb`` builds its ``App`` with;
- :class:`KernelState` — what a loaded extension owns in one kernel (the App, the NAME → agent
  bindings, one shared feed and one cached ``AgentView`` per agent plus the views ``%%agent``
  cells showed, the approval service, the interrupt hook, the notebook provider, the kernel
  memory: autopsies, undo snapshots and provenance, provided as ``ctx.kernel_memory`` and
  ``ctx.undo``; the describers registry, provided as ``ctx.describers``; the Agents panel's
  roster and actions);
- ``kernel_tools``: the kernel tools whose ``describe`` registers in the loaded state's
  registry;
- the holder of the current :class:`KernelState` (:func:`attach`, :func:`detach`,
  :func:`state`) and of Apps still closing after an unload (:func:`closing`,
  :func:`wait_closed`);
- :class:`UserError` — a problem shown as one line, never as a traceback.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from ..app import App
from ..errors import AgentloopError, InvalidValueError, UsageError
from ..loop import AgentOptions
from ._panel import AgentsPanel
from .kernel import (
    DEFAULT_SIZE_LIMIT,
    Describers,
    InterruptHook,
    KernelMemory,
    KernelTools,
    shell_describers,
)
from .notebook import NotebookProvider
from .view import DEFAULT_APPROVAL_TIMEOUT, WidgetApproval

if TYPE_CHECKING:
    # Loaded with their first use, not by %load_ext: the views bring ipywidgets, the bridge
    # (only a kernel has one) its message models.
    from .fold import SessionFeed
    from .kernel import UndoReport
    from .notebook import NotebookBridge, NotebookDocument
    from .view import AgentView

#: What ``%agent create`` without ``--provider``, the Agents panel's Create button and the
#: "Fix with agent" button's new agent use unless :func:`configure` names others
#: (``default_provider=``, ``default_model=``).
DEFAULT_PROVIDER = "offline"
DEFAULT_MODEL = "demo"


# Constant and valid: constructed, so %load_ext builds no validator for it (start-up cost).
_DEFAULT_OPTIONS = AgentOptions.model_construct(provider=DEFAULT_PROVIDER, model=DEFAULT_MODEL)


class UserError(AgentloopError):
    """A problem a person fixes by typing something else: shown as one line, no traceback."""


class KernelState:
    """Everything the extension owns in one kernel: the App, the NAME → agent bindings the
    magics made, one cached :class:`AgentView` per agent, the approval service, the hook, the
    describers registry (``describers``, provided as ``ctx.describers`` until :meth:`close`).
    Nothing it owns is reachable from a module once it is detached and closed."""

    def __init__(
        self,
        shell: Any,
        app: App,
        approval: WidgetApproval,
        *,
        defaults: AgentOptions | None = None,
    ) -> None:
        self.shell = shell
        self.app = app
        self.approval = approval
        self.names: dict[str, Any] = {}
        self.views: dict[str, AgentView] = {}
        self.cell_views: dict[str, list[AgentView]] = {}
        self.feeds: dict[str, SessionFeed] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hook = InterruptHook(shell, self.cancel_running)
        kernel = getattr(shell, "kernel", None)  # the comm to the JupyterLab extension
        self.notebook: NotebookBridge | None = None
        if kernel is not None:
            from .notebook import NotebookBridge

            self.notebook = NotebookBridge(kernel)
        self._off = app.ctx.on("agent/disposed", self._forget)
        # The notebook the notebook tools act on, handed to them as the ``ctx.notebooks``
        # service (the notebook room cannot import this module). Whoever owns the comm to the
        # JupyterLab extension is handed over here: the provider uses it while it is connected.
        self.notebooks = NotebookProvider(shell)
        if self.notebook is not None:
            self.notebooks.set_bridge(self.notebook)
        self._off_notebooks = app.ctx.provide("notebooks", self.notebooks)
        # What ``kernel_tools.describe`` registers in, and ``inspect_variable``, autopsies and
        # ``%%agent --with`` summarise with: the shell's (it outlives a reload, as the user's
        # registrations in earlier cells do; no module holds it).
        self.describers = shell_describers(shell) if shell is not None else Describers()
        self._unprovide = [app.ctx.provide("describers", self.describers)]
        self.memory: KernelMemory | None = None
        if shell is not None:
            limit = _KERNEL.settings.get("undo_size_limit", DEFAULT_SIZE_LIMIT)
            self.memory = KernelMemory(
                shell, size_limit=limit, name_of=self.name_of, describers=self.describers
            )
            self.memory.install()
            # Services of the App: kernel tools find the memory, agent.undo() its undo.
            self._unprovide += [
                app.ctx.provide("kernel_memory", self.memory),
                app.ctx.provide("undo", self.memory),
            ]
        self._defaults = defaults or _DEFAULT_OPTIONS
        # The Agents panel: the roster every front end lists, and the panel's actions over the
        # bridge (``%agent panel`` shows the same roster without the extension).
        self.panel = AgentsPanel(self, self.notebook)

    def default_options(self) -> AgentOptions:
        """The provider and model of an agent created without naming them."""
        return self._defaults

    # -- agents by name ---------------------------------------------------------------------

    def bind(self, name: str, agent: Any) -> None:
        """Bind ``agent`` to ``name`` (in the user namespace too, when there is a shell)."""
        self.names[name] = agent
        for view in self._views_of(agent.id):  # views made before the binding show the name
            view.name = name
        if self.shell is not None:
            self.shell.push({name: agent}, interactive=True)
        self.panel.changed()

    def unbind(self, name: str) -> Any:
        """Forget the binding ``name`` (and its user-namespace variable, if it still holds the
        agent); returns the agent. Raises :class:`UserError` for an unknown name."""
        agent = self.agent(name)
        del self.names[name]
        if self.shell is not None and self.shell.user_ns.get(name) is agent:
            del self.shell.user_ns[name]
        self.panel.changed()
        return agent

    def agent(self, name: str) -> Any:
        """The agent bound to ``name``; raises :class:`UserError` when there is none."""
        agent = self.names.get(name)
        if agent is None:
            known = ", ".join(sorted(self.names)) or "none yet"
            raise UserError(
                f"no agent named {name!r} (known: {known}); create one with %agent create {name}"
            )
        return agent

    def name_of(self, agent: Any) -> str | None:
        return next((n for n, a in self.names.items() if a is agent), None)

    def free_name(self, base: str) -> str:
        """``base``, or ``base2``, ``base3``, ... : the first name no agent is bound to."""
        name, n = base, 1
        while name in self.names:
            n += 1
            name = f"{base}{n}"
        return name

    def bind_fork(self, agent: Any) -> str:
        """Bind an agent a view's "fork from here" button created to a free name
        (``<source name>_fork``, or ``fork`` when its source has no name); returns it."""
        source = agent.session.header.meta.get("forked_from")
        base = next((n for n, a in self.names.items() if a.session.id == source), None)
        name = self.free_name(f"{base}_fork" if base else "fork")
        self.bind(name, agent)
        return name

    def feed(self, agent: Any) -> SessionFeed:
        """The agent's feed, shared by all its views (a chunk is folded once)."""
        feed = self.feeds.get(agent.id)
        if feed is None:
            from .fold import SessionFeed

            feed = self.feeds[agent.id] = SessionFeed(agent.session, agent.ctx)
        return feed

    def view(self, agent: Any) -> AgentView:
        """The agent's cached ``AgentView`` of every turn (``%agent show``, :func:`view`)."""
        view = self.views.get(agent.id)
        if view is None:
            from .view import AgentView

            view = self.views[agent.id] = AgentView(
                agent, name=self.name_of(agent), feed=self.feed(agent), on_fork=self.bind_fork
            )
        return view

    def cell_view(self, agent: Any, own: list[str]) -> AgentView:
        """A new ``AgentView`` of the turns of messages ``own`` (what a ``%%agent`` cell
        shows), kept until the agent is disposed."""
        from .view import AgentView

        view = AgentView(
            agent, name=self.name_of(agent), feed=self.feed(agent), own=own, on_fork=self.bind_fork
        )
        self.cell_views.setdefault(agent.id, []).append(view)
        return view

    def memory_or_fail(self, what: str) -> KernelMemory:
        """The kernel memory; raises :class:`UserError` naming ``what`` without a shell."""
        if self.memory is None:
            raise UserError(f"{what}: needs an IPython kernel (no shell is attached)")
        return self.memory

    def _views_of(self, agent_id: str) -> list[AgentView]:
        cached = self.views.get(agent_id)
        return [*([cached] if cached is not None else []), *self.cell_views.get(agent_id, [])]

    def _forget(self, payload: Any) -> None:
        agent = payload.agent
        # Frozen, not closed: a disposed agent's views keep showing what happened.
        for view in self._views_of(agent.id):
            view.freeze()
        self.views.pop(agent.id, None)
        self.cell_views.pop(agent.id, None)
        feed = self.feeds.pop(agent.id, None)
        if feed is not None:
            feed.close()
        for name in [n for n, a in self.names.items() if a is agent]:
            del self.names[name]

    # -- background work --------------------------------------------------------------------

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Hold a strong reference to a background task until it ends (the loop keeps only
        weak ones)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def spawn(self, work: Any) -> asyncio.Task[Any]:
        """Run coroutine ``work`` as a background task this state owns (see :meth:`drain`).
        Raises ``RuntimeError`` when no event loop is running."""
        task = asyncio.get_running_loop().create_task(work)
        self.keep(task)
        return task

    async def drain(self) -> None:
        """Wait for the background work magics scheduled (a dispose, a resume that waited)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel_running(self) -> int:
        """Cancel every running agent with cause ``user``; returns how many were running."""
        n = 0
        for agent in self.app.agent_loop.list():
            if agent.status == "running" and agent.cancel("user"):
                n += 1
        return n

    def close(self) -> None:
        """Uninstall the hook, stop listening and freeze every view (unsubscribed, but left on
        screen with what it showed; the App stays open)."""
        self.hook.uninstall()
        self._off()
        self.panel.close()
        self._off_notebooks()
        if self.memory is not None:
            self.memory.uninstall()
        for unprovide in self._unprovide:
            unprovide()
        self._unprovide = []
        self.notebooks.set_bridge(None)
        if self.notebook is not None:
            self.notebook.close()
        for agent_id in list({*self.views, *self.cell_views}):
            for view in self._views_of(agent_id):
                view.freeze()
        self.views.clear()
        self.cell_views.clear()
        for feed in self.feeds.values():
            feed.close()
        self.feeds.clear()


class _Holder:
    """The kernel-wide slots: settings for the next load, the loaded state, closing Apps."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}
        self.current: KernelState | None = None
        self.closing: set[asyncio.Task[None]] = set()


_KERNEL = _Holder()


def configure(
    *,
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    undo_size_limit: int = DEFAULT_SIZE_LIMIT,
    default_provider: str | None = None,
    default_model: str | None = None,
    **app_kwargs: Any,
) -> None:
    """Set what the next ``%load_ext agentloop_nb`` builds its ``App`` with: any ``App(...)``
    keyword (``providers=``, ``persistence_root=``, ``config=``, ``retry=``, ...) plus the
    approval timeout (seconds; an unanswered ``Ask`` is denied after it), the undo size limit
    (bytes; a larger value is not copied before an agent's run, so it is not restorable;
    default 50 MB) and the provider and model of agents created without naming them
    (``%agent create NAME``, the Agents panel's Create button, "Fix with agent"; default
    ``offline``/``demo``). Takes effect on the next load (``%reload_ext agentloop_nb`` to
    apply it now). Raises ``ValueError`` for a negative or non-integer limit, or a
    ``default_model`` without a ``default_provider``."""
    if not isinstance(undo_size_limit, int) or undo_size_limit < 0:
        raise InvalidValueError(
            f"undo_size_limit must be a number of bytes >= 0, got {undo_size_limit!r}"
        )
    if default_model is not None and default_provider is None:
        raise InvalidValueError("configure(default_model=...) needs default_provider= too")
    _KERNEL.settings = {
        **app_kwargs,
        "approval_timeout": approval_timeout,
        "undo_size_limit": undo_size_limit,
        "default_provider": default_provider,
        "default_model": default_model,
    }


def default_options() -> AgentOptions:
    """The provider and model :func:`configure` set for agents created without naming them
    (``offline``/``demo`` unless configured; a provider without a model keeps the model
    unset, so an ``agent/request`` listener or the adapter's defaults must supply it)."""
    provider = _KERNEL.settings.get("default_provider")
    if provider is None:
        return _DEFAULT_OPTIONS
    return AgentOptions(provider=provider, model=_KERNEL.settings.get("default_model"))


def build_app() -> tuple[App, WidgetApproval]:
    """A new ``App`` built with the :func:`configure` settings (JSONL persistence under
    ``.agentloop/sessions`` in the current directory unless they say otherwise), with a
    :class:`WidgetApproval` provided as ``ctx.approval``."""
    kwargs = dict(_KERNEL.settings)
    timeout = kwargs.pop("approval_timeout", DEFAULT_APPROVAL_TIMEOUT)
    kwargs.pop("undo_size_limit", None)  # the kernel state's, not the App's
    kwargs.pop("default_provider", None)
    kwargs.pop("default_model", None)
    if "persistence" not in kwargs and "persistence_root" not in kwargs:
        kwargs["persistence_root"] = os.path.join(os.getcwd(), ".agentloop", "sessions")
    application = App(**kwargs)
    approval = WidgetApproval(timeout=timeout)
    application.ctx.provide("approval", approval)
    return application, approval


def current() -> KernelState | None:
    """The loaded state, or ``None`` before ``%load_ext`` / after ``%unload_ext``."""
    return _KERNEL.current


def _current_describers() -> Describers | None:
    st = _KERNEL.current
    if st is not None:
        return st.describers
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else shell_describers(shell)


kernel_tools = KernelTools(describers=_current_describers)
"""``kernel_tools(agent, *, run="ask", max_chars=4000)``: the kernel tools on ``agent``;
``kernel_tools.describe(type, fn)`` registers a describer in the IPython shell's registry
(the loaded extension's ``ctx.describers``; ``RuntimeError`` outside IPython, where ``ctx=``
names a context's ``describers`` service instead)."""


def attach(st: KernelState) -> None:
    """Make ``st`` the kernel's state. Raises ``RuntimeError`` when one is attached already."""
    if _KERNEL.current is not None:
        raise UsageError("agentloop_nb is already loaded in this kernel")
    _KERNEL.current = st


def detach() -> KernelState | None:
    """Forget the kernel's state and return it (``None`` when nothing was loaded)."""
    st, _KERNEL.current = _KERNEL.current, None
    return st


def state() -> KernelState:
    """The loaded state. Raises ``RuntimeError`` until ``%load_ext agentloop_nb``."""
    st = _KERNEL.current
    if st is None:
        raise UsageError(
            "agentloop_nb is not loaded in this kernel: run %load_ext agentloop_nb first"
        )
    return st


def app() -> App:
    """The kernel-wide ``App``. Raises ``RuntimeError`` until ``%load_ext agentloop_nb``."""
    return state().app


def view(agent: Any) -> AgentView:
    """The ``AgentView`` the magics display for ``agent`` (one per agent, created on first
    use). Read its widgets from a later cell after ``await view(agent).settled()``."""
    return state().view(agent)


def notebook() -> NotebookDocument:
    """The notebook document the notebook tools act on now (the open notebook through the
    JupyterLab extension, else the attached or ``JPY_SESSION_NAME`` file). Raises
    ``RuntimeError`` before ``%load_ext agentloop_nb`` and ``DocumentError("no-notebook")``
    when there is none."""
    return state().notebooks.current()


def undo(agent: Any, calls: int = 1) -> UndoReport:
    """Undo what ``agent``'s last ``calls`` runs of code (``run_python``, ``run_cell``) changed
    in this kernel's namespace; ``agent.undo(calls)`` is the same. Returns the per-name report
    (print it). Raises ``RuntimeError`` until ``%load_ext agentloop_nb``, ``ValueError`` for
    ``calls`` < 1."""
    return state().memory_or_fail("undo").undo(agent, calls)


def closing(task: asyncio.Task[None]) -> None:
    """Keep an unloaded App's closing task until it ends (see :func:`wait_closed`)."""
    _KERNEL.closing.add(task)
    task.add_done_callback(_KERNEL.closing.discard)


async def wait_closed() -> None:
    """Wait until Apps disposed by ``%unload_ext`` have finished closing."""
    while _KERNEL.closing:
        await asyncio.gather(*_KERNEL.closing, return_exceptions=True)


__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PROVIDER",
    "KernelState",
    "UserError",
    "app",
    "attach",
    "build_app",
    "closing",
    "configure",
    "current",
    "default_options",
    "detach",
    "kernel_tools",
    "notebook",
    "state",
    "undo",
    "view",
    "wait_closed",
]
