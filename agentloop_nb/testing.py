"""Shipped test doubles: :class:`ScriptedModel` (a zero-latency adapter that replays a script)
and the helpers that build its entries.

Every helper returns a plain ``list`` of ``StreamChunk``s, so a custom adapter can replay the same
responses at its own pace::

    model = ScriptedModel([tool_call("c1", "echo", {"text": "ping"}), text("done")])
    ctx.llm.register_adapter(["scripted"], model)

Script entries, consumed one per request:

- a list of chunks: streamed as is (nothing is awaited between chunks);
- :data:`HANG`: streams the text ``partial`` and then waits until the request's ``signal``
  aborts, then finishes ``aborted`` (a request without a signal waits until cancelled);
- ``hang_after(chunks)``: streams ``chunks`` up to (not including) their finish, then hangs
  like ``HANG``;
- a callable: receives the ``GenerateOptions`` and returns an entry (chunks, ``HANG``, ...) or
  an awaitable of one;
- when the script is exhausted the response is an error finish
  (``ScriptedModel: script exhausted``).

:class:`ReplayModel` turns a recorded session (a live ``Session`` or its JSONL file) into an
adapter that answers the i-th request with the i-th recorded model call, and (strict mode)
fails with ``REPLAY_DIVERGED`` when a request's messages differ from the recording's.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, TypeAlias

from ._json import dumps_arguments
from .errors import InvalidValueError
from .llm import (
    CHUNK_ADAPTER,
    Aborted,
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    GenerateOptions,
    MaxTokens,
    Stop,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    UsageChunk,
)
from .messages import Message
from .session import JsonlPersistence, SessionStore


class _Hang:
    """The :data:`HANG` sentinel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HANG"


HANG = _Hang()
"""Script entry: stream ``partial`` then wait for the request's abort signal."""


@dataclass(frozen=True, slots=True)
class HangAfter:
    """Script entry built by :func:`hang_after`."""

    chunks: tuple[StreamChunk, ...]


Response: TypeAlias = list[StreamChunk]
ScriptEntry: TypeAlias = (
    Sequence[StreamChunk] | _Hang | HangAfter | Callable[[GenerateOptions], Any]
)


def _text_block(index: int, s: str) -> list[StreamChunk]:
    chunks: list[StreamChunk] = [BlockStart(index=index, block_type="text")]
    chunks.extend(TextDelta(index=index, text=ch) for ch in s)
    # No ``block`` on the end: the assembler builds it from the deltas, and the durable
    # ``assistant/chunk`` log does not carry the text twice.
    chunks.append(BlockEnd(index=index))
    return chunks


def text(s: str) -> Response:
    """A text answer: block-start, one text-delta per character, block-end,
    usage ``{input 10, output len(s)}``, finish ``stop``."""
    return [
        *_text_block(0, s),
        UsageChunk(usage=Usage(input_tokens=10, output_tokens=len(s))),
        Finish(reason=Stop()),
    ]


def max_tokens(s: str) -> Response:
    """Like :func:`text` but the response was cut off: finish ``max-tokens``."""
    return [
        *_text_block(0, s),
        UsageChunk(usage=Usage(input_tokens=10, output_tokens=len(s))),
        Finish(reason=MaxTokens()),
    ]


def tool_call(id: str, name: str, args: Any, text: str | None = None) -> Response:
    """One tool call: an optional text block, then a tool-call block whose arguments (``args``
    as given when it is a ``str``, else ``json.dumps(args)``) arrive in two deltas, usage,
    finish ``tool-calls``."""
    arguments = args if isinstance(args, str) else dumps_arguments(args)
    chunks: list[StreamChunk] = []
    index = 0
    if text is not None:
        chunks.extend(_text_block(0, text))
        index = 1
    half = len(arguments) // 2
    chunks += [
        BlockStart(index=index, block_type="tool-call"),
        ToolCallDelta(index=index, id=id, name=name, arguments_delta=arguments[:half]),
        ToolCallDelta(index=index, id=id, arguments_delta=arguments[half:]),
        BlockEnd(index=index),
        UsageChunk(usage=Usage(input_tokens=10, output_tokens=len(arguments) + len(text or ""))),
        Finish(reason=ToolCalls()),
    ]
    return chunks


def combine(*responses: Sequence[StreamChunk]) -> Response:
    """Merge several responses (typically ``tool_call(...)``s) into one: their blocks in order,
    re-indexed, then one usage (the sums) and the last response's finish."""
    out: list[StreamChunk] = []
    offset = 0
    input_tokens = output_tokens = 0
    finish: Finish | None = None
    for response in responses:
        indices: set[int] = set()
        for chunk in response:
            if isinstance(chunk, Finish):
                finish = chunk
            elif isinstance(chunk, UsageChunk):
                input_tokens = max(input_tokens, chunk.usage.input_tokens)
                output_tokens += chunk.usage.output_tokens
            else:
                indices.add(chunk.index)
                out.append(chunk.model_copy(update={"index": chunk.index + offset}))
        offset += max(indices) + 1 if indices else 0
    out.append(UsageChunk(usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens)))
    out.append(finish if finish is not None else Finish(reason=Stop()))
    return out


