"""``MCPServer``: how to reach one MCP tool server (a command over stdio, or a URL)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidValueError

__all__ = ["MCPServer"]

# The server name prefixes tool names (``f"{server}__{tool}"``), which providers restrict.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


class MCPServer:
    """One MCP server: ``MCPServer(name, command=[...], env=None, cwd=None)`` starts a process
    and speaks MCP over its stdin/stdout; ``MCPServer(name, url=..., headers=None)`` talks
    streamable HTTP to a running server.

    ``name`` (1-40 letters, digits, ``_`` or ``-``) names the server in errors and prefixes its
    tools. ``env`` is merged over the SDK's safe default environment (``PATH``, ``HOME``, ...),
    not over this process's whole environment. ``startup_timeout`` bounds the handshake and the
    first tool listing (seconds). Immutable; the value is only a description, nothing starts
    until ``ctx.mcp.connect``.

    Raises ``ValueError`` for a bad name, both or neither of ``command``/``url``, an empty
    command, or a non-positive timeout.
    """

    __slots__ = ("command", "cwd", "env", "headers", "name", "startup_timeout", "url")

    name: str
    command: tuple[str, ...] | None
    env: Mapping[str, str] | None
    cwd: str | None
    url: str | None
    headers: Mapping[str, str] | None
    startup_timeout: float

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidValueError(
                f"invalid MCP server name {name!r}: use 1-40 letters, digits, '_' or '-' "
                "(it prefixes the tool names)"
            )
        if (command is None) == (url is None):
            raise InvalidValueError(
                f"MCP server {name!r}: give exactly one of command=[...] or url=..."
            )
        if command is not None:
            if (
                isinstance(command, str)
                or not command
                or not all(isinstance(part, str) for part in command)
            ):
                raise InvalidValueError(
                    f"MCP server {name!r}: command must be a non-empty list of strings, "
                    f"got {command!r}"
                )
            if url is None and headers is not None:
                raise InvalidValueError(f"MCP server {name!r}: headers apply to url= servers only")
        elif env is not None or cwd is not None:
            raise InvalidValueError(
                f"MCP server {name!r}: env and cwd apply to command= servers only"
            )
        if not startup_timeout > 0:
            raise InvalidValueError(f"MCP server {name!r}: startup_timeout must be positive")
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "command", tuple(command) if command is not None else None)
        set_(self, "env", dict(env) if env is not None else None)
        set_(self, "cwd", os.fspath(cwd) if cwd is not None else None)
        set_(self, "url", url)
        set_(self, "headers", dict(headers) if headers is not None else None)
        set_(self, "startup_timeout", float(startup_timeout))

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """A one-line description for listings (never shows ``env`` or ``headers`` values,
        which may carry secrets)."""
        if self.command is not None:
            return " ".join(self.command)
        return str(self.url)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("MCPServer is immutable")

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, {self.transport}: {self.describe()!r})"
