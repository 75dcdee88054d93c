/**
 * Calls back for every cell widget of a notebook panel now and whenever cells are added, a
 * cell's metadata or outputs change, so a plugin can keep per-cell decorations (the agent
 * badge, the "Fix with agent" button) in step with the notebook.
 */

import type { Cell, ICellModel, ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { IDisposable } from '@lumino/disposable';

export type CellCallback = (cell: Cell) => void;

export class CellWatcher implements IDisposable {
  private readonly watched = new WeakSet<ICellModel>();
  private disposed = false;
  private scheduled = false;

  constructor(
    private readonly panel: NotebookPanel,
    private readonly onCell: CellCallback
  ) {
    void panel.context.ready.then(() => {
      if (this.disposed) {
        return;
      }
      panel.content.model?.cells.changed.connect(this.refreshSoon, this);
      // Cell widgets are (re)created when the notebook's model is set or a cell changes type.
      panel.content.modelContentChanged.connect(this.refreshSoon, this);
      this.refresh();
    });
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /** Run the callback for every cell now. */
  refresh(): void {
    if (this.disposed || this.panel.isDisposed) {
      return;
    }
    for (const cell of this.panel.content.widgets) {
      this.watch(cell.model);
      this.onCell(cell);
    }
  }

  dispose(): void {
    this.disposed = true;
  }

  /** Coalesce bursts (a paste of many cells) into one pass after the notebook made widgets. */
  private refreshSoon(): void {
    if (this.scheduled) {
      return;
    }
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      this.refresh();
    });
  }

  private watch(model: ICellModel): void {
    if (this.watched.has(model)) {
      return;
    }
    this.watched.add(model);
    const again = () => {
      if (this.disposed) {
        return;
      }
      const cell = this.panel.content.widgets.find(w => w.model === model);
      if (cell) {
        this.onCell(cell);
      }
    };
    model.metadataChanged.connect(again);
    if (model.type === 'code') {
      (model as ICodeCellModel).outputs.changed.connect(again);
    }
  }
}
