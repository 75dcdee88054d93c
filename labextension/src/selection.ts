/**
 * "Ask agent about selection": what the user selected in a cell's editor or in an output,
 * as a reference the Agents panel attaches to its next prompt (docs/notebook-bridge.md, the
 * `refs` of a `prompt` action). The kernel turns each reference into a context block with
 * the selected text; the agent can `read_cell` the cell id for more.
 */

import type { Cell } from '@jupyterlab/cells';
import { CodeCell } from '@jupyterlab/cells';
import type { Notebook } from '@jupyterlab/notebook';

/** At most this much selected text travels with a reference (the kernel cuts at 4,000). */
const MAX_TEXT = 20_000;

/** One reference, as the `refs` entries of a `prompt` action carry it. */
export interface ICellRef {
  /** The cell's id (what `read_cell` takes). */
  cell_id: string;
  /** The cell's position in the notebook, 1 = first (as the notebook tools count). */
  position: number;
  /** The selected lines of the cell's source, 1-based and inclusive; null for an output. */
  lines: [number, number] | null;
  /** The index of the selected output in the cell's outputs (0 = first); null for source. */
  output: number | null;
  /** The selected text. */
  text: string;
}

function clip(text: string): string {
  return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) : text;
}

/** The cell of `notebook` whose DOM holds `node`, or null. */
export function cellOf(notebook: Notebook, node: Node): Cell | null {
  return notebook.widgets.find(cell => cell.node.contains(node)) ?? null;
}

/**
 * The selection in `cell`'s editor as a reference: the selected text and its line range, or
 * the cursor's whole line when nothing is selected. Null when the cell has no editor.
 */
export function editorRef(notebook: Notebook, cell: Cell): ICellRef | null {
  const editor = cell.editor;
  if (!editor) {
    return null;
  }
  const selection = editor.getSelection();
  let [start, end] = [selection.start, selection.end];
  if (start.line > end.line || (start.line === end.line && start.column > end.column)) {
    [start, end] = [end, start];
  }
  const source = editor.model.sharedModel.getSource();
  let first = start.line;
  let last = end.line;
  let text: string;
  if (first === last && start.column === end.column) {
    text = source.split('\n')[first] ?? '';
  } else {
    text = source.slice(editor.getOffsetAt(start), editor.getOffsetAt(end));
    // A selection that ends at the start of a line (a triple click, Shift+Down) stops before it.
    if (end.column === 0 && last > first) {
      last -= 1;
    }
  }
  return {
    cell_id: cell.model.id,
    position: notebook.widgets.indexOf(cell) + 1,
    lines: [first + 1, last + 1],
    output: null,
    text: clip(text)
  };
}

/**
 * The output of `cell` that holds `node`, as a reference: the text selected inside it, or
 * the output's whole text when the selection is elsewhere. Null when `node` is in no output.
 */
export function outputRef(notebook: Notebook, cell: Cell, node: Node): ICellRef | null {
  if (!(cell instanceof CodeCell)) {
    return null;
  }
  const children = cell.outputArea.widgets;
  const index = children.findIndex(child => child.node.contains(node));
  if (index < 0) {
    return null;
  }
  const host = children[index].node;
  const selection = window.getSelection();
  const selected =
    selection && !selection.isCollapsed && selection.anchorNode && host.contains(selection.anchorNode)
      ? selection.toString()
      : '';
  const whole = (host.querySelector('.jp-OutputArea-output') ?? host).textContent ?? '';
  return {
    cell_id: cell.model.id,
    position: notebook.widgets.indexOf(cell) + 1,
    lines: null,
    output: index,
    text: clip(selected || whole.trim())
  };
}

/** A short label for a reference's chip in the prompt box ("cell 3 · lines 2–4"). */
export function refLabel(ref: ICellRef): string {
  if (ref.output !== null) {
    return `cell ${ref.position} · output ${ref.output + 1}`;
  }
  if (ref.lines) {
    const [a, b] = ref.lines;
    return `cell ${ref.position} · ${a === b ? `line ${a}` : `lines ${a}–${b}`}`;
  }
  return `cell ${ref.position}`;
}
