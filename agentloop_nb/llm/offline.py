"""``OfflineModel``: a small deterministic demo model that needs no network and no key.

It is what the notebooks and Binder use by default, and it says so: its greeting and help
answers introduce it as the offline demo model, never as a real LLM.

Grammar (matched on the last user message, case-insensitive; tools are matched by name among
``options.tools``):

- **after tool results** (the conversation ends with tool results) → "The result is …"
  quoting the result (several results are listed by tool name; an error result is reported as
  such).
- **greeting** — ``hello``, ``hi``, ``hey`` → a greeting that says it is the offline demo model
  and lists what it understands.
- **arithmetic** — ``what is 2+3*4``, ``calculate 17 * 23``, ``compute (1+2)/3`` or a bare
  expression: with a tool named ``calculate``/``calculator``/``calc``/``evaluate``/``eval``/
  ``math``/``compute`` → a call passing the expression; with ``add``/``sum`` and an expression
  ``a + b`` → a call passing both numbers; without a matching tool it evaluates the expression
  itself (``+ - * / // % **``, parentheses).
- **time** — ``what time is it``, ``the time``, ``current date`` → a call to ``now``/``time``/
  ``get_time``/``current_time``/``get_current_time``/``clock``/``datetime``/``date``.
- **files** — ``list files [in DIR]``/``ls [DIR]`` → ``list_files``/``ls``/``list_dir``/
  ``list_directory``/``listdir``; ``read FILE`` → ``read_file``/``read``/``cat``/``open_file``.
- **echo** — ``echo TEXT`` → an ``echo`` tool call with TEXT (case preserved), or TEXT itself
  without the tool.
- **use** — ``use TOOL`` or ``use TOOL {"json": "arguments"}`` → a call to the offered tool
  named exactly TOOL (any tool, e.g. an MCP server's ``files__read``) with that JSON object
  (``{}`` when omitted); an unknown TOOL or arguments that are not a JSON object get an
  explanation instead.
- **kernel** (the notebook's kernel tools) — ``variables`` → ``list_variables()``;
  ``inspect NAME`` → ``inspect_variable(name=NAME)``; ``run: CODE`` (everything after ``run:``,
  leading blanks stripped, newlines kept) → ``run_python(code=CODE)``; ``history`` →
  ``notebook_history()``. Without the tool it says which tool it would need.
- **notebook** (the notebook tools; N is a position, 1 = first) — ``cells`` →
  ``list_cells()``; ``cell N`` → ``read_cell(cell=N)``; ``insert after N: CODE`` →
  ``insert_cell(after=N, source=CODE)``; ``replace N: CODE`` → ``replace_cell(cell=N,
  source=CODE)``; ``delete N`` → ``delete_cell(cell=N)``; ``run cell N`` →
  ``run_cell(cell=N)``. CODE is everything after the colon (a newline right after it is
  dropped, the rest kept). After a notebook tool's result it answers with one sentence about
  it (the cell it changed, the error a cell shows, ...).
- **fix** (error autopsies, ``%agent fix``) — a request starting with ``fix`` whose message
  carries an error autopsy (or, without one, after calling an offered ``read_error``): for a
  ``NameError``/``KeyError``/``AttributeError`` whose autopsy names a closest match, it
  replaces that name (key, attribute) in the cell's source with the match, then calls
  ``replace_cell`` + ``run_cell`` on the cell when both are offered and the cell has an id,
  otherwise ``run_python`` with the corrected code; anything else is explained and nothing is
  proposed. See :func:`fix_response`.
- anything else → an explanation of what it can do.

The phrase is read from the last text block of the last user message (earlier blocks, e.g.
variable summaries attached with ``%%agent NAME --with``, are context, not the request).

A tool call's arguments follow the tool's JSON schema: the value goes to the first ``string``
property (or the first ``number``/``integer`` one for numeric values); a tool without
properties gets ``{}``; an optional directory is passed only when the user named one (or the
property is required, then ``"."``). Call ids are deterministic (``offline-<n>``).

Streaming: a text answer is one text block streamed word by word (a text-delta per word); a
tool call is one tool-call block with the whole arguments in one delta. Every response ends
with a usage chunk (words in / words out) and exactly one finish. ``token_delay`` seconds are
slept between deltas (default 0.02 s so widgets show visible streaming; tests pass 0, and then
the model never awaits). Aborting ``options.signal`` ends the stream with ``Finish(Aborted())``
at the next delta.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from .._json import dumps_arguments
from .._lazyre import lazy_re
from ..errors import InvalidValueError
from ..messages import TextBlock, ToolResultMessage, UserMessage
from ._offline_fix import fix_response, trailing_results

if TYPE_CHECKING:
    from ._chunks import StreamChunk
    from ._options import GenerateOptions

INTRO = "I'm the offline demo model: a tiny deterministic stand-in for a real LLM (no network, no API key)."
HELP = (
    "I understand: 'hello', arithmetic such as 'what is 2+3*4', 'what time is it', "
    "'list files', 'read FILE', 'echo TEXT' and 'use TOOL {json}'; with tools offered I call "
    "the matching tool. "
    "Configure a real provider (e.g. OPENAI_API_KEY or ANTHROPIC_API_KEY) for real answers."
)

_CALC_TOOLS = ("calculate", "calculator", "calc", "evaluate", "eval", "math", "compute")
_ADD_TOOLS = ("add", "sum")
_TIME_TOOLS = (
    "now",
    "time",
    "get_time",
    "current_time",
    "get_current_time",
    "clock",
    "datetime",
    "date",
)
_LS_TOOLS = ("list_files", "ls", "list_dir", "list_directory", "listdir")
_READ_TOOLS = ("read_file", "read", "cat", "open_file")
_ECHO_TOOLS = ("echo",)

_GREETING = lazy_re(r"^\s*(hello|hi|hey|good (morning|afternoon|evening))\b", re.I)
_ARITH_INTENT = lazy_re(
    r"^\s*(?:what(?:'s| is)|calculate|compute|evaluate|how much is|solve)\s+(.+?)\s*[?.!]*\s*$",
    re.I,
)
_EXPR = lazy_re(r"^[\d\s.+\-*/%()]+$")
_TIME = lazy_re(
    r"\b(what time|the time|current time|time is it|what day|today's date|current date)\b", re.I
)
_LS = lazy_re(
    r"^\s*(?:please\s+)?(?:list(?: the)? files|ls|show(?: me)?(?: the)? files)(?:\s+(?:in\s+)?(\S+))?\s*[?.!]*\s*$",
    re.I,
)
_READ = lazy_re(
    r"^\s*(?:please\s+)?(?:read|cat|open|show me)\s+(?:the\s+)?(?:file\s+)?(\S+?)\s*[?.!]*\s*$",
    re.I,
)
_ECHO = lazy_re(r"^\s*echo\s+(.+?)\s*$", re.I | re.S)
_VARIABLES = lazy_re(r"^\s*(?:list\s+)?variables\s*[?.!]*\s*$", re.I)
_INSPECT = lazy_re(r"^\s*inspect\s+([A-Za-z_][\w.]*)\s*[?.!]*\s*$", re.I)
_RUN = lazy_re(r"^\s*run:[ \t]*\n?(.*)$", re.I | re.S)
_HISTORY = lazy_re(r"^\s*history\s*[?.!]*\s*$", re.I)
_WORD = lazy_re(r"\S+\s*|\s+")
_USE = lazy_re(r"^\s*use\s+([A-Za-z0-9_-]{1,64})(?:\s+(\{.*\}))?\s*[.!]*\s*$", re.I | re.S)

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def evaluate(expression: str) -> float | int:
    """Evaluate plain arithmetic (numbers, ``+ - * / // % **``, parentheses).

    Raises ``ValueError`` for anything else, for division by zero, and for powers too large to
    be a demo's business.
    """

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if isinstance(node.value, bool):
                raise InvalidValueError(f"not plain arithmetic: {expression!r}")
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise InvalidValueError("exponent too large")
            try:
                return _BINOPS[type(node.op)](left, right)
            except ZeroDivisionError:
                raise InvalidValueError("division by zero") from None
        raise InvalidValueError(f"not plain arithmetic: {expression!r}")

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise InvalidValueError(f"not plain arithmetic: {expression!r}") from None
    return ev(tree)


def _fmt(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def _arith(text: str) -> str | None:
    """The arithmetic expression the message asks for, if any."""
    match = _ARITH_INTENT.match(text)
    candidate = match.group(1) if match else text.strip().rstrip("?.!= ")
    candidate = (
        candidate.replace("×", "*").replace("x", "*")
        if re.search(r"\d\s*[x×]\s*\d", candidate)
        else candidate
    )
    if _EXPR.match(candidate) and re.search(r"\d", candidate) and re.search(r"[-+*/%]", candidate):
        return candidate.strip()
    return None


class OfflineModel:
    """The offline demo adapter (see the module docstring for its grammar)."""

    name = "offline"
    #: Nothing leaves the process (the default system prompt may name the working directory).
    is_local = True

    def __init__(self, *, token_delay: float = 0.02) -> None:
        if token_delay < 0:
            raise InvalidValueError(f"token_delay must be >= 0 seconds, got {token_delay!r}")
        self.token_delay = token_delay

    def __repr__(self) -> str:
        return f"OfflineModel(token_delay={self.token_delay!r})"

    async def aclose(self) -> None:
        """Nothing to release; present for symmetry with the HTTP adapters."""

    # -- decision -----------------------------------------------------------------------------

    def respond(
        self, options: GenerateOptions
    ) -> tuple[str, tuple[str, str, dict[str, Any]] | None]:
        """``(text, tool_call)`` the model answers with: the text (possibly empty) and an
        optional ``(call_id, tool_name, arguments)``. Pure and deterministic."""
        messages = list(options.messages)
        user = next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)
        said = _request_text(user)
        tools = {str(t.get("name")): t for t in options.tools}
        call_id = f"offline-{len(messages) + 1}"
        fixing = fix_response(messages, user, said, tools, call_id)
        if fixing is not None:
            return fixing
        results = trailing_results(messages)
        if results:
            answer = (
                notebook_answer(results)
                or variables_answer(results)
                or _answer_from_results(results)
            )
            return answer, None

        if _GREETING.match(said):
            return f"Hello! {INTRO} {HELP}", None

        kernel = notebook_call(said) or _kernel_call(said, tools)
        if kernel is not None:
            name, args = kernel
            if name in tools:
                return "", (call_id, name, args)
            plugin = "notebook_tools" if name in NOTEBOOK_TOOLS else "kernel_tools"
            return f"I would call '{name}', but it is not offered: use {plugin}. {INTRO}", None

        expression = _arith(said)
        if expression is not None:
            tool = _find(tools, _CALC_TOOLS)
            if tool is not None:
                return "", (call_id, tool["name"], _args_for(tool, expression))
            add = _find(tools, _ADD_TOOLS)
            pair = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*\+\s*(-?\d+(?:\.\d+)?)\s*", expression)
            if add is not None and pair:
                return "", (call_id, add["name"], _args_for_pair(add, pair.group(1), pair.group(2)))
            try:
                return f"{expression} = {_fmt(evaluate(expression))}", None
            except ValueError as exc:
                return f"I can't compute that: {exc}. {INTRO}", None

        if _TIME.search(said):
            tool = _find(tools, _TIME_TOOLS)
            if tool is not None:
                return "", (call_id, tool["name"], {})
            return (
                f"I have no clock: offer me a tool named 'now' or 'time' and I'll call it. {INTRO}",
                None,
            )

        ls = _LS.match(said)
        if ls:
            tool = _find(tools, _LS_TOOLS)
            if tool is not None:
                return "", (call_id, tool["name"], _args_for(tool, ls.group(1), optional=True))
            return f"I can't see any files: offer me a 'list_files' tool. {INTRO}", None

        read = _READ.match(said)
        if read:
            tool = _find(tools, _READ_TOOLS)
            if tool is not None:
                return "", (call_id, tool["name"], _args_for(tool, read.group(1)))
            return f"I can't read files: offer me a 'read_file' tool. {INTRO}", None

        echo = _ECHO.match(said)
        if echo:
            tool = _find(tools, _ECHO_TOOLS)
            if tool is not None:
                return "", (call_id, tool["name"], _args_for(tool, echo.group(1)))
            return echo.group(1), None

        use = _USE.match(said)
        if use:
            return _use(tools, use.group(1), use.group(2), call_id)

        if not said:
            return f"{INTRO} {HELP}", None
        return f"{INTRO} I don't understand {said[:80]!r}. {HELP}", None

    # -- streaming ----------------------------------------------------------------------------

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """Stream the answer (see the module docstring). Never raises; ends with one finish."""
        from ._chunks import (  # not at import: see ``_chunks``
            Aborted,
            BlockEnd,
            BlockStart,
            Finish,
            Stop,
            TextDelta,
            ToolCallDelta,
            ToolCalls,
            Usage,
            UsageChunk,
        )

        signal = options.signal
        text, call = self.respond(options)
        chunks: list[StreamChunk] = []
        index = 0
        words = _WORD.findall(text) if text else []
        if words:
            chunks.append(BlockStart(index=0, block_type="text"))
            chunks.extend(TextDelta(index=0, text=w) for w in words)
            chunks.append(BlockEnd(index=0))
            index = 1
        if call is not None:
            call_id, name, args = call
            chunks.append(BlockStart(index=index, block_type="tool-call"))
            chunks.append(
                ToolCallDelta(
                    index=index, id=call_id, name=name, arguments_delta=dumps_arguments(args)
                )
            )
            chunks.append(BlockEnd(index=index))
        usage = Usage(
            input_tokens=_count_words(options),
            output_tokens=max(1, len(words) + (1 if call else 0)),
        )
        chunks.append(UsageChunk(usage=usage))
        chunks.append(Finish(reason=ToolCalls() if call is not None else Stop()))

        delay = self.token_delay
        for chunk in chunks:
            if signal is not None and signal.aborted:
                yield Finish(reason=Aborted())
                return
            if delay and isinstance(chunk, TextDelta | ToolCallDelta):
                await anyio.sleep(delay)
                if signal is not None and signal.aborted:
                    yield Finish(reason=Aborted())
                    return
            yield chunk


# -- helpers ----------------------------------------------------------------------------------


def _use(
    tools: Mapping[str, Mapping[str, Any]], name: str, raw: str | None, call_id: str
) -> tuple[str, tuple[str, str, dict[str, Any]] | None]:
    """``use TOOL {json}``: call exactly that tool with that JSON object."""
    if name not in tools:
        offered = ", ".join(sorted(tools)) or "none"
        return f"I have no tool named {name!r} (offered: {offered}).", None
    try:
        args = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        return f"Those arguments are not JSON ({exc.msg}); write them as a JSON object.", None
    if not isinstance(args, dict):
        return 'The arguments must be a JSON object, like {"path": "README.md"}.', None
    return "", (call_id, name, args)


def _request_text(user: UserMessage | None) -> str:
    """The last text block of ``user`` (stripped): the request itself."""
    if user is None:
        return ""
    blocks = [b for b in user.content if isinstance(b, TextBlock)]
    return blocks[-1].text.strip() if blocks else ""


def _kernel_call(
    said: str, tools: Mapping[str, Mapping[str, Any]]
) -> tuple[str, dict[str, Any]] | None:
    """The kernel tool a pinned phrase asks for, with its arguments."""
    if _VARIABLES.match(said):
        return "list_variables", {}
    if _HISTORY.match(said):
        return "notebook_history", {}
    inspect = _INSPECT.match(said)
    if inspect:
        return "inspect_variable", {"name": inspect.group(1)}
    run = _RUN.match(said)
    if run:
        return "run_python", {"code": run.group(1).lstrip(" \t")}
    return None


# -- the notebook tools (``notebook_tools``): phrases and answers ------------------------------

NOTEBOOK_TOOLS = frozenset(
    {"list_cells", "read_cell", "insert_cell", "replace_cell", "delete_cell", "run_cell"}
)
_NB_CELLS = lazy_re(r"^\s*(?:list\s+(?:the\s+)?)?cells\s*[?.!]*\s*$", re.I)
_NB_READ = lazy_re(r"^\s*(?:read\s+)?cell\s+(\d+)\s*[?.!]*\s*$", re.I)
_NB_INSERT = lazy_re(r"^\s*insert\s+after\s+(\d+)\s*:[ \t]*\n?(.*)$", re.I | re.S)
_NB_REPLACE = lazy_re(r"^\s*replace\s+(?:cell\s+)?(\d+)\s*:[ \t]*\n?(.*)$", re.I | re.S)
_NB_DELETE = lazy_re(r"^\s*delete\s+(?:cell\s+)?(\d+)\s*[?.!]*\s*$", re.I)
_NB_RUN = lazy_re(r"^\s*run\s+cell\s+(\d+)\s*[?.!]*\s*$", re.I)
_NB_ERROR = lazy_re(r"^error: (.+)$", re.M)


def notebook_call(said: str) -> tuple[str, dict[str, Any]] | None:
    """The notebook tool a pinned phrase asks for, with its arguments (``None``: not one)."""
    if _NB_CELLS.match(said):
        return "list_cells", {}
    if m := _NB_READ.match(said):
        return "read_cell", {"cell": int(m.group(1))}
    if m := _NB_INSERT.match(said):
        return "insert_cell", {"after": int(m.group(1)), "source": m.group(2)}
    if m := _NB_REPLACE.match(said):
        return "replace_cell", {"cell": int(m.group(1)), "source": m.group(2)}
    if m := _NB_DELETE.match(said):
        return "delete_cell", {"cell": int(m.group(1))}
    if m := _NB_RUN.match(said):
        return "run_cell", {"cell": int(m.group(1))}
    return None


def notebook_answer(results: list[ToolResultMessage]) -> str | None:
    """One sentence about a notebook tool's result (``None`` unless every trailing result
    came from a notebook tool)."""
    if not results or any(r.name not in NOTEBOOK_TOOLS for r in results):
        return None
    sentences = []
    for r in results:
        text = r.text.strip()
        first = text.splitlines()[0] if text else "(no result)"
        if r.is_error:
            sentences.append(f"The notebook tool {r.name} failed: {first.removeprefix('Error: ')}")
            continue
        error = _NB_ERROR.search(text)
        shows = f"; it shows the error {error.group(1)}" if error else ""
        if r.name == "list_cells":
            sentences.append(f"I listed {first.rstrip(':')}")
        elif r.name == "read_cell":
            sentences.append(f"I read {first}{shows}")
        else:
            sentences.append(f"{first.rstrip('.:')}{shows}")
    return " ".join(s if s.endswith((".", "!", "?")) else s + "." for s in sentences)


_VARIABLE_LINE = lazy_re(r"^([A-Za-z_]\w*): (\S+)( \(secret: value hidden\))?")


def variables_answer(results: list[ToolResultMessage]) -> str | None:
    """A sentence about a ``list_variables`` result (``None`` unless that is the one trailing
    result): the names with their types, the secret ones last and said to be hidden."""
    if len(results) != 1 or results[0].name != "list_variables" or results[0].is_error:
        return None
    plain: list[str] = []
    secret: list[str] = []
    for line in results[0].text.strip().splitlines():
        m = _VARIABLE_LINE.match(line)
        if m is None:
            continue
        (secret if m.group(3) else plain).append(f"{m.group(1)} ({m.group(2)})")
    if not plain and not secret:
        return "The notebook has no variables of its own yet."
    sentence = ""
    if plain:
        many = len(plain) > 1
        sentence = f"The notebook has {len(plain)} variable{'s' if many else ''}: {_and(plain)}."
    if secret:
        lead = " Also " if plain else "The notebook has "
        hidden = "their values are" if len(secret) > 1 else "its value is"
        like = "look like secrets" if len(secret) > 1 else "looks like a secret"
        sentence += f"{lead}{_and(secret)}, which {like}: {hidden} hidden."
    return sentence.strip()


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _answer_from_results(results: list[ToolResultMessage]) -> str:
    def first_line(r: ToolResultMessage) -> str:
        # One line: the first one, saying how many more there were.
        lines = r.text.strip().splitlines()
        if not lines:
            return ""
        more = len(lines) - 1
        return lines[0] + (f" (and {more} more line{'s' if more > 1 else ''})" if more else "")

    def one(r: ToolResultMessage) -> str:
        content = first_line(r) or "(empty)"
        return f"the tool reported an error: {content}" if r.is_error else content

    if len(results) == 1:
        r = results[0]
        if r.is_error:
            return f"The tool call failed: {first_line(r) or '(no message)'}"
        return f"The result is {one(r)}"
    listed = "; ".join(f"{r.name or r.call_id}: {one(r)}" for r in results)
    return f"The results are: {listed}"


def _find(tools: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> Mapping[str, Any] | None:
    lowered = {name.lower(): tool for name, tool in tools.items()}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


def _properties(tool: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    schema = tool.get("parameters") or {}
    props = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    return (dict(props) if isinstance(props, Mapping) else {}), required


def _args_for(
    tool: Mapping[str, Any], value: str | None, *, optional: bool = False
) -> dict[str, Any]:
    """Arguments for a one-value tool, following its schema's property names and types."""
    props, required = _properties(tool)
    if not props:
        return {}
    string_prop = next(
        (
            n
            for n, p in props.items()
            if not isinstance(p, Mapping) or p.get("type") in (None, "string")
        ),
        None,
    )
    if optional and value is None:
        return {string_prop: "."} if string_prop is not None and string_prop in required else {}
    if string_prop is not None:
        return {string_prop: value if value is not None else ""}
    number_prop = next(
        (n for n, p in props.items() if p.get("type") in ("number", "integer")), None
    )
    if number_prop is not None and value is not None:
        try:
            return {number_prop: evaluate(value)}
        except ValueError:
            pass
    return {}


def _args_for_pair(tool: Mapping[str, Any], a: str, b: str) -> dict[str, Any]:
    props, _ = _properties(tool)
    numeric = [
        n
        for n, p in props.items()
        if isinstance(p, Mapping) and p.get("type") in ("number", "integer")
    ]
    names = numeric[:2] if len(numeric) >= 2 else list(props)[:2]
    if len(names) < 2:
        names = ["a", "b"]
    return {names[0]: json.loads(a), names[1]: json.loads(b)}


def _count_words(options: GenerateOptions) -> int:
    total = len((options.system or "").split())
    for m in options.messages:
        total += len(m.text.split())
    return max(1, total)


__all__ = [
    "HELP",
    "INTRO",
    "NOTEBOOK_TOOLS",
    "OfflineModel",
    "evaluate",
    "notebook_answer",
    "notebook_call",
    "variables_answer",
]
