/**
 * Tokens the extension's plugins provide, so later plugins (an Agents side panel) can reuse
 * the per-notebook bridge connection without opening a second comm.
 */

import type { NotebookPanel } from '@jupyterlab/notebook';
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { IActionMessage, IAgentInfo, INoticeMessage } from './protocol';

/** One notebook panel's comm to its kernel. */
export interface IBridgeConnection {
  /** The notebook panel this connection belongs to. */
  readonly panel: NotebookPanel;
  /** True while the comm is open and the kernel welcomed it. */
  readonly connected: boolean;
  /** Emits the new `connected` value whenever it changes. */
  readonly connectedChanged: ISignal<IBridgeConnection, boolean>;
  /** The last `agents` list the kernel pushed (empty until the first push). */
  readonly agents: readonly IAgentInfo[];
  /** Emits every `agents` push from the kernel. */
  readonly agentsChanged: ISignal<IBridgeConnection, readonly IAgentInfo[]>;
  /** Emits every `notice` from the kernel (its answer to a `fix` action). */
  readonly noticed: ISignal<IBridgeConnection, INoticeMessage>;
  /**
   * Send a notification to the kernel (`fix`, `prompt`, `cancel`, `create`, `list`).
   * Returns false (and sends nothing) while the comm is not connected.
   */
  sendAction(action: Omit<IActionMessage, 'type'>): boolean;
  /** Probe the kernel again and open the comm when it has the target. */
  reconnect(): Promise<void>;
}

/** The bridge plugin's service: the connection of each open notebook panel. */
export interface INotebookBridge {
  /** The connection of `panel`, or null for a panel the bridge does not track (yet). */
  connectionFor(panel: NotebookPanel): IBridgeConnection | null;
  /** Emits each new connection (one per notebook panel, made when the panel opens). */
  readonly connectionAdded: ISignal<INotebookBridge, IBridgeConnection>;
}

export const INotebookBridge = new Token<INotebookBridge>(
  'agentloop-nb:INotebookBridge',
  'The comm between each notebook panel and the agentloop_nb extension in its kernel.'
);
