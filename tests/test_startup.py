"""What ``import agentloop_nb`` loads: the core, and nothing that only some programs use.

Each check runs a fresh interpreter (``sys.modules`` of this test process holds whatever other
tests imported). The optional parts (YAML configuration files, MCP, PostgreSQL, Dask, the HTTP
providers, the notebook layer, the invariant companion) are imported when first used; the
pydantic models build their validators on first use.
"""

from __future__ import annotations

from _startup_helpers import loaded_among, run_fresh

# Third-party packages only some programs need, the notebook layer's, and standard-library
# modules only an error message needs.
LAZY_PACKAGES = (
    "yaml",
    "mcp",
    "psycopg",
    "distributed",
    "dask",
    "httpx",
    "IPython",
    "ipywidgets",
    "difflib",  # standard library, but only a misspelt name needs it (its suggestion)
)
# The package's own modules that load on first use.
LAZY_SUBMODULES = (
    "agentloop_nb.jupyter",
    "agentloop_nb.mcp",
    "agentloop_nb.session._postgres",
    "agentloop_nb._configfile",
    "agentloop_nb.llm.providers",
    "agentloop_nb.llm.openai",
    "agentloop_nb.llm.anthropic",
    "agentloop_nb.llm.offline",
    "agentloop_nb.plugins.dask",
    "agentloop_nb.plugins.invariants",
    "agentloop_nb.plugins.retry",
    "agentloop_nb.testing",
    "agentloop_nb._docgen",
    "agentloop_nb.events",  # the event catalogue: the writers import only the names
    "agentloop_nb._event_catalogue",  # its shapes and specs (``agentloop_nb.events`` loads it)
    "agentloop_nb._hook_catalogue",  # HOOKS: the dispatchers need only names and payloads
    # The JSONL backend (an App without persistence keeps no log), the session listing, the
    # repair of a resumed log and the fork plan: the root and ``session`` export them lazily.
    "agentloop_nb.session._jsonl",
    "agentloop_nb.session._jsonl_codec",
    "agentloop_nb.session._jsonl_io",
    "agentloop_nb.session._listing",
    "agentloop_nb.session._lock",
    "agentloop_nb.session._writebehind",
    "agentloop_nb.session._repair",
    "agentloop_nb.loop._fork",
    # GenerateOptions (a dataclass: its methods compile when the class is made): first request
    "agentloop_nb.llm._options",
    # Assembly (a dataclass) and its payload: the first assembly (a step) loads them
    "agentloop_nb._assembly",
    # What the first stream needs: the chunk models (a dozen pydantic classes), the assembler
    # that folds them, the stream guard with its finish constants, the providers' stream
    # mappings, and the request-error payload (its ``failure`` is a chunk model)
    *(
        "agentloop_nb.llm._chunks",
        "agentloop_nb.llm._assembler",
        "agentloop_nb.llm._guard",
        "agentloop_nb.llm._abort_watch",
        "agentloop_nb.llm._stream_state",
        "agentloop_nb.llm._openai_stream",
        "agentloop_nb.llm._anthropic_stream",
        "agentloop_nb._request_error",
        "agentloop_nb.session._chunklog",  # the session's log of a streaming response
    ),
    # The tool pipeline's phases and its decisions: the first tool call
    "agentloop_nb.tools._admit",
    "agentloop_nb.tools._dispatch",
    "agentloop_nb.tools._settle",
    "agentloop_nb.tools._hooks",
    "agentloop_nb.tools._verdicts",
    # The agent (its driver, inbox, turn state, the tool scheduler with its pool, the assistant
    # message's log form) and its usage ledger: the first agent an App creates
    "agentloop_nb.loop._agent",
    "agentloop_nb.loop._driver",
    "agentloop_nb.loop._inbox",
    "agentloop_nb.loop._state",
    "agentloop_nb.loop._scheduler",
    "agentloop_nb.loop._pool",
    "agentloop_nb.session._assistant_log",
    "agentloop_nb.usage",
    # ErrorReport (a pydantic model): made only for a contained failure somebody listens to
    "agentloop_nb._error_report",
    # What a tool definition needs (``tool``, ``Tool``, where bodies run), the execution record
    # with ``ToolResult`` (a pydantic model) and the result caps: the first tool defined or
    # called (``App()`` builds only the ``ToolRuntime`` and its registry)
    "agentloop_nb.tools._define",
    "agentloop_nb.tools._bodies",
    "agentloop_nb.tools._decisions",
    "agentloop_nb.tools._results",
    # The loop's decisions (four pydantic models on their base) with the ``agent/request``
    # payload, and the request path: the first agent (the bundled plugins that answer with a
    # decision import it where they answer; ``App()`` registers only the prompt variables)
    "agentloop_nb._step_decisions",
    "agentloop_nb._decision",
    "agentloop_nb.loop._request",
)


