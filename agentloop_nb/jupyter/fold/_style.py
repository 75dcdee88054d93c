"""``STYLE``: the one stylesheet every view carries.

Every colour derives from JupyterLab's theme variables (``--jp-*``), so the view follows the
light and the dark theme (and third-party themes) without knowing which is on. Several theme
accents are too faint for text, though (``--jp-warn-color1`` on white is 2.3:1,
``--jp-error-color1`` on the dark theme's cells 2.7:1), so text never uses an accent directly:
the palette below mixes each accent with the theme's strongest ink (``--jp-content-font-color0``:
black in a light theme, white in a dark one), which darkens it on light backgrounds and lightens
it on dark ones while keeping its hue. The shares were chosen for WCAG AA (≥ 4.5:1) against
``--jp-layout-color0`` … ``--jp-layout-color2`` in JupyterLab Light and Dark; the real-browser
test ``tests/browser/test_contrast.py`` measures every text of every part of the view.
"""

from __future__ import annotations


def _mix(var: str, share: int) -> str:
    return f"color-mix(in srgb,var({var}) {share}%,var(--agentloop-ink))"


_PALETTE = (
    ".agentloop-root,.agentloop-code{--agentloop-ink:var(--jp-content-font-color0);"
    f"--agentloop-muted:{_mix('--jp-ui-font-color2', 75)};"
    f"--agentloop-error:{_mix('--jp-error-color1', 45)};"
    f"--agentloop-warn:{_mix('--jp-warn-color1', 55)};"
    f"--agentloop-ok:{_mix('--jp-success-color1', 60)};"
    f"--agentloop-accent:{_mix('--jp-brand-color1', 60)};"
    f"--agentloop-info:{_mix('--jp-info-color1', 65)};"
    f"--agentloop-link:{_mix('--jp-content-link-color', 80)};"
    f"--agentloop-code-keyword:{_mix('--jp-mirror-editor-keyword-color', 60)};"
    f"--agentloop-code-builtin:{_mix('--jp-mirror-editor-builtin-color', 55)};"
    f"--agentloop-code-def:{_mix('--jp-mirror-editor-def-color', 50)};"
    f"--agentloop-code-string:{_mix('--jp-mirror-editor-string-color', 60)};"
    f"--agentloop-code-number:{_mix('--jp-mirror-editor-number-color', 75)};"
    f"--agentloop-code-comment:{_mix('--jp-mirror-editor-comment-color', 45)};"
    f"--agentloop-code-operator:{_mix('--jp-mirror-editor-operator-color', 75)};"
    f"--agentloop-code-meta:{_mix('--jp-mirror-editor-meta-color', 40)}}}"
)

# Pygments' short token classes (one per span), coloured from the palette: k* keywords,
# s* strings, m*/il numbers, c* comments, o/ow operators, nb/bp builtins, nf/fm/nc/nn
# definitions, nd decorators; in diffs gi/gd inserted and deleted lines, gh/gu headers.
_CODE = """
.agentloop-code{background:var(--jp-cell-editor-background);color:var(--jp-content-font-color1);
font-family:var(--jp-code-font-family);font-size:var(--jp-code-font-size);line-height:1.4;
padding:4px 6px;margin:2px 0;border-radius:2px;white-space:pre-wrap;overflow-wrap:anywhere}
.agentloop-code span[class^="k"],.agentloop-code .ow{color:var(--agentloop-code-keyword)}
.agentloop-code span[class^="s"],.agentloop-code .dl{color:var(--agentloop-code-string)}
.agentloop-code span[class^="m"],.agentloop-code .il{color:var(--agentloop-code-number)}
.agentloop-code span[class^="c"]{color:var(--agentloop-code-comment);font-style:italic}
.agentloop-code .o{color:var(--agentloop-code-operator)}
.agentloop-code .nb,.agentloop-code .bp{color:var(--agentloop-code-builtin)}
.agentloop-code .nf,.agentloop-code .fm,.agentloop-code .nc,.agentloop-code .nn{
color:var(--agentloop-code-def)}
.agentloop-code .nd{color:var(--agentloop-code-meta)}
.agentloop-code .err{color:var(--agentloop-error)}
.agentloop-code .gi{color:var(--agentloop-ok)}
.agentloop-code .gd{color:var(--agentloop-error)}
.agentloop-code .gh,.agentloop-code .gu{color:var(--agentloop-accent);font-weight:bold}
"""

