"""What ``%load_ext agentloop_nb`` loads: the notebook layer's rooms a fresh extension uses, and
the ones that load with their first use (each check runs a fresh interpreter)."""

from __future__ import annotations

import importlib

import pytest
from _startup_helpers import loaded_among, run_fresh

# The notebook layer's rooms a freshly loaded extension does not use: the widgets (ipywidgets),
# the event fold, the notebook tools and the bridge's message models, the "Fix with agent"
# flow, and every magic sub-command (they load with the first ``%agent`` line). The kernel
# memory (its hooks record cells from the load on), the interrupt hook, the notebook provider
# and the public ``kernel_tools`` do load.
LOAD_EXT_LAZY = (
    "ipywidgets",
    "anywidget",
    "markdown_it",
    "importlib.metadata",  # pydantic's plugin discovery: no validator is built at %load_ext
    "difflib",  # the "did you mean" of a misspelt name or keyword only
    "agentloop_nb._event_catalogue",  # the plugins the App installs write events by name
    "agentloop_nb.llm._options",  # the App's adapters name GenerateOptions only for checkers
    "agentloop_nb._assembly",  # the App registers sections; the first step assembles
    "agentloop_nb.llm._chunks",  # the App's adapters make chunks only when they stream
    "agentloop_nb.llm._assembler",
    "agentloop_nb.llm._guard",
    "agentloop_nb.llm._stream_state",
    "agentloop_nb.llm._openai_stream",
    "agentloop_nb.llm._anthropic_stream",
    "agentloop_nb._request_error",
    "agentloop_nb.session._chunklog",
    "agentloop_nb.jupyter.fold._feed",
    "agentloop_nb.jupyter.fold._transcript",
    "agentloop_nb.jupyter.fold._render",
    "agentloop_nb.jupyter.view._agentview",
    "agentloop_nb.jupyter.view._sessionview",
    "agentloop_nb.jupyter.view._pool",
    "agentloop_nb.jupyter.view._prompt",
    "agentloop_nb.jupyter.notebook._bridge",
    "agentloop_nb.jupyter.notebook._messages",
    "agentloop_nb.jupyter.notebook._tools",
    "agentloop_nb.jupyter._fixflow",
    "agentloop_nb.jupyter.magics._fix",
    "agentloop_nb.jupyter.magics._panel",
    "agentloop_nb.jupyter.magics._notebook",
    "agentloop_nb.jupyter.magics._kernel",
    "agentloop_nb.jupyter.magics._sessions",
)

_LOAD_EXT = (
    "import sys, json, os, tempfile, pydantic\n"
    "os.chdir(tempfile.mkdtemp())\n"
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "shell = InteractiveShell.instance()\n"
    "shell.run_line_magic('load_ext', 'agentloop_nb')\n"
    "def walk(c):\n"
    "    for s in c.__subclasses__():\n"
    "        yield s\n"
    "        yield from walk(s)\n"
    "built = sorted(c.__qualname__ for c in walk(pydantic.BaseModel)\n"
    "               if c.__module__.startswith('agentloop_nb') and c.__pydantic_complete__)\n"
    "loaded = sorted(m for m, v in sys.modules.items() if type(v).__name__ != '_LazyModule')\n"
)


def test_load_ext_loads_only_what_a_fresh_extension_uses() -> None:
    code = _LOAD_EXT + (
        "ctx = shell.user_ns['ctx']\n"
        "print(json.dumps([loaded, built, type(ctx).__name__, sorted(shell.magics_manager\n"
        "    .magics['line']), sorted(shell.magics_manager.magics['cell'])]))\n"
    )
    loaded, built, ctx, line, cell = run_fresh(code)  # type: ignore[misc]
    assert "agentloop_nb.jupyter._state" in loaded and ctx == "Context"  # it did load
    assert "agent" in line and {"agent", "plugin"} <= set(cell)
    assert loaded_among(LOAD_EXT_LAZY, set(loaded)) == []
    assert built == []


