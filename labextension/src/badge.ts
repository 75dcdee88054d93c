/**
 * The badge plugin: a cell whose metadata carries `agentloop` (an agent inserted or replaced
 * it) shows a small badge with the agent's name; hovering it shows agent, turn and call id.
 */

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import type { Cell } from '@jupyterlab/cells';
import { INotebookTracker } from '@jupyterlab/notebook';

import { CATEGORY, CommandIds } from './bridge';
import { CellWatcher } from './cells';
import type { IAgentStamp } from './protocol';

const CELL_CLASS = 'agentloop-mod-agent';
const BADGE_CLASS = 'agentloop-badge';
const HIDDEN_CLASS = 'agentloop-mod-badges-hidden';

/** The hover text of a badge: who wrote the cell, in which turn, through which call. */
export function badgeTitle(stamp: IAgentStamp): string {
  const lines = [`Written by agent ${stamp.agent || '(unnamed)'}`];
  if (stamp.turn !== undefined) {
    lines.push(`turn ${stamp.turn}`);
  }
  if (stamp.call_id) {
    lines.push(`call ${stamp.call_id}`);
  }
  if (stamp.session) {
    lines.push(`session ${stamp.session}`);
  }
  return lines.join('\n');
}

function syncBadge(cell: Cell): void {
  const stamp = cell.model.getMetadata('agentloop') as IAgentStamp | undefined;
  let badge = cell.node.querySelector<HTMLElement>(`:scope > .${BADGE_CLASS}`);
  if (!stamp || typeof stamp !== 'object') {
    badge?.remove();
    cell.node.classList.remove(CELL_CLASS);
    return;
  }
  if (!badge) {
    badge = document.createElement('div');
    badge.className = BADGE_CLASS;
    badge.setAttribute('role', 'note');
    cell.node.appendChild(badge);
  }
  cell.node.classList.add(CELL_CLASS);
  const name = String(stamp.agent || 'agent');
  badge.textContent = name;
  badge.title = badgeTitle(stamp);
  badge.setAttribute('aria-label', badgeTitle(stamp).replace(/\n/g, ', '));
  badge.dataset.agent = name;
}

export const badgePlugin: JupyterFrontEndPlugin<void> = {
  id: 'agentloop-nb:badge',
  description: 'Marks the cells an agent wrote with a badge naming the agent.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, palette: ICommandPalette | null) => {
    const watch = (panel: Parameters<Parameters<typeof tracker.widgetAdded.connect>[0]>[1]) => {
      const watcher = new CellWatcher(panel, syncBadge);
      panel.disposed.connect(() => watcher.dispose());
    };
    tracker.forEach(watch);
    tracker.widgetAdded.connect((_, panel) => watch(panel));

    app.commands.addCommand(CommandIds.toggleBadges, {
      label: 'Show Agent Badges on Cells',
      caption: 'Mark the cells an agent wrote with the agent’s name',
      isToggled: () => !document.body.classList.contains(HIDDEN_CLASS),
      execute: () => {
        document.body.classList.toggle(HIDDEN_CLASS);
        app.commands.notifyCommandChanged(CommandIds.toggleBadges);
      }
    });
    palette?.addItem({ command: CommandIds.toggleBadges, category: CATEGORY });
  }
};
