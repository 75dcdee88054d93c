"""``%agent`` / ``%%agent`` / ``%%plugin``: drive background agents from cells.

Every subcommand only schedules work on the kernel loop and returns at once. Bad arguments and
other problems a person fixes by typing something else print one ``UsageError: ...`` line to
stderr (never a traceback, and the cell still succeeds); ``%agent --help`` and
``%agent SUB --help`` print argparse help; ``%agent?`` shows the docstring.
:func:`keep_question_marks` (an input transformer the extension registers) keeps IPython from
reading ``%agent steer NAME why?`` as a help request.
"""

from __future__ import annotations

import argparse
import builtins
import functools
import keyword
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class
from IPython.display import display

from ...errors import AgentloopError
from ...loop import AgentOptions
from .._state import DEFAULT_MODEL, DEFAULT_PROVIDER, KernelState, UserError

# The sub-commands' modules (``_fix``, ``_panel``, ``_notebook``...) load with the first
# ``%agent`` line, not with %load_ext: they bring the widgets, the notebook tools and the
# "Fix with agent" flow. ``_build_parser`` imports them all; each command imports its own.

_RAW_TEXT = ("steer", "inject")  # TEXT is the raw rest of the line (quotes and all)
# `%agent steer|inject NAME TEXT?`: IPython would read the trailing `?` as a help request.
_QUESTION_LINE = re.compile(
    r"(?P<indent>[ \t]*)%agent[ \t]+(?P<rest>(?:steer|inject)[ \t]+[^\s?]+[ \t]+\S.*?\?)[ \t]*"
)


