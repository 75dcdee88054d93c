"""The messages a notebook front end sends over the comm ``agentloop.notebook``, as pydantic
models (docs/notebook-bridge.md is the contract).

Everything that arrives from the front end is parsed with these before it is acted on:
:func:`parse_front_message` for the messages on an open comm, :class:`Hello` for the comm's
open data, and the ``*Result`` models for what a response carries per op. Extra fields are
ignored (a newer front end may send more); missing or mistyped fields fail validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from ...errors import InvalidValueError

PROTOCOL = 1
COMM_TARGET = "agentloop.notebook"
READY_TARGET = "agentloop.notebook.ready"

ErrorCode = Literal[
    "conflict", "not-found", "bad-request", "busy", "internal", "disconnected", "timeout"
]
OPS = ("snapshot", "insert", "replace", "delete", "run")


class _Message(BaseModel):
    # Built at import, unlike the core's models: deferring them broke the "Fix with agent" round
    # trip in the browser (docs/architecture.md, "Start-up"). Only a kernel imports this module
    # at %load_ext (the bridge needs a comm); a terminal IPython never does.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Hello(_Message):
    """The comm's open data: which notebook this front end shows."""

    type: Literal["hello"]
    protocol: int
    path: str = Field(max_length=4096)
    client: str = Field(default="", max_length=200)


class ErrorBody(_Message):
    code: Literal["conflict", "not-found", "bad-request", "busy", "internal"]
    message: str


class Response(_Message):
    """The one answer to a request: ``result`` when ``ok``, else ``error``."""

    type: Literal["response"]
    id: str = Field(min_length=1, max_length=200)
    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorBody | None = None

    @model_validator(mode="after")
    def _result_or_error(self) -> Response:
        if self.ok and self.result is None:
            raise InvalidValueError("an ok response needs a result object")
        if not self.ok and self.error is None:
            raise InvalidValueError("a failed response needs an error {code, message}")
        return self


class CellRef(_Message):
    """A part of the notebook the user attached to a prompt."""

    cell_id: str
    position: int | None = None
    lines: tuple[int, int] | None = None
    output: int | None = None
    text: str = ""


class FixAction(_Message):
    """The "Fix with agent" button under an error output of cell ``cell_id``."""

    type: Literal["action"]
    action: Literal["fix"]
    cell_id: str = Field(min_length=1)
    agent: str = ""


class PromptAction(_Message):
    """The Agents panel's prompt box."""

    type: Literal["action"]
    action: Literal["prompt"]
    agent: str
    mode: Literal["followup", "steer", "inject"] = "followup"
    text: str
    refs: list[CellRef] = Field(default_factory=list)


class CancelAction(_Message):
    type: Literal["action"]
    action: Literal["cancel"]
    agent: str


class CreateAction(_Message):
    type: Literal["action"]
    action: Literal["create"]


class ListAction(_Message):
    type: Literal["action"]
    action: Literal["list"]


Action = Annotated[
    FixAction | PromptAction | CancelAction | CreateAction | ListAction,
    Field(discriminator="action"),
]
FrontMessage = Annotated[Response | Action, Field(discriminator="type")]
_FRONT = TypeAdapter[Response | Action](FrontMessage)


def parse_front_message(data: Any) -> Response | Action:
    """Validate one message from the front end; raises ``pydantic.ValidationError``."""
    return _FRONT.validate_python(data)


# -- results, per op ----------------------------------------------------------------------------


class CellInfo(_Message):
    """One cell as the front end describes it."""

    id: str
    cell_type: Literal["code", "markdown", "raw"]
    source: str
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    execution_count: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: Literal["idle", "running", "queued"] = "idle"
    editing: bool = False


class SnapshotResult(_Message):
    path: str
    cells: list[CellInfo]


class CellResult(_Message):
    cell: CellInfo


class RunResult(_Message):
    cell: CellInfo
    finished: bool


class EmptyResult(_Message):
    pass


RESULTS: Mapping[str, type[_Message]] = MappingProxyType(
    {
        "snapshot": SnapshotResult,
        "insert": CellResult,
        "replace": CellResult,
        "delete": EmptyResult,
        "run": RunResult,
    }
)

__all__ = [
    "COMM_TARGET",
    "OPS",
    "PROTOCOL",
    "READY_TARGET",
    "Action",
    "CancelAction",
    "CellInfo",
    "CellRef",
    "CreateAction",
    "ErrorCode",
    "FixAction",
    "Hello",
    "ListAction",
    "PromptAction",
    "Response",
    "parse_front_message",
]
