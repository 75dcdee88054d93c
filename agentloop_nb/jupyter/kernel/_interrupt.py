"""Kernel interrupt (the stop button, ``KernelManager.interrupt_kernel()``) → cancel agents.

How ipykernel 7 delivers an interrupt (signal interrupt mode, the default): the kernel manager
sends SIGINT to the kernel process. What the main thread then does depends on the handler
installed at that moment:

- **idle** (no request executing): ipykernel installs ``SIG_IGN`` at start-up, so the signal is
  dropped and background agents would never notice;
- **a synchronous cell executing**: ``pre_handler_hook`` installs ``default_int_handler``, which
  raises ``KeyboardInterrupt`` in whatever the main thread runs (the cell);
- **an async cell executing** (top-level ``await``): ``_cancel_on_sigint`` installs a handler
  that cancels the cell's future (the cell ends with ``CancelledError``).

After every request ``post_handler_hook`` restores ``kernel.saved_sigint_handler`` (the handler
that was active before the request). :class:`InterruptHook` therefore

1. replaces the idle handler (``signal.signal`` now, ``kernel.saved_sigint_handler`` so the
   kernel restores *ours* after each request) with one that cancels running agents;
2. on ``pre_run_cell`` (fired inside the cell, after the kernel installed its per-cell handler)
   wraps whatever handler is active so it first cancels running agents and then does what the
   kernel meant (raise ``KeyboardInterrupt`` / cancel the cell). The kernel's own restores then
   put its saved handlers back, so nothing leaks past the cell.

A Python signal handler only runs when the *main* thread executes bytecode. Linux may deliver
the signal to any kernel thread (iopub, shell channel, heartbeat...), and then a main thread
blocked in ``epoll_wait`` (an idle kernel, or a cell awaiting a hung agent) would not run the
handler until something else woke it — possibly never. So, unless a wakeup fd is already set,
the hook installs one (``signal.set_wakeup_fd`` on a socket pair the loop reads): every signal
wakes the loop, and the handler runs at once.

Cancelling is scheduled with ``loop.call_soon_threadsafe`` (a signal handler runs between two
bytecodes and must not re-enter the loop). A ``KeyboardInterrupt`` is not raised while the main
thread is running an agent's own code (``current_initiator()`` is set there): the agent is
cancelled cooperatively instead of being killed half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from ...agents import current_initiator

_log = logging.getLogger("agentloop_nb.jupyter")

SignalHandler = Callable[[int, FrameType | None], Any] | int | None


class InterruptHook:
    """Install/uninstall the SIGINT integration for one kernel. ``cancel_running`` is called on
    the kernel's loop with no arguments and must cancel the running agents (cause ``user``)."""

    def __init__(self, shell: Any, cancel_running: Callable[[], Any]) -> None:
        self.shell = shell
        self.cancel_running = cancel_running
        self.kernel = getattr(shell, "kernel", None)
        self.interrupts = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous_idle: SignalHandler = None
        self._installed = False
        self._wakeup: tuple[socket.socket, socket.socket] | None = None

    def install(self) -> bool:
        """Install; ``False`` (and nothing done) off the main thread or without a kernel."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        kernel = self.kernel
        if kernel is not None and hasattr(kernel, "saved_sigint_handler"):
            # We are inside a request: the kernel restores saved_sigint_handler when it ends.
            self._previous_idle = kernel.saved_sigint_handler
            kernel.saved_sigint_handler = self._idle
        else:
            self._previous_idle = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._idle)
        self.shell.events.register("pre_run_cell", self._pre_run_cell)
        self._install_wakeup()
        self._installed = True
        return True

    def _install_wakeup(self) -> None:
        loop = self._loop
        if loop is None:
            return
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        wsock.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            previous = None
        if previous != -1:  # someone already wakes the loop on signals (or we cannot): keep it
            if previous is not None:
                signal.set_wakeup_fd(previous)
            rsock.close()
            wsock.close()
            return
        loop.add_reader(rsock.fileno(), self._drain_wakeup, rsock)
        self._wakeup = (rsock, wsock)

    @staticmethod
    def _drain_wakeup(rsock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while rsock.recv(4096):
                pass

    def _uninstall_wakeup(self) -> None:
        if self._wakeup is None:
            return
        rsock, wsock = self._wakeup
        self._wakeup = None
        with contextlib.suppress(ValueError, OSError):
            current = signal.set_wakeup_fd(-1)
            if current != wsock.fileno():  # someone replaced ours meanwhile: keep theirs
                signal.set_wakeup_fd(current)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(rsock.fileno())
        rsock.close()
        wsock.close()

    def uninstall(self) -> None:
        if not self._installed:
            return
        self._installed = False
        with contextlib.suppress(ValueError):
            self.shell.events.unregister("pre_run_cell", self._pre_run_cell)
        self._uninstall_wakeup()
        kernel = self.kernel
        previous = self._previous_idle if self._previous_idle is not None else signal.SIG_IGN
        if kernel is not None and getattr(kernel, "saved_sigint_handler", None) is self._idle:
            kernel.saved_sigint_handler = previous
        elif signal.getsignal(signal.SIGINT) is self._idle:
            signal.signal(signal.SIGINT, previous)

    # -- handlers ---------------------------------------------------------------------------

    def _schedule_cancel(self) -> None:
        self.interrupts += 1
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        try:
            self.cancel_running()
        except Exception:
            _log.exception("cancelling agents on interrupt failed")

    def _idle(self, signum: int, frame: FrameType | None) -> None:
        self._schedule_cancel()

    def _pre_run_cell(self, *_info: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        inner = signal.getsignal(signal.SIGINT)
        if inner is self._idle or isinstance(inner, _Chained):
            return
        signal.signal(signal.SIGINT, _Chained(self, inner))


class _Chained:
    """A per-cell SIGINT handler: cancel agents, then run the kernel's own handler."""

    __slots__ = ("hook", "inner")

    def __init__(self, hook: InterruptHook, inner: SignalHandler) -> None:
        self.hook = hook
        self.inner = inner

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.hook._schedule_cancel()
        inner = self.inner
        if not callable(inner):
            return  # SIG_IGN / SIG_DFL stand-ins: nothing more to do
        if inner is signal.default_int_handler and current_initiator() is not None:
            return  # the main thread is inside an agent: cancel it cooperatively, do not kill it
        inner(signum, frame)


__all__ = ["InterruptHook"]
