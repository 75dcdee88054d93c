"""MCP servers over stdio through ``ctx.mcp``: a real server process (the SDK's own server
class, tests/_mcp_server.py) driven through full agent turns with the ScriptedModel."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import data, new_agent, run
from _mcp_helpers import WAIT, alive, command, wait_dead, wait_file

from agentloop_nb.app import App
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.offline import OfflineModel
from agentloop_nb.loop import AgentOptions
from agentloop_nb.mcp import MCPConnectError, MCPServer
from agentloop_nb.messages import TextBlock, ToolResultMessage, UserMessage
from agentloop_nb.testing import combine, text, tool_call

pytestmark = pytest.mark.anyio


def server(name: str = "t", mode: str = "stdio") -> MCPServer:
    return MCPServer(name, command=command(mode))


def results(agent: Any) -> list[dict[str, Any]]:
    return data(agent, "tool/result")


async def test_agent_calls_an_mcp_tool_and_reads_its_text() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        agent, model = new_agent(
            app, tool_call("c1", "t__add", {"a": 2, "b": 3}), text("five"), id="a"
        )
        await run(agent)
        (result,) = results(agent)
        assert result["content"] == "5" and not result["is_error"]
        assert "t__add" in [t["name"] for t in model.requests[0].tools]
        assert agent.session.derive_messages()[-1].text == "five"


async def test_tools_carry_the_server_schema_and_read_only_hint() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        add = app.ctx.tools.lookup("t__add")
        assert add.parameters["required"] == ["a", "b"]
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert app.ctx.tools.lookup("t__echo").concurrency_safe is True
        assert add.concurrency_safe is False


async def test_image_results_reach_the_model_as_image_blocks_and_is_error_is_tool_error() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        agent, model = new_agent(
            app,
            combine(tool_call("c1", "t__image", {}), tool_call("c2", "t__fail", {"reason": "x"})),
            text("done"),
        )
        await run(agent)
        image, fail = results(agent)
        caption, block = image["content"]
        assert caption == {"type": "text", "text": "a pixel"}
        assert block["type"] == "image" and block["media_type"] == "image/png"
        assert block["data"].startswith("iVBOR")
        assert image["meta"] == {"mcp": {"server": "t", "tool": "image"}}
        assert fail["is_error"] and fail["error"]["code"] == "TOOL_ERROR"
        sent = [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)]
        assert sent[0].text == "a pixel" and sent[0].images[0].data == block["data"]
        assert sent[1].images == ()


async def test_disposing_the_connection_unregisters_tools_and_ends_the_process() -> None:
    async with App() as app:
        dispose = await app.ctx.mcp.connect(server())
        pid = int((await app.ctx.mcp.get("t").call("pid", {})).content)
        assert alive(pid)
        await dispose()
        assert app.ctx.tools.lookup("t__pid") is None
        assert app.ctx.mcp.get("t") is None
        assert not alive(pid)


async def test_disposing_the_scope_or_rerunning_the_plugin_closes_the_server() -> None:
    async with App() as app:
        pids: list[int] = []

        def cell(ctx: Any, _config: Any) -> None:
            ctx.mcp.start(server("cell"))

        for _ in range(2):
            fiber = app.ctx.plugin(cell, name="mcp-cell")  # a re-run replaces the scope
            connection = app.ctx.mcp.get("cell")
            await connection.ready()
            pids.append(int((await connection.call("pid", {})).content))
        await wait_dead(pids[0])  # the old scope's async teardown runs in the background
        assert alive(pids[1])
        await fiber.aclose()
        assert not alive(pids[1])
        assert app.ctx.tools.lookup("cell__pid") is None


async def test_app_close_ends_every_server_process() -> None:
    app = App()
    await app.ctx.mcp.connect(server("one"))
    await app.ctx.mcp.connect(server("two"))
    pids = [int((await c.call("pid", {})).content) for c in app.ctx.mcp.list()]
    await app.aclose()
    assert [alive(p) for p in pids] == [False, False]


async def test_a_server_killed_mid_call_yields_an_error_result_and_the_turn_goes_on() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        agent, _ = new_agent(
            app, tool_call("c1", "t__crash", {}), text("it crashed"), text("still here")
        )
        await run(agent)
        (result,) = results(agent)
        assert result["is_error"] and result["error"]["code"] == "TOOL_ERROR"
        assert "'t'" in result["content"] and "closed the connection" in result["content"]
        assert agent.session.derive_messages()[-1].text == "it crashed"
        await run(agent, "again")
        assert agent.session.derive_messages()[-1].text == "still here"
        assert app.ctx.mcp.get("t").state == "failed"


async def test_cancelling_the_turn_sends_the_mcp_cancellation(tmp_path: Path) -> None:
    marker = str(tmp_path / "wait")
    async with App() as app:
        await app.ctx.mcp.connect(server())
        agent, _ = new_agent(app, tool_call("c1", "t__wait", {"marker": marker}), text("after"))
        agent.followup("go")
        await wait_file(Path(marker + ".started"))
        agent.cancel()
        with anyio.fail_after(WAIT):
            await agent.when_idle()
        assert await wait_file(Path(marker + ".cancelled")) == "cancelled"
        (result,) = results(agent)
        assert result["is_error"] and result["error"]["code"] == "ABORTED"
        assert app.ctx.mcp.get("t").state == "ready"  # the session survives a cancelled call


async def test_tools_list_changed_refreshes_the_tools() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        connection = app.ctx.mcp.get("t")
        assert "t__bonus" not in connection.tools
        agent, _ = new_agent(
            app,
            tool_call("c1", "t__grow", {}),
            text("grown"),
            tool_call("c2", "t__bonus", {}),
            text("ok"),
        )
        await run(agent)
        with anyio.fail_after(WAIT):
            await connection.wait_for_tools(lambda tools: "t__bonus" in tools)
        await run(agent, "use it")
        assert [r["content"] for r in results(agent)] == ["grown", "bonus!"]


async def test_tools_for_one_agent_are_invisible_to_others() -> None:
    async with App() as app:
        agent, _ = new_agent(app, text("x"), id="a")
        other = app.ctx.agent_loop.create("b", agent.options)
        await app.ctx.mcp.connect(server(), agent=agent.id)
        assert app.ctx.tools.lookup("t__add", agent) is not None
        assert app.ctx.tools.lookup("t__add", other) is None
        assert app.ctx.tools.lookup("t__add") is None


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (["/nonexistent/mcp-server-binary"], "cannot start"),
        (command("die"), "refuses to start"),
        (command("garbage"), "does not speak MCP"),
    ],
    ids=["missing-command", "exits-at-startup", "speaks-garbage"],
)
async def test_a_server_that_cannot_start_is_a_clear_error_naming_it(
    cmd: list[str], expected: str
) -> None:
    async with App() as app:
        with anyio.fail_after(WAIT), pytest.raises(MCPConnectError) as info:
            await app.ctx.mcp.connect(MCPServer("broken", command=cmd, startup_timeout=10))
        assert "MCP server 'broken'" in str(info.value) and expected in str(info.value)
        assert app.ctx.mcp.get("broken") is None
        assert not [t for t in app.ctx.tools.definitions() if t.name.startswith("broken__")]


async def test_a_second_server_with_the_same_name_is_refused() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        with pytest.raises(ValueError, match="named 't' is connected"):
            await app.ctx.mcp.connect(server())


def test_server_descriptions_are_validated() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        MCPServer("x")
    with pytest.raises(ValueError, match="invalid MCP server name"):
        MCPServer("a b", command=["x"])
    with pytest.raises(ValueError, match="non-empty list"):
        MCPServer("x", command="python server.py")  # type: ignore[arg-type]
    remote = MCPServer("r", url="http://127.0.0.1:1/mcp", headers={"Authorization": "secret"})
    assert "secret" not in repr(remote) and remote.transport == "http"
    assert json.loads(json.dumps(list(server().command or ())))[-1] == "stdio"


async def test_the_offline_model_calls_an_mcp_tool_with_use() -> None:
    async with App() as app:
        await app.ctx.mcp.connect(server())
        agent = app.ctx.agent_loop.create("demo", AgentOptions(provider="offline", model="demo"))
        await run(agent, 'use t__add {"a": 2, "b": 40}')
        (result,) = results(agent)
        assert result["content"] == "42" and not result["is_error"]
        assert "42" in agent.session.derive_messages()[-1].text


def test_the_offline_use_phrase_explains_unknown_tools_and_bad_arguments() -> None:
    model = OfflineModel(token_delay=0)
    tools = ({"name": "t__add", "description": "", "parameters": {"type": "object"}},)

    def answer(said: str) -> tuple[str, Any]:
        message = UserMessage(id="u", content=(TextBlock(text=said),))
        options = GenerateOptions(
            provider="offline", model="demo", messages=(message,), tools=tools
        )
        return model.respond(options)

    assert answer("use t__add")[1][1:] == ("t__add", {})
    assert "no tool named 'nope'" in answer("use nope {}")[0]
    assert "not JSON" in answer("use t__add {a: 1}")[0]
    assert answer("use t__add {a: 1}")[1] is None


async def test_killing_the_server_process_mid_call_gives_an_error_result(tmp_path: Path) -> None:
    marker = str(tmp_path / "wait")
    async with App() as app:
        dispose = await app.ctx.mcp.connect(server())
        agent, _ = new_agent(
            app, tool_call("c1", "t__wait", {"marker": marker}), text("noted"), text("fine")
        )
        agent.followup("go")
        pid = int(await wait_file(Path(marker + ".started")))
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(WAIT):
            await agent.when_idle()
        (result,) = results(agent)
        assert result["is_error"] and "MCP server 't'" in result["content"]
        await run(agent, "and now?")
        assert agent.session.derive_messages()[-1].text == "fine"
        assert "not connected" in (await app.ctx.mcp.get("t").call("add", {})).content
        await dispose()
        assert not alive(pid)


async def test_without_the_sdk_connect_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    async with App() as app:
        with pytest.raises(ImportError, match=r"agentloop_nb\[mcp\]"):
            await app.ctx.mcp.connect(server())
        assert app.ctx.mcp.list() == []
