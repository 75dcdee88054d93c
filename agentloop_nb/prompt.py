"""``SystemPrompt``: the ``ctx.system_prompt`` service.

Plugins contribute named *sections* (text, or a function of the agent) and *variables*
(``fn(agent) -> str | None``); every step the loop calls ``await assemble(agent)`` and
``render(assembly)`` to get the system text it sends.

Scoping: a registration made through an agent's context (``agent.ctx.system_prompt``) belongs
to that agent and that agent's scope: it is visible to that agent only and shadows a global
registration of the same name for it. Within one scope the latest registration of a name wins
and disposing it reveals the previous one (re-running a notebook cell replaces, never stacks).

Ordering: sections render by ``(order, first registration of the name)``, so replacing or
shadowing a section keeps its position and the prompt stays byte-stable (the provider's KV
cache depends on it).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Coroutine, Mapping
from functools import lru_cache, partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._bus import EVERY_NAME, Lazy
from ._disposer import Disposer
from ._prompt_types import Section, SectionSource, VariableSource
from ._scoped import BoundView, ScopedRegistry
from .errors import AgentloopError, InvalidTypeError, InvalidValueError
from .signals import AbortError

if TYPE_CHECKING:
    from ._assembly import AssemblePayload, Assembly
    from .signals import AbortSignal

PERSONA_SECTION = "deployment:persona"
# Byte-stable on purpose: any change invalidates every provider-side prompt cache.
PERSONA_TEXT = (
    "You are a helpful assistant running inside a Jupyter kernel via agentloop_nb.\n"
    "Provider: {{provider}}. Model: {{model}}. Working directory: {{cwd}}."
)

_ASSEMBLE = "system-prompt/assemble"
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.:-]*)\s*\}\}")


class UndefinedVariableError(KeyError, AgentloopError):
    """A section uses ``{{name}}`` but no variable ``name`` is registered."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0]) if self.args else ""


class _SectionSpec:
    __slots__ = ("order", "section", "source")

    def __init__(self, source: SectionSource, order: int) -> None:
        self.source = source
        self.order = order
        # The last ``Section`` resolved from this registration (its name and order never
        # change): reused while the text is equal, so an unchanged prompt keeps its objects.
        self.section: Section | None = None


