"""Every exception the package raises on purpose is an ``AgentloopError`` and still the
built-in it always was; a source walk keeps it so."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentloop_nb
from agentloop_nb import (
    AgentloopError,
    App,
    InvalidTypeError,
    InvalidValueError,
    MissingDependencyError,
    NotFoundError,
    UsageError,
)
from agentloop_nb.session import JsonlPersistence, SessionExistsError, SessionHeader

PACKAGE = Path(agentloop_nb.__file__).parent
BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)

# The places that raise a built-in exception as is, by category. Python's protocols need exactly
# these, or the exception never leaves the package.
ATTRIBUTE = "attribute lookup: hasattr/getattr/from-import expect AttributeError exactly"
IMMUTABLE = "a frozen object's __setattr__/__delattr__/__setitem__: the built-in, as frozen dataclasses and mappingproxy do"
ABSTRACT = "abstract method: NotImplementedError is the convention for 'a subclass defines this'"
PROTOCOL = (
    "control flow Python defines: end of async iteration, Ctrl-C, a script's exit, a failed import"
)
GROUP = "an ExceptionGroup only carries the listeners' own exceptions"
PYDANTIC = "pydantic validator: pydantic re-raises it inside its own ValidationError (a ValueError)"
INTERNAL = "caught and reported on the spot; never reaches a caller"

ALLOWED: dict[tuple[str, str, str], str] = {
    ("__init__.py", "__getattr__", "AttributeError"): ATTRIBUTE,
    ("_lazy.py", "LazyExports.load", "AttributeError"): ATTRIBUTE,  # packages' __getattr__
    ("hooks.py", "__getattr__", "AttributeError"): ATTRIBUTE,
    ("context.py", "__getattr__", "AttributeError"): ATTRIBUTE,  # the lazy ErrorReport
    ("prompt.py", "__getattr__", "AttributeError"): ATTRIBUTE,
    ("llm/openai.py", "__getattr__", "AttributeError"): ATTRIBUTE,  # the lazy stream mapping
    ("llm/anthropic.py", "__getattr__", "AttributeError"): ATTRIBUTE,
    ("context.py", "Context.__getattr__", "AttributeError"): ATTRIBUTE,
    ("context.py", "Context._service", "AttributeError"): ATTRIBUTE,  # behind ctx.<name>
    ("_scoped.py", "BoundView.__getattr__", "AttributeError"): ATTRIBUTE,
    ("mcp/_server.py", "MCPServer.__setattr__", "AttributeError"): IMMUTABLE,
    ("session/_events.py", "_frozen_setattr", "AttributeError"): IMMUTABLE,
    ("session/_events.py", "_frozen_delattr", "AttributeError"): IMMUTABLE,
    ("session/_frozen.py", "FrozenDict._immutable", "TypeError"): IMMUTABLE,
    ("llm/_sse.py", "SseAdapter.build_body", "NotImplementedError"): ABSTRACT,
    ("llm/_sse.py", "SseAdapter._endpoint", "NotImplementedError"): ABSTRACT,
    ("llm/_sse.py", "SseAdapter._parser", "NotImplementedError"): ABSTRACT,
    ("llm/_sse.py", "SseAdapter._auth_headers", "NotImplementedError"): ABSTRACT,
    ("llm/_stream_state.py", "StreamState._close_open_blocks", "NotImplementedError"): ABSTRACT,
    ("llm/_stream_state.py", "StreamState._final_usage", "NotImplementedError"): ABSTRACT,
    ("session/_writebehind.py", "_Control.run", "NotImplementedError"): ABSTRACT,
    ("session/_writebehind.py", "WriteBehind._store_header", "NotImplementedError"): ABSTRACT,
    ("session/_writebehind.py", "WriteBehind._store_events", "NotImplementedError"): ABSTRACT,
    ("session/_writebehind.py", "WriteBehind._failure", "NotImplementedError"): ABSTRACT,
    ("session/_writebehind.py", "WriteBehind._on_created", "NotImplementedError"): ABSTRACT,
    ("llm/_runtime.py", "_closed", "StopAsyncIteration"): PROTOCOL,
    ("jupyter/kernel/_run_code.py", "_interruptible.handler", "KeyboardInterrupt"): PROTOCOL,
    ("_docgen.py", "<module>", "SystemExit"): PROTOCOL,
    # stands in for the `import` statement it defers
    ("llm/_http.py", "_lazy_module", "ModuleNotFoundError"): PROTOCOL,
    ("_bus.py", "Bus.parallel", "ExceptionGroup"): GROUP,
    ("app.py", "AppConfig._check_persistence_url", "ValueError"): PYDANTIC,
    ("loop/_config.py", "AgentConfig._exclusive_ids", "ValueError"): PYDANTIC,
    # wrapped into the session's PersistenceError by the write-behind worker
    ("session/_postgres.py", "PostgresPersistence._connection", "ConnectionError"): INTERNAL,
    # its text reaches the model as "TypeError: finalize_content returned ..."
    ("tools/_settle.py", "_finalize", "TypeError"): INTERNAL,
}


def builtin_raises(path: Path) -> Iterator[tuple[str, str, int]]:
    """``(function, built-in name, line)`` for each built-in exception ``path`` raises or
    builds (``raise ValueError(...)``, ``raise KeyError``, ``report(..., RuntimeError(...))``);
    ``function`` is the dotted path of the enclosing defs, ``<module>`` at the top level."""

    def walk(node: ast.AST, scope: tuple[str, ...]) -> Iterator[tuple[str, str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from walk(child, (*scope, child.name))
                continue
            target = None
            if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Name):
                target = child.exc
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                target = child.func
            if target is not None and target.id in BUILTIN_EXCEPTIONS:
                yield ".".join(scope) or "<module>", target.id, child.lineno
            yield from walk(child, scope)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), ())


def test_the_package_raises_no_bare_built_in_exception_outside_the_allow_list() -> None:
    seen: set[tuple[str, str, str]] = set()
    strays: list[str] = []
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 100  # the walk really reached the package
    for path in files:
        rel = path.relative_to(PACKAGE).as_posix()
        for function, name, line in builtin_raises(path):
            key = (rel, function, name)
            if key in ALLOWED:
                seen.add(key)
            else:
                strays.append(f"{rel}:{line} {function}: {name}")
    assert strays == [], (
        "raise one of agentloop_nb's errors (InvalidValueError, InvalidTypeError, UsageError, "
        "NotFoundError, MissingDependencyError or a more specific one) instead of the bare "
        f"built-in, or add the place to ALLOWED with its reason: {strays}"
    )
    assert sorted(set(ALLOWED) - seen) == [], "stale ALLOWED entries"


def test_the_walk_finds_a_bare_raise_a_bare_name_and_a_built_exception(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "class A:\n"
        "    def f(self):\n"
        "        raise ValueError('x')\n"
        "def g():\n"
        "    raise KeyError\n"
        "def h(report):\n"
        "    report(RuntimeError('y'))\n"
        "    raise\n"
        "def i():\n"
        "    raise InvalidValueError('z')\n",
        encoding="utf-8",
    )
    assert list(builtin_raises(source)) == [
        ("A.f", "ValueError", 3),
        ("g", "KeyError", 5),
        ("h", "RuntimeError", 7),
    ]


@pytest.mark.parametrize(
    ("leaf", "builtin"),
    [
        (InvalidValueError, ValueError),
        (InvalidTypeError, TypeError),
        (UsageError, RuntimeError),
        (NotFoundError, KeyError),
        (NotFoundError, LookupError),
        (MissingDependencyError, ImportError),
        (SessionExistsError, FileExistsError),
    ],
)
def test_each_leaf_is_both_an_agentloop_error_and_its_built_in(
    leaf: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(leaf, AgentloopError)
    assert issubclass(leaf, builtin)


def test_a_not_found_error_shows_its_message_unquoted_and_keeps_its_args() -> None:
    error = NotFoundError("no MCP server named 'x' is connected")
    assert str(error) == "no MCP server named 'x' is connected"
    assert error.args == ("no MCP server named 'x' is connected",)


@pytest.mark.anyio
async def test_an_unknown_keyword_to_create_is_an_agentloop_type_error_naming_it(app: App) -> None:
    with pytest.raises(AgentloopError, match=r"unexpected keyword argument 'optoins'") as info:
        app.agent_loop.create("a", optoins={})
    assert isinstance(info.value, TypeError)
    assert "did you mean options=?" in str(info.value)


@pytest.mark.anyio
async def test_a_tool_name_registered_twice_is_an_agentloop_value_error_naming_it(app: App) -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    app.ctx.tools.register(ping)
    with pytest.raises(ValueError, match="tool 'ping' is already registered") as info:
        app.ctx.tools.register(ping)
    assert isinstance(info.value, AgentloopError)


@pytest.mark.anyio
async def test_removing_an_unknown_mcp_server_is_an_agentloop_key_error_naming_it(app: App) -> None:
    with pytest.raises(KeyError) as info:
        app.ctx.mcp.remove("nowhere")
    assert isinstance(info.value, AgentloopError)
    assert str(info.value) == "no MCP server named 'nowhere' is connected"


def test_creating_a_stored_session_again_is_an_agentloop_file_exists_error(
    tmp_path: Path,
) -> None:
    store = JsonlPersistence(tmp_path)
    store.create(SessionHeader("s1", created_at=1.0))
    with pytest.raises(FileExistsError, match="session 's1' is already stored at") as info:
        store.create(SessionHeader("s1", created_at=2.0))
    assert isinstance(info.value, SessionExistsError)
    assert isinstance(info.value, AgentloopError)


@pytest.mark.anyio
async def test_creating_an_agent_on_a_closed_app_is_an_agentloop_runtime_error() -> None:
    app = App()
    await app.aclose()
    with pytest.raises(RuntimeError, match="the agent loop is closed") as info:
        app.agent_loop.create("a")
    assert isinstance(info.value, AgentloopError)
    assert "build a new App" in str(info.value)
