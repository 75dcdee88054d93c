"""Reading an App configuration file (TOML or YAML) defensively.

A configuration file is input from outside the program: it may be huge, malformed or hostile
(a YAML "billion laughs" alias bomb is a few hundred bytes). This module reads at most
``MAX_BYTES``, refuses YAML aliases and tags (configuration never needs them), bounds nesting,
and names the file in every error.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import yaml

from .errors import AgentloopError

MAX_BYTES = 1 << 20  # 1 MiB: far more than any real App configuration
MAX_DEPTH = 32


class ConfigFileError(ValueError, AgentloopError):
    """A configuration file cannot be used; the message names the file and the problem."""


class _NoAliasLoader(yaml.SafeLoader):
    """``SafeLoader`` that rejects anchors/aliases: they are what makes alias bombs possible."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"YAML aliases are not allowed in a configuration file (line "
                f"{event.start_mark.line + 1}): write the value out instead"
            )
        return super().compose_node(parent, index)


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping stored in a ``.toml``, ``.yaml`` or ``.yml`` file.

    Raises :class:`ConfigFileError` (a ``ValueError``) naming the file for: another extension, a
    missing or unreadable file, a file over 1 MiB, a syntax error, YAML aliases, nesting deeper
    than 32 levels, or a top level that is not a mapping.
    """
    p = Path(path)
    if p.suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigFileError(f"cannot read config {p}: use a .toml, .yaml or .yml file")
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigFileError(f"cannot read config {p}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigFileError(
            f"config {p} is larger than {MAX_BYTES // 1024} KiB; an App configuration is small: "
            "is this the right file?"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(
            f"config {p} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    data = _parse(p, text)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"config {p} must hold a mapping of App settings at its top level, "
            f"got {type(data).__name__}"
        )
    _check_depth(p, data, 0)
    return data


def _parse(p: Path, text: str) -> Any:
    try:
        if p.suffix == ".toml":
            return tomllib.loads(text)
        return yaml.load(text, Loader=_NoAliasLoader)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, RecursionError) as exc:
        detail = "nesting is too deep" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigFileError(f"config {p} is not valid {p.suffix[1:].upper()}: {detail}") from None


def _check_depth(p: Path, value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ConfigFileError(f"config {p} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for v in value.values():
            _check_depth(p, v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_depth(p, v, depth + 1)