def error(code: str, message: str) -> Response:
    """A response that is only a terminal error finish with ``code`` and ``message``."""
    return [Finish(reason=ErrorFinish(code=code, message=message))]


def hang_after(chunks: Iterable[StreamChunk]) -> HangAfter:
    """Stream ``chunks`` (without their finish), then hang like :data:`HANG`."""
    return HangAfter(tuple(c for c in chunks if not isinstance(c, Finish)))


_HANG_PREFIX: tuple[StreamChunk, ...] = (
    BlockStart(index=0, block_type="text"),
    TextDelta(index=0, text="partial"),
)
_EXHAUSTED = Finish(reason=ErrorFinish(code="UNKNOWN", message="ScriptedModel: script exhausted"))
_ABORTED = Finish(reason=Aborted())


class ScriptedModel:
    """A deterministic adapter: each request consumes the next script entry (see the module
    docstring). ``requests`` records every ``GenerateOptions`` received, in order. ``push``
    appends entries. A callable entry that raises makes ``stream`` raise (the runtime turns
    that into an error finish)."""

    #: In-process: nothing leaves the machine (the default prompt may name the working directory).
    is_local = True

    def __init__(self, script: Iterable[ScriptEntry] = ()) -> None:
        self._script: list[ScriptEntry] = list(script)
        self._position = 0
        self.requests: list[GenerateOptions] = []

    def push(self, *entries: ScriptEntry) -> None:
        """Append entries to the script."""
        self._script.extend(entries)

    @property
    def remaining(self) -> int:
        """How many entries have not been consumed yet."""
        return len(self._script) - self._position

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.requests.append(options)
        if self._position >= len(self._script):
            yield _EXHAUSTED
            return
        entry: Any = self._script[self._position]
        self._position += 1
        if callable(entry):
            entry = entry(options)
            if inspect.isawaitable(entry):
                entry = await entry
        if isinstance(entry, _Hang):
            prefix: Sequence[StreamChunk] = _HANG_PREFIX
        elif isinstance(entry, HangAfter):
            prefix = entry.chunks
        else:
            for chunk in entry:
                yield chunk
            return
        for chunk in prefix:
            yield chunk
        await _wait_for_abort(options)
        yield _ABORTED


async def _wait_for_abort(options: GenerateOptions) -> None:
    signal = options.signal
    if signal is None:
        # No signal can ever end this: wait until the consumer cancels or closes the stream.
        await _forever()
    else:
        await signal.wait()


def _forever() -> Awaitable[None]:
    return asyncio.get_running_loop().create_future()


# -- replaying a recorded session ------------------------------------------------------------