_VIEW = """
.agentloop-root{color:var(--jp-content-font-color1);font-family:var(--jp-content-font-family);
font-size:var(--jp-content-font-size1);line-height:1.4;overflow-wrap:anywhere;min-width:0}
.agentloop-box{margin:2px 0;padding:2px 6px;border-radius:4px}
.agentloop-plain{white-space:pre-wrap}
.agentloop-muted{color:var(--agentloop-muted);font-size:85%}
.agentloop-user{background:var(--jp-layout-color2);color:var(--jp-content-font-color1);
border-left:3px solid var(--jp-brand-color1)}
.agentloop-source-steer{border-left-color:var(--jp-warn-color1)}
.agentloop-source-inject{border-left-color:var(--jp-info-color1)}
.agentloop-assistant p,.agentloop-assistant ul,.agentloop-assistant ol,
.agentloop-assistant pre,.agentloop-assistant table{margin:0.25em 0}
.agentloop-assistant pre{background:var(--jp-layout-color2);padding:4px;overflow-x:auto;
white-space:pre-wrap}
.agentloop-assistant code{background:var(--jp-layout-color2);border-radius:2px}
.agentloop-assistant a,.agentloop-root a{color:var(--agentloop-link)}
.agentloop-assistant th,.agentloop-assistant td{border:1px solid var(--jp-border-color2);
padding:1px 4px}
.agentloop-reasoning{color:var(--agentloop-muted);white-space:pre-wrap}
.agentloop-turn-start{border-top:1px solid var(--jp-border-color2);margin-top:6px}
.agentloop-tool-call{border-left:3px solid var(--jp-border-color1)}
.agentloop-tool-result{white-space:pre-wrap;color:var(--agentloop-muted);
max-height:16em;overflow:auto}
.agentloop-error,.agentloop-tool-failed .agentloop-tool-state,.agentloop-tool-invalid
.agentloop-tool-state,.agentloop-notice{color:var(--agentloop-error)}
.agentloop-retry,.agentloop-interrupted,.agentloop-tool-aborted .agentloop-tool-state,
.agentloop-tool-cancelled .agentloop-tool-state{color:var(--agentloop-warn)}
.agentloop-tool-running{border-left-color:var(--jp-brand-color1)}
.agentloop-tool-done{border-left-color:var(--jp-success-color1)}
.agentloop-tool-failed,.agentloop-tool-invalid{border-left-color:var(--jp-error-color1)}
.agentloop-tool-aborted,.agentloop-tool-denied,.agentloop-tool-cancelled{
border-left-color:var(--jp-warn-color1)}
.agentloop-tool-running .agentloop-tool-state{color:var(--agentloop-accent)}
.agentloop-tool-awaiting-approval .agentloop-tool-state{color:var(--agentloop-info)}
.agentloop-tool-done .agentloop-tool-state{color:var(--agentloop-ok)}
.agentloop-tool-queued .agentloop-tool-state,.agentloop-tool-streaming .agentloop-tool-state,
.agentloop-tool-dropped .agentloop-tool-state{color:var(--agentloop-muted)}
.agentloop-status{padding:1px 6px;border-radius:8px;background:var(--jp-layout-color3);
color:var(--jp-ui-font-color0)}
.agentloop-status-running{background:var(--agentloop-accent);color:var(--jp-layout-color1)}
.agentloop-spinner{display:inline-block;width:0.8em;height:0.8em;margin-right:4px;
vertical-align:-0.1em;border:2px solid var(--jp-layout-color1);
border-right-color:transparent;border-radius:50%;animation:agentloop-spin 0.8s linear infinite}
@keyframes agentloop-spin{to{transform:rotate(360deg)}}
.agentloop-clock{animation:agentloop-clock-s 60s steps(60,end) infinite,
agentloop-clock-m 360000s steps(6000,end) forwards;
counter-reset:agentloop-clock-m var(--agentloop-clock-m) agentloop-clock-s var(--agentloop-clock-s)}
.agentloop-clock::after{content:counter(agentloop-clock-m) ":"
counter(agentloop-clock-s,decimal-leading-zero)}
@property --agentloop-clock-s{syntax:"<integer>";inherits:false;initial-value:0}
@property --agentloop-clock-m{syntax:"<integer>";inherits:false;initial-value:0}
@keyframes agentloop-clock-s{to{--agentloop-clock-s:60}}
@keyframes agentloop-clock-m{to{--agentloop-clock-m:6000}}
.agentloop-pool-table{font-size:85%;width:100%;border-collapse:collapse}
.agentloop-pool-state,.agentloop-pool-duration{white-space:nowrap;padding:0 6px}
.agentloop-pool-title{color:var(--agentloop-muted);font-size:85%}
.agentloop-track{position:relative;height:10px;background:var(--jp-layout-color3)}
.agentloop-bar{position:absolute;top:0;bottom:0;background:var(--jp-ui-font-color3)}
.agentloop-bar-running{background:var(--jp-brand-color1)}
.agentloop-bar-awaiting-approval{background:var(--jp-info-color1)}
.agentloop-bar-done{background:var(--jp-success-color1)}
.agentloop-bar-failed,.agentloop-bar-invalid{background:var(--jp-error-color1)}
.agentloop-bar-aborted,.agentloop-bar-denied,.agentloop-bar-cancelled{
background:var(--jp-warn-color1)}
.agentloop-pool-running .agentloop-pool-state{color:var(--agentloop-accent)}
.agentloop-pool-done .agentloop-pool-state{color:var(--agentloop-ok)}
.agentloop-pool-failed .agentloop-pool-state,.agentloop-pool-invalid .agentloop-pool-state{
color:var(--agentloop-error)}
.agentloop-pool-aborted .agentloop-pool-state,.agentloop-pool-denied .agentloop-pool-state,
.agentloop-pool-cancelled .agentloop-pool-state{color:var(--agentloop-warn)}
.agentloop-pool-awaiting-approval .agentloop-pool-state{color:var(--agentloop-info)}
.agentloop-scroll{display:flex;flex-direction:column-reverse;max-height:32em;overflow-y:auto;
position:relative}
.agentloop-scroll>.agentloop-body,.agentloop-body>*,.agentloop-turn>*{flex-shrink:0}
.agentloop-item{margin:0 !important}
.agentloop-root .widget-html-content{line-height:1.45 !important}
.agentloop-flow{display:block !important;white-space:pre-wrap}
.agentloop-flow>.agentloop-segment,.agentloop-flow>.agentloop-segment>.widget-html-content{
display:inline !important;margin:0 !important;padding:0 !important;height:auto !important;
min-height:0 !important;line-height:inherit !important;white-space:pre-wrap !important}
.agentloop-inbox-item{background:var(--jp-layout-color2);border-radius:4px;padding:0 4px}
.agentloop-child-toggle,.agentloop-fork,.agentloop-elsewhere-toggle{font-size:85%;
height:auto;line-height:1.6;padding:0 8px;margin:1px 0}
.agentloop-elsewhere-turns{margin-left:14px;padding-left:6px;border-left:2px dashed
var(--jp-border-color2)}
.agentloop-elsewhere-static>summary{color:var(--agentloop-muted);font-size:85%}
.agentloop-root .jupyter-button.agentloop-fork{color:var(--jp-ui-font-color1)}
.agentloop-child-view{margin-left:14px;padding-left:6px;border-left:2px solid
var(--jp-border-color2)}
.agentloop-root .jupyter-button.mod-primary{background:var(--agentloop-accent);
color:var(--jp-layout-color1)}
.agentloop-root .jupyter-button.mod-success{background:var(--agentloop-ok);
color:var(--jp-layout-color1)}
.agentloop-root .jupyter-button.mod-warning{background:var(--agentloop-warn);
color:var(--jp-layout-color1)}
.agentloop-root .jupyter-button.mod-danger{background:var(--agentloop-error);
color:var(--jp-layout-color1)}
"""

STYLE = _PALETTE + _CODE + _VIEW
"""The view's stylesheet. ``.agentloop-scroll`` lays its children out bottom-up, so the browser
keeps a growing transcript scrolled to its end (auto-scroll without script) unless the reader
scrolled up; nothing inside it may shrink (widget boxes are ``overflow: auto`` flex items, which
a height limit would otherwise squeeze until they clip their own content). Buttons with a
``button_style`` get the palette's colours (ipywidgets' own warning and success buttons are
white on orange or green, below AA in the light theme)."""


__all__ = ["STYLE"]