class SystemPrompt:
    """The ``ctx.system_prompt`` service.

    ``section``/``variable`` called on the service itself register globally and return a plain
    disposer; through a context (``ctx.system_prompt``) they are owned by that context's scope
    and, when the context belongs to an agent, scoped to that agent (see :class:`BoundSystemPrompt`).
    ``assemble`` propagates exceptions from section/variable functions and from
    ``system-prompt/assemble`` listeners (a raising plugin ends the turn); ``render`` raises
    :class:`UndefinedVariableError` (a ``KeyError``) or ``ValueError`` for a variable that is
    unknown or ``None``.
    """

    def __init__(self, ctx: Any, *, persona: str | None = PERSONA_TEXT) -> None:
        self._ctx = ctx
        self._sections: ScopedRegistry[_SectionSpec] = ScopedRegistry("system-prompt section")
        self._variables: ScopedRegistry[VariableSource] = ScopedRegistry("system-prompt variable")
        # Each agent's last collected assembly: handed out again while every part is the same
        # (the sections, the variables' values, the tool schemas), so the rendered text and the
        # request header's comparison are kept too (benchmarks/README.md "Step (session 12)").
        # (A plain dict keyed by weak references to the agents, each made with a callback that
        # drops the entry when its agent goes, as a ``WeakKeyDictionary`` does.)
        self._collected: dict[weakref.ref[Any], Assembly] = {}
        # (service generation, ``ctx.tools`` or None) as last resolved (``_tool_schemas``)
        self._tools: tuple[int | None, Any] = (None, None)
        if persona is not None:
            self.section(PERSONA_SECTION, persona)

    def __bind__(self, ctx: Any) -> BoundSystemPrompt:
        return BoundSystemPrompt(self, ctx)

    # -- registration ----------------------------------------------------------------------

    def section(self, name: str, text_or_fn: SectionSource, *, order: int = 0) -> Disposer:
        """Register a global section. ``text_or_fn`` is text (may use ``{{variable}}``) or
        ``fn(agent) -> str | None`` (``None`` omits the section for that agent)."""
        return self._add_section(name, text_or_fn, order, None)

    def variable(self, name: str, fn: VariableSource) -> Disposer:
        """Register a global variable: ``fn(agent) -> str | None``."""
        return self._add_variable(name, fn, None)

    def _add_section(self, name: str, source: SectionSource, order: int, agent: Any) -> Disposer:
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"a system-prompt section needs a non-empty name, got {name!r}")
        if not isinstance(source, str) and not callable(source):
            raise InvalidTypeError(
                f"section {name!r}: expected text or a function of the agent, "
                f"got {type(source).__name__}"
            )
        if type(order) is not int:
            raise InvalidTypeError(f"section {name!r}: order must be an int, got {order!r}")
        return self._sections.add(name, _SectionSpec(source, order), agent)

    def _add_variable(self, name: str, fn: VariableSource, agent: Any) -> Disposer:
        if not isinstance(name, str) or not _VARIABLE.fullmatch("{{" + name + "}}"):
            raise InvalidValueError(
                f"invalid system-prompt variable name {name!r}: use letters, digits, '_', "
                "'.', ':' or '-', starting with a letter or '_'"
            )
        if not callable(fn):
            raise InvalidTypeError(
                f"variable {name!r}: expected a function of the agent, got {fn!r}"
            )
        return self._variables.add(name, fn, agent)

    # -- assembly --------------------------------------------------------------------------

    def collect(self, agent: Any) -> Assembly:
        """The assembly for ``agent`` before the ``system-prompt/assemble`` waterfall. Every
        section and variable function is called; while their answers, the visible sections
        and the tool schemas are what they were at the agent's last collection, that same
        ``Assembly`` object is returned (it is immutable)."""
        registry = self._sections
        sections_list: list[Section] = []
        for name, spec in registry.visible(agent):
            source = spec.source
            text = source if isinstance(source, str) else source(agent)
            if text is None:
                continue
            if not isinstance(text, str):
                raise InvalidTypeError(
                    f"system-prompt section {name!r} returned {type(text).__name__}; "
                    "a section function must return str or None"
                )
            section = spec.section
            if section is None or section.text != text:
                section = spec.section = Section(name, text, spec.order)
            sections_list.append(section)
        if len(sections_list) > 1:
            # (order, first registration): ranked only when there is something to sort
            position = registry.position
            sections_list.sort(key=lambda section: (section.order, position(section.name)))
        variables: dict[str, str | None] = {}
        for name, fn in self._variables.visible(agent):
            value = fn(agent)
            if value is not None and not isinstance(value, str):
                raise InvalidTypeError(
                    f"system-prompt variable {name!r} returned {type(value).__name__}; "
                    "a variable function must return str or None"
                )
            variables[name] = value
        sections = tuple(sections_list)
        tools = self._tool_schemas(agent)
        # fast path (docs/architecture.md "Step, session 16"): the agent's entry looked up by
        # a weak reference in a plain dict (a ``WeakKeyDictionary``'s ``get`` is Python code)
        collected = self._collected
        try:
            key: Any = weakref.ref(agent)
            last = collected.get(key)
        except TypeError:  # an agent that takes no weak reference (e.g. None) or no hash
            key = last = None  # nothing kept
        # fast path (benchmarks/README.md "Step (session 12)"): the same parts, the same
        # assembly (tuples compare their items by identity first: the sections are reused
        # above and an unchanged tool's schema is the same dict)
        if (
            last is not None
            and last.sections == sections
            and last.variables == variables
            and last.tools == tools
        ):
            return last
        assembly = (_ASSEMBLY or _load_assembly())(
            sections=sections, tools=tools, variables=MappingProxyType(variables)
        )
        if key is not None:
            if last is None:  # the entry leaves with the agent
                key = weakref.ref(agent, partial(_forget, collected))
            collected[key] = assembly
        _ASSEMBLY_MODULE.own(assembly)  # its text is kept once rendered
        return assembly

    def _tool_schemas(self, agent: Any) -> tuple[Mapping[str, Any], ...]:
        ctx = self._ctx
        # fast path (benchmarks/README.md "Step (session 12)"): ``ctx.tools`` as last resolved
        # while no service was provided or withdrawn since (a frame per step saved)
        generation = getattr(ctx, "service_generation", None)
        held = self._tools
        if generation is None or held[0] != generation:
            try:
                tools = ctx.tools
            except AttributeError:  # no tools service: nothing to offer
                tools = None
            held = self._tools = (generation, tools)
        tools = held[1]
        if tools is None:
            return ()
        return tuple(tools.schemas(agent))

    async def assemble(
        self, agent: Any, *, ctx: Any = None, signal: AbortSignal | None = None
    ) -> Assembly:
        """Collect sections and variables for ``agent``, then run the ``system-prompt/assemble``
        waterfall (payload :class:`AssemblePayload`). The waterfall dispatches through
        ``agent.ctx`` when the agent has one (so that agent's own listeners apply), else
        through ``ctx`` / the service's context. With no listener the collected assembly is
        the result. ``signal`` (e.g. the turn's) makes the waterfall abortable: it raises
        :class:`~agentloop_nb.signals.AbortError` when the signal is or becomes aborted while
        a listener runs."""
        assembly = self.collect(agent)
        dispatcher = getattr(agent, "ctx", None)
        if dispatcher is None:
            dispatcher = ctx if ctx is not None else self._ctx
        # (``listened(dispatcher)``'s rule inlined: a frame a step)
        if _ASSEMBLE not in getattr(dispatcher, "listened", EVERY_NAME):
            # fast path (benchmarks/bench_ab.py, unobserved hooks): the answer, undispatched
            if signal is not None and signal.aborted:
                raise AbortError(signal.reason)
            return assembly
        result = await dispatcher.waterfall(
            _ASSEMBLE,
            Lazy(AssemblePayload, assembly, agent),
            partial(_same, assembly),
            signal=signal,
        )
        if not isinstance(result, Assembly):
            raise InvalidTypeError(
                f"a 'system-prompt/assemble' listener returned {type(result).__name__}; "
                "return an Assembly (e.g. payload.assembly.replace(...) or await next())"
            )
        return result

    @staticmethod
    def render(assembly: Assembly) -> str:
        """Join the sections (stable-sorted by ``order``) with blank lines and interpolate
        ``{{name}}``. Raises :class:`UndefinedVariableError` for an unknown variable and
        ``ValueError`` for one whose value is ``None``, naming the variable and the section."""
        # fast path (benchmarks/README.md "Step (session 12)"): an assembly ``collect`` built
        # (its variables are a mapping nobody else holds) renders to the text it rendered to
        module = _ASSEMBLY_MODULE or _load_assembly_module()
        kept = module.kept_text(assembly)
        if kept is not None:
            return kept
        variables = assembly.variables
        parts: list[str] = []
        sections = assembly.sections
        for section in sorted(sections, key=_order) if len(sections) > 1 else sections:
            text = section.text
            if "{{" in text:
                pieces = _template(text)
                if len(pieces) > 1:
                    filled = list(pieces)
                    for i in range(1, len(filled), 2):
                        value = variables.get(filled[i])
                        # undefined or None: ``_value`` raises the error that names it
                        filled[i] = (
                            _value(variables, filled[i], section.name) if value is None else value
                        )
                    text = "".join(filled)
            parts.append(text)
        rendered = "\n\n".join(parts)
        module.keep_text(assembly, rendered)  # (only if ``collect`` built it)
        return rendered


