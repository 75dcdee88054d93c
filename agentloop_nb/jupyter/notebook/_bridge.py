"""The kernel's end of the comm ``agentloop.notebook`` (docs/notebook-bridge.md).

:class:`NotebookBridge` registers the comm target, announces itself to the front ends (the
``agentloop.notebook.ready`` comm, kept open while the bridge lives so that pages opened later
find it with ``comm_info``), keeps the comms the front ends open, sends requests to the most
recently opened live one and hands validated notifications (``action``) to its listeners.

Every message from a front end is validated (:mod:`._messages`); one that is too big (over
10 MB), arrives over the rate limit (1,000 a second per comm), or does not match is dropped
with one log line on the ``agentloop_nb.notebook`` logger: nothing a front end sends can put a
traceback in a user's cell.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..._disposer import Disposer
from ..._json import dumps_bytes
from ...errors import AgentloopError, InvalidTypeError, InvalidValueError
from ._messages import (
    COMM_TARGET,
    OPS,
    PROTOCOL,
    READY_TARGET,
    RESULTS,
    Action,
    Hello,
    Response,
    parse_front_message,
)

_log = logging.getLogger("agentloop_nb.notebook")

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
MAX_MESSAGES_PER_SECOND = 1000
# How much longer than the cell's own timeout a `run` request waits for the front end's answer.
RUN_GRACE = 5.0


class BridgeError(AgentloopError):
    """A request that did not succeed. ``code`` is one of ``conflict``, ``not-found``,
    ``bad-request``, ``busy``, ``internal`` (from the front end) or ``disconnected``,
    ``timeout`` (no answer); ``message`` is one line for the model and the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(eq=False)
class _Live:
    """One open comm from a front end, with its rate-limit window."""

    comm: Any
    hello: Hello
    window_start: float = 0.0
    window_count: int = 0
    warned: bool = False
    pending: set[str] = field(default_factory=set)

    def admit(self, limit: int) -> bool:
        """Count one message; False once this second's ``limit`` is spent (logged once)."""
        now = time.monotonic()
        if now - self.window_start >= 1.0:
            self.window_start, self.window_count, self.warned = now, 0, False
        self.window_count += 1
        if self.window_count <= limit:
            return True
        if not self.warned:
            self.warned = True
            _log.warning(
                "notebook bridge: the front end of %s sent over %d messages in a second; "
                "dropping the rest of this second",
                self.hello.path,
                limit,
            )
        return False


@dataclass(eq=False)
class _Pending:
    future: asyncio.Future[dict[str, Any]]
    op: str
    live: _Live


def _comm_manager(kernel_or_comm_manager: Any) -> Any:
    if hasattr(kernel_or_comm_manager, "register_target"):
        return kernel_or_comm_manager
    manager = getattr(kernel_or_comm_manager, "comm_manager", None)
    if manager is None:
        raise InvalidTypeError(
            "NotebookBridge needs an ipykernel kernel (get_ipython().kernel) or its comm "
            f"manager, got {type(kernel_or_comm_manager).__name__}"
        )
    return manager


def _ensure_log_destination() -> None:
    """Send the bridge's log lines to the kernel process's own stderr (the Jupyter server's
    log) when nothing is configured: Python's last-resort handler would write them to
    ``sys.stderr``, which a kernel turns into output of whatever cell is current."""
    if _log.level == logging.NOTSET:
        _log.setLevel(logging.INFO)  # a dropped message is worth a line, like a warning
    if _log.hasHandlers():
        return
    handler = logging.StreamHandler(sys.__stderr__)
    handler.setFormatter(logging.Formatter("[%(levelname)s %(name)s] %(message)s"))
    _log.addHandler(handler)


def _kernel_id() -> str:
    try:
        from ipykernel.connect import get_connection_file

        name = get_connection_file().rsplit("/", 1)[-1]
    except Exception:
        return ""
    return name.removeprefix("kernel-").removesuffix(".json") if name.startswith("kernel-") else ""


def _size(data: Any) -> int:
    try:
        return len(dumps_bytes(data))
    except (TypeError, ValueError):  # not JSON: never sendable
        return math.inf  # type: ignore[return-value]


