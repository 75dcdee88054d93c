"""The IPython extension: one kernel-wide ``App``, the magics, the approval service and the
interrupt hook.

``%load_ext agentloop_nb`` → :func:`load_ipython_extension`: builds the ``App`` (JSONL
persistence under ``.agentloop/sessions`` relative to the kernel's cwd, i.e. the notebook's
folder; :func:`configure` changes what it is built with), provides ``ctx.approval``
(:class:`WidgetApproval`), registers ``%agent`` / ``%%agent`` / ``%%plugin``, binds ``ctx`` in
the user namespace and installs the SIGINT hook. Agent drivers run as tasks owned by the App's
supervisor on the kernel's own running loop: nothing here needs ``nest_asyncio``.

``%unload_ext agentloop_nb`` → :func:`unload_ipython_extension`: removes the magics and the
hook, and disposes the App (``await app.aclose()`` scheduled on the kernel loop: turns end
``disposed``, the log is flushed); ``await agentloop_nb.jupyter.wait_closed()`` waits for it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ..app import App
from ._approval import DEFAULT_APPROVAL_TIMEOUT, WidgetApproval
from ._interrupt import InterruptHook

_CONFIG: dict[str, Any] = {}
_STATE: KernelState | None = None
_CLOSING: set[asyncio.Task[None]] = set()


class UserError(Exception):
    """A problem a person fixes by typing something else: shown as one line, no traceback."""


class KernelState:
    """Everything the extension owns in one kernel: the App, the NAME → agent bindings the
    magics made, one cached :class:`AgentView` per agent, the approval service, the hook."""

    def __init__(self, shell: Any, app: App, approval: WidgetApproval) -> None:
        self.shell = shell
        self.app = app
        self.approval = approval
        self.names: dict[str, Any] = {}
        self.views: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hook = InterruptHook(shell, self.cancel_running)
        self._off = app.ctx.on("agent/disposed", self._forget)

    # -- agents by name ---------------------------------------------------------------------

    def bind(self, name: str, agent: Any) -> None:
        self.names[name] = agent
        view = self.views.get(agent.id)
        if view is not None:  # a view made before the binding shows the name from now on
            view.name = name
        if self.shell is not None:
            self.shell.push({name: agent}, interactive=True)

    def agent(self, name: str) -> Any:
        agent = self.names.get(name)
        if agent is None:
            known = ", ".join(sorted(self.names)) or "none yet"
            raise UserError(
                f"no agent named {name!r} (known: {known}); create one with %agent create {name}"
            )
        return agent

    def name_of(self, agent: Any) -> str | None:
        return next((n for n, a in self.names.items() if a is agent), None)

    def view(self, agent: Any) -> Any:
        """The agent's cached ``AgentView`` (one per agent, shared by every cell showing it)."""
        view = self.views.get(agent.id)
        if view is None:
            from ._widgets import AgentView

            view = self.views[agent.id] = AgentView(agent, name=self.name_of(agent))
        return view

    def _forget(self, payload: Any) -> None:
        agent = payload.agent
        view = self.views.pop(agent.id, None)
        if view is not None:
            view.close()
        for name in [n for n, a in self.names.items() if a is agent]:
            del self.names[name]

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Hold a strong reference to a background task until it ends (the loop keeps only
        weak ones)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        self.hook.uninstall()
        self._off()
        for view in self.views.values():
            view.close()
        self.views.clear()


def configure(*, approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT, **app_kwargs: Any) -> None:
    """Set what the next ``%load_ext agentloop_nb`` builds its ``App`` with: any ``App(...)``
    keyword (``providers=``, ``persistence_root=``, ``config=``, ``retry=``, ...) plus the
    approval timeout (seconds; an unanswered ``Ask`` is denied after it). Takes effect on the
    next load (``%reload_ext agentloop_nb`` to apply it now)."""
    _CONFIG.clear()
    _CONFIG.update(app_kwargs)
    _CONFIG["approval_timeout"] = approval_timeout


def app() -> App:
    """The kernel-wide ``App``. Raises ``RuntimeError`` until ``%load_ext agentloop_nb``."""
    return state().app


def view(agent: Any) -> Any:
    """The ``AgentView`` the magics display for ``agent`` (one per agent, created on first
    use). Read its widgets from a later cell after ``await view(agent).settled()``."""
    return state().view(agent)


def state() -> KernelState:
    if _STATE is None:
        raise RuntimeError(
            "agentloop_nb is not loaded in this kernel: run %load_ext agentloop_nb first"
        )
    return _STATE


def _build_app() -> tuple[App, WidgetApproval]:
    kwargs = dict(_CONFIG)
    timeout = kwargs.pop("approval_timeout", DEFAULT_APPROVAL_TIMEOUT)
    if "persistence" not in kwargs and "persistence_root" not in kwargs:
        kwargs["persistence_root"] = os.path.join(os.getcwd(), ".agentloop", "sessions")
    application = App(**kwargs)
    approval = WidgetApproval(timeout=timeout)
    application.ctx.provide("approval", approval)
    return application, approval


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext agentloop_nb``. Loading twice keeps the existing App."""
    global _STATE
    if _STATE is not None:
        return
    from ._magics import AgentMagics, keep_question_marks

    application, approval = _build_app()
    st = KernelState(ipython, application, approval)
    _STATE = st
    ipython.register_magics(AgentMagics(ipython, st))
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and keep_question_marks not in cleanup:
        cleanup.append(keep_question_marks)
    ipython.push({"ctx": application.ctx}, interactive=True)
    if getattr(ipython, "kernel", None) is not None:  # a terminal IPython keeps Ctrl-C as is
        st.hook.install()


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext agentloop_nb``: remove the magics and the interrupt hook, dispose the App."""
    global _STATE
    st, _STATE = _STATE, None
    if st is None:
        return
    st.close()
    from ._magics import keep_question_marks

    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and keep_question_marks in cleanup:
        cleanup.remove(keep_question_marks)
    magics = ipython.magics_manager.magics
    for kind, name in (("line", "agent"), ("cell", "agent"), ("cell", "plugin")):
        magics[kind].pop(name, None)
    if ipython.user_ns.get("ctx") is st.app.ctx:
        del ipython.user_ns["ctx"]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(st.app.aclose())
        return
    task = loop.create_task(st.app.aclose(), name="agentloop_nb unload")
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


async def wait_closed() -> None:
    """Wait until Apps disposed by ``%unload_ext`` have finished closing."""
    while _CLOSING:
        await asyncio.gather(*_CLOSING, return_exceptions=True)


__all__ = [
    "KernelState",
    "UserError",
    "app",
    "configure",
    "load_ipython_extension",
    "state",
    "unload_ipython_extension",
    "view",
    "wait_closed",
]
