"""``code_html``: source code or a diff as highlighted, theme-following HTML.

Pygments (which IPython ships with) tokenises; the spans carry its short class names and no
colours, so the views' stylesheet (:data:`~._render.STYLE`, rules under ``.agentloop-code``)
colours them from JupyterLab's editor theme variables, readable in the light and the dark
theme alike. Inline colours (pygments' ``noclasses``) would be one theme's: the default style's
light background behind dark-theme text is what made approval code unreadable.
"""

from __future__ import annotations

from html import escape

from ...errors import InvalidValueError

LANGUAGES = ("python", "diff", "text")
"""What :func:`code_html` can highlight (``text``: escaped, not highlighted)."""


def code_html(code: str, language: str = "python") -> str:
    """``code`` as ``<pre class="agentloop-code agentloop-code-LANGUAGE">`` with pygments
    token spans (plain escaped text when pygments is missing). ``language`` is one of
    :data:`LANGUAGES`; anything else raises ``ValueError`` naming the choices."""
    if language not in LANGUAGES:
        raise InvalidValueError(
            f"code_html: unknown language {language!r}; choose one of {LANGUAGES}"
        )
    head = f'<pre class="agentloop-code agentloop-code-{language}">'
    if language == "text":
        return f"{head}{escape(code)}</pre>"
    try:
        from pygments import highlight  # type: ignore[import-untyped]
        from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
        from pygments.lexers import DiffLexer, PythonLexer  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - IPython depends on pygments
        return f"{head}{escape(code)}</pre>"
    lexer = DiffLexer() if language == "diff" else PythonLexer()
    body = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f"{head}{body.rstrip(chr(10))}</pre>"


__all__ = ["LANGUAGES", "code_html"]
