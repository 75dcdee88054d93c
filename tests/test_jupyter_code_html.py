"""``code_html``: code and diffs carry token classes and no inline colours, so the view's
stylesheet colours them from the theme (readable in light and dark)."""

from __future__ import annotations

import pytest

from agentloop_nb.jupyter.fold import STYLE, code_html
from agentloop_nb.jupyter.kernel._tools import approval_detail_html


def test_python_is_highlighted_with_classes_and_no_inline_colours() -> None:
    html = code_html("import math\nx = 1  # note <b>\n")
    assert html.startswith('<pre class="agentloop-code agentloop-code-python">')
    assert '<span class="kn">import</span>' in html
    assert '<span class="c1"># note &lt;b&gt;</span>' in html  # escaped
    assert "style=" not in html and "background" not in html


def test_a_diff_marks_inserted_and_deleted_lines() -> None:
    html = code_html("@@ -1 +1 @@\n-old\n+new\n", "diff")
    assert '<span class="gd">-old</span>' in html
    assert '<span class="gi">+new</span>' in html
    assert ".agentloop-code .gi{" in STYLE and ".agentloop-code .gd{" in STYLE


def test_an_unknown_language_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown language 'rust'.*python"):
        code_html("fn main() {}", "rust")


def test_run_python_approvals_show_the_code_with_theme_classes() -> None:
    html = approval_detail_html('{"code": "print(1)"}')
    assert html is not None and 'class="agentloop-code' in html and "style=" not in html


def test_text_colours_in_the_stylesheet_never_use_a_raw_theme_accent() -> None:
    # Accents like --jp-warn-color1 are below AA as text on one theme or the other: text
    # colours go through the palette (mixed with the theme's ink).
    for accent in ("warn", "error", "success", "brand", "info"):
        for rule in STYLE.split("}"):
            for decl in rule.split(";"):
                name, _, value = decl.rpartition("{")[-1].partition(":")
                if name.strip() == "color":
                    assert f"--jp-{accent}-color" not in value, rule