def test_importing_the_package_leaves_the_optional_parts_unloaded() -> None:
    modules = run_fresh("import sys, json, agentloop_nb; print(json.dumps(sorted(sys.modules)))")
    assert isinstance(modules, list)
    loaded = set(modules)
    assert "agentloop_nb.app" in loaded  # the check would pass vacuously on a failed import
    assert loaded_among(LAZY_PACKAGES, loaded) == []
    assert loaded_among(LAZY_SUBMODULES, loaded) == []


def test_importing_the_package_builds_no_pydantic_validator() -> None:
    # The import's own models (messages, configurations), then those of the modules that load
    # on first use (``ToolResult``, ``ErrorReport``, the stream chunks, the tool and the loop's
    # decisions) loaded on top: none builds a validator by being defined.
    code = (
        "import json, importlib, pydantic, agentloop_nb\n"
        "def walk(c):\n"
        "    for s in c.__subclasses__():\n"
        "        yield s\n"
        "        yield from walk(s)\n"
        "def ours():\n"
        "    return {c for c in walk(pydantic.BaseModel) if c.__module__.startswith('agentloop_nb')}\n"
        "at_import = len(ours())\n"
        "lazy = ('tools._decisions', '_error_report', 'llm._chunks', 'tools._verdicts',\n"
        "        '_step_decisions')\n"
        "for m in lazy:\n"
        "    importlib.import_module('agentloop_nb.' + m)\n"
        "built = sorted(c.__qualname__ for c in ours() if c.__pydantic_complete__)\n"
        "print(json.dumps([at_import, len(ours()), built]))\n"
    )
    result = run_fresh(code)
    assert isinstance(result, list)
    at_import, count, built = result
    assert at_import >= 15  # messages, configurations
    assert count > 40  # with the tool results, the decisions, the error report, the chunks
    assert built == []


def test_the_lazy_parts_load_when_used() -> None:
    code = (
        "import sys, json, tempfile, pathlib, asyncio\n"
        "import agentloop_nb\n"
        "from agentloop_nb import App, InvariantError\n"
        "from agentloop_nb.session import PostgresPersistence\n"
        "d = pathlib.Path(tempfile.mkdtemp())\n"
        "(d / 'app.yaml').write_text('max_parallel_tool_calls: 3\\n')\n"
        "app = App.from_file(d / 'app.yaml')\n"
        "mcp = app.ctx.mcp\n"
        "asyncio.run(app.aclose())\n"
        "print(json.dumps([app.config.max_parallel_tool_calls, type(mcp).__name__,\n"
        "    InvariantError.__module__, PostgresPersistence.__module__,\n"
        "    [m for m in ('yaml', 'agentloop_nb.mcp') if m in sys.modules]]))\n"
    )
    assert run_fresh(code) == [
        3,
        "MCPService",
        "agentloop_nb.plugins.invariants",
        "agentloop_nb.session._postgres",
        ["yaml", "agentloop_nb.mcp"],
    ]


