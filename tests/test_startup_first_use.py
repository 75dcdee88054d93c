"""Parts of the core that load with their first use, not with ``import agentloop_nb``: the agent
(with its driver, inbox, turn state and tool scheduler) and the ``internal/error`` report.

Each check runs a fresh interpreter: ``sys.modules`` of this test process holds whatever other
tests imported.
"""

from __future__ import annotations

import json
import subprocess
import sys


def _run(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_agent_loads_with_the_first_agent_and_the_loop_finds_none_before() -> None:
    # Before any agent exists the loop's ``get`` / ``list`` answer "none" without loading the
    # agent's module; the first creation loads it and both find the agent; every public home
    # resolves the same class, which reports its public path.
    code = (
        "import sys, json, asyncio\n"
        "from agentloop_nb import AgentOptions, App\n"
        "M = ('agentloop_nb.loop._agent', 'agentloop_nb.loop._driver',\n"
        "     'agentloop_nb.loop._scheduler', 'agentloop_nb.usage')\n"
        "app = App()\n"
        "loop = app.ctx.agent_loop\n"
        "empty = [loop.get('a'), loop.list()]\n"
        "before = [m for m in M if m in sys.modules]\n"
        "async def main():\n"
        "    agent = loop.create('a', AgentOptions(provider='offline', model='demo'))\n"
        "    agent.followup('hi')\n"
        "    await agent.when_idle()\n"
        "    found = [loop.get(agent.id) is agent, loop.list() == [agent], agent.status]\n"
        "    await app.aclose()\n"
        "    return found\n"
        "found = asyncio.run(main())\n"
        "after = [m for m in M if m in sys.modules]\n"
        "import agentloop_nb, agentloop_nb.loop as lp, agentloop_nb.usage as usage\n"
        "same = [agentloop_nb.Agent is lp.Agent, agentloop_nb.AgentTurnError is lp.AgentTurnError,\n"
        "        agentloop_nb.UsageTotals is usage.UsageTotals]\n"
        "paths = [agentloop_nb.Agent.__module__, lp.AgentTurnError.__module__,\n"
        "         usage.UsageTotals.__module__]\n"
        "print(json.dumps([empty, before, found, after, same, paths,\n"
        "    'Agent' in dir(lp), 'UsageTotals' in dir(agentloop_nb)]))\n"
    )
    assert _run(code) == [
        [None, []],
        [],
        [True, True, "idle"],
        list(
            (
                "agentloop_nb.loop._agent",
                "agentloop_nb.loop._driver",
                "agentloop_nb.loop._scheduler",
                "agentloop_nb.usage",
            )
        ),
        [True, True, True],
        ["agentloop_nb", "agentloop_nb", "agentloop_nb"],
        True,
        True,
    ]


def test_the_error_report_loads_with_the_first_reported_failure() -> None:
    # A contained failure nobody listens to reports nothing and loads nothing; with an
    # ``internal/error`` listener the report is made (its module loads then) and ``context``
    # and ``hooks`` resolve the same class.
    code = (
        "import sys, json\n"
        "from agentloop_nb import Context\n"
        "M = 'agentloop_nb._error_report'\n"
        "ctx = Context()\n"
        "def bad(p):\n"
        "    raise ValueError('boom')\n"
        "ctx.on('e', bad)\n"
        "ctx.emit('e', None)\n"
        "unheard = M in sys.modules\n"
        "reports = []\n"
        "ctx.on('internal/error', reports.append)\n"
        "ctx.emit('e', None)\n"
        "from agentloop_nb import context, hooks\n"
        "R = context.ErrorReport\n"
        "print(json.dumps([unheard, M in sys.modules, [type(r).__name__ for r in reports],\n"
        "    reports[0].event, isinstance(reports[0], R), hooks.ErrorReport is R, R.__module__]))\n"
    )
    assert _run(code) == [
        False,
        True,
        ["ErrorReport"],
        "e",
        True,
        True,
        "agentloop_nb.context",
    ]


def test_tool_definitions_load_with_the_first_tool_and_resolve_from_every_home() -> None:
    # ``App()`` builds the ``ToolRuntime`` without the tool machinery; the first registration
    # loads the definitions, the first call runs through the pipeline as ever; the root,
    # ``tools`` and ``hooks`` resolve the same classes, which report their public paths.
    code = (
        "import sys, json, asyncio\n"
        "from agentloop_nb import App\n"
        "M = ('agentloop_nb.tools._define', 'agentloop_nb.tools._bodies',\n"
        "     'agentloop_nb.tools._decisions', 'agentloop_nb.tools._results')\n"
        "app = App()\n"
        "tools = app.ctx.tools\n"
        "before = [m for m in M if m in sys.modules]\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
        "tools.register(add)\n"
        "registered = [m for m in M if m in sys.modules]\n"
        "class Call:\n"
        "    id, name, arguments = 'c1', 'add', '{\"a\": 2, \"b\": 3}'\n"
        "async def main():\n"
        "    execution = tools.new_execution(Call())\n"
        "    mode = tools.execution_mode(execution)\n"
        "    result = await tools.execute(execution)\n"
        "    await app.aclose()\n"
        "    return [mode, result.content, result.is_error]\n"
        "ran = asyncio.run(main())\n"
        "import agentloop_nb, agentloop_nb.tools as t, agentloop_nb.hooks as h\n"
        "same = [agentloop_nb.Tool is t.Tool, agentloop_nb.tool is t.tool,\n"
        "        agentloop_nb.ToolResult is t.ToolResult, h.ToolExecution is t.ToolExecution,\n"
        "        agentloop_nb.ToolExecution is t.ToolExecution]\n"
        "paths = sorted({c.__module__ for c in (t.Tool, t.tool, t.ToolResult, t.ToolExecution)})\n"
        "print(json.dumps([before, registered, ran, same, paths, t.DENIED, 'tool' in dir(t)]))\n"
    )
    assert _run(code) == [
        [],
        [
            "agentloop_nb.tools._define",
            "agentloop_nb.tools._bodies",
            "agentloop_nb.tools._decisions",
        ],
        ["exclusive", "5", False],
        [True, True, True, True, True],
        ["agentloop_nb"],
        "DENIED",
        True,
    ]


def test_the_loop_decisions_load_with_the_first_agent_and_resolve_from_every_home() -> None:
    # ``App()`` (with its bundled retry and compaction plugins) loads neither the decisions nor
    # the request path; the first agent's step does. Every home gives the same classes, which
    # report their public path; the ``agent/request`` payload's hints resolve in its module.
    code = (
        "import sys, json, asyncio, typing\n"
        "from agentloop_nb import AgentOptions, App\n"
        "M = ('agentloop_nb._step_decisions', 'agentloop_nb.loop._request')\n"
        "app = App()\n"
        "before = [m for m in M if m in sys.modules]\n"
        "async def main():\n"
        "    agent = app.ctx.agent_loop.create('a', AgentOptions(provider='offline', model='demo'))\n"
        "    agent.followup('hi')\n"
        "    await agent.when_idle()\n"
        "    await app.aclose()\n"
        "asyncio.run(main())\n"
        "after = [m for m in M if m in sys.modules]\n"
        "import agentloop_nb, agentloop_nb.loop as lp, agentloop_nb.hooks as h\n"
        "names = ('Enter', 'Reject', 'Retry', 'RequestConfig')\n"
        "same = [getattr(agentloop_nb, n) is getattr(lp, n) is getattr(h, n) for n in names]\n"
        "paths = sorted({getattr(h, n).__module__ for n in names})\n"
        "hints = typing.get_type_hints(h.RequestPayload)\n"
        "print(json.dumps([before, after, same, paths, hints['config'] is h.RequestConfig,\n"
        "    h.Retry() == h.Retry(), 'Enter' in dir(lp)]))\n"
    )
    assert _run(code) == [
        [],
        ["agentloop_nb._step_decisions", "agentloop_nb.loop._request"],
        [True, True, True, True],
        ["agentloop_nb"],
        True,
        True,
        True,
    ]