def _same(assembly: Assembly) -> Assembly:
    return assembly


def _forget(collected: dict[Any, Any], key: weakref.ref[Any]) -> None:
    """A collected agent's entry leaves with it (its weak reference's callback)."""
    collected.pop(key, None)


# ``Assembly`` and ``AssemblePayload`` load with the first assembly (``collect``) or the first
# access to either name here: ``Assembly`` is a dataclass, whose methods are compiled when the
# class is made (start-up cost). A global read per assembly after.
_ASSEMBLY: type[Assembly] | None = None
_ASSEMBLY_MODULE: Any = None  # ``_assembly`` itself, bound with ``_ASSEMBLY``
_LAZY_NAMES = ("AssemblePayload", "Assembly")


def _load_assembly() -> type[Assembly]:
    global _ASSEMBLY, _ASSEMBLY_MODULE
    from . import _assembly

    # Both names bound here: the payload's and the assembly's type hints resolve in this
    # module (their public home), and ``assemble`` names them as globals.
    globals().update(Assembly=_assembly.Assembly, AssemblePayload=_assembly.AssemblePayload)
    _ASSEMBLY_MODULE = _assembly
    _ASSEMBLY = _assembly.Assembly
    return _ASSEMBLY


def _load_assembly_module() -> Any:
    _load_assembly()
    return _ASSEMBLY_MODULE


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        _load_assembly()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


