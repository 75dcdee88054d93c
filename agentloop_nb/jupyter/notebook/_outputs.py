"""Cell outputs as the model reads them: bounded text plus at most a few images.

- stream text (stdout/stderr): head and tail, with the number of lines dropped between;
- an error: ``ename: evalue`` and the last frames of its traceback, ANSI colour stripped;
- ``image/png`` and ``image/jpeg``: image blocks (at most :data:`MAX_IMAGES` per call); one
  over :data:`MAX_IMAGE_BYTES` is downscaled when Pillow is importable (matplotlib ships it),
  else left out with a note saying so;
- rich outputs by their best text form: Markdown, then ``text/plain`` (an HTML table when the
  plain form is only an object's address), HTML tables as pipe-separated text, other HTML with
  its tags stripped; widget outputs by their widget class (or model id).

Every text passes the kernel tools' secrets rule (``mask``) before the model sees it, and the
whole is cut to the caller's ``max_chars``.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from ..kernel import mask

__all__ = [
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "OutputSummary",
    "bounded",
    "one_line",
    "strip_ansi",
    "summarize",
]

MAX_IMAGES = 3
MAX_IMAGE_BYTES = 1_000_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
_ADDRESS_REPR = re.compile(r"^<[\w.]+ (object )?at 0x[0-9a-fA-F]+>$")
_WIDGET = "application/vnd.jupyter.widget-view+json"
_TRACEBACK_FRAMES = 3


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (IPython colours its tracebacks)."""
    return _ANSI.sub("", text)