class _Exit(AgentloopError):
    """argparse finished on its own (``--help`` was printed)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message} — {' '.join(self.format_usage().split())}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit


def _build_parser() -> _Parser:
    from ._fix import add_fix_parser
    from ._fork import add_fork_parser
    from ._kernel import add_create_flags, add_tool_command
    from ._longrun import add_longrun_parsers
    from ._mcp import add_mcp_parser
    from ._notebook import add_notebook_parser
    from ._panel import add_panel_parser
    from ._undo import add_undo_parser
    from ._why import add_why_parser

    p = _Parser(
        prog="%agent",
        description="Create, steer and cancel background agents.",
        exit_on_error=False,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    c = sub.add_parser(
        "create",
        help="create an agent bound to NAME",
        description="Create an agent and bind it to NAME in the user namespace.",
    )
    c.add_argument("name", metavar="NAME")
    c.add_argument(
        "--provider",
        metavar="P",
        default=None,
        help=f"model provider (default: {DEFAULT_PROVIDER}, or configure(default_provider=...))",
    )
    c.add_argument(
        "--model",
        metavar="M",
        default=None,
        help=f"model name (default with the offline provider: {DEFAULT_MODEL})",
    )
    c.add_argument("--max-tokens", metavar="N", type=int, default=None, dest="max_tokens")
    c.add_argument(
        "--pace",
        metavar="WPS",
        type=float,
        default=None,
        help="offline provider only: stream this many words per second (slow enough to steer)",
    )
    add_create_flags(c)
    for name, what in (
        ("steer", "steer the running turn (wakes an idle agent)"),
        ("inject", "add context for the next step (does not wake)"),
    ):
        s = sub.add_parser(
            name,
            help=what,
            description=what,
            epilog='TEXT is the raw rest of the line; a trailing "?" is part of it (the '
            "extension stops IPython reading it as a help request).",
        )
        s.add_argument("name", metavar="NAME")
        s.add_argument("text", metavar="TEXT", nargs="+")
    x = sub.add_parser("cancel", help="cancel the running turn (cause: user)")
    x.add_argument("name", metavar="NAME")
    x.add_argument("--keep-inbox", action="store_true", help="keep queued input")
    r = sub.add_parser(
        "resume",
        help="resume a persisted session as NAME",
        description="Resume a persisted session: its history is rendered from the "
        "log (nothing re-runs) and the agent accepts new prompts.",
    )
    r.add_argument("session_id", metavar="SESSION_ID")
    r.add_argument(
        "--name",
        metavar="NAME",
        default=None,
        help="variable to bind (default: the id's prefix before '-session-')",
    )
    sub.add_parser("list", help="list live agents")
    sh = sub.add_parser("show", help="display the live view of NAME")
    sh.add_argument("name", metavar="NAME")
    sub.add_parser("sessions", help="list persisted sessions")
    d = sub.add_parser("dispose", help="dispose NAME (its turn ends 'disposed')")
    d.add_argument("name", metavar="NAME")
    add_longrun_parsers(sub)
    add_mcp_parser(sub)
    add_tool_command(sub)
    add_fork_parser(sub)
    add_notebook_parser(sub)
    add_fix_parser(sub)
    add_undo_parser(sub)
    add_why_parser(sub)
    add_panel_parser(sub)
    return p


def keep_question_marks(lines: list[str]) -> list[str]:
    """IPython input transformer (``shell.input_transformers_cleanup``): turn each
    ``%agent steer|inject NAME TEXT?`` line into the equivalent ``run_line_magic`` call, so
    IPython's help syntax does not take the trailing ``?`` (it would run ``%pinfo`` on the last
    word instead). Cells of cell magics (``%%...``) are left alone: their body is raw text."""
    if not lines or lines[0].lstrip().startswith("%%"):
        return lines
    out = lines
    for i, line in enumerate(lines):
        if "?" not in line or "%agent" not in line:
            continue
        body = line.rstrip("\r\n")
        m = _QUESTION_LINE.fullmatch(body)
        if m is None or (i > 0 and lines[i - 1].rstrip("\r\n").endswith("\\")):
            continue
        if out is lines:
            out = list(lines)
        out[i] = (
            f"{m['indent']}get_ipython().run_line_magic('agent', {m['rest']!r}){line[len(body) :]}"
        )
    return out


# Names a notebook relies on: binding an agent to one would break the notebook itself.
_IPYTHON_NAMES = frozenset(
    {"In", "Out", "get_ipython", "exit", "quit", "display", "ctx", "_", "__", "___"}
)


def _identifier(name: str, what: str = "NAME") -> str:
    """``name`` when it can become a notebook variable; raises :class:`UserError` for a
    non-identifier, a keyword, a dunder, a builtin (``print``) or an IPython name
    (``get_ipython``, ``In``, ``Out``, ``exit``...)."""
    if not name.isidentifier() or keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise UserError(f"{what} must be a Python identifier (it becomes a variable), got {name!r}")
    if name.startswith("__") and name.endswith("__"):
        raise UserError(f"{what} {name!r} is a dunder name reserved by Python; pick another name")
    if name in _IPYTHON_NAMES or hasattr(builtins, name):
        raise UserError(
            f"{what} {name!r} would replace a name the notebook relies on "
            f"({'a Python builtin' if hasattr(builtins, name) else 'an IPython name'}); "
            "pick another name"
        )
    return name


def _close_matches(word: str, known: Sequence[str]) -> str:
    import difflib  # here: only a miss needs it (2.5 M instructions to import)

    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def _fail(message: str) -> None:
    print("UsageError: " + " ".join(message.split()), file=sys.stderr)


@magics_class
class AgentMagics(Magics):
    """The magics of one kernel's extension state."""

    def __init__(self, shell: Any, state: KernelState) -> None:
        super().__init__(shell)
        self.state = state

    @functools.cached_property
    def parser(self) -> _Parser:
        """The ``%agent`` argument parser, built on first use."""
        return _build_parser()

    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Drive background agents from cells.

        Line magic::

          %agent create NAME [--provider P] [--model M] [--max-tokens N] [--pace WPS]
              create an agent and bind it to NAME (default provider: offline, model: demo);
              an unknown provider is refused (with the known ones and a close match);
              --pace WPS makes the offline model stream WPS words per second;
              --kernel [--run ask|always|never]: give it this kernel's tools
              --notebook [--edit ask|always|never]: and the notebook tools (implies --kernel)
          %agent notebook [PATH | --detach]
                                      the .ipynb the notebook tools edit headless (a
                                      connected JupyterLab page wins); no PATH: which one
          %agent tool FUNC [--agent NAME]
                                      a notebook function becomes a tool (re-run replaces)
          %agent steer NAME TEXT      steer the running turn (wakes an idle agent)
          %agent inject NAME TEXT     add context for the next step (does not wake)
              TEXT is the raw rest of the line (quotes are kept). A trailing "?" is kept
              too: IPython reads a line ending in "?" as a help request (it would run %pinfo
              on the last word and drop the command), so the extension registers an input
              transformer that passes these two lines to %agent unchanged. Where it is not
              active, end the line with a space after the "?".
          %agent cancel NAME [--keep-inbox]
                                      cancel the running turn (cause: user)
          %agent resume SESSION_ID [--name NAME]
                                      resume a persisted session; history renders from the
                                      log without re-running anything
          %agent list                 live agents
          %agent show NAME            display the live view
          %agent panel                the Agents panel as an output: every agent of the
                                      kernel, the selected one's live view, a prompt box
          %agent sessions             persisted sessions (id, created, live name), listed
                                      off the event loop (the kernel never waits on disk)
          %agent dispose NAME         dispose the agent
          %agent compact NAME         summarise the earlier conversation now (needs the
                                      compaction plugin)
          %agent mcp add NAME [--agent A] -- CMD ARG...  |  %agent mcp add NAME --url URL
          %agent mcp list  |  %agent mcp remove NAME
                                      MCP tool servers (tools appear as NAME__TOOL)
          %agent fix NAME [CELL]      start a turn of NAME carrying the autopsy of a failed
                                      cell (default: the last one; CELL: id or [N])
          %agent undo NAME [--calls N]
                                      undo what NAME's last N code runs changed in the
                                      namespace (per name: restored / removed / not
                                      restorable (why) / changed since, kept)
          %agent why [VAR]            where VAR came from (cells and agents, newest first);
                                      without VAR: the names agents changed

        Cell magic::

          %%agent NAME [--with a,b]
          prompt text...

        queues the cell body as a follow-up and displays a view of the turns this cell
        started (``--with a,b`` puts a summary of each named variable before the prompt;
        earlier turns behind one collapsed toggle; ``%agent show NAME`` shows them
        all). NAME must not shadow a builtin, a dunder or an IPython name. Every command
        returns at once; ``await NAME.when_idle()`` in a later cell waits for the agent.
        Bad arguments print one ``UsageError`` line. ``%agent --help`` prints argparse help.
        """
        try:
            if cell is not None:
                self._cell(line, cell)
            else:
                self._line(line)
        except _Exit:
            pass
        except UserError as exc:
            _fail(str(exc))

    @cell_magic
    def plugin(self, line: str, cell: str) -> None:
        """Run the cell as the named plugin NAME::

          %%plugin NAME
          ctx.on("agent/status", lambda p: ...)

        While the cell runs, ``ctx`` is the plugin's own context (a child of the App's), so
        everything registered through it belongs to the scope NAME; the cell's variables land
        in the user namespace as usual. Re-running the cell disposes the old scope first, so
        handlers are registered once. If the cell raises, everything it registered is disposed
        (no half-registered plugin) and the error is shown.
        """
        try:
            words = shlex.split(line)
        except ValueError as exc:
            _fail(f"%%plugin: {exc} — usage: %%plugin NAME")
            return
        if len(words) != 1:
            _fail("%%plugin: expected exactly one NAME — usage: %%plugin NAME")
            return
        from ._cellplugin import run_plugin_cell

        run_plugin_cell(self.shell, self.state.app.ctx, words[0], cell)

    # -- dispatch ---------------------------------------------------------------------------

    def _parse(self, line: str) -> argparse.Namespace:
        head, _, rest = line.strip().partition(" ")
        if head in _RAW_TEXT:
            name, _, text = rest.strip().partition(" ")
            if name and not name.startswith("-") and text.strip():
                return argparse.Namespace(command=head, name=name, text=text.strip())
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UserError(
                f"%agent: {exc} — {' '.join(self.parser.format_usage().split())}"
            ) from None
        try:
            args = self.parser.parse_args(words)
        except argparse.ArgumentError as exc:
            raise UserError(
                f"%agent: {exc} — {' '.join(self.parser.format_usage().split())}"
            ) from None
        if args.command is None:
            raise UserError(
                f"%agent: a COMMAND is required — {' '.join(self.parser.format_usage().split())}"
            )
        if head in _RAW_TEXT:
            args.text = " ".join(args.text)
        return args

    def _line(self, line: str) -> None:
        args = self._parse(line)
        getattr(self, f"_cmd_{args.command}")(args)

    def _cell(self, line: str, cell: str) -> None:
        from ._kernel import prompt_with, split_cell_line

        name, attach = split_cell_line(line)
        agent = self.state.agent(name)
        prompt = cell.strip()
        own = []
        if prompt:
            content = (
                prompt_with(self.shell, attach, prompt, self.state.describers) if attach else prompt
            )
            own.append(str(agent.followup(content).id))  # first: the view shows it running
        display(self.state.cell_view(agent, own))

    # -- commands ---------------------------------------------------------------------------

    def _cmd_create(self, args: argparse.Namespace) -> None:
        from ._kernel import after_create, check_create_flags

        name = _identifier(args.name)
        self._check_free(name)
        defaults = self.state.default_options()
        provider = args.provider or defaults.provider or DEFAULT_PROVIDER
        self._check_provider(provider)
        if args.pace is not None:
            provider = self._paced(provider, args.pace)
        offline = provider == DEFAULT_PROVIDER or provider.startswith(f"{DEFAULT_PROVIDER}@")
        configured = defaults.model if args.provider is None else None
        model = args.model or configured or (DEFAULT_MODEL if offline else None)
        if model is None:
            raise UserError(f"%agent create: --model is required with --provider {provider}")
        if args.max_tokens is not None and args.max_tokens <= 0:
            raise UserError("%agent create: --max-tokens must be a positive integer")
        check_create_flags(args)
        options = AgentOptions(provider=provider, model=model, max_tokens=args.max_tokens)
        try:
            agent = self.state.app.agent_loop.create(name, options)
        except Exception as exc:
            raise UserError(f"%agent create: {exc}") from None
        self.state.bind(name, agent)
        note = after_create(agent, args)
        print(f"agent {name!r} ready ({provider}/{model}){note}; session {agent.session.id}")

    def _check_provider(self, provider: str) -> None:
        known = self.state.app.ctx.llm.providers()
        if provider not in known:
            raise UserError(
                f"%agent create: unknown provider {provider!r} (known: {', '.join(known)})"
                + _close_matches(provider, known)
            )

    def _paced(self, provider: str, pace: float) -> str:
        """The provider name of an offline model streaming ``pace`` words per second
        (registered on first use as ``offline@<pace>wps``)."""
        if provider != DEFAULT_PROVIDER:
            raise UserError("%agent create: --pace works with the offline provider only")
        if not 0 < pace <= 1000:
            raise UserError("%agent create: --pace must be between 0 and 1000 words per second")
        from ...llm.offline import OfflineModel

        name = f"{DEFAULT_PROVIDER}@{pace:g}wps"
        llm = self.state.app.ctx.llm
        if name not in llm.providers():
            llm.register_adapter([name], OfflineModel(token_delay=1.0 / pace))
        return name

    def _check_free(self, name: str) -> None:
        if name in self.state.names:
            raise UserError(f"an agent named {name!r} exists; %agent dispose {name} first")

    def _cmd_panel(self, args: argparse.Namespace) -> None:
        from ._panel import run_panel_command

        run_panel_command(self.state, args)

    def _cmd_notebook(self, args: argparse.Namespace) -> None:
        from ._notebook import run_notebook_command

        print(run_notebook_command(self.state, args))

    def _cmd_tool(self, args: argparse.Namespace) -> None:
        from ._kernel import register_tool

        agent = None if args.agent is None else self.state.agent(args.agent)
        print(register_tool(self.shell, self.state.app.ctx, agent, args.func))

    def _cmd_steer(self, args: argparse.Namespace) -> None:
        self.state.agent(args.name).steer(args.text)

    def _cmd_inject(self, args: argparse.Namespace) -> None:
        self.state.agent(args.name).inject(args.text)

    def _cmd_cancel(self, args: argparse.Namespace) -> None:
        if not self.state.agent(args.name).cancel("user", keep_inbox=args.keep_inbox):
            print(f"{args.name} is idle: nothing to cancel")

    def _cmd_resume(self, args: argparse.Namespace) -> None:
        from ..kernel import run_eagerly

        sid = args.session_id
        default = sid.split("-session-")[0] if "-session-" in sid else None
        if args.name is None and (default is None or not default.isidentifier()):
            self._check_session(sid)
            raise UserError(f"%agent resume: cannot derive a NAME from {sid!r}; pass --name NAME")
        st = self.state
        self._check_session(sid)
        name = _identifier(args.name or default or "")
        self._check_free(name)
        try:
            done, value = run_eagerly(st.app.ctx.agents.resume(session_id=sid))
        except Exception as exc:
            raise UserError(f"%agent resume: {exc}") from None
        if done:
            self._resumed(name, value.agent)
            return

        def bind(task: Any) -> None:  # resume had to wait (a setup): bind when it lands
            if not task.cancelled() and task.exception() is None:
                self._resumed(name, task.result().agent)
            else:
                _fail(f"%agent resume: {task.exception() or 'cancelled'}")

        self.state.keep(value)
        value.add_done_callback(bind)
        print(f"resuming {sid} as {name}…")

    def _cmd_fork(self, args: argparse.Namespace) -> None:
        from ._fork import run_fork

        run_fork(self.state, args)

    def _cmd_fix(self, args: argparse.Namespace) -> None:
        from ._fix import run_fix

        run_fix(self.state, args)

    def _cmd_undo(self, args: argparse.Namespace) -> None:
        from ._undo import run_undo

        run_undo(self.state, args)

    def _cmd_why(self, args: argparse.Namespace) -> None:
        from ._why import run_why

        run_why(self.state, args)

    def _check_session(self, sid: str) -> None:
        """Raise :class:`UserError` when the persistence has no session ``sid`` (naming the
        closest ids). Reads the session headers only."""
        persistence = self.state.app.persistence
        if persistence is None:
            raise UserError("%agent resume: this App has no session persistence")
        ids = [h.id for h in persistence.list()]
        if sid not in ids:
            raise UserError(
                f"%agent resume: no session {sid!r} in {_where(persistence)}"
                + (_close_matches(sid, ids) or f" ({len(ids)} stored; see %agent sessions)")
            )

    def _resumed(self, name: str, agent: Any) -> None:
        self.state.bind(name, agent)
        display(self.state.view(agent))

    def _cmd_list(self, _args: argparse.Namespace) -> None:
        agents = self.state.app.agent_loop.list()
        if not agents:
            print("no live agents")
            return
        rows = [("NAME", "STATUS", "TURNS", "MODEL", "SESSION")]
        for a in agents:
            rows.append(
                (
                    self.state.name_of(a) or "-",
                    a.status,
                    str(a.turn),
                    f"{a.options.provider}/{a.options.model}",
                    a.session.id,
                )
            )
        _table(rows)

    def _cmd_show(self, args: argparse.Namespace) -> None:
        display(self.state.view(self.state.agent(args.name)))

    def _cmd_sessions(self, _args: argparse.Namespace) -> None:
        from ._sessions import run_sessions

        run_sessions(self.state, self.shell)

    def _cmd_compact(self, args: argparse.Namespace) -> None:
        from ._longrun import cmd_compact

        cmd_compact(self.state, args)

    def _cmd_mcp(self, args: argparse.Namespace) -> None:
        from ._mcp import run_mcp_command

        run_mcp_command(self.state, args)

    def _cmd_dispose(self, args: argparse.Namespace) -> None:
        from ..kernel import run_eagerly

        st = self.state
        agent = st.unbind(args.name)
        done, value = run_eagerly(st.app.agent_loop.dispose(agent))
        if not done:
            st.keep(value)


def _where(persistence: Any) -> str:
    root = getattr(persistence, "root", None)
    return str(root) if root is not None else "the session store"


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    from ._sessions import format_table as _format_table

    print(_format_table(rows))


__all__ = ["DEFAULT_MODEL", "DEFAULT_PROVIDER", "AgentMagics", "keep_question_marks"]
