"""``%agent mcp ...`` and MCP servers in plugin cells, in-process through an IPython shell."""

from __future__ import annotations

import shlex

import anyio
import pytest
from _mcp_helpers import WAIT, alive, command, wait_dead
from IPython.core.interactiveshell import InteractiveShell

EXT = "agentloop_nb.jupyter"
pytestmark = pytest.mark.anyio


def _cmd() -> str:
    return " ".join(shlex.quote(part) for part in command())


async def _pid(sh: InteractiveShell, name: str) -> int:
    connection = sh.user_ns["ctx"].mcp.get(name)
    with anyio.fail_after(WAIT):
        await connection.ready()
    return int((await connection.call("pid", {})).content)


async def test_mcp_add_list_remove(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", f"mcp add files -- {_cmd()}")
    assert "MCP server 'files' connecting" in capsys.readouterr().out
    pid = await _pid(shell, "files")
    shell.run_line_magic("agent", "mcp list")
    out = capsys.readouterr().out
    assert "files  ready" in out and "files__echo" in out
    shell.run_line_magic("agent", "mcp remove files")
    assert "removed" in capsys.readouterr().out
    await wait_dead(pid)
    assert shell.user_ns["ctx"].tools.lookup("files__echo") is None
    shell.run_line_magic("agent", "mcp list")
    assert "no MCP servers" in capsys.readouterr().out


async def test_mcp_add_for_one_agent(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    shell.run_line_magic("agent", "create b")
    shell.run_line_magic("agent", f"mcp add files --agent a -- {_cmd()}")
    await _pid(shell, "files")
    tools = shell.user_ns["ctx"].tools
    assert tools.lookup("files__add", shell.user_ns["a"]) is not None
    assert tools.lookup("files__add", shell.user_ns["b"]) is None
    shell.run_line_magic("agent", "mcp list")
    assert "agent=a" in capsys.readouterr().out


async def test_a_failed_server_shows_its_error_in_the_list(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "mcp add broken -- /nonexistent/mcp-binary")
    connection = shell.user_ns["ctx"].mcp.get("broken")
    with anyio.fail_after(WAIT), pytest.raises(Exception, match="MCP server 'broken'"):
        await connection.ready()
    shell.run_line_magic("agent", "mcp list")
    out = capsys.readouterr().out
    assert "broken  failed" in out and "cannot start" in out


@pytest.mark.parametrize(
    "line",
    [
        "mcp",
        "mcp add files",
        "mcp add files --url http://127.0.0.1:1/mcp -- python x",
        "mcp add 'bad name' -- python x",
        "mcp add files --agent nobody -- python x",
        "mcp remove nothing",
        "mcp add files --bogus -- python x",
    ],
)
async def test_bad_mcp_arguments_print_one_usage_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    shell.run_line_magic("agent", line)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("UsageError: "), err
    assert shell.user_ns["ctx"].mcp.list() == []


async def test_rerunning_the_plugin_cell_closes_its_server(shell: InteractiveShell) -> None:
    cell = (
        "from agentloop_nb.mcp import MCPServer\n"
        f"ctx.mcp.start(MCPServer('cellsrv', command={command()!r}))\n"
    )
    shell.run_cell_magic("plugin", "tools", cell)
    first = await _pid(shell, "cellsrv")
    shell.run_cell_magic("plugin", "tools", cell)  # the old scope closes, a new server starts
    second = await _pid(shell, "cellsrv")
    assert first != second
    await wait_dead(first)  # the old scope's teardown finishes in the background
    assert alive(second)