def test_the_lazy_persistence_names_resolve_and_work_on_first_use() -> None:
    # ``dir()`` lists them before they load; the root's ``JsonlPersistence`` reports its public
    # path; a JSONL App writes, lists, resumes (repairing the log) and forks through them.
    code = (
        "import sys, json, tempfile, asyncio\n"
        "import agentloop_nb\n"
        "from agentloop_nb import session\n"
        "names = ['JsonlPersistence', 'list_sessions', 'repair', 'StoredSession',\n"
        "         'TOOL_OUTCOME_UNKNOWN']\n"
        "listed = ['JsonlPersistence' in dir(agentloop_nb)] + [n in dir(session) for n in names]\n"
        "from agentloop_nb import AgentOptions, App, JsonlPersistence\n"
        "async def main():\n"
        "    app = App(persistence=JsonlPersistence(tempfile.mkdtemp()))\n"
        "    options = AgentOptions(provider='offline', model='demo')\n"
        "    a = await app.agent_loop.acreate(session_id='s1', options=options)\n"
        "    a.agent.followup('hi')\n"
        "    await a.agent.when_idle()\n"
        "    await a.dispose()\n"
        "    b = await app.agent_loop.resume(session_id='s1')\n"
        "    c = await app.agent_loop.fork('s1', session_id='s2')\n"
        "    await c.agent.session.flush()  # the fork's log on disk before listing\n"
        "    ids = sorted(s.id for s in session.list_sessions(app.persistence))\n"
        "    kinds = [type(s).__name__ for s in session.list_sessions(app.persistence)]\n"
        "    out = [ids, kinds[0], b.agent.session.id, c.agent.session.id,\n"
        "           [e.type for e in c.agent.session.events if e.type == 'user/message']]\n"
        "    await app.aclose()\n"
        "    return out\n"
        "out = asyncio.run(main())\n"
        "print(json.dumps([listed, JsonlPersistence.__module__, session.repair.__module__,\n"
        "    session.TOOL_OUTCOME_UNKNOWN == 'TOOL_OUTCOME_UNKNOWN', *out]))\n"
    )
    assert run_fresh(code) == [
        [True, True, True, True, True, True],
        "agentloop_nb",
        "agentloop_nb.session._repair",
        True,
        ["s1", "s2"],
        "StoredSession",
        "s1",
        "s2",
        ["user/message"],
    ]


def test_generate_options_loads_with_the_first_request_or_access() -> None:
    # The loop's first request loads it; the root and ``agentloop_nb.llm`` resolve the same
    # class, which reports its public path and stays a dataclass (``dataclasses.replace``).
    code = (
        "import sys, json, asyncio, dataclasses\n"
        "from agentloop_nb import AgentOptions, App\n"
        "app = App()\n"
        "before = 'agentloop_nb.llm._options' in sys.modules\n"
        "async def main():\n"
        "    options = AgentOptions(provider='offline', model='demo')\n"
        "    agent = app.ctx.agent_loop.create('a', options)\n"
        "    agent.followup('hi')\n"
        "    await agent.when_idle()\n"
        "    await app.aclose()\n"
        "asyncio.run(main())\n"
        "after = 'agentloop_nb.llm._options' in sys.modules\n"
        "import agentloop_nb, agentloop_nb.llm as llm\n"
        "G = agentloop_nb.GenerateOptions\n"
        "copy = dataclasses.replace(G(provider='p', model='m'), model='n')\n"
        "print(json.dumps([before, after, G is llm.GenerateOptions, G.__module__,\n"
        "    copy.model, 'GenerateOptions' in dir(llm)]))\n"
    )
    assert run_fresh(code) == [False, True, True, "agentloop_nb", "n", True]


def test_the_assembly_loads_with_the_first_step_and_resolves_from_its_public_homes() -> None:
    # ``Assembly`` and ``AssemblePayload`` load with the first assembly, or when reached through
    # ``prompt`` / ``hooks``; their type hints resolve in ``agentloop_nb.prompt``.
    code = (
        "import sys, json, asyncio, typing, dataclasses\n"
        "from agentloop_nb import AgentOptions, App, hooks, prompt\n"
        "app = App()\n"
        "before = 'agentloop_nb._assembly' in sys.modules\n"
        "seen = []\n"
        "async def main():\n"
        "    options = AgentOptions(provider='offline', model='demo')\n"
        "    agent = app.ctx.agent_loop.create('a', options)\n"
        "    assembly = await app.ctx.system_prompt.assemble(agent)\n"
        "    seen.append(type(assembly).__name__)\n"
        "    await app.aclose()\n"
        "asyncio.run(main())\n"
        "after = 'agentloop_nb._assembly' in sys.modules\n"
        "A, P = prompt.Assembly, prompt.AssemblePayload\n"
        "hints = typing.get_type_hints(P)\n"
        "print(json.dumps([before, after, seen, hooks.AssemblePayload is P,\n"
        "    hints['assembly'] is A, A.__module__, dataclasses.is_dataclass(A),\n"
        "    'Assembly' in dir(prompt)]))\n"
    )
    assert run_fresh(code) == [
        False,
        True,
        ["Assembly"],
        True,
        True,
        "agentloop_nb.prompt",
        True,
        True,
    ]


