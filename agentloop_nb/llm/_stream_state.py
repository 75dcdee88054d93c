"""The part of a provider's stream state machine that both HTTP adapters share: block
numbering, decoding one event's JSON, in-stream error events, and the end of the stream —
closing what is still open, the usage chunk, the finish kind and the truncation check.

A subclass (an ``EventParser`` for :func:`._sse.stream_sse`) implements ``feed`` and the hooks
``_close_open_blocks``, ``_final_usage`` and ``_provider_finish``, and records in ``_reason``
the provider's stop/finish reason, in ``_has_text`` / ``_has_tools`` whether the answer carried
text / tool calls. Everything here raises only :class:`._sse.StreamFailure` (from
``_decode`` / ``_stream_failure``), which the driver turns into an error finish.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ._chunks import (
    BlockStart,
    BlockType,
    ErrorFinish,
    Finish,
    FinishReason,
    MaxTokens,
    Stop,
    StreamChunk,
    ToolCalls,
    Usage,
    UsageChunk,
)
from ._http import stream_error, truncate
from ._sse import StreamFailure


class StreamState:
    """Shared bookkeeping of one streamed response (see the module docstring)."""

    #: The wire field the reason comes from, quoted in the ``EMPTY_RESPONSE`` message.
    reason_field: ClassVar[str]
    #: The reason value that means the output hit ``max_tokens``.
    max_tokens_reason: ClassVar[str]
    #: What a truncated stream ended without, quoted in the ``TRANSPORT`` message.
    terminator: ClassVar[str]

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.done = False
        self._next_block = 0
        self._reason: str | None = None
        self._has_text = False
        self._has_tools = False
        self._events = 0

    # -- hooks ----------------------------------------------------------------------------------

    def _close_open_blocks(self, out: list[StreamChunk]) -> None:
        """Append a ``BlockEnd`` for every block still open at the finish."""
        raise NotImplementedError

    def _final_usage(self) -> Usage | None:
        """The usage to report before the finish (``None``: no usage chunk)."""
        raise NotImplementedError

    def _provider_finish(self, reason: str | None) -> FinishReason | None:
        """A provider-specific error finish for ``reason`` (refusal, content filter, ...), or
        ``None`` to fall through to the common mapping."""
        return None

    # -- shared steps ---------------------------------------------------------------------------

    def _open_block(self, out: list[StreamChunk], block_type: BlockType) -> int:
        """Number a new block and announce it; returns its index."""
        index = self._next_block
        self._next_block += 1
        out.append(BlockStart(index=index, block_type=block_type))
        return index

    def _decode(self, data: str, where: str) -> dict[str, Any]:
        """``data`` as a JSON object; ``BAD_RESPONSE`` (quoting it) when it is not one."""
        try:
            obj = json.loads(data)
        except ValueError:
            raise StreamFailure(
                ErrorFinish(
                    code="BAD_RESPONSE",
                    message=f"{self.provider}: malformed JSON in {where}: {truncate(data, 200)!r}",
                )
            ) from None
        if not isinstance(obj, dict):
            raise StreamFailure(
                ErrorFinish(
                    code="BAD_RESPONSE",
                    message=f"{self.provider}: unexpected event data (not an object): {truncate(data, 200)!r}",
                )
            )
        return obj

    def _stream_failure(self, payload: Any) -> StreamFailure:
        """The failure for an error the provider reported inside the stream (to be raised)."""
        # Secrets are redacted by the driver, which knows them.
        return StreamFailure(
            stream_error(provider=self.provider, payload=payload, secrets=(), default="SERVER")
        )

    def _finish(self) -> list[StreamChunk]:
        """The stream's last chunks: open blocks closed, the usage, then the ``Finish``."""
        self.done = True
        out: list[StreamChunk] = []
        self._close_open_blocks(out)
        usage = self._final_usage()
        if usage is not None:
            out.append(UsageChunk(usage=usage))
        out.append(Finish(reason=self._finish_kind()))
        return out

    def _finish_kind(self) -> FinishReason:
        reason = self._reason
        if reason == self.max_tokens_reason:
            return MaxTokens()
        special = self._provider_finish(reason)
        if special is not None:
            return special
        # Whatever the reason says (some servers say "stop" after tool calls), calls win.
        if self._has_tools:
            return ToolCalls()
        if not self._has_text:
            return ErrorFinish(
                code="EMPTY_RESPONSE",
                message=f"{self.provider}: the model returned no text and no tool calls "
                f"({self.reason_field} {reason!r})",
            )
        return Stop()

    def eof(self) -> list[StreamChunk]:
        """Chunks for a stream that ended before its terminator (see ``EventParser.eof``)."""
        if self._reason is not None:
            # The answer is complete (its reason arrived); only the terminator is missing.
            return self._finish()
        self.done = True
        return [
            Finish(
                reason=ErrorFinish(
                    code="TRANSPORT",
                    message=f"{self.provider}: the stream was truncated: it ended after "
                    f"{self._events} events without {self.terminator}",
                )
            )
        ]


__all__ = ["StreamState"]
