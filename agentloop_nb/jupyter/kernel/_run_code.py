"""Run model-written code in the user namespace the way a cell would, capturing what it shows.

Where it runs: synchronously on the kernel's main thread, inside the event loop's current
callback (the ``run_python`` tool body is ``async`` and never awaits while the code runs). That
is where a cell runs too, so the code sees the same namespace, the same matplotlib backend and
the same thread-affine libraries, and nothing else touches the namespace meanwhile. The price is
the one a long cell pays: the loop (widgets, other agents) waits until the code returns.

Output isolation: stdout, stderr and ``display()`` calls are captured for the duration of the
run (``IPython.utils.capture.capture_output``), so nothing the code prints lands in whichever
cell happens to own the kernel's output streams. Because the code runs synchronously on the
loop thread, no other cell or agent runs while the capture is in place.

Interrupts: while the code runs, SIGINT (the kernel's stop button) raises ``KeyboardInterrupt``
inside it, after first calling the handler that was installed (the extension's hook, which
cancels running agents). :func:`run_code` reports ``interrupted=True``.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

from IPython.utils.capture import capture_output

from ..._record import MutableRecord

__all__ = ["FILENAME", "RunOutcome", "run_code"]

#: The file name tracebacks show for the model's code.
FILENAME = "<run_python>"
_TRACEBACK_FRAMES = 3


# A mutable record, not a dataclass: %load_ext imports this module (the kernel tools) and
# ``dataclass`` compiles the class's methods from source at import. Mutable, equal by its
# fields, unhashable and shown as ``RunOutcome(stdout=..., ...)``, as the dataclass was.
class RunOutcome(MutableRecord):
    """What one run produced. ``value`` is the last expression's ``repr`` (``None`` when the
    code does not end in an expression or it evaluated to ``None``); ``names`` the variables
    created or rebound, sorted; ``images`` base64 PNGs (``display()`` outputs and new
    matplotlib figures); ``error`` the formatted exception (last frames) or ``None``, with
    ``ename``/``evalue`` its class name and message (a notebook's error output needs them)."""

    __slots__ = (
        "displays",
        "ename",
        "error",
        "evalue",
        "images",
        "interrupted",
        "names",
        "stderr",
        "stdout",
        "value",
    )
    __match_args__ = (
        "stdout",
        "stderr",
        "value",
        "names",
        "images",
        "displays",
        "error",
        "ename",
        "evalue",
        "interrupted",
    )

    def __init__(
        self,
        stdout: str = "",
        stderr: str = "",
        value: str | None = None,
        names: list[str] | None = None,
        images: list[str] | None = None,
        displays: list[str] | None = None,
        error: str | None = None,
        ename: str | None = None,
        evalue: str | None = None,
        interrupted: bool = False,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.value = value
        self.names: list[str] = [] if names is None else names
        self.images: list[str] = [] if images is None else images
        self.displays: list[str] = [] if displays is None else displays
        self.error = error
        self.ename = ename
        self.evalue = evalue
        self.interrupted = interrupted


def _split(code: str) -> tuple[ast.Module, ast.Expression | None]:
    tree = ast.parse(code, filename=FILENAME, mode="exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        assert isinstance(last, ast.Expr)
        return tree, ast.Expression(body=last.value)
    return tree, None


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` in the running code (after the previous handler ran:
    it may cancel agents). Only the main thread can install handlers; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _fingerprint(ns: Mapping[str, Any]) -> dict[str, int]:
    return {k: id(v) for k, v in ns.items()}


def _figures() -> set[int]:
    plt = sys.modules.get("matplotlib.pyplot")
    return set(plt.get_fignums()) if plt is not None else set()


def _new_figure_pngs(before: set[int]) -> list[str]:
    """PNG (base64) of every figure the code opened; they are closed so that the inline
    backend does not also show them in the next cell's output."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    pngs = []
    for num in plt.get_fignums():
        if num in before:
            continue
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        plt.close(fig)
        pngs.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    return pngs


def _png(data: Any) -> str | None:
    if isinstance(data, bytes):
        return base64.b64encode(data).decode("ascii")
    if isinstance(data, str):
        return data.strip()
    return None


def _format_error(exc: BaseException) -> str:
    tb = exc.__traceback__
    # Keep only the frames of the model's code (drop this module's exec/eval frames).
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb, limit=-_TRACEBACK_FRAMES)
    return "".join(lines).rstrip()


def run_code(shell: Any, code: str) -> RunOutcome:
    """Run ``code`` in ``shell.user_ns`` (see the module docstring). Never raises for the
    code's own failures (they are ``error``); a ``KeyboardInterrupt`` becomes
    ``interrupted=True``. Must run on the thread that owns the namespace (the kernel's)."""
    out = RunOutcome()
    try:
        module, last = _split(code)
    except SyntaxError as exc:
        out.error = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        out.ename, out.evalue = "SyntaxError", str(exc)
        return out
    ns = shell.user_ns
    before = _fingerprint(ns)
    figures = _figures()
    value: Any = None
    with capture_output(stdout=True, stderr=True, display=True) as cap:
        try:
            with _interruptible():
                exec(compile(module, FILENAME, "exec"), ns)
                if last is not None:
                    value = eval(compile(last, FILENAME, "eval"), ns)
        except KeyboardInterrupt:
            out.interrupted = True
            out.error = "KeyboardInterrupt: interrupted by the kernel's stop button"
            out.ename, out.evalue = "KeyboardInterrupt", "interrupted by the kernel's stop button"
        except Exception as exc:
            out.error = _format_error(exc)
            out.ename, out.evalue = type(exc).__name__, str(exc)
    out.stdout, out.stderr = cap.stdout, cap.stderr
    for rich in cap.outputs:
        data = rich.data
        png = _png(data.get("image/png")) if "image/png" in data else None
        if png:
            out.images.append(png)
        elif "text/plain" in data:
            out.displays.append(str(data["text/plain"]))
    after = _fingerprint(ns)
    out.names = sorted(k for k, i in after.items() if not k.startswith("_") and before.get(k) != i)
    if value is not None and type(value).__name__ == "Figure" and hasattr(value, "savefig"):
        value = None  # the figure itself is among the images
    out.images.extend(_new_figure_pngs(figures))
    if value is not None:
        try:
            out.value = repr(value)
        except Exception as exc:
            out.value = f"(repr failed: {type(exc).__name__}: {exc})"
    return out
