/**
 * One notebook panel's comm `agentloop.notebook` to its kernel (docs/notebook-bridge.md).
 *
 * Life cycle: whenever the panel's kernel changes or comes back from a restart, the
 * connection registers the `agentloop.notebook.ready` target on it and probes (`probe.ts`: a
 * `comm_info_request` for that target on the control channel, so a running cell does not hold
 * it up; the kernel keeps its announce comm open while its bridge lives). A kernel that loads
 * the extension later announces itself through the same target. Either way the connection
 * opens its comm with a `hello` and is `connected` once welcomed. One probe is in flight at a
 * time, and once the page is being unloaded nothing is opened any more: a comm opened by a
 * page on its way out would become the kernel's most recent comm and swallow its requests.
 */

import type { Kernel, KernelMessage } from '@jupyterlab/services';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { type JSONObject, UUID } from '@lumino/coreutils';
import { Signal, type ISignal } from '@lumino/signaling';

import { NotebookOperations } from './operations';
import { probeKernel } from './probe';
import {
  BridgeError,
  COMM_TARGET,
  errorResponse,
  type IActionMessage,
  type IAgentInfo,
  type INoticeMessage,
  okResponse,
  parseKernelMessage,
  PROTOCOL,
  READY_TARGET,
  type Request
} from './protocol';
import type { IBridgeConnection } from './tokens';
import { TypingTracker } from './typing';

/** A random id for this page, sent in every `hello` (tells two pages on one kernel apart). */
const CLIENT_ID = UUID.uuid4();

const LOST_STATUSES = new Set<Kernel.Status>(['restarting', 'autorestarting', 'dead', 'terminating']);

export class BridgeConnection implements IBridgeConnection {
  readonly connectedChanged: ISignal<IBridgeConnection, boolean>;
  readonly agentsChanged: ISignal<IBridgeConnection, readonly IAgentInfo[]>;
  private readonly _connectedChanged = new Signal<IBridgeConnection, boolean>(this);
  private readonly _agentsChanged = new Signal<IBridgeConnection, readonly IAgentInfo[]>(this);
  private readonly _noticed = new Signal<IBridgeConnection, INoticeMessage>(this);
  private readonly typing: TypingTracker;
  private readonly ops: NotebookOperations;
  private kernel: Kernel.IKernelConnection | null = null;
  private comm: Kernel.IComm | null = null;
  private welcomed = false;
  // Probe until one probe is answered (per kernel, and again after each restart), not after
  // every execution.
  private probePending = false;
  private probing: Promise<void> | null = null;
  // Set from `beforeunload` (the last moment a comm_close still reaches the kernel) until the
  // page shows it stayed: a user's key or click (the "unsaved changes" dialog was cancelled) or
  // a `pageshow` from the back-forward cache.
  private leaving = false;
  private _agents: readonly IAgentInfo[] = [];
  private disposed = false;

  constructor(readonly panel: NotebookPanel) {
    this.connectedChanged = this._connectedChanged;
    this.agentsChanged = this._agentsChanged;
    this.typing = new TypingTracker(panel);
    this.ops = new NotebookOperations(panel, this.typing);
    const session = panel.sessionContext;
    session.kernelChanged.connect(this.onKernelChanged, this);
    session.statusChanged.connect(this.onStatus, this);
    this.adopt(session.session?.kernel ?? null);
    window.addEventListener('beforeunload', this.onLeave);
    window.addEventListener('pagehide', this.onLeave);
    window.addEventListener('pageshow', this.onPageShow);
  }

  get connected(): boolean {
    return this.welcomed && this.comm !== null && !this.comm.isDisposed;
  }

  get noticed(): ISignal<IBridgeConnection, INoticeMessage> {
    return this._noticed;
  }

  get agents(): readonly IAgentInfo[] {
    return this._agents;
  }

  sendAction(action: Omit<IActionMessage, 'type'>): boolean {
    if (!this.connected || !this.comm) {
      return false;
    }
    this.comm.send({ type: 'action', ...action } as unknown as JSONObject);
    return true;
  }

  async reconnect(): Promise<void> {
    if (this.connected) {
      return;
    }
    await this.probe();
  }

  dispose(): void {
    if (this.disposed) {
      return;
    }
    this.disposed = true;
    window.removeEventListener('beforeunload', this.onLeave);
    window.removeEventListener('pagehide', this.onLeave);
    window.removeEventListener('pageshow', this.onPageShow);
    this.stopWatchingStay();
    const session = this.panel.sessionContext;
    session.kernelChanged.disconnect(this.onKernelChanged, this);
    session.statusChanged.disconnect(this.onStatus, this);
    this.closeComm();
    this.adopt(null);
    this.typing.dispose();
    Signal.clearData(this);
  }

  private onKernelChanged(): void {
    this.adopt(this.panel.sessionContext.session?.kernel ?? null);
  }

  private onStatus(_: unknown, status: Kernel.Status): void {
    if (LOST_STATUSES.has(status)) {
      // The kernel forgets its comms on a restart; JupyterLab disposes ours without a close.
      this.dropComm();
      this.probePending = true;
    } else if (status === 'idle' && this.probePending) {
      void this.probe();
    }
  }

