/**
 * agentloop-nb: JupyterLab's half of agentloop_nb's notebook bridge.
 *
 * - `agentloop-nb:bridge` — the comm `agentloop.notebook` of each notebook panel, which lets
 *   agents in the kernel read and edit the notebook (provides `INotebookBridge`);
 * - `agentloop-nb:badge` — a badge naming the agent on every cell an agent wrote;
 * - `agentloop-nb:fix-button` — "Fix with agent" under error outputs;
 * - `agentloop-nb:agents-panel` — the Agents side panel and "Ask agent about selection".
 */

import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { badgePlugin } from './badge';
import { bridgePlugin } from './bridge';
import { fixPlugin } from './fix';
import { panelPlugin } from './panelplugin';

export { INotebookBridge } from './tokens';
export type { IBridgeConnection } from './tokens';
export type { IActionMessage, IAgentInfo, IAgentsMessage } from './protocol';

const plugins: JupyterFrontEndPlugin<any>[] = [bridgePlugin, badgePlugin, fixPlugin, panelPlugin];

export default plugins;
