/**
 * The operations a kernel request performs on one notebook panel. Every edit goes through
 * the notebook's shared model, so it syncs under real-time collaboration, is undoable from
 * the cell (Ctrl+Z) and is saved like a user's edit.
 */

import { type Cell, CodeCell, type ICellModel, type ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { JSONObject } from '@lumino/coreutils';

import {
  BridgeError,
  type IAgentStamp,
  type ICellInfo,
  type IDeleteArgs,
  type IInsertArgs,
  type IReplaceArgs,
  type IRunArgs
} from './protocol';
import type { TypingTracker } from './typing';

/** Operations on one panel; `typing` says which cells the user is typing in. */
export class NotebookOperations {
  constructor(
    private readonly panel: NotebookPanel,
    private readonly typing: TypingTracker
  ) {}

  snapshot(): JSONObject {
    const model = this.model();
    const cells: ICellInfo[] = [];
    for (let i = 0; i < model.cells.length; i++) {
      cells.push(this.describe(model.cells.get(i)));
    }
    return { path: this.panel.context.localPath, cells } as unknown as JSONObject;
  }

  insert(args: IInsertArgs): JSONObject {
    const model = this.model();
    const count = model.cells.length;
    if (args.index < 0 || args.index > count) {
      throw new BridgeError(
        'bad-request',
        `index ${args.index} is out of range: the notebook has ${count} cells, so 0..${count}`
      );
    }
    const metadata: JSONObject = {};
    if (args.metadata?.agentloop) {
      metadata.agentloop = args.metadata.agentloop as JSONObject;
    }
    model.sharedModel.insertCell(args.index, {
      cell_type: args.cell_type,
      source: args.source,
      metadata
    });
    return { cell: this.describe(model.cells.get(args.index)) } as unknown as JSONObject;
  }

  replace(args: IReplaceArgs): JSONObject {
    const cell = this.editable(args.id, args.expected_source);
    const shared = cell.sharedModel;
    const stamp: IAgentStamp | undefined = args.metadata?.agentloop;
    // One transaction of the cell itself: its undo manager tracks the cell as origin, so a
    // single Ctrl+Z in the cell restores the old source (and drops the agent's stamp).
    shared.transact(() => {
      shared.setSource(args.source);
      if (stamp) {
        shared.setMetadata('agentloop', stamp as JSONObject);
      }
    });
    return { cell: this.describe(cell) } as unknown as JSONObject;
  }

  delete(args: IDeleteArgs): JSONObject {
    const cell = this.editable(args.id, args.expected_source);
    const index = this.indexOf(cell.id);
    this.model().sharedModel.deleteCell(index);
    return {};
  }

  async run(args: IRunArgs): Promise<JSONObject> {
    const model = this.find(args.id);
    if (model.type !== 'code') {
      throw new BridgeError('bad-request', `cell ${args.id} is a ${model.type} cell: only code cells run`);
    }
    const widget = this.panel.content.widgets.find(w => w.model === model);
    if (!widget || !(widget instanceof CodeCell)) {
      throw new BridgeError('internal', `cell ${args.id} has no code cell widget in this panel`);
    }
    const session = this.panel.sessionContext;
    if (!session.session?.kernel) {
      throw new BridgeError('busy', 'the notebook has no running kernel');
    }
    let timer: number | undefined;
    const timedOut = new Promise<'timeout'>(resolve => {
      timer = window.setTimeout(() => resolve('timeout'), args.timeout * 1000);
    });
    // Executed as the user would: outputs land in the notebook, the prompt shows [*] / [n].
    const execution = CodeCell.execute(widget as CodeCell, session).then(
      () => 'done' as const,
      (error: unknown) => {
        throw new BridgeError('internal', `running cell ${args.id} failed: ${String(error)}`);
      }
    );
    try {
      const outcome = await Promise.race([execution, timedOut]);
      return { cell: this.describe(model), finished: outcome === 'done' } as unknown as JSONObject;
    } finally {
      window.clearTimeout(timer);
    }
  }

  /** The cell `id` if it may be overwritten: it still holds `expected` and nobody types in it. */
  private editable(id: string, expected: string): ICellModel {
    const cell = this.find(id);
    if (this.typing.isEditing(cell.id)) {
      throw new BridgeError(
        'conflict',
        `the user is typing in cell ${id}: nothing was changed; read it again later and retry`
      );
    }
    if (cell.sharedModel.getSource() !== expected) {
      throw new BridgeError(
        'conflict',
        `cell ${id} changed since it was read: nothing was changed; read it again and retry`
      );
    }
    return cell;
  }

  private model() {
    const model = this.panel.content.model;
    if (!model || this.panel.isDisposed) {
      throw new BridgeError('busy', 'the notebook panel is closing');
    }
    return model;
  }

  private find(id: string): ICellModel {
    const model = this.model();
    for (let i = 0; i < model.cells.length; i++) {
      const cell = model.cells.get(i);
      if (cell.id === id) {
        return cell;
      }
    }
    throw new BridgeError('not-found', `no cell with id ${id} (deleted, or never in this notebook)`);
  }

  private indexOf(id: string): number {
    const cells = this.model().cells;
    for (let i = 0; i < cells.length; i++) {
      if (cells.get(i).id === id) {
        return i;
      }
    }
    throw new BridgeError('not-found', `no cell with id ${id}`);
  }

  describe(cell: ICellModel): ICellInfo {
    const stamp = cell.getMetadata('agentloop') as IAgentStamp | undefined;
    const code = cell.type === 'code' ? (cell as ICodeCellModel) : null;
    return {
      id: cell.id,
      cell_type: cell.type as ICellInfo['cell_type'],
      source: cell.sharedModel.getSource(),
      outputs: code ? (code.outputs.toJSON() as unknown as JSONObject[]) : [],
      execution_count: code ? code.executionCount : null,
      metadata: stamp ? { agentloop: stamp } : {},
      // JupyterLab marks queued and running cells alike ([*]): both read "running".
      state: code && code.executionState === 'running' ? 'running' : 'idle',
      editing: this.typing.isEditing(cell.id)
    };
  }
}

/** The cell widget of model `model` in `panel`, if the panel has one. */
export function widgetOf(panel: NotebookPanel, model: ICellModel): Cell | undefined {
  return panel.content.widgets.find(w => w.model === model);
}
