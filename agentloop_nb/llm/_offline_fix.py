"""The offline model's ``fix`` command: a corrected cell from an error autopsy.

Kept apart from the other commands of :mod:`.offline` because it reads another module's text
format: the autopsy that ``%agent fix`` sends (``agentloop_nb/jupyter/kernel/_autopsy.py``:
``Autopsy.render`` — the ``Error autopsy of cell [N] (id ID): ...`` title, the ``missing: ...``
line of ``Missing.line`` and the fenced ``source:`` block). Deterministic: for a
``NameError``/``KeyError``/``AttributeError`` whose autopsy names a closest match, the misspelt
name (key, attribute) is replaced by that match where the source spells it; anything else is
explained and nothing is proposed.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Mapping, Sequence
from typing import Any

from .._lazyre import lazy_re
from ..messages import Message, TextBlock, ToolResultMessage, UserMessage

__all__ = ["fix_response", "trailing_results"]

_FIX = lazy_re(r"^\s*fix\b", re.I)
_AUTOPSY = lazy_re(
    r"^Error autopsy of cell \[[^\]]*\](?: \(id (?P<id>[^)\s]+)\))?: (?P<exc>.*)$", re.M
)
_MISSING = lazy_re(
    r"^missing: (?P<kind>name|key|attribute) (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r" — not among (?P<among>.*?); closest: (?P<closest>.*)$",
    re.M,
)
_SOURCE = lazy_re(r"^source:\n```python\n(?P<src>.*?)\n```$", re.M | re.S)
_CELL_PROPS = ("cell", "cell_id", "id", "position", "index")
_SOURCE_PROPS = ("source", "new_source", "code", "text")
_Call = tuple[str, str, dict[str, Any]]


def fix_response(
    messages: Sequence[Message],
    user: UserMessage | None,
    said: str,
    tools: Mapping[str, Mapping[str, Any]],
    call_id: str,
) -> tuple[str, _Call | None] | None:
    """The ``fix`` command's answer, or ``None`` when the request is not ``fix`` (or the fix
    is done and the normal answer to the last tool result applies). Pure and deterministic."""
    if not _FIX.match(said):
        return None
    results = trailing_results(messages)
    autopsy = _autopsy_in(user)
    if results:
        last = results[-1]
        if last.name == "replace_cell" and not last.is_error:
            cell = _last_call_arguments(messages, "replace_cell").get("cell_arg")
            run = tools.get("run_cell")
            if run is not None and cell is not None:
                return "", (call_id, "run_cell", {_prop(run, _CELL_PROPS, 0): cell})
            return None
        if last.name == "read_error" and not last.is_error and autopsy is None:
            autopsy = last.text
        else:
            return None
    if autopsy is None:
        if "read_error" in tools:
            return "", (call_id, "read_error", {})
        return (
            "There is no error autopsy to work from: run %agent fix NAME after a cell fails "
            "(or offer me read_error).",
            None,
        )
    return _propose(autopsy, tools, call_id)


def _autopsy_in(user: UserMessage | None) -> str | None:
    if user is None:
        return None
    for block in user.content:
        if isinstance(block, TextBlock) and _AUTOPSY.search(block.text):
            return block.text
    return None


def _last_call_arguments(messages: Sequence[Message], tool: str) -> dict[str, Any]:
    """The arguments of the last ``tool`` call, plus ``cell_arg`` (its cell value)."""
    for m in reversed(messages):
        for block in getattr(m, "content", ()) or ():
            if getattr(block, "type", None) == "tool-call" and block.name == tool:
                try:
                    args = json.loads(block.arguments or "{}")
                except json.JSONDecodeError:
                    return {}
                if not isinstance(args, dict):
                    return {}
                cell = next((args[k] for k in _CELL_PROPS if k in args), None)
                return {**args, "cell_arg": cell}
    return {}


def _prop(tool: Mapping[str, Any], preferred: Sequence[str], fallback: int) -> str:
    """The tool's property named like one of ``preferred``, else its ``fallback``-th one."""
    names = _property_names(tool)
    for name in preferred:
        if name in names:
            return name
    return names[fallback] if fallback < len(names) else preferred[0]


def _propose(
    autopsy: str, tools: Mapping[str, Mapping[str, Any]], call_id: str
) -> tuple[str, _Call | None]:
    head = _AUTOPSY.search(autopsy)
    error = head["exc"] if head else "an error"
    missing = _MISSING.search(autopsy)
    source = _SOURCE.search(autopsy)
    nothing = (
        f"The cell failed with {error}. I only fix a misspelt name, key or attribute that has "
        "a close match, so I propose nothing."
    )
    if missing is None or source is None or missing["closest"].strip() == "none":
        return nothing, None
    try:
        name = ast.literal_eval(missing["name"])
        closest = ast.literal_eval(f"[{missing['closest']}]")
    except (ValueError, SyntaxError):
        return nothing, None
    if not closest or not isinstance(name, str) or not isinstance(closest[0], str):
        return nothing, None
    kind, best = missing["kind"], closest[0]
    fixed = _replace_in_source(source["src"], kind, name, best)
    if fixed is None:
        return (
            f"The cell failed with {error}: {kind} {name!r} looks like a typo for {best!r}, but "
            "it is not spelt in the cell itself, so I propose nothing.",
            None,
        )
    text = (
        f"The {kind} {name!r} does not exist; the closest among {missing['among']} is "
        f"{best!r}. Corrected cell:\n```python\n{fixed}\n```"
    )
    cell_id = head["id"] if head else None
    replace, run = tools.get("replace_cell"), tools.get("run_cell")
    if replace is not None and run is not None and cell_id:
        args = {_prop(replace, _CELL_PROPS, 0): cell_id, _prop(replace, _SOURCE_PROPS, 1): fixed}
        return text, (call_id, "replace_cell", args)
    if "run_python" in tools:
        return text, (call_id, "run_python", {"code": fixed})
    return text + "\nOffer me run_python (or replace_cell and run_cell) to apply it.", None


def _replace_in_source(source: str, kind: str, name: str, best: str) -> str | None:
    """``source`` with ``name`` replaced by ``best`` where it is spelt as that kind: a bare
    name (not after a dot), an attribute (after a dot) or a string key; ``None`` if nowhere."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    previous: tokenize.TokenInfo | None = None
    for tok in tokens:
        after_dot = previous is not None and previous.type == tokenize.OP and previous.string == "."
        if tok.type == tokenize.NAME and tok.string == name:
            if (kind == "name" and not after_dot) or (kind == "attribute" and after_dot):
                edits.append((tok.start, tok.end, best))
        elif kind == "key" and tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):
                value = None
            if value == name:
                quote = tok.string[-1]
                literal = f"{quote}{best}{quote}" if quote not in best else repr(best)
                edits.append((tok.start, tok.end, literal))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    if not edits:
        return None
    lines = source.splitlines(keepends=True)
    for (row, col), (end_row, end_col), text in reversed(edits):
        if row != end_row:
            continue  # a multi-line string: left alone
        line = lines[row - 1]
        lines[row - 1] = line[:col] + text + line[end_col:]
    return "".join(lines)


def trailing_results(messages: Sequence[Message]) -> list[ToolResultMessage]:
    """The tool results that end the conversation, in order."""
    results: list[ToolResultMessage] = []
    for m in reversed(messages):
        if not isinstance(m, ToolResultMessage):
            break
        results.append(m)
    results.reverse()
    return results


def _property_names(tool: Mapping[str, Any]) -> list[str]:
    props = (tool.get("parameters") or {}).get("properties") or {}
    return list(props) if isinstance(props, Mapping) else []
