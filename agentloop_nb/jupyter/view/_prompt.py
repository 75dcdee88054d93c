"""``PromptBox``: the follow-up box, a small textarea widget that sends on Ctrl/Cmd+Enter
(or, with ``enter_sends``, on Enter, Shift+Enter making a new line).

ipywidgets' ``Textarea`` reports no key events, so it cannot tell Enter from Ctrl+Enter. This
is an anywidget (a few lines of browser code shipped with the Python class, no front-end build
step or separate extension to install): the textarea syncs ``value`` as the person types and,
on Ctrl+Enter or Cmd+Enter, sends ``{"event": "submit", "value": ...}``, which calls the
``on_submit`` callbacks with the text. The key press does not reach JupyterLab (it would run
the cell instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anywidget
import traitlets

_ESM = """
function render({ model, el }) {
  const box = document.createElement("textarea");
  box.className = "agentloop-prompt-input";
  box.rows = 2;
  box.placeholder = model.get("placeholder");
  box.value = model.get("value");
  box.addEventListener("input", () => {
    model.set("value", box.value);
    model.save_changes();
  });
  box.addEventListener("keydown", (e) => {
    const plain = model.get("enter_sends") && !e.shiftKey && !e.altKey && !e.isComposing;
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey || plain)) {
      e.preventDefault();
      e.stopPropagation();
      model.set("value", box.value);
      model.save_changes();
      model.send({ event: "submit", value: box.value });
    }
  });
  model.on("change:value", () => {
    if (box.value !== model.get("value")) box.value = model.get("value");
  });
  model.on("change:placeholder", () => { box.placeholder = model.get("placeholder"); });
  el.appendChild(box);
}
export default { render };
"""

_CSS = """
.agentloop-prompt-input{width:100%;box-sizing:border-box;resize:vertical;
font-family:var(--jp-content-font-family);font-size:var(--jp-content-font-size1);
color:var(--jp-ui-font-color1);background:var(--jp-layout-color1);
border:1px solid var(--jp-border-color1);border-radius:2px;padding:4px}
.agentloop-prompt-input:focus{outline:1px solid var(--jp-brand-color1)}
"""


class PromptBox(anywidget.AnyWidget):
    """A textarea whose Ctrl/Cmd+Enter calls the :meth:`on_submit` callbacks with its text.

    ``value`` is the text (settable from Python, e.g. cleared after sending); ``placeholder``
    the hint shown while empty; ``enter_sends`` makes a plain Enter send too (Shift+Enter
    then types a new line), as chat boxes do."""

    _esm = _ESM
    _css = _CSS
    value = traitlets.Unicode("").tag(sync=True)
    placeholder = traitlets.Unicode("").tag(sync=True)
    enter_sends = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_class("agentloop-prompt")
        self._submit_callbacks: list[Callable[[str], None]] = []
        self.on_msg(self._on_front_end_msg)

    def on_submit(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(text)`` when the person presses Ctrl/Cmd+Enter."""
        self._submit_callbacks.append(callback)

    def submit(self, text: str | None = None) -> None:
        """What Ctrl/Cmd+Enter does: set ``value`` (when given) and call the callbacks."""
        if text is not None:
            self.value = text
        for callback in list(self._submit_callbacks):
            callback(self.value)

    def _on_front_end_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "submit":
            value = content.get("value")
            self.submit(value if isinstance(value, str) else None)


__all__ = ["PromptBox"]