REPLAY_DIVERGED = "REPLAY_DIVERGED"
"""Error code of a strict replay whose request differs from the recording."""
REPLAY_EXHAUSTED = "REPLAY_EXHAUSTED"
"""Error code of a request beyond the recording's last model call."""


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One model call of a recording: the chunks it streamed, and the messages the recording's
    log derives just before it (what its request carried)."""

    chunks: tuple[StreamChunk, ...]
    messages: tuple[Message, ...]


class ReplayModel:
    """An adapter that replays a recorded session's model calls, in order.

    The i-th request is answered with the i-th recorded call's chunks: a successful call's
    ``assistant/chunk`` events (as logged: coalesced, or as streamed in a version-1 log; both
    assemble into the recorded message), or the chunks of a failed attempt (``assistant/attempt``), so a
    retried failure replays as the same failure followed by the same retry. In ``strict`` mode
    each request's messages are first compared with the ones the recording's log derives at
    that point (message ids are not compared: they are minted afresh on every run); the first
    difference answers with an error finish ``REPLAY_DIVERGED`` naming the 0-based message
    index, which ends the turn ``error``. A request beyond the recording answers with an error
    finish ``REPLAY_EXHAUSTED``. ``requests`` records every ``GenerateOptions`` received.
    """

    def __init__(self, calls: Iterable[RecordedCall], *, strict: bool = True) -> None:
        self.calls: tuple[RecordedCall, ...] = tuple(calls)
        self.strict = strict
        self.requests: list[GenerateOptions] = []

    @classmethod
    def from_session(
        cls, session_or_path: Any | str | PathLike[str], *, strict: bool = True
    ) -> ReplayModel:
        """Build a replay of a ``Session`` (live or loaded) or of a stored ``<id>.jsonl`` file.

        Raises ``ValueError`` for a path that is not a ``.jsonl`` file and the persistence
        errors (``SessionNotFoundError``, ``SessionCorruptError``) for a missing or corrupt one.
        """
        if isinstance(session_or_path, str | PathLike):
            header, events = _load_jsonl(Path(session_or_path))
        else:
            header, events = session_or_path.header, list(session_or_path.events)
        return cls(_recorded_calls(header, events), strict=strict)

    @property
    def remaining(self) -> int:
        """How many recorded calls have not been replayed yet."""
        return max(len(self.calls) - len(self.requests), 0)

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        index = len(self.requests)
        self.requests.append(options)
        if index >= len(self.calls):
            message = f"ReplayModel: the recording has {len(self.calls)} model calls; request {index} has none"
            yield Finish(reason=ErrorFinish(code=REPLAY_EXHAUSTED, message=message))
            return
        call = self.calls[index]
        if self.strict:
            problem = _divergence(call.messages, options.messages)
            if problem is not None:
                message = f"ReplayModel: request {index} diverged from the recording: {problem}"
                yield Finish(reason=ErrorFinish(code=REPLAY_DIVERGED, message=message))
                return
        for chunk in call.chunks:
            yield chunk


def _load_jsonl(path: Path) -> tuple[Any, list[Any]]:
    if path.suffix != ".jsonl":
        raise InvalidValueError(f"ReplayModel.from_session: {path} is not a session .jsonl file")
    return JsonlPersistence(path.parent).load(path.name[: -len(".jsonl")])


def _recorded_calls(header: Any, events: Sequence[Any]) -> list[RecordedCall]:
    # (first chunk seq, chunk seqs, the message event or None for an attempt), in log order
    calls: list[tuple[int, list[int], Any]] = []
    for event in events:
        if event.type == "assistant/message":
            seqs = list(event.source_event_seqs or ())
            if seqs:  # (a message without chunks is history a caller seeded, not a call)
                calls.append((min(seqs), seqs, event))
        elif event.type == "assistant/attempt":
            seqs = [s for s in event.data.get("chunks", ()) if isinstance(s, int)]
            if seqs:
                calls.append((min(seqs), seqs, None))
    calls.sort(key=lambda c: c[0])
    store = SessionStore()
    out: list[RecordedCall] = []
    for first, seqs, message in calls:
        prefix = store.prepare(header=header, events=events[:first])
        chunks = [_chunk(events[s].data["chunk"]) for s in seqs]
        if message is not None:
            chunks += _implied_tail(message.data, chunks)
        out.append(RecordedCall(tuple(chunks), tuple(prefix.derive_messages())))
    return out


def _chunk(data: Any) -> StreamChunk:
    return CHUNK_ADAPTER.validate_python(_thaw(data))


def _implied_tail(data: Mapping[str, Any], chunks: Sequence[StreamChunk]) -> list[StreamChunk]:
    """The chunks a log of version 3 left out of a response (see ``ChunkLog.close``): when the
    logged chunks hold no finish and the message was not interrupted, its usage (unless the
    last logged usage chunk holds it already) and the finish its content implies. Nothing for
    an older log, whose responses log their finish."""
    if data.get("interrupted") or any(isinstance(c, Finish) for c in chunks):
        return []
    tail: list[StreamChunk] = []
    usage = data.get("usage")
    if usage is not None:
        last = next((c for c in reversed(chunks) if isinstance(c, UsageChunk)), None)
        chunk = _chunk({"type": "usage", "usage": usage})
        if last is None or last != chunk:
            tail.append(chunk)
    content = data.get("message", {}).get("content", ())
    calls = any(isinstance(b, Mapping) and b.get("type") == "tool-call" for b in content)
    tail.append(_chunk({"type": "finish", "reason": {"kind": "tool-calls" if calls else "stop"}}))
    return tail


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def _comparable(message: Any) -> Any:
    data = message.model_dump(mode="json")
    data.pop("id", None)
    return data


def _divergence(expected: Sequence[Any], actual: Sequence[Any]) -> str | None:
    """``None`` when the messages match (ids aside), else a description naming the first
    differing 0-based message index."""
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if _comparable(want) != _comparable(got):
            return f"message {i} differs: recorded {_brief(want)}, got {_brief(got)}"
    if len(expected) != len(actual):
        i = min(len(expected), len(actual))
        return (
            f"message {i} differs: the recording has {len(expected)} messages, "
            f"the request has {len(actual)}"
        )
    return None


def _brief(message: Any) -> str:
    text = getattr(message, "text", None)
    if not isinstance(text, str):
        content = getattr(message, "content", None)
        text = content if isinstance(content, str) else None
    shown = repr(text if len(text) <= 60 else text[:57] + "...") if isinstance(text, str) else ""
    return f"{message.role} {shown}".strip()


__all__ = [
    "HANG",
    "REPLAY_DIVERGED",
    "REPLAY_EXHAUSTED",
    "HangAfter",
    "RecordedCall",
    "ReplayModel",
    "ScriptedModel",
    "combine",
    "error",
    "hang_after",
    "max_tokens",
    "text",
    "tool_call",
]
