/**
 * The "Fix with agent" plugin: under every error output of a code cell, while the notebook's
 * bridge is connected, a button that sends `{"type": "action", "action": "fix", "cell_id"}` to
 * the kernel. The palette command does the same for the active cell.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { type Cell, CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';

import { CATEGORY, CommandIds } from './bridge';
import { CellWatcher } from './cells';
import { INotebookBridge, type IBridgeConnection } from './tokens';

const BAR_CLASS = 'agentloop-fix';
const BUTTON_CLASS = 'agentloop-fix-button';
export const FIX_LABEL = 'Fix with agent';

function hasError(cell: Cell): boolean {
  if (!(cell instanceof CodeCell)) {
    return false;
  }
  const outputs = cell.model.outputs;
  for (let i = 0; i < outputs.length; i++) {
    if (outputs.get(i).type === 'error') {
      return true;
    }
  }
  return false;
}

function sendFix(connection: IBridgeConnection, cellId: string): boolean {
  return connection.sendAction({ action: 'fix', cell_id: cellId, agent: '' });
}

function syncButton(cell: Cell, connection: IBridgeConnection): void {
  const area = cell instanceof CodeCell ? cell.outputArea.node : null;
  let bar = cell.node.querySelector<HTMLElement>(`.${BAR_CLASS}`);
  if (!area || !connection.connected || !hasError(cell)) {
    bar?.remove();
    return;
  }
  if (!bar) {
    bar = document.createElement('div');
    bar.className = BAR_CLASS;
    const button = document.createElement('button');
    button.type = 'button';
    button.className = BUTTON_CLASS;
    button.textContent = FIX_LABEL;
    button.title = 'Ask the agent to read this error and fix the cell';
    button.addEventListener('click', event => {
      event.stopPropagation();
      if (sendFix(connection, cell.model.id)) {
        button.textContent = 'Sent to the agent';
        button.disabled = true;
      }
    });
    bar.appendChild(button);
  }
  if (bar.previousElementSibling !== area) {
    area.insertAdjacentElement('afterend', bar);
  }
}

export const fixPlugin: JupyterFrontEndPlugin<void> = {
  id: 'agentloop-nb:fix-button',
  description: 'Adds a "Fix with agent" button under error outputs.',
  autoStart: true,
  requires: [INotebookTracker, INotebookBridge],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    bridge: INotebookBridge,
    palette: ICommandPalette | null
  ) => {
    const decorate = (connection: IBridgeConnection) => {
      const watcher = new CellWatcher(connection.panel, cell => syncButton(cell, connection));
      connection.connectedChanged.connect(() => watcher.refresh());
      connection.panel.disposed.connect(() => watcher.dispose());
    };
    bridge.connectionAdded.connect((_, connection) => decorate(connection));
    tracker.forEach(panel => {
      const connection = bridge.connectionFor(panel);
      if (connection) {
        decorate(connection);
      }
    });

    const active = (): [IBridgeConnection, Cell] | null => {
      const panel: NotebookPanel | null = tracker.currentWidget;
      const cell = tracker.activeCell;
      const connection = panel ? bridge.connectionFor(panel) : null;
      return connection && cell ? [connection, cell] : null;
    };
    app.commands.addCommand(CommandIds.fixActive, {
      label: 'Fix the Active Cell with the Agent',
      caption: 'Send the active cell’s error to the agent',
      isEnabled: () => {
        const found = active();
        return found !== null && found[0].connected && hasError(found[1]);
      },
      execute: () => {
        const found = active();
        if (found) {
          sendFix(found[0], found[1].model.id);
        }
      }
    });
    palette?.addItem({ command: CommandIds.fixActive, category: CATEGORY });
  }
};
