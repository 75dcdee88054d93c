/**
 * agentloop-nb: JupyterLab's half of agentloop_nb's notebook bridge.
 *
 * - `agentloop-nb:bridge` — the comm `agentloop.notebook` of each notebook panel, which lets
 *   agents in the kernel read and edit the notebook (provides `INotebookBridge`);
 * - `agentloop-nb:badge` — a badge naming the agent on every cell an agent wrote;
 * - `agentloop-nb:fix-button` — "Fix with agent" under error outputs.
 */

import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { badgePlugin } from './badge';
import { bridgePlugin } from './bridge';
import { fixPlugin } from './fix';

export { INotebookBridge } from './tokens';
export type { IBridgeConnection } from './tokens';
export type { IActionMessage, IAgentInfo, IAgentsMessage } from './protocol';

const plugins: JupyterFrontEndPlugin<any>[] = [bridgePlugin, badgePlugin, fixPlugin];

export default plugins;