def bounded(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``: its first and last lines, with the number of lines
    dropped between them (a single huge line is cut in the middle)."""
    if len(text) <= max_chars:
        return text
    lines = text.splitlines()
    half = max(20, (max_chars - 40) // 2)
    if len(lines) < 3:
        return f"{text[:half]} …[{len(text) - 2 * half} characters dropped]… {text[-half:]}"
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > half:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    used = 0
    for line in reversed(lines[len(head) :]):
        if used + len(line) + 1 > half:
            break
        tail.append(line)
        used += len(line) + 1
    tail.reverse()
    dropped = len(lines) - len(head) - len(tail)
    if not head and not tail:  # a few very long lines
        return f"{text[:half]} …[{len(text) - 2 * half} characters dropped]… {text[-half:]}"
    return "\n".join([*head, f"…[{dropped} lines dropped]…", *tail])


@dataclass
class OutputSummary:
    """What :func:`summarize` made of a cell's outputs: the ``text`` and the ``images`` kept as
    ``(media_type, base64)``."""

    text: str
    images: list[tuple[str, str]] = field(default_factory=list)


class _TableText(HTMLParser):
    """Tables of an HTML fragment as pipe-separated rows; the other text as it comes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._text: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables += 1
            self._flush_text()
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag in ("br", "p", "div", "li") and self._cell is None:
            self._flush_text()

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.lines.append(" | ".join(self._row))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._row is None:
            self._text.append(data)

    def _flush_text(self) -> None:
        text = " ".join("".join(self._text).split())
        if text:
            self.lines.append(text)
        self._text = []

    def result(self) -> str:
        self._flush_text()
        return "\n".join(self.lines)


def html_text(html: str) -> str:
    """An HTML fragment as text (tables as ``a | b`` rows)."""
    parser = _TableText()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # malformed markup: the tags stripped crudely
        return " ".join(re.sub(r"<[^>]+>", " ", html).split())
    return parser.result()


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    # text for people: anything str() can show, spaced (not the wire form)
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _widget_name(data: Mapping[str, Any]) -> str:
    view = data.get(_WIDGET)
    model_id = view.get("model_id") if isinstance(view, Mapping) else None
    name = None
    if isinstance(model_id, str):
        try:
            import ipywidgets

            live = ipywidgets.Widget.widgets.get(model_id)
        except Exception:
            live = None
        if live is not None:
            name = type(live).__name__
    plain = _text(data.get("text/plain", ""))
    if name is None and plain:
        name = plain.split("(", 1)[0].strip() or None
    if name is None:
        return f"a widget (model {model_id})" if model_id else "a widget"
    return f"widget {name}"


def _rich_text(data: Mapping[str, Any]) -> str:
    if _WIDGET in data:
        return _widget_name(data)
    if "text/markdown" in data:
        return _text(data["text/markdown"])
    plain = _text(data.get("text/plain", "")) if "text/plain" in data else None
    if plain is not None and not (_ADDRESS_REPR.match(plain.strip()) and "text/html" in data):
        return plain
    if "text/html" in data:
        return html_text(_text(data["text/html"]))
    if "text/latex" in data:
        return _text(data["text/latex"])
    if "application/json" in data:
        return _text(data["application/json"])
    if plain is not None:
        return plain
    kinds = ", ".join(k for k in data if not k.startswith("image/"))
    return f"(an output of type {kinds})" if kinds else ""


def _image(media_type: str, b64: Any) -> tuple[tuple[str, str] | None, str]:
    """``(image or None, note)``: the image within :data:`MAX_IMAGE_BYTES` (downscaled when
    needed and possible), or ``None`` with why it was left out."""
    data = _text(b64).strip()
    try:
        raw = base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return None, f"{media_type} (not valid base64, left out)"
    if len(raw) <= MAX_IMAGE_BYTES:
        return (media_type, "".join(data.split())), ""
    try:
        from PIL import Image  # matplotlib depends on Pillow
    except ImportError:
        return (
            None,
            f"{media_type} of {len(raw):,} bytes left out (over 1 MB; Pillow is not installed to shrink it)",
        )
    try:
        image: Any = Image.open(io.BytesIO(raw))
        image.load()
        fmt = "JPEG" if media_type == "image/jpeg" else "PNG"
        if fmt == "JPEG" and image.mode not in ("RGB", "L"):
            image = image.convert("RGB")
        scale = (MAX_IMAGE_BYTES / len(raw)) ** 0.5
        for _ in range(6):
            size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
            small = image.resize(size)
            buf = io.BytesIO()
            small.save(buf, format=fmt)
            if buf.tell() <= MAX_IMAGE_BYTES:
                out = base64.b64encode(buf.getvalue()).decode("ascii")
                return (media_type, out), f"{media_type} downscaled to {size[0]}x{size[1]}"
            scale *= 0.7
    except Exception as exc:
        return (
            None,
            f"{media_type} of {len(raw):,} bytes left out (could not shrink it: {type(exc).__name__})",
        )
    return None, f"{media_type} of {len(raw):,} bytes left out (over 1 MB)"


def _error_text(output: Mapping[str, Any], budget: int) -> str:
    ename, evalue = str(output.get("ename", "Error")), str(output.get("evalue", ""))
    frames = [strip_ansi(_text(f)).rstrip() for f in output.get("traceback") or ()]
    last = "\n".join(f for f in frames[-_TRACEBACK_FRAMES:] if f)
    head = f"error: {ename}: {strip_ansi(evalue)}"
    return head + (f"\n{bounded(last, max(200, budget - len(head)))}" if last else "")


def summarize(
    outputs: Sequence[Mapping[str, Any]],
    *,
    max_chars: int,
    secrets: Iterable[str] = (),
    images_left: int = MAX_IMAGES,
) -> OutputSummary:
    """The model's view of ``outputs`` (see the module docstring): text within ``max_chars``
    with ``secrets`` masked, and at most ``images_left`` images."""
    secrets = list(secrets)
    parts: list[str] = []
    images: list[tuple[str, str]] = []
    # Consecutive stream outputs of one name read as one text (a print loop makes many).
    streams: list[tuple[str, str]] = []
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            name = str(output.get("name", "stdout"))
            text = _text(output.get("text", ""))
            if streams and streams[-1][0] == name:
                streams[-1] = (name, streams[-1][1] + text)
            else:
                streams.append((name, text))
            continue
        parts.extend(_streams(streams, max_chars))
        streams = []
        if kind == "error":
            parts.append(_error_text(output, max_chars // 2))
        elif kind in ("execute_result", "display_data", "update_display_data"):
            data = output.get("data") or {}
            if not isinstance(data, Mapping):
                continue
            for media_type in ("image/png", "image/jpeg"):
                if media_type not in data:
                    continue
                if len(images) >= images_left:
                    parts.append(
                        f"[{media_type}: not attached, {MAX_IMAGES} images per call at most]"
                    )
                    break
                image, note = _image(media_type, data[media_type])
                if image is not None:
                    images.append(image)
                    parts.append(
                        f"[{media_type} attached as image {len(images)}]"
                        + (f" ({note})" if note else "")
                    )
                else:
                    parts.append(f"[{note}]")
                break
            else:
                label = "value" if kind == "execute_result" else "display"
                parts.append(f"{label}: {_rich_text(data)}")
    parts.extend(_streams(streams, max_chars))
    text = mask("\n".join(p for p in parts if p), secrets)
    return OutputSummary(bounded(text, max_chars), images)


def _streams(streams: list[tuple[str, str]], max_chars: int) -> list[str]:
    return [f"{name}:\n{bounded(text.rstrip(), max_chars // 2)}" for name, text in streams if text]


def one_line(
    outputs: Sequence[Mapping[str, Any]], secrets: Iterable[str] = (), width: int = 60
) -> str:
    """A few words on ``outputs`` for a cell listing (``stdout 3 lines; ValueError: bad``)."""
    bits: list[str] = []
    lines: dict[str, int] = {}
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            name = str(output.get("name", "stdout"))
            lines[name] = lines.get(name, 0) + _text(output.get("text", "")).count("\n")
        elif kind == "error":
            evalue = strip_ansi(str(output.get("evalue", ""))).splitlines()
            bits.append(
                f"{output.get('ename', 'Error')}: {evalue[0] if evalue else ''}".rstrip(": ")
            )
        elif kind in ("execute_result", "display_data"):
            data = output.get("data") or {}
            image = next((m for m in ("image/png", "image/jpeg") if m in data), None)
            if image is not None:
                bits.append(image)
            elif isinstance(data, Mapping):
                first = _rich_text(data).strip().splitlines()
                bits.append(first[0] if first else "(empty)")
    head = [f"{name} {n or 1} line{'s' if n != 1 else ''}" for name, n in lines.items()]
    text = mask("; ".join(head + bits), list(secrets))
    return text if len(text) <= width else text[: width - 1] + "…"
