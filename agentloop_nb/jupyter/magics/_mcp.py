"""``%agent mcp ...``: connect, list and remove MCP tool servers from a cell.

::

  %agent mcp add NAME [--agent A] -- CMD ARG...   start CMD and speak MCP over its stdio
  %agent mcp add NAME [--agent A] --url URL       connect a streamable HTTP server
  %agent mcp list                                 name, state, tools, command or URL
  %agent mcp remove NAME                          close it (the process ends, tools go)

Like every ``%agent`` command these only schedule work: ``add`` returns at once while the
server starts in the background (``%agent mcp list`` shows ``connecting``, then ``ready`` with
its tools or ``failed`` with the reason). Connections made here belong to the App's root
context, so they live until removed or the extension unloads; a server connected inside a
plugin cell (``ctx.mcp.start(...)``) belongs to that cell's scope instead.
"""

from __future__ import annotations

import argparse
from typing import Any

from .._state import KernelState, UserError

__all__ = ["add_mcp_parser", "run_mcp_command"]


def add_mcp_parser(sub: Any) -> None:
    """Add the ``mcp`` subcommand (with ``add``, ``list``, ``remove``) to ``%agent``'s parser."""
    m = sub.add_parser(
        "mcp",
        help="connect, list and remove MCP tool servers",
        description="MCP tool servers: their tools appear as SERVER__TOOL.",
    )
    msub = m.add_subparsers(dest="mcp_command", metavar="MCP_COMMAND", parser_class=type(m))
    a = msub.add_parser(
        "add",
        help="connect a server: -- CMD ARG... (stdio) or --url URL (streamable HTTP)",
        description="Connect an MCP server; its tools appear as NAME__TOOL once it is ready.",
    )
    a.add_argument("name", metavar="NAME")
    a.add_argument("--agent", metavar="A", default=None, help="only agent A sees the tools")
    a.add_argument("--url", metavar="URL", default=None, help="a streamable HTTP endpoint")
    # REMAINDER: a nested subparser does not honour "--" itself; _split_rest parses the rest.
    a.add_argument("server_command", metavar="-- CMD", nargs=argparse.REMAINDER, help="the command")
    msub.add_parser("list", help="list MCP servers")
    r = msub.add_parser("remove", help="close a server (its process ends, its tools go)")
    r.add_argument("name", metavar="NAME")


def run_mcp_command(state: KernelState, args: argparse.Namespace) -> None:
    """Run a parsed ``%agent mcp ...`` command; problems raise :class:`UserError`."""
    command = getattr(args, "mcp_command", None)
    if command == "add":
        _add(state, args)
    elif command == "list":
        _list(state)
    elif command == "remove":
        _remove(state, args.name)
    else:
        raise UserError("%agent mcp: a command is required — add, list or remove")


def _split_rest(args: argparse.Namespace) -> None:
    """Move ``--agent``/``--url`` given after NAME out of the remainder; what follows ``--``
    is the server command, verbatim."""
    rest = list(args.server_command)
    if "--" in rest:
        cut = rest.index("--")
        options, args.server_command = rest[:cut], rest[cut + 1 :]
    elif rest and rest[0] in ("--agent", "--url"):
        options, args.server_command = rest, []
    else:
        options = []
    while options:
        flag = options.pop(0)
        if flag not in ("--agent", "--url") or not options:
            raise UserError(
                f"%agent mcp add: unexpected {flag!r} — usage: "
                "%agent mcp add NAME [--agent A] -- CMD ARG... | %agent mcp add NAME --url URL"
            )
        setattr(args, flag[2:], options.pop(0))


def _add(state: KernelState, args: argparse.Namespace) -> None:
    from ...mcp import MCPServer

    _split_rest(args)
    if bool(args.url) == bool(args.server_command):
        raise UserError(
            "%agent mcp add: give either -- CMD ARG... or --url URL — usage: "
            "%agent mcp add NAME [--agent A] -- CMD ARG... | %agent mcp add NAME --url URL"
        )
    agent = state.agent(args.agent) if args.agent is not None else None
    try:
        if args.url:
            server = MCPServer(args.name, url=args.url)
        else:
            server = MCPServer(args.name, command=args.server_command)
        connection = state.app.ctx.mcp.start(server, agent=agent)
    except (ValueError, TypeError, ImportError, RuntimeError) as exc:
        raise UserError(f"%agent mcp add: {exc}") from None
    who = f" for {args.agent}" if args.agent is not None else ""
    print(
        f"MCP server {args.name!r} connecting{who} ({connection.server.describe()}); "
        "%agent mcp list shows when its tools are ready"
    )


def _list(state: KernelState) -> None:
    connections = state.app.ctx.mcp.list()
    if not connections:
        print("no MCP servers (add one with %agent mcp add NAME -- CMD ARG...)")
        return
    for c in connections:
        line = f"{c.server.name}  {c.state}  {c.server.describe()}"
        if c.agent is not None:
            line += f"  agent={state.name_of(c.agent) or c.agent.id}"
        if c.state == "failed":
            line += f"\n    {c.error}"
        elif c.tools:
            line += "\n    tools: " + ", ".join(c.tools)
        print(line)


def _remove(state: KernelState, name: str) -> None:
    try:
        done = state.app.ctx.mcp.remove(name)
    except KeyError as exc:
        raise UserError(f"%agent mcp remove: {exc.args[0]}") from None
    state.keep(_wait(done))
    print(f"MCP server {name!r} removed")


def _wait(done: Any) -> Any:
    import asyncio

    async def closed() -> None:
        await done

    return asyncio.get_running_loop().create_task(closed())
