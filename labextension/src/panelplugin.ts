/**
 * The Agents panel plugin: the panel in the right sidebar (restored across reloads), the
 * commands "Agents: Show Panel" (Alt+Shift+G) and "Ask Agent About Selection" (Alt+Shift+Q;
 * also in the context menu of cell editors and outputs), and the panel following the
 * notebook in focus.
 */

import {
  ILabShell,
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';

import { CATEGORY } from './bridge';
import { AgentsPanel, agentsIcon, PANEL_ID } from './panel';
import { cellOf, editorRef, type ICellRef, outputRef } from './selection';
import { INotebookBridge } from './tokens';

export const PanelCommandIds = {
  show: 'agentloop:show-agents-panel',
  ask: 'agentloop:ask-about-selection'
};

const EDITOR_SELECTOR = '.jp-Notebook .jp-Cell .jp-InputArea-editor';
const OUTPUT_SELECTOR = '.jp-Notebook .jp-OutputArea-output';

function isIn(node: Node, selector: string): boolean {
  const el = node instanceof Element ? node : node.parentElement;
  return el !== null && el.closest(selector) !== null;
}

/** The notebook panel whose DOM holds `node`. */
function notebookOf(tracker: INotebookTracker, node: Node): NotebookPanel | null {
  return tracker.find(panel => panel.content.node.contains(node)) ?? null;
}

/** The reference for the selection under `node` (an editor or an output), or null. */
function refAt(tracker: INotebookTracker, node: Node): [NotebookPanel, ICellRef] | null {
  const panel = notebookOf(tracker, node);
  const cell = panel ? cellOf(panel.content, node) : null;
  if (!panel || !cell) {
    return null;
  }
  const ref = isIn(node, '.jp-OutputArea')
    ? outputRef(panel.content, cell, node)
    : editorRef(panel.content, cell);
  return ref ? [panel, ref] : null;
}

/** The reference the keyboard shortcut means: the focused editor, else a selected output,
 * else the active cell's editor. */
function refFromFocus(tracker: INotebookTracker): [NotebookPanel, ICellRef] | null {
  const focused = document.activeElement;
  if (focused && isIn(focused, EDITOR_SELECTOR)) {
    const found = refAt(tracker, focused);
    if (found) {
      return found;
    }
  }
  const anchor = window.getSelection()?.anchorNode ?? null;
  if (anchor && isIn(anchor, OUTPUT_SELECTOR)) {
    const found = refAt(tracker, anchor);
    if (found) {
      return found;
    }
  }
  const panel = tracker.currentWidget;
  const cell = tracker.activeCell;
  const ref = panel && cell ? editorRef(panel.content, cell) : null;
  return panel && ref ? [panel, ref] : null;
}

export const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'agentloop-nb:agents-panel',
  description: "The Agents side panel: the kernel's agents, a live view and a prompt box.",
  autoStart: true,
  requires: [INotebookTracker, INotebookBridge],
  optional: [ICommandPalette, ILayoutRestorer, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    bridge: INotebookBridge,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null
  ) => {
    const panel = new AgentsPanel(bridge);
    app.shell.add(panel, 'right', { rank: 650 });
    restorer?.add(panel, PANEL_ID);
    tracker.currentChanged.connect((_, current) => panel.follow(current));
    panel.follow(tracker.currentWidget);
    // Closing the followed notebook: follow whichever notebook is current now (or none).
    labShell?.layoutModified.connect(() => panel.follow(tracker.currentWidget));

    const show = (): void => {
      if (!panel.isAttached) {
        app.shell.add(panel, 'right', { rank: 650 });
      }
      app.shell.activateById(panel.id);
    };

    app.commands.addCommand(PanelCommandIds.show, {
      label: 'Agents: Show Panel',
      caption: "Show the agents of the current notebook's kernel",
      icon: agentsIcon,
      execute: () => {
        show();
        panel.focusInput();
      }
    });
    app.commands.addKeyBinding({
      command: PanelCommandIds.show,
      keys: ['Alt Shift G'],
      selector: 'body'
    });

    app.commands.addCommand(PanelCommandIds.ask, {
      label: 'Ask Agent About Selection',
      caption: 'Attach the selected lines or output to the Agents panel prompt',
      icon: agentsIcon,
      isEnabled: () => tracker.currentWidget !== null,
      execute: args => {
        const node =
          args.via === 'menu'
            ? app.contextMenuHitTest(n => n.matches('.jp-OutputArea-output, .jp-InputArea-editor'))
            : undefined;
        const found = node ? refAt(tracker, node) : refFromFocus(tracker);
        if (!found) {
          return;
        }
        show();
        panel.addRef(found[0], found[1]);
      }
    });
    app.commands.addKeyBinding({
      command: PanelCommandIds.ask,
      keys: ['Alt Shift Q'],
      selector: '.jp-Notebook'
    });
    for (const selector of [EDITOR_SELECTOR, OUTPUT_SELECTOR]) {
      app.contextMenu.addItem({
        command: PanelCommandIds.ask,
        selector,
        rank: 0,
        args: { via: 'menu' }
      });
    }
    palette?.addItem({ command: PanelCommandIds.show, category: CATEGORY });
    palette?.addItem({ command: PanelCommandIds.ask, category: CATEGORY });
  }
};
