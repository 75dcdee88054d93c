/**
 * Does a kernel have agentloop_nb's bridge? (docs/notebook-bridge.md, "Opening".)
 *
 * The kernel keeps its announce comm (target `agentloop.notebook.ready`) open while its bridge
 * lives, so a `comm_info_request` for that target answers the question. The request goes on
 * the **control** channel and, as a fallback, on the shell channel; the first answer wins.
 *
 * Why control: a kernel runs shell requests one at a time, and ipykernel 7 lets only comm
 * messages past a running cell. A `comm_info_request` on shell sent while a cell runs (the
 * user's long cell, an agent's turn awaited in a cell) waits until that cell ends, so a page
 * reloaded meanwhile stayed disconnected. The messaging spec has the control channel accept
 * every shell request precisely so that it does not queue behind executions, and ipykernel
 * answers it from its control thread. The shell request stays for kernels that ignore
 * `comm_info_request` on control.
 */

import type { Kernel, KernelMessage } from '@jupyterlab/services';
import { KernelMessage as Messages } from '@jupyterlab/services';

import { READY_TARGET } from './protocol';

/** `true`/`false` once a kernel answered; `null` when no channel answered (kernel gone). */
export type ProbeAnswer = boolean | null;

function announced(content: KernelMessage.ICommInfoReplyMsg['content'] | undefined): ProbeAnswer {
  if (!content || content.status !== 'ok' || typeof content.comms !== 'object') {
    return null;
  }
  return Object.values(content.comms).some(comm => comm?.target_name === READY_TARGET);
}

function askControl(kernel: Kernel.IKernelConnection): Promise<ProbeAnswer> {
  const request = Messages.createMessage<KernelMessage.ICommInfoRequestMsg>({
    msgType: 'comm_info_request',
    channel: 'shell',
    session: kernel.clientId,
    username: kernel.username,
    content: { target_name: READY_TARGET }
  });
  // The same request on the control socket (the services' typings list only the control-only
  // message types there; the wire format is identical).
  const message = { ...request, channel: 'control' } as unknown as KernelMessage.IControlMessage;
  return new Promise(resolve => {
    let future: Kernel.IControlFuture;
    try {
      future = kernel.sendControlMessage(message, true, true);
    } catch {
      resolve(null); // the kernel is dead or the connection is closing
      return;
    }
    future.onReply = reply => {
      resolve(announced((reply as unknown as KernelMessage.ICommInfoReplyMsg).content));
    };
    // Settles a kernel that never replies (restarted, disposed): `resolve` only counts once.
    future.done.then(
      () => resolve(null),
      () => resolve(null)
    );
  });
}

async function askShell(kernel: Kernel.IKernelConnection): Promise<ProbeAnswer> {
  try {
    const reply = await kernel.requestCommInfo({ target_name: READY_TARGET });
    return announced(reply.content);
  } catch {
    return null; // the kernel went away meanwhile
  }
}

/** Ask `kernel` whether its bridge is announced; resolves with the first channel's answer. */
export function probeKernel(kernel: Kernel.IKernelConnection): Promise<ProbeAnswer> {
  const asks = [askControl(kernel), askShell(kernel)];
  return new Promise(resolve => {
    let remaining = asks.length;
    for (const ask of asks) {
      void ask.then(answer => {
        remaining -= 1;
        if (answer !== null || remaining === 0) {
          resolve(answer);
        }
      });
    }
  });
}
