"""``LlmError``: the one exception type the LLM runtime raises."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AgentloopError

if TYPE_CHECKING:
    from ._chunks import ErrorFinish


class LlmError(AgentloopError):
    """A model-call failure with a stable ``code`` (the error-finish codes), e.g. ``RATE_LIMIT``,
    ``NO_ADAPTER`` or ``DUPLICATE_ADAPTER``. ``status`` is the HTTP status when there was one;
    ``retry_after`` is the server's requested delay in seconds."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after

    def to_finish(self) -> ErrorFinish:
        # the chunk models load with the first stream, which is where a finish is made
        from ._chunks import ErrorFinish

        return ErrorFinish(
            message=self.message, code=self.code, status=self.status, retry_after=self.retry_after
        )

    @classmethod
    def from_finish(cls, finish: ErrorFinish) -> LlmError:
        return cls(
            finish.code, finish.message, status=finish.status, retry_after=finish.retry_after
        )