def _order(section: Section) -> int:
    return section.order


@lru_cache(maxsize=256)
def _template(text: str) -> tuple[str, ...]:
    """``text`` split at its ``{{name}}`` placeholders: literal, name, literal, ..., literal
    (names at the odd positions). Cached per text: a section's text is usually the same at
    every step, and splitting it once spares a regex pass per request."""
    return tuple(_VARIABLE.split(text))


def _value(variables: Mapping[str, str | None], name: str, section: str) -> str:
    """The value of ``{{name}}`` in ``section``; raises when it is undefined or ``None``."""
    try:
        value = variables[name]
    except KeyError:
        raise UndefinedVariableError(
            f"system-prompt section {section!r} uses {{{{{name}}}}}, but no variable "
            f"{name!r} is defined; define it with ctx.system_prompt.variable({name!r}, "
            "lambda agent: ...)"
        ) from None
    if value is None:
        raise InvalidValueError(
            f"system-prompt section {section!r} uses {{{{{name}}}}}, but variable {name!r} "
            "has no value for this agent (its function returned None); make it return a "
            "string or remove the placeholder"
        )
    return value


class BoundSystemPrompt(BoundView[SystemPrompt]):
    """``ctx.system_prompt`` seen from one context: registrations are owned by that context's
    scope (disposed with it) and, when the context belongs to an agent, visible to that agent
    only, shadowing global registrations of the same name. ``assemble`` dispatches through
    that context when the agent has none of its own."""

    __slots__ = ()

    def section(self, name: str, text_or_fn: SectionSource, *, order: int = 0) -> Disposer:
        service, agent = self.service, self.agent
        return self.own(lambda: service._add_section(name, text_or_fn, order, agent))

    def variable(self, name: str, fn: VariableSource) -> Disposer:
        service, agent = self.service, self.agent
        return self.own(lambda: service._add_variable(name, fn, agent))

    def collect(self, agent: Any) -> Assembly:
        return self.service.collect(agent)

    def assemble(
        self, agent: Any, *, signal: AbortSignal | None = None
    ) -> Coroutine[Any, Any, Assembly]:
        # The service's coroutine itself: a delegating ``async def`` costs a frame per step.
        return self.service.assemble(agent, ctx=self.ctx, signal=signal)

    # The service's own static method (a delegating one costs a frame per step).
    render = SystemPrompt.__dict__["render"]


__all__ = [
    "PERSONA_SECTION",
    "PERSONA_TEXT",
    "AssemblePayload",
    "Assembly",
    "BoundSystemPrompt",
    "Section",
    "SystemPrompt",
    "UndefinedVariableError",
]
