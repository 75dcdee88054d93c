"""The IPython extension: ``%load_ext`` / ``%unload_ext agentloop_nb``.

``%load_ext agentloop_nb`` → :func:`load_ipython_extension`: builds the ``App`` (JSONL
persistence under ``.agentloop/sessions`` relative to the kernel's cwd, i.e. the notebook's
folder; ``configure`` changes what it is built with), provides ``ctx.approval``
(``WidgetApproval``), registers ``%agent`` / ``%%agent`` / ``%%plugin``, binds ``ctx`` in the
user namespace, installs the SIGINT hook and answers the notebook bridge's "Fix with agent"
actions (``_fixflow``). Agent drivers run as tasks owned by the App's
supervisor on the kernel's own running loop: nothing here needs ``nest_asyncio``.

``%unload_ext agentloop_nb`` → :func:`unload_ipython_extension`: removes the magics and the
hook, and disposes the App (``await app.aclose()`` scheduled on the kernel loop: turns end
``disposed``, the log is flushed); ``await agentloop_nb.jupyter.wait_closed()`` waits for it.

The kernel-wide state itself lives in ``_state`` (which imports nothing from here).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._state import KernelState, attach, build_app, closing, current, default_options, detach
from .magics import AgentMagics, keep_question_marks

_MAGICS = (("line", "agent"), ("cell", "agent"), ("cell", "plugin"))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext agentloop_nb``. Loading twice keeps the existing App."""
    if current() is not None:
        return
    application, approval = build_app()
    st = KernelState(ipython, application, approval, defaults=default_options())
    attach(st)
    if st.notebook is not None:  # "Fix with agent"; closing the bridge ends it with the state
        from ._fixflow import fix_listener  # only a kernel has the bridge

        st.notebook.on_action(fix_listener(st, st.notebook.push))
    ipython.register_magics(AgentMagics(ipython, st))
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and keep_question_marks not in cleanup:
        cleanup.append(keep_question_marks)
    ipython.push({"ctx": application.ctx}, interactive=True)
    if getattr(ipython, "kernel", None) is not None:  # a terminal IPython keeps Ctrl-C as is
        st.hook.install()


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext agentloop_nb``: remove the magics and the interrupt hook, dispose the App."""
    st = detach()
    if st is None:
        return
    st.close()
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and keep_question_marks in cleanup:
        cleanup.remove(keep_question_marks)
    magics = ipython.magics_manager.magics
    for kind, name in _MAGICS:
        magics[kind].pop(name, None)
    if ipython.user_ns.get("ctx") is st.app.ctx:
        del ipython.user_ns["ctx"]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(st.app.aclose())
        return
    closing(loop.create_task(st.app.aclose(), name="agentloop_nb unload"))


__all__ = ["load_ipython_extension", "unload_ipython_extension"]