class NotebookBridge:
    """The kernel side of the notebook bridge for one kernel.

    ``NotebookBridge(kernel)`` (``get_ipython().kernel``, or a comm manager) registers the
    comm target and announces itself; ``max_message_bytes`` (10 MB) and
    ``max_messages_per_second`` (1,000 per comm) bound what a front end may send. :meth:`request` performs an op in the front end and
    returns its result dict or raises :class:`BridgeError`; :meth:`on_action` listens to the
    front end's notifications; :meth:`push` sends to every live comm; :meth:`close` undoes it
    all. Use it from the kernel's event loop (a cell, or a task started there).

    Every comm callback (open, message, close) runs on the thread and event loop the bridge
    was made on, in the context it was made in, whichever thread the kernel received it on:
    JupyterLab 4.4+ sends each comm target's messages to a kernel subshell of its own, and
    ipykernel 7 runs a subshell's handlers on its own thread with its own event loop. An
    action handled there would start an agent's driver on that loop (a loop no cell awaits,
    whose wake-ups never reach the kernel's) and touch the agents from a second thread.
    """

    def __init__(
        self,
        kernel_or_comm_manager: Any,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_messages_per_second: int = MAX_MESSAGES_PER_SECOND,
    ) -> None:
        self._manager = _comm_manager(kernel_or_comm_manager)
        self._max_bytes = max_message_bytes
        self._max_rate = max_messages_per_second
        _ensure_log_destination()
        self._live: list[_Live] = []
        self._pending: dict[str, _Pending] = {}
        self._listeners: list[Callable[[Action], Any]] = []
        self._closed = False
        # Where comm callbacks run (see the class docstring). The context is the one of the
        # cell that made the bridge: its parent message is on the main shell, so what the
        # callbacks publish on a comm makes ipykernel route that comm's later messages to the
        # main shell too (it routes a comm's replies to the shell that last sent on it).
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop (a plain script): callbacks run in place
            self._loop = None
        self._thread = threading.get_ident()
        self._context = contextvars.copy_context()
        self._manager.register_target(COMM_TARGET, self._on_open)
        self._announce = self._open_announce()

    # -- public API -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while at least one front end's comm is open."""
        return bool(self._live)

    @property
    def path(self) -> str | None:
        """The notebook path named by the live comm's ``hello`` (the one requests go to)."""
        return self._live[-1].hello.path if self._live else None

    async def request(
        self,
        op: str,
        args: dict[str, Any],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the contract: a per-request deadline
    ) -> dict[str, Any]:
        """Perform ``op`` (snapshot, insert, replace, delete, run) with ``args`` in the most
        recently opened live front end; returns its validated result.

        Raises :class:`BridgeError`: ``bad-request`` for an unknown op, ``disconnected`` when no
        front end is connected or its comm closes before answering, ``timeout`` after
        ``timeout`` seconds (a ``run`` waits at least its own ``args["timeout"]`` plus a few
        seconds), or the front end's error code.
        """
        if op not in OPS:
            raise BridgeError("bad-request", f"unknown op {op!r}; known: {', '.join(OPS)}")
        if not isinstance(args, dict):
            raise BridgeError("bad-request", f"args must be a dict, got {type(args).__name__}")
        if not self._live:
            raise BridgeError(
                "disconnected",
                "no notebook front end is connected: open this notebook in JupyterLab with the "
                "agentloop-nb extension installed (pip install agentloop_nb)",
            )
        if op == "run" and isinstance(args.get("timeout"), int | float):
            timeout = max(timeout, float(args["timeout"]) + RUN_GRACE)
        live = self._live[-1]
        request_id = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(future, op, live)
        live.pending.add(request_id)
        try:
            live.comm.send({"type": "request", "id": request_id, "op": op, "args": args})
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise BridgeError(
                "timeout", f"the notebook front end did not answer {op!r} within {timeout:g} s"
            ) from None
        finally:
            self._pending.pop(request_id, None)
            live.pending.discard(request_id)

    def on_action(self, callback: Callable[[Action], Any]) -> Disposer:
        """Call ``callback(action)`` for every validated notification (a ``FixAction``,
        ``PromptAction``, ``CancelAction``, ``CreateAction`` or ``ListAction``). An exception
        in the callback is logged, not raised. Returns the :class:`Disposer` that stops it."""
        self._listeners.append(callback)

        def off() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return Disposer(off)

    def push(self, message: dict[str, Any]) -> None:
        """Send ``message`` (a dict with a string ``type``, e.g. ``{"type": "agents", ...}``)
        to every live front end. Raises ``ValueError`` for a message without a ``type``."""
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise InvalidValueError("a pushed message must be a dict with a string 'type'")
        for live in list(self._live):
            self._send(live, message)

    def close(self) -> None:
        """Unregister the target, close the comms, fail pending requests (``disconnected``)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._manager.unregister_target(COMM_TARGET, self._on_open)
        except Exception:  # already gone (a kernel shutting down)
            _log.debug("notebook bridge: unregister_target failed", exc_info=True)
        for live in list(self._live):
            self._forget(live)
            try:
                live.comm.close()
            except Exception:
                _log.debug("notebook bridge: closing a comm failed", exc_info=True)
        if self._announce is not None:
            try:
                self._announce.close()
            except Exception:
                _log.debug("notebook bridge: closing the announce comm failed", exc_info=True)
            self._announce = None

    # -- comms ------------------------------------------------------------------------------

    def _open_announce(self) -> Any:
        """Tell the front ends the target exists; kept open so later pages can probe for it."""
        try:
            from comm import create_comm

            return create_comm(
                target_name=READY_TARGET, data={"type": "ready", "protocol": PROTOCOL}
            )
        except Exception:  # no kernel to publish on (a plain IPython, a test harness)
            _log.debug("notebook bridge: no announce comm", exc_info=True)
            return None

    def _on_main(self, callback: Callable[..., None]) -> Callable[..., None]:
        """``callback`` as a comm callback that runs on the bridge's loop and thread."""

        def run(*args: Any) -> None:
            loop = self._loop
            if loop is None or threading.get_ident() == self._thread or loop.is_closed():
                callback(*args)
            else:
                loop.call_soon_threadsafe(callback, *args, context=self._context.copy())

        return run

    def _on_open(self, comm: Any, msg: dict[str, Any]) -> None:
        data = (msg.get("content") or {}).get("data")
        try:
            if _size(data) > self._max_bytes:
                raise InvalidValueError(f"hello over {self._max_bytes} bytes")
            hello = Hello.model_validate(data)
        except (ValidationError, ValueError) as exc:
            _log.warning("notebook bridge: refused a comm with a bad hello: %s", _first_line(exc))
            self._refuse(comm, "the hello message is malformed")
            return
        if hello.protocol != PROTOCOL:
            _log.warning(
                "notebook bridge: refused a front end speaking protocol %s", hello.protocol
            )
            self._refuse(
                comm,
                f"this kernel speaks protocol {PROTOCOL}, the front end {hello.protocol}: "
                "install matching versions of agentloop_nb in the kernel and JupyterLab",
            )
            return
        # The handlers are set here, on whichever thread the open came in on, so a message
        # that follows at once finds them; what they do runs on the bridge's loop, in order.
        live = _Live(comm, hello)
        comm.on_msg(self._on_main(lambda message: self._on_msg(live, message)))
        comm.on_close(self._on_main(lambda _message: self._on_close(live)))
        self._on_main(self._welcome)(live)

    def _welcome(self, live: _Live) -> None:
        if self._closed:  # closed while the open hopped over from a subshell: not adopted
            try:
                live.comm.close()
            except Exception:
                _log.debug("notebook bridge: closing a late comm failed", exc_info=True)
            return
        self._live.append(live)
        self._send(live, {"type": "welcome", "protocol": PROTOCOL, "kernel": _kernel_id()})

    def _refuse(self, comm: Any, reason: str) -> None:
        try:
            comm.send({"type": "refused", "reason": reason})
            comm.close()
        except Exception:
            _log.debug("notebook bridge: refusing a comm failed", exc_info=True)

    def _on_msg(self, live: _Live, msg: dict[str, Any]) -> None:
        # Runs inside the comm machinery: never let anything escape into a cell's output.
        try:
            self._handle(live, (msg.get("content") or {}).get("data"))
        except Exception:
            _log.exception("notebook bridge: failed to handle a front-end message")

    def _handle(self, live: _Live, data: Any) -> None:
        if not live.admit(self._max_rate):
            return
        if _size(data) > self._max_bytes:
            _log.warning(
                "notebook bridge: dropped a message over %d bytes from %s",
                self._max_bytes,
                live.hello.path,
            )
            return
        try:
            message = parse_front_message(data)
        except ValidationError as exc:
            _log.warning("notebook bridge: dropped a malformed message: %s", _first_line(exc))
            return
        if isinstance(message, Response):
            self._resolve(live, message)
        else:
            for listener in list(self._listeners):
                try:
                    listener(message)
                except Exception:
                    _log.exception("notebook bridge: an action listener failed")

    def _resolve(self, live: _Live, response: Response) -> None:
        pending = self._pending.get(response.id)
        if pending is None or pending.live is not live:
            _log.info("notebook bridge: dropped a stale or unknown response %s", response.id)
            return
        if pending.future.done():
            return
        if not response.ok:
            assert response.error is not None  # the model's validator guarantees it
            outcome: Any = BridgeError(response.error.code, response.error.message)
        else:
            try:
                result = RESULTS[pending.op].model_validate(response.result)
                outcome = result.model_dump(mode="json")
            except ValidationError as exc:
                _log.warning(
                    "notebook bridge: malformed %r result: %s", pending.op, _first_line(exc)
                )
                outcome = BridgeError(
                    "internal", f"the front end sent a malformed {pending.op!r} result"
                )
        _settle(pending.future, outcome)

    def _on_close(self, live: _Live) -> None:
        try:
            self._forget(live)
        except Exception:
            _log.exception("notebook bridge: failed to forget a closed comm")

    def _forget(self, live: _Live) -> None:
        if live in self._live:
            self._live.remove(live)
        for request_id in list(live.pending):
            pending = self._pending.get(request_id)
            if pending is not None and not pending.future.done():
                _settle(
                    pending.future,
                    BridgeError(
                        "disconnected",
                        f"the notebook front end closed before answering {pending.op!r}; "
                        "nothing is known to have changed",
                    ),
                )

    def _send(self, live: _Live, message: dict[str, Any]) -> None:
        try:
            live.comm.send(message)
        except Exception:
            _log.warning("notebook bridge: sending to %s failed", live.hello.path, exc_info=True)


def _settle(future: asyncio.Future[dict[str, Any]], outcome: Any) -> None:
    """Resolve ``future`` from any thread (comm handlers may run off the loop's thread)."""

    def apply() -> None:
        if future.done():
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    loop = future.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        apply()
    else:
        loop.call_soon_threadsafe(apply)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " / ".join(line.strip() for line in text.splitlines()[:3])


__all__ = ["BridgeError", "NotebookBridge"]
