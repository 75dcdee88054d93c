/**
 * The "Fix with agent" plugin: under every error output of a code cell, while the notebook's
 * bridge is connected, a button that sends `{"type": "action", "action": "fix", "cell_id"}` to
 * the kernel. The palette command does the same for the active cell. The kernel answers with a
 * `notice` (which agent took the cell, or why nothing started), shown beside the button; after
 * an error notice the button can be clicked again.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { type Cell, CodeCell } from '@jupyterlab/cells';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';

import { CATEGORY, CommandIds } from './bridge';
import type { INoticeMessage } from './protocol';
import { CellWatcher } from './cells';
import { INotebookBridge, type IBridgeConnection } from './tokens';

const BAR_CLASS = 'agentloop-fix';
const BUTTON_CLASS = 'agentloop-fix-button';
const NOTICE_CLASS = 'agentloop-fix-notice';
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

/** Show the kernel's notice about a fix request beside that cell's button. */
function showNotice(panel: NotebookPanel, notice: INoticeMessage): void {
  const cell = panel.content.widgets.find(c => c.model.id === notice.cell_id);
  const bar = cell?.node.querySelector<HTMLElement>(`.${BAR_CLASS}`);
  if (!bar) {
    return; // the error is gone (fixed, cleared) or the cell was deleted meanwhile
  }
  let note = bar.querySelector<HTMLElement>(`.${NOTICE_CLASS}`);
  if (!note) {
    note = document.createElement('span');
    note.className = NOTICE_CLASS;
    note.setAttribute('role', 'status');
    bar.appendChild(note);
  }
  note.textContent = notice.text;
  note.classList.toggle('agentloop-mod-error', notice.level === 'error');
  const button = bar.querySelector<HTMLButtonElement>(`.${BUTTON_CLASS}`);
  if (button && notice.level === 'error') {
    button.textContent = FIX_LABEL;
    button.disabled = false;
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
      connection.noticed.connect((_, notice) => showNotice(connection.panel, notice));
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
