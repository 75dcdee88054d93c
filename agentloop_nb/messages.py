"""Message and content-block models shared by the session log, the loop and the providers.

Every model here is a small frozen pydantic model with a literal discriminator, so a message
can round-trip through the JSON session log (``model_dump(mode="json")`` /
``MESSAGE_ADAPTER.validate_python``) without loss.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Frozen(BaseModel):
    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class TextBlock(_Frozen):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ReasoningBlock(_Frozen):
    """Model reasoning ("thinking"). ``signature`` is the provider's opaque integrity token
    (Anthropic), which must be sent back unchanged with the block."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None


class ToolCallBlock(_Frozen):
    """A tool call requested by the model. ``arguments`` stays the raw JSON string the model
    produced (it may be invalid JSON; the loop turns that into an ``INVALID_ARGS`` result)."""

    type: Literal["tool-call"] = "tool-call"
    id: str
    name: str
    arguments: str = ""


class ImageBlock(_Frozen):
    """An inline image, base64 encoded."""

    type: Literal["image"] = "image"
    media_type: str
    data: str


ContentBlock = Annotated[
    TextBlock | ReasoningBlock | ToolCallBlock | ImageBlock, Field(discriminator="type")
]


class UserMessage(_Frozen):
    """Input from a person, a steering plugin or injected context. ``source`` says who sent it,
    e.g. ``{"kind": "user"}``, ``{"kind": "steer"}`` or ``{"kind": "tool-context", ...}``."""

    role: Literal["user"] = "user"
    id: str
    content: tuple[ContentBlock, ...]
    source: dict[str, Any] = Field(default_factory=lambda: {"kind": "user"})

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


class AssistantMessage(_Frozen):
    """What the model answered in one step."""

    role: Literal["assistant"] = "assistant"
    content: tuple[ContentBlock, ...] = ()

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def reasoning(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, ReasoningBlock))

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        # Exact classes first: ``isinstance`` on a pydantic model is an ABC check, and the
        # loop asks once a step (benchmarks/README.md "Step (session 11)").
        return tuple(
            [
                b
                for b in self.content
                if type(b) is ToolCallBlock
                or (type(b) not in _NOT_CALLS and isinstance(b, ToolCallBlock))
            ]
        )


# The exact block classes that are not tool calls (a subclass of one is checked as usual).
_NOT_CALLS = frozenset({TextBlock, ReasoningBlock, ImageBlock})

#: A block of a tool result's content: text or an image.
ToolResultBlock = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultMessage(_Frozen):
    """The result of one tool call, paired with the assistant's call by ``call_id``.

    ``content`` is a string, or blocks (text and images) when the tool returned images."""

    role: Literal["tool"] = "tool"
    call_id: str
    name: str | None = None
    content: str | tuple[ToolResultBlock, ...]
    is_error: bool = False

    @property
    def text(self) -> str:
        """The content's text (the string itself, or the text blocks joined)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def images(self) -> tuple[ImageBlock, ...]:
        """The content's image blocks (none for a string content)."""
        if isinstance(self.content, str):
            return ()
        return tuple(b for b in self.content if isinstance(b, ImageBlock))


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]

# Built on first validation, not at import (start-up cost).
_DEFER = ConfigDict(defer_build=True)
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message, config=_DEFER)
CONTENT_ADAPTER: TypeAdapter[tuple[ContentBlock, ...]] = TypeAdapter(
    tuple[ContentBlock, ...], config=_DEFER
)

__all__ = [
    "CONTENT_ADAPTER",
    "MESSAGE_ADAPTER",
    "AssistantMessage",
    "ContentBlock",
    "ImageBlock",
    "Message",
    "ReasoningBlock",
    "TextBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ToolResultMessage",
    "UserMessage",
]