def test_the_stream_chunks_load_with_the_first_stream_and_resolve_from_their_homes() -> None:
    # Neither the import nor ``App()`` (which builds the HTTP and offline adapters) makes the
    # chunk models; the first stream does. Every public name resolves from its documented home
    # to the one class: ``agentloop_nb.llm`` (attribute, ``from`` import, ``dir``), the root
    # (``Usage`` reporting its public path), the providers' stream mappings; the
    # ``agent/request-error`` payload's hints resolve to the chunk model; the assembler's
    # class-keyed dispatch folds chunks made through the public names.
    code = (
        "import sys, json, asyncio, typing\n"
        "from agentloop_nb import AgentOptions, App\n"
        "def chunked():\n"
        "    return [m for m in ('agentloop_nb.llm._chunks', 'agentloop_nb.llm._assembler',\n"
        "            'agentloop_nb.llm._guard', 'agentloop_nb.session._chunklog',\n"
        "            'agentloop_nb._request_error') if m in sys.modules]\n"
        "app = App()\n"
        "before = chunked()\n"
        "async def main():\n"
        "    agent = app.ctx.agent_loop.create('a', AgentOptions(provider='offline', model='m'))\n"
        "    agent.followup('what is 6*7')\n"
        "    await agent.when_idle()\n"
        "    [m] = [e.data['message'] for e in agent.session.events\n"
        "           if e.type == 'assistant/message']\n"
        "    await app.aclose()\n"
        "    return m['content'][0]['text']\n"
        "answer = asyncio.run(main())\n"
        "after = chunked()\n"
        "import agentloop_nb, agentloop_nb.llm as llm\n"
        "from agentloop_nb.llm import BlockAssembler, ErrorFinish, Finish, Stop, TextDelta\n"
        "from agentloop_nb.llm import _chunks\n"
        "from agentloop_nb.llm.openai import OpenAIStreamParser, usage_from_openai\n"
        "from agentloop_nb.llm.anthropic import AnthropicStreamParser\n"
        "from agentloop_nb import hooks\n"
        "same = all(getattr(llm, n) is getattr(_chunks, n) for n in\n"
        "    ('TextDelta', 'Finish', 'ErrorFinish', 'StreamChunk', 'CHUNK_ADAPTER', 'Usage'))\n"
        "hints = typing.get_type_hints(hooks.RequestErrorPayload)\n"
        "asm = BlockAssembler()\n"
        "for c in (TextDelta(index=0, text='a'), TextDelta(index=0, text='b'),\n"
        "          Finish(reason=Stop())):\n"
        "    asm.feed(c)\n"
        "print(json.dumps([before, after, answer, same, agentloop_nb.Usage is llm.Usage,\n"
        "    agentloop_nb.Usage.__module__, agentloop_nb.StreamChunk is llm.StreamChunk,\n"
        "    hints['failure'] is ErrorFinish,\n"
        "    hooks.HOOKS['agent/request-error'].payload is hooks.RequestErrorPayload,\n"
        "    asm.message().text, asm.finish.kind, 'TextDelta' in dir(llm),\n"
        "    usage_from_openai({'prompt_tokens': 2}).input_tokens,\n"
        "    [c.__name__ for c in (OpenAIStreamParser, AnthropicStreamParser)]]))\n"
    )
    assert run_fresh(code) == [
        [],
        [
            "agentloop_nb.llm._chunks",
            "agentloop_nb.llm._assembler",
            "agentloop_nb.llm._guard",
            "agentloop_nb.session._chunklog",
        ],
        "6*7 = 42",
        True,
        True,
        "agentloop_nb",
        True,
        True,
        True,
        "ab",
        "stop",
        True,
        2,
        ["OpenAIStreamParser", "AnthropicStreamParser"],
    ]


def test_a_failed_request_loads_its_payload_with_resolvable_hints() -> None:
    # The ``agent/request-error`` payload loads with the first failure and carries the
    # failure's ``ErrorFinish``; a listener sees it with the same class the names resolve to.
    code = (
        "import sys, json, asyncio, typing\n"
        "from agentloop_nb import AgentOptions, App\n"
        "app = App(retry=False)\n"
        "seen = []\n"
        "async def on_error(payload, next):\n"
        "    seen.append([type(payload).__name__, payload.failure.code,\n"
        "                 type(payload.failure) is typing.get_type_hints(type(payload))['failure']])\n"
        "    return await next()\n"
        "app.ctx.on('agent/request-error', on_error)\n"
        "async def main():\n"
        "    agent = app.ctx.agent_loop.create('a', AgentOptions(provider='nobody', model='m'))\n"
        "    agent.followup('hi')\n"
        "    await agent.when_idle()\n"
        "    await app.aclose()\n"
        "asyncio.run(main())\n"
        "print(json.dumps([seen, 'agentloop_nb._request_error' in sys.modules]))\n"
    )
    assert run_fresh(code) == [[["RequestErrorPayload", "NO_ADAPTER", True]], True]


