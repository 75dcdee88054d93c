"""``ErrorReport``, the ``internal/error`` payload: made only when a contained listener or
teardown failure has a listener to report to, so it loads then (or at its first access through
:mod:`agentloop_nb.context` or :mod:`agentloop_nb.hooks`), not with ``import agentloop_nb``
(a pydantic model class costs its build at import)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ErrorReport(BaseModel):
    """Payload of ``internal/error``: a contained listener or teardown failure.

    ``event`` is the dispatched event name (``fiber/dispose`` for teardown errors), ``handler``
    the failing callable's ``repr`` and ``error`` the exception.
    """

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    type: Literal["internal/error"] = "internal/error"
    event: str
    handler: str
    error: Exception


# Its public home (reprs, docs), as before it had a module of its own.
ErrorReport.__module__ = "agentloop_nb.context"

__all__ = ["ErrorReport"]
