"""``JumpToLatest``: the "jump to latest" button of a transcript's scroll box.

The transcript box is laid out bottom-up (``flex-direction: column-reverse``), so the browser
itself keeps it pinned to the newest content while the reader has not scrolled up, and leaves
it where it is once they have (the chat convention). What script cannot be avoided for is the
way back: this anywidget sits at the bottom of the box (``position: sticky``), shows a button
while the reader is more than a few lines away from the newest content, and scrolls back to it
on a click. The browser code is a few lines shipped with the class (no front-end build).
"""

from __future__ import annotations

import anywidget

_ESM = """
function render({ el }) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "agentloop-jump";
  button.textContent = "\\u2193 jump to latest";
  button.title = "scroll to the newest output (the view follows it again)";
  el.appendChild(button);
  let box = null;
  let tries = 0;
  // In a column-reverse box scrollTop is 0 at the newest content and negative above it.
  const update = () => {
    const away = box !== null && Math.abs(box.scrollTop) > 48;
    button.classList.toggle("agentloop-jump-shown", away);
  };
  const attach = () => {
    box = el.closest(".agentloop-scroll");
    if (box === null) {
      if (tries++ < 600) requestAnimationFrame(attach);  // not in the page yet
      return;
    }
    box.addEventListener("scroll", update, { passive: true });
    update();
  };
  button.addEventListener("click", () => {
    if (box !== null) box.scrollTop = 0;
    update();
  });
  attach();
  return () => { if (box !== null) box.removeEventListener("scroll", update); };
}
export default { render };
"""

_CSS = """
.agentloop-jump-bar{position:sticky;bottom:0;height:0;overflow:visible;flex:none;
align-self:stretch;margin:0;z-index:2}
.agentloop-jump{display:none;position:absolute;right:12px;bottom:6px;cursor:pointer;
padding:2px 10px;border-radius:10px;border:1px solid var(--jp-border-color1);
background:var(--jp-layout-color1);color:var(--jp-ui-font-color1);
font-family:var(--jp-ui-font-family);font-size:var(--jp-ui-font-size1);
box-shadow:var(--jp-elevation-z2)}
.agentloop-jump.agentloop-jump-shown{display:block}
"""


class JumpToLatest(anywidget.AnyWidget):
    """The sticky "jump to latest" button of one transcript box (no traits: it only reads
    the box's scroll position in the browser)."""

    _esm = _ESM
    _css = _CSS

    def __init__(self) -> None:
        super().__init__()
        self.add_class("agentloop-jump-bar")


__all__ = ["JumpToLatest"]
