/**
 * The Agents side panel: every agent of the focused notebook's kernel (name, state, model,
 * turns, tokens, cost; live from the kernel's `agents` pushes), the selected agent's live
 * `AgentView` rendered through that notebook's widget manager, and a prompt box.
 *
 * The panel holds no agent logic: it renders what the kernel pushes and sends the `list`,
 * `create`, `prompt` and `cancel` actions of docs/notebook-bridge.md over the notebook's
 * bridge connection. The view is the widget model the kernel names in the row (`view`), shown
 * with a renderer the notebook's own rendermime creates for
 * `application/vnd.jupyter.widget-view+json`: the cell and the panel show two views of one
 * model, so approvals, Cancel and the inbox work from either.
 */

import type { NotebookPanel } from '@jupyterlab/notebook';
import { MimeModel, type IRenderMime } from '@jupyterlab/rendermime';
import { LabIcon } from '@jupyterlab/ui-components';
import { Panel, Widget } from '@lumino/widgets';

import type { IAgentInfo } from './protocol';
import { type ICellRef, refLabel } from './selection';
import type { IBridgeConnection, INotebookBridge } from './tokens';

export const PANEL_ID = 'agentloop-agents-panel';
const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

type Mode = 'followup' | 'steer' | 'inject';
const MODES: [Mode, string][] = [
  ['followup', 'Follow-up'],
  ['steer', 'Steer'],
  ['inject', 'Inject']
];

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161">
<path d="M12 2l2.2 5.6L20 9.8l-5.8 2.2L12 17.6l-2.2-5.6L4 9.8l5.8-2.2z"/>
<circle cx="18.5" cy="18.5" r="2.5"/><circle cx="5.5" cy="18.5" r="1.8"/>
</g></svg>`;

export const agentsIcon = new LabIcon({ name: 'agentloop-nb:agents', svgstr: ICON_SVG });

/** What the panel remembers per notebook (its selection, draft, references, mode). */
interface INotebookState {
  selected: string | null;
  draft: string;
  refs: ICellRef[];
  mode: Mode;
  creating: boolean;
}

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function formatCost(cost: number | null | undefined): string {
  return typeof cost === 'number' ? `$${cost.toFixed(4)}` : '$?';
}

function stateClass(state: string): string {
  return `agentloop-state agentloop-state-${state.replace(/[^a-z]+/gi, '-').toLowerCase()}`;
}

export class AgentsPanel extends Panel {
  private notebook: NotebookPanel | null = null;
  private connection: IBridgeConnection | null = null;
  private readonly states = new WeakMap<NotebookPanel, INotebookState>();
  private readonly heading = element('div', 'agentloop-panel-heading');
  private readonly status = element('div', 'agentloop-panel-status');
  private readonly list = element('div', 'agentloop-panel-list');
  private readonly empty = element('div', 'agentloop-panel-empty');
  private readonly viewHost = new Panel();
  private readonly chips = element('div', 'agentloop-panel-refs');
  private readonly input = element('textarea', 'agentloop-panel-input');
  private readonly modeSelect = element('select', 'agentloop-panel-mode');
  private readonly sendButton = element('button', 'agentloop-panel-send jp-mod-accept', 'Send');
  private readonly stopButton = element('button', 'agentloop-panel-stop', 'Stop');
  private readonly notice = element('div', 'agentloop-panel-notice');
  private renderer: IRenderMime.IRenderer | null = null;
  private rendered: { model: string; notebook: NotebookPanel } | null = null;
  private wasConnected = false;

  constructor(private readonly bridge: INotebookBridge) {
    super();
    this.id = PANEL_ID;
    this.addClass('agentloop-panel');
    this.title.icon = agentsIcon;
    this.title.caption = 'Agents';

    const top = new Widget();
    top.addClass('agentloop-panel-top');
    top.node.append(this.heading, this.status, this.list, this.empty);
    this.buildEmpty();
    this.addWidget(top);

    this.viewHost.addClass('agentloop-panel-view');
    this.addWidget(this.viewHost);

    const prompt = new Widget();
    prompt.addClass('agentloop-panel-prompt');
    this.buildPrompt(prompt.node);
    this.addWidget(prompt);

    bridge.connectionAdded.connect((_, connection) => {
      if (connection.panel === this.notebook && !this.connection) {
        this.follow(this.notebook);
      }
    });
    this.follow(null);
  }

  /** Show the agents of `notebook`'s kernel (null: no notebook is open). */
  follow(notebook: NotebookPanel | null): void {
    const connection = notebook ? this.bridge.connectionFor(notebook) : null;
    if (notebook === this.notebook && connection === this.connection) {
      return;
    }
    this.saveDraft();
    if (this.connection) {
      this.connection.agentsChanged.disconnect(this.refresh, this);
      this.connection.connectedChanged.disconnect(this.onConnected, this);
    }
    if (this.notebook && !this.notebook.isDisposed) {
      this.notebook.sessionContext.statusChanged.disconnect(this.onKernelStatus, this);
      this.notebook.sessionContext.kernelChanged.disconnect(this.onKernelStatus, this);
    }
    this.notebook = notebook;
    this.connection = connection;
    this.wasConnected = connection?.connected ?? false;
    if (notebook) {
      notebook.sessionContext.statusChanged.connect(this.onKernelStatus, this);
      notebook.sessionContext.kernelChanged.connect(this.onKernelStatus, this);
    }
    if (connection) {
      connection.agentsChanged.connect(this.refresh, this);
      connection.connectedChanged.connect(this.onConnected, this);
      if (connection.connected) {
        connection.sendAction({ action: 'list' });
      }
    }
    const state = this.state();
    this.input.value = state?.draft ?? '';
    this.modeSelect.value = state?.mode ?? 'followup';
    this.say('');
    this.refresh();
  }

  /** Attach `ref` to the next prompt of `notebook` (shown as a chip) and focus the box. */
  addRef(notebook: NotebookPanel, ref: ICellRef): void {
    this.follow(notebook);
    const state = this.state();
    if (!state) {
      return;
    }
    const same = (r: ICellRef) =>
      r.cell_id === ref.cell_id &&
      r.output === ref.output &&
      JSON.stringify(r.lines) === JSON.stringify(ref.lines);
    state.refs = [...state.refs.filter(r => !same(r)), ref];
    this.renderRefs();
    this.focusInput();
  }

  focusInput(): void {
    this.input.focus();
  }

  /** The name of the selected agent, or null. */
  get selected(): string | null {
    return this.state()?.selected ?? null;
  }

  protected onAfterShow(): void {
    this.refresh();
  }

  protected onAfterHide(): void {
    // A collapsed sidebar shows no view: drop it rather than keep rendering every update
    // (the cell's view keeps the model alive); onAfterShow renders it again.
    this.clearView();
  }

  dispose(): void {
    this.clearView();
    super.dispose();
  }

  // -- building -------------------------------------------------------------------------------

  private buildEmpty(): void {
    const text = element('p', '', 'No agent in this kernel yet. Create one here, or with ');
    text.append(element('code', '', '%agent create NAME --notebook'), ' in a cell.');
    const create = element('button', 'agentloop-panel-create jp-mod-accept', 'Create an agent');
    create.type = 'button';
    create.title = "A notebook agent with the kernel's default provider (edits and runs ask first)";
    create.addEventListener('click', () => this.create());
    this.empty.append(text, create);
  }

  private buildPrompt(host: HTMLElement): void {
    this.input.rows = 3;
    this.input.placeholder = 'Message the agent… (Enter sends, Shift+Enter: new line, Esc stops)';
    this.input.setAttribute('aria-label', 'Prompt for the selected agent');
    this.input.addEventListener('keydown', this.onKey);
    this.input.addEventListener('input', () => this.saveDraft());
    for (const [value, label] of MODES) {
      const option = element('option', '', label);
      option.value = value;
      this.modeSelect.append(option);
    }
    this.modeSelect.title =
      'Follow-up: a new turn · Steer: into the running turn · Inject: context for the next step';
    this.modeSelect.setAttribute('aria-label', 'How the prompt is sent');
    this.modeSelect.addEventListener('change', () => {
      const state = this.state();
      if (state) {
        state.mode = this.modeSelect.value as Mode;
      }
    });
    this.sendButton.type = 'button';
    this.sendButton.addEventListener('click', () => this.send());
    this.stopButton.type = 'button';
    this.stopButton.title = 'Cancel the running turn (Esc in the prompt box)';
    this.stopButton.addEventListener('click', () => this.stop());
    const row = element('div', 'agentloop-panel-buttons');
    row.append(this.modeSelect, this.sendButton, this.stopButton);
    host.append(this.chips, this.input, row, this.notice);
  }

  // -- state ----------------------------------------------------------------------------------

  private state(): INotebookState | null {
    const notebook = this.notebook;
    if (!notebook) {
      return null;
    }
    let state = this.states.get(notebook);
    if (!state) {
      state = { selected: null, draft: '', refs: [], mode: 'followup', creating: false };
      this.states.set(notebook, state);
    }
    return state;
  }

  private saveDraft(): void {
    const state = this.state();
    if (state) {
      state.draft = this.input.value;
    }
  }

  private agents(): readonly IAgentInfo[] {
    const connection = this.connection;
    // After a restart the last list is stale: show nothing until the kernel pushes again.
    return connection && connection.connected ? connection.agents : [];
  }

  private onConnected(_: IBridgeConnection, connected: boolean): void {
    this.wasConnected = connected;
    if (connected) {
      this.connection?.sendAction({ action: 'list' });
    }
    this.refresh();
  }

  /** The kernel's status changed: a restart or a dead kernel drops the comm, and the panel
   * empties at once rather than waiting for a `connectedChanged` that a dropped comm may
   * not emit. */
  private onKernelStatus(): void {
    const connected = this.connection?.connected ?? false;
    if (connected !== this.wasConnected) {
      this.wasConnected = connected;
      this.refresh();
    }
  }

  // -- rendering ------------------------------------------------------------------------------

  private readonly refresh = (): void => {
    const notebook = this.notebook;
    const connection = this.connection;
    const agents = this.agents();
    const state = this.state();
    this.heading.textContent = notebook ? `Agents · ${notebook.title.label}` : 'Agents';
    if (!notebook) {
      this.status.textContent = 'Open a notebook to see its agents.';
    } else if (!connection || !connection.connected) {
      this.status.textContent = '';
      this.status.append(
        "This notebook's kernel has not loaded agentloop_nb: run ",
        element('code', '', '%load_ext agentloop_nb'),
        ' in a cell.'
      );
    } else {
      this.status.textContent = '';
    }
    if (state) {
      if (state.creating && agents.length > 0) {
        // The agent the Create button asked for is the one that was not there before.
        const known = new Set(Array.from(this.list.querySelectorAll('[data-agent]'), n => n.getAttribute('data-agent')));
        const fresh = agents.find(a => !known.has(a.name));
        if (fresh) {
          state.selected = fresh.name;
          state.creating = false;
        }
      }
      if (!agents.some(a => a.name === state.selected)) {
        state.selected = agents.length ? agents[0].name : null;
      }
    }
    this.renderList(agents, state?.selected ?? null);
    this.empty.hidden = !(connection && connection.connected && agents.length === 0);
    const selected = agents.find(a => a.name === state?.selected) ?? null;
    this.renderView(selected);
    this.renderRefs();
    const ready = selected !== null;
    this.input.disabled = !ready;
    this.sendButton.disabled = !ready;
    this.stopButton.disabled = !ready || selected?.state === 'idle';
  };

  private renderList(agents: readonly IAgentInfo[], selected: string | null): void {
    this.list.textContent = '';
    this.list.setAttribute('role', 'listbox');
    this.list.setAttribute('aria-label', 'Agents of this kernel');
    for (const agent of agents) {
      const row = element('div', 'agentloop-panel-agent');
      row.setAttribute('role', 'option');
      row.setAttribute('data-agent', agent.name);
      row.setAttribute('aria-selected', String(agent.name === selected));
      row.tabIndex = 0;
      if (agent.name === selected) {
        row.classList.add('jp-mod-selected');
      }
      const top = element('div', 'agentloop-panel-agent-top');
      top.append(
        element('span', 'agentloop-panel-agent-name', agent.name),
        element('span', stateClass(agent.state), agent.state)
      );
      const facts = [
        agent.model ?? '',
        `${agent.turns ?? 0} turn${agent.turns === 1 ? '' : 's'}`,
        `${agent.tokens ?? 0} tokens`,
        formatCost(agent.cost)
      ];
      const bottom = element('div', 'agentloop-panel-agent-facts', facts.join(' · '));
      row.append(top, bottom);
      const choose = () => this.select(agent.name);
      row.addEventListener('click', choose);
      row.addEventListener('keydown', event => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          choose();
        }
      });
      this.list.append(row);
    }
  }

  private select(name: string): void {
    const state = this.state();
    if (state && state.selected !== name) {
      state.selected = name;
      this.refresh();
    }
  }

  private renderView(agent: IAgentInfo | null): void {
    const notebook = this.notebook;
    const model = agent?.view ?? '';
    if (!notebook || !model || !this.isVisible) {
      this.clearView();
      return;
    }
    if (this.rendered && this.rendered.model === model && this.rendered.notebook === notebook) {
      return;
    }
    this.clearView();
    const rendermime = notebook.content.rendermime;
    if (!rendermime.mimeTypes.includes(WIDGET_MIME)) {
      this.say('The live view needs the Jupyter widgets extension (pip install ipywidgets).');
      return;
    }
    const renderer = rendermime.createRenderer(WIDGET_MIME);
    renderer.addClass('agentloop-panel-widget');
    this.renderer = renderer;
    this.rendered = { model, notebook };
    this.viewHost.addWidget(renderer);
    const data = { [WIDGET_MIME]: { model_id: model, version_major: 2, version_minor: 1 } };
    void renderer.renderModel(new MimeModel({ data })).catch(error => {
      console.warn('agentloop-nb: the agent view did not render', error);
    });
  }

  private clearView(): void {
    this.renderer?.dispose();
    this.renderer = null;
    this.rendered = null;
  }

  private renderRefs(): void {
    const state = this.state();
    this.chips.textContent = '';
    for (const ref of state?.refs ?? []) {
      const chip = element('span', 'agentloop-panel-ref');
      chip.title = ref.text;
      chip.append(element('span', '', refLabel(ref)));
      const remove = element('button', 'agentloop-panel-ref-remove', '×');
      remove.type = 'button';
      remove.title = 'Remove this reference';
      remove.addEventListener('click', () => {
        state!.refs = state!.refs.filter(r => r !== ref);
        this.renderRefs();
      });
      chip.append(remove);
      this.chips.append(chip);
    }
    this.chips.hidden = !(state && state.refs.length);
  }

  private say(text: string): void {
    this.notice.textContent = text;
    this.notice.hidden = !text;
  }

  // -- actions --------------------------------------------------------------------------------

  private readonly onKey = (event: KeyboardEvent): void => {
    if (event.key === 'Enter' && !event.shiftKey && !event.altKey && !event.isComposing) {
      event.preventDefault();
      event.stopPropagation();
      this.send();
    } else if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      this.stop();
    }
  };

  private create(): void {
    const state = this.state();
    if (!this.connection?.sendAction({ action: 'create' })) {
      this.say('The kernel is not connected: run %load_ext agentloop_nb first.');
      return;
    }
    if (state) {
      state.creating = true;
    }
    this.say('');
  }

  private send(): void {
    const state = this.state();
    const agent = state?.selected;
    const text = this.input.value.trim();
    if (!state || !agent) {
      this.say('Create or select an agent first.');
      return;
    }
    if (!text && state.refs.length === 0) {
      this.say('Type a message first.');
      return;
    }
    const sent = this.connection?.sendAction({
      action: 'prompt',
      agent,
      mode: state.mode,
      text,
      refs: state.refs.map(ref => ({ ...ref }))
    });
    if (!sent) {
      this.say('The kernel is not connected: nothing was sent.');
      return;
    }
    this.input.value = '';
    state.draft = '';
    state.refs = [];
    this.renderRefs();
    this.say('');
  }

  private stop(): void {
    const agent = this.state()?.selected;
    if (agent && this.connection?.sendAction({ action: 'cancel', agent })) {
      this.say('');
    }
  }
}
