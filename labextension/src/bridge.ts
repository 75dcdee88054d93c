/**
 * The bridge plugin: one `BridgeConnection` per notebook panel (docs/notebook-bridge.md),
 * provided as `INotebookBridge`, and a palette command that reconnects the current notebook.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';

import { BridgeConnection } from './connection';
import { INotebookBridge, type IBridgeConnection } from './tokens';

export const CommandIds = {
  reconnect: 'agentloop:reconnect-bridge',
  fixActive: 'agentloop:fix-active-cell',
  toggleBadges: 'agentloop:toggle-badges'
};

export const CATEGORY = 'Agents';

class NotebookBridge implements INotebookBridge {
  readonly connectionAdded: Signal<INotebookBridge, IBridgeConnection> = new Signal(this);
  private readonly connections = new WeakMap<NotebookPanel, BridgeConnection>();

  connectionFor(panel: NotebookPanel): IBridgeConnection | null {
    return this.connections.get(panel) ?? null;
  }

  track(panel: NotebookPanel): void {
    if (this.connections.has(panel)) {
      return;
    }
    void panel.sessionContext.ready.then(() => {
      if (panel.isDisposed || this.connections.has(panel)) {
        return;
      }
      const connection = new BridgeConnection(panel);
      this.connections.set(panel, connection);
      panel.disposed.connect(() => {
        connection.dispose();
        this.connections.delete(panel);
      });
      this.connectionAdded.emit(connection);
    });
  }
}

export const bridgePlugin: JupyterFrontEndPlugin<INotebookBridge> = {
  id: 'agentloop-nb:bridge',
  description: 'Connects every notebook to the agentloop_nb extension in its kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  provides: INotebookBridge,
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null
  ): INotebookBridge => {
    const bridge = new NotebookBridge();
    tracker.forEach(panel => bridge.track(panel));
    tracker.widgetAdded.connect((_, panel) => bridge.track(panel));

    app.commands.addCommand(CommandIds.reconnect, {
      label: 'Reconnect the Notebook to Its Agents',
      caption: 'Probe the kernel for agentloop_nb and open the notebook bridge',
      isEnabled: () => tracker.currentWidget !== null,
      execute: async () => {
        const panel = tracker.currentWidget;
        const connection = panel ? bridge.connectionFor(panel) : null;
        await connection?.reconnect();
      }
    });
    palette?.addItem({ command: CommandIds.reconnect, category: CATEGORY });
    return bridge;
  }
};