  private adopt(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this.kernel) {
      return;
    }
    if (this.kernel && !this.kernel.isDisposed) {
      this.kernel.removeCommTarget(READY_TARGET, this.onReady);
      this.kernel.connectionStatusChanged.disconnect(this.onConnection, this);
    }
    this.closeComm();
    this.kernel = kernel;
    if (kernel) {
      kernel.registerCommTarget(READY_TARGET, this.onReady);
      kernel.connectionStatusChanged.connect(this.onConnection, this);
      this.probePending = true;
      void this.probe();
    }
  }

  private onConnection(_: unknown, status: Kernel.ConnectionStatus): void {
    if (status === 'connected' && !this.connected) {
      this.probePending = true;
      void this.probe();
    }
  }

  /** The kernel announced its bridge (`%load_ext agentloop_nb` ran): open our comm. */
  private readonly onReady = (_comm: Kernel.IComm, msg: KernelMessage.ICommOpenMsg): void => {
    const data = msg.content.data as JSONObject;
    if (data?.type !== 'ready' || data.protocol !== PROTOCOL) {
      console.warn('agentloop-nb: ignored a ready announce that does not match protocol', PROTOCOL, data);
      return;
    }
    // The announce comm stays open kernel-side (it is what later pages probe for).
    if (!this.connected) {
      this.open();
    }
  };

  /** Probe the kernel unless a probe is already on its way (statuses come in bursts). */
  private probe(): Promise<void> {
    if (!this.probing) {
      this.probing = this.probeOnce().finally(() => {
        this.probing = null;
      });
    }
    return this.probing;
  }

  private async probeOnce(): Promise<void> {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed || this.comm || this.disposed || this.leaving) {
      return;
    }
    const announced = await probeKernel(kernel);
    // null: no channel answered (the kernel went away); the next status change probes again.
    if (announced === null || kernel !== this.kernel || this.comm) {
      return;
    }
    // An answered probe settles it: a kernel that loads the extension later announces itself.
    this.probePending = false;
    if (announced) {
      this.open();
    }
  }

  private open(): void {
    const kernel = this.kernel;
    if (!kernel || kernel.isDisposed || this.disposed || this.leaving) {
      return;
    }
    this.closeComm();
    const comm = kernel.createComm(COMM_TARGET);
    this.comm = comm;
    comm.onMsg = msg => this.onMessage(comm, msg.content.data);
    comm.onClose = () => {
      if (this.comm === comm) {
        this.dropComm();
      }
    };
    comm.open({
      type: 'hello',
      protocol: PROTOCOL,
      path: this.panel.context.localPath,
      client: CLIENT_ID
    });
  }

  private onMessage(comm: Kernel.IComm, data: unknown): void {
    if (comm !== this.comm) {
      return;
    }
    let message;
    try {
      message = parseKernelMessage(data);
    } catch (error) {
      console.warn(`agentloop-nb: dropped a message from the kernel: ${(error as Error).message}`);
      return;
    }
    if ('kind' in message) {
      if (message.kind === 'bad-request') {
        comm.send(errorResponse(message.id, 'bad-request', message.reason));
      } else {
        void this.answer(comm, message.request);
      }
      return;
    }
    switch (message.type) {
      case 'welcome':
        this.setWelcomed(true);
        break;
      case 'refused':
        console.warn(`agentloop-nb: the kernel refused the bridge: ${message.reason}`);
        this.closeComm();
        break;
      case 'agents':
        this._agents = message.agents;
        this._agentsChanged.emit(message.agents);
        break;
      case 'notice':
        this._noticed.emit(message);
        break;
    }
  }

  /** Perform one request and answer it exactly once. */
  private async answer(comm: Kernel.IComm, request: Request): Promise<void> {
    let reply: JSONObject;
    try {
      let result: JSONObject;
      switch (request.op) {
        case 'snapshot':
          result = this.ops.snapshot();
          break;
        case 'insert':
          result = this.ops.insert(request.args);
          break;
        case 'replace':
          result = this.ops.replace(request.args);
          break;
        case 'delete':
          result = this.ops.delete(request.args);
          break;
        case 'run':
          result = await this.ops.run(request.args);
          break;
      }
      reply = okResponse(request.id, result);
    } catch (error) {
      reply =
        error instanceof BridgeError
          ? errorResponse(request.id, error.code, error.message)
          : errorResponse(request.id, 'internal', String((error as Error)?.message ?? error));
    }
    if (!comm.isDisposed) {
      comm.send(reply);
    }
  }

  private setWelcomed(value: boolean): void {
    const before = this.connected;
    this.welcomed = value;
    if (before !== this.connected) {
      this._connectedChanged.emit(this.connected);
    }
  }

  /** Forget the comm without telling the kernel (it is gone, or already closed). */
  private dropComm(): void {
    const before = this.connected;
    this.comm = null;
    this.welcomed = false;
    if (before) {
      this._connectedChanged.emit(false);
    }
  }

  /** Close the comm (the kernel forgets it) and forget it. */
  private closeComm(): void {
    const comm = this.comm;
    this.dropComm();
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        // the kernel connection is already gone: nothing left to tell
      }
    }
  }

  private readonly onLeave = (): void => {
    // Best effort: tell the kernel this page's comm is gone, so requests go to a live one.
    this.leaving = true;
    this.closeComm();
    window.addEventListener('keydown', this.onStay, true);
    window.addEventListener('pointerdown', this.onStay, true);
  };

  private readonly onPageShow = (event: PageTransitionEvent): void => {
    if (event.persisted) {
      this.onStay(); // back from the back-forward cache: this page is live again
    }
  };

  private readonly onStay = (): void => {
    this.stopWatchingStay();
    if (this.leaving && !this.disposed) {
      this.leaving = false;
      this.probePending = true;
      void this.probe();
    }
  };

  private stopWatchingStay(): void {
    window.removeEventListener('keydown', this.onStay, true);
    window.removeEventListener('pointerdown', this.onStay, true);
  }
}