def test_building_an_app_leaves_the_event_catalogue_and_tokenize_unbuilt() -> None:
    # The bundled plugins write events by name (the catalogue's shapes load with their first
    # use), and the loop's live settings take no builtin default factory (pydantic would read
    # its signature with ``tokenize``, compiling its large pattern).
    code = (
        "import sys, json, tokenize, asyncio, agentloop_nb\n"
        "app = agentloop_nb.App()\n"
        "before = ['agentloop_nb._event_catalogue' in sys.modules,\n"
        "          tokenize._compile.cache_info().currsize]\n"
        "from agentloop_nb import events\n"
        "spec = events.EVENTS[events.LLM_RETRY]\n"
        "asyncio.run(app.aclose())\n"
        "print(json.dumps([before, 'agentloop_nb._event_catalogue' in sys.modules,\n"
        "    spec.writer, events.LlmRetryData.__name__, 'EVENTS' in dir(events)]))\n"
    )
    assert run_fresh(code) == [[False, 0], True, "plugins.retry", "LlmRetryData", True]


def test_an_unknown_root_attribute_is_an_attribute_error() -> None:
    import agentloop_nb
    import agentloop_nb.events
    import agentloop_nb.session

    for module in (agentloop_nb, agentloop_nb.session, agentloop_nb.events):
        try:
            module.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
        except AttributeError as exc:
            assert "NoSuchName" in str(exc)
        else:
            raise AssertionError(f"{module.__name__}.NoSuchName resolved")


_SSE_SERVER = """
import http.server, threading
BODY = (
    b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hel"}}]}\\n\\n'
    b'data: {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}\\n\\n'
    b'data: [DONE]\\n\\n'
)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
URL = f"http://127.0.0.1:{server.server_address[1]}/v1"
"""


def test_the_first_request_loads_httpx_and_streams_through_it() -> None:
    # A fresh interpreter: httpx stays a lazy module until the adapter's first request, which
    # then streams a real answer over loopback HTTP through it.
    code = _SSE_SERVER + (
        "import sys, json, asyncio\n"
        "from agentloop_nb import App, AgentOptions\n"
        "app = App(providers={'local': {'type': 'openai', 'base_url': URL,\n"
        "                              'context_window': 4096}})\n"
        "def real():\n"
        "    m = sys.modules.get('httpx')\n"
        "    return m is not None and type(m).__name__ != '_LazyModule'\n"
        "before = real()\n"
        "async def main():\n"
        "    agent = app.ctx.agent_loop.create('a', AgentOptions(provider='local', model='m'))\n"
        "    agent.followup('hi')\n"
        "    await agent.when_idle()\n"
        "    [m] = [e.data['message'] for e in agent.session.events\n"
        "           if e.type == 'assistant/message']\n"
        "    adapter = app.ctx.llm.adapter_for('local')\n"
        "    await app.aclose()\n"
        "    await adapter.aclose()\n"
        "    return ''.join(b['text'] for b in m['content'])\n"
        "answer = asyncio.run(main())\n"
        "print(json.dumps([before, real(), answer]))\n"
    )
    assert run_fresh(code) == [False, True, "hello"]


def test_the_catalogues_load_on_first_use_and_name_the_same_objects() -> None:
    # ``agentloop_nb.events`` and ``hooks.HOOKS`` are not built by the import; reaching them
    # through the package loads them, and what the writers use is what they list.
    code = (
        "import sys, json, agentloop_nb\n"
        "from agentloop_nb import hooks, session\n"
        "before = [m in sys.modules for m in ('agentloop_nb.events',\n"
        "                                      'agentloop_nb._hook_catalogue')]\n"
        "events = agentloop_nb.events\n"
        "spec = hooks.HOOKS['agent/status']\n"
        "print(json.dumps([before, events.SURFACE_TYPES is session.SURFACE_TYPES,\n"
        "    spec.payload is hooks.StatusPayload, hooks.HookSpec.__name__,\n"
        "    sorted(n for n, s in events.EVENTS.items() if s.model_visible != 'no')]))\n"
    )
    assert run_fresh(code) == [
        [False, False],
        True,
        True,
        "HookSpec",
        ["assistant/message", "compaction/summary", "tool/result", "user/message"],
    ]