def test_load_ext_builds_no_dataclass_but_the_notebook_cell_values() -> None:
    # ``dataclass`` compiles each class's methods from source at import (about 3.9 M
    # instructions a class): the notebook layer's values %load_ext imports are Records or
    # slotted classes. ``Cell`` and ``RunResult`` stay dataclasses: a user's tool may return
    # them, and a tool result is serialised by pydantic, which writes a dataclass as an object.
    code = _LOAD_EXT + (
        "found = sorted(f'{m}.{k}' for m, v in list(sys.modules.items())\n"
        "               if m.startswith('agentloop_nb.jupyter') and type(v).__name__ != '_LazyModule'\n"
        "               for k, c in vars(v).items()\n"
        "               if isinstance(c, type) and c.__module__ == m\n"
        "               and '__dataclass_fields__' in vars(c))\n"
        "print(json.dumps(found))\n"
    )
    assert run_fresh(code) == [
        "agentloop_nb.jupyter.notebook._document.Cell",
        "agentloop_nb.jupyter.notebook._document.RunResult",
    ]


def test_the_deferred_rooms_load_with_the_first_agent_command() -> None:
    # What %load_ext left out is there when used: the magics' parser and sub-commands, the
    # agent's view with its widgets, and the validators of the options it was created with.
    code = _LOAD_EXT + (
        "shell.run_line_magic('agent', 'create bot')\n"
        "shell.run_line_magic('agent', 'show bot')\n"
        "after = set(sys.modules)\n"
        "print(json.dumps([sorted(m for m in after if m not in loaded),\n"
        "                  type(shell.user_ns['bot']).__name__]))\n"
    )
    new, bot = run_fresh(code)  # type: ignore[misc]
    assert bot == "Agent"
    assert {
        "ipywidgets",
        "agentloop_nb.jupyter.magics._panel",
        "agentloop_nb.jupyter.view._agentview",
        "agentloop_nb.jupyter.fold._feed",
    } <= set(new)


@pytest.mark.parametrize(
    "package",
    [
        "agentloop_nb.jupyter",
        "agentloop_nb.jupyter.fold",
        "agentloop_nb.jupyter.kernel",
        "agentloop_nb.jupyter.magics",
        "agentloop_nb.jupyter.notebook",
        "agentloop_nb.jupyter.view",
    ],
)
def test_a_lazy_package_exports_what_it_lists(package: str) -> None:
    # ``__all__``, the lazy table and the names resolve alike (the type checkers' imports
    # under TYPE_CHECKING name the same modules); a name not exported is an AttributeError.
    module = importlib.import_module(package)
    assert sorted(module.__all__) == module._EXPORTS.names()
    for name in module.__all__:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError, match="NoSuchName"):
        module.NoSuchName  # noqa: B018


def test_the_jupyter_functions_named_like_a_room_stay_functions() -> None:
    # ``agentloop_nb.jupyter.view`` and ``.notebook`` are the functions of the kernel state even
    # after the rooms of the same names load (a first submodule import rebinds its name).
    code = (
        "import json, agentloop_nb.jupyter as J\n"
        "before = [callable(J.view), callable(J.notebook)]\n"
        "import agentloop_nb.jupyter.view._agentview, agentloop_nb.jupyter.notebook._tools\n"
        "print(json.dumps(before + [J.view.__module__, J.notebook.__module__]))\n"
    )
    assert run_fresh(code) == [
        True,
        True,
        "agentloop_nb.jupyter._state",
        "agentloop_nb.jupyter._state",
    ]


def test_load_ext_leaves_http_anywidget_and_markdown_for_their_first_use() -> None:
    # The App builds its HTTP adapters at %load_ext, but httpx loads with the first request;
    # anywidget with the first view, markdown-it with the first answer shown.
    code = (
        "import sys, json, os, tempfile\n"
        "os.chdir(tempfile.mkdtemp())\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_line_magic('load_ext', 'agentloop_nb')\n"
        "def real(name):\n"
        "    m = sys.modules.get(name)\n"
        "    return m is not None and type(m).__name__ != '_LazyModule'\n"
        "names = ('httpx', 'httpx_sse', 'anywidget', 'markdown_it')\n"
        "before = [n for n in names if real(n)]\n"
        "import agentloop_nb.jupyter as J\n"
        "from agentloop_nb.jupyter.fold._markdown import markdown_html\n"
        "html = markdown_html('**6*7**')\n"
        "box = J.PromptBox()\n"
        "after = [n for n in names if real(n)]\n"
        "print(json.dumps([before, after, html, type(box).__name__]))\n"
    )
    before, after, html, box = run_fresh(code)  # type: ignore[misc]
    assert before == []
    assert after == ["anywidget", "markdown_it"]
    assert html == "<p><strong>6*7</strong></p>\n" and box == "PromptBox"
