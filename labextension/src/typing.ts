/**
 * Which cells the user is typing in: an agent edit must never overwrite keystrokes the agent
 * did not see. A cell counts as "editing" for `EDITING_MS` after the last key or text input in
 * its editor.
 */

import type { NotebookPanel } from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

export const EDITING_MS = 2000;

// Keys that change nothing by themselves (a modifier, navigation) do not count as typing.
const NEUTRAL_KEYS = new Set([
  'Shift',
  'Control',
  'Alt',
  'Meta',
  'CapsLock',
  'Escape',
  'ArrowUp',
  'ArrowDown',
  'ArrowLeft',
  'ArrowRight',
  'PageUp',
  'PageDown',
  'Home',
  'End',
  'Tab'
]);

export class TypingTracker implements IDisposable {
  private readonly lastTyped = new Map<string, number>();
  private disposed = false;

  constructor(private readonly panel: NotebookPanel) {
    // Capture phase: CodeMirror handles (and may stop) the events on the editor itself.
    panel.content.node.addEventListener('keydown', this.onKey, true);
    panel.content.node.addEventListener('beforeinput', this.onInput, true);
    panel.content.node.addEventListener('paste', this.onInput, true);
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /** True if the user typed in cell `id`'s editor in the last `EDITING_MS`. */
  isEditing(id: string): boolean {
    const at = this.lastTyped.get(id);
    return at !== undefined && performance.now() - at < EDITING_MS;
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    this.panel.content.node.removeEventListener('keydown', this.onKey, true);
    this.panel.content.node.removeEventListener('beforeinput', this.onInput, true);
    this.panel.content.node.removeEventListener('paste', this.onInput, true);
    this.lastTyped.clear();
  }

  private readonly onKey = (event: KeyboardEvent): void => {
    if (NEUTRAL_KEYS.has(event.key) || (event.ctrlKey && event.key === 'Enter')) {
      return;
    }
    if (event.shiftKey && event.key === 'Enter') {
      return; // runs the cell, changes no text
    }
    this.mark(event.target);
  };

  private readonly onInput = (event: Event): void => {
    this.mark(event.target);
  };

  private mark(target: EventTarget | null): void {
    if (!(target instanceof Element) || !target.closest('.jp-InputArea-editor')) {
      return;
    }
    const cell = this.panel.content.widgets.find(w => w.node.contains(target));
    if (cell) {
      this.lastTyped.set(cell.model.id, performance.now());
    }
  }
}
