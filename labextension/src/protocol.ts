/**
 * The wire contract of the comm `agentloop.notebook` (docs/notebook-bridge.md is the single
 * source of truth): message shapes and the validators that check what the kernel sends.
 *
 * Every message from the kernel is validated before it is acted on; a message that does not
 * match is dropped with a console warning naming what was wrong, or, for a request whose id
 * could be read, answered with a `bad-request` error.
 */

import type { JSONObject } from '@lumino/coreutils';

export const PROTOCOL = 1;
export const COMM_TARGET = 'agentloop.notebook';
export const READY_TARGET = 'agentloop.notebook.ready';

export type ErrorCode = 'conflict' | 'not-found' | 'bad-request' | 'busy' | 'internal';
export type CellType = 'code' | 'markdown' | 'raw';
export type ActionName = 'fix' | 'prompt' | 'cancel' | 'create' | 'list';

/** The provenance an agent stamps on a cell it wrote (`metadata.agentloop`). */
export interface IAgentStamp {
  agent?: string;
  session?: string;
  turn?: number;
  call_id?: string;
  [key: string]: unknown;
}

export interface ICellInfo {
  id: string;
  cell_type: CellType;
  source: string;
  outputs: JSONObject[];
  execution_count: number | null;
  metadata: { agentloop?: IAgentStamp };
  state: 'idle' | 'running';
  editing: boolean;
}

export interface IInsertArgs {
  index: number;
  source: string;
  cell_type: CellType;
  metadata?: { agentloop?: IAgentStamp };
}

export interface IReplaceArgs {
  id: string;
  expected_source: string;
  source: string;
  metadata?: { agentloop?: IAgentStamp };
}

export interface IDeleteArgs {
  id: string;
  expected_source: string;
}

export interface IRunArgs {
  id: string;
  timeout: number;
}

export type Request =
  | { type: 'request'; id: string; op: 'snapshot'; args: Record<string, never> }
  | { type: 'request'; id: string; op: 'insert'; args: IInsertArgs }
  | { type: 'request'; id: string; op: 'replace'; args: IReplaceArgs }
  | { type: 'request'; id: string; op: 'delete'; args: IDeleteArgs }
  | { type: 'request'; id: string; op: 'run'; args: IRunArgs };

export interface IAgentInfo {
  name: string;
  state: string;
  model?: string;
  turns?: number;
  tokens?: number;
  cost?: number;
  view?: string;
}

export interface IAgentsMessage {
  type: 'agents';
  agents: IAgentInfo[];
}

/** The kernel's answer to a `fix` action: what happened to that cell's request. */
export interface INoticeMessage {
  type: 'notice';
  level: 'info' | 'error';
  text: string;
  cell_id: string;
}

export interface IActionMessage {
  type: 'action';
  action: ActionName;
  cell_id?: string;
  agent?: string;
  mode?: 'followup' | 'steer' | 'inject';
  text?: string;
  refs?: JSONObject[];
}

/** What the kernel may send, once validated. */
export type KernelMessage =
  | { type: 'welcome'; protocol: number; kernel: string }
  | { type: 'refused'; reason: string }
  | { kind: 'request'; request: Request }
  | { kind: 'bad-request'; id: string; reason: string }
  | IAgentsMessage
  | INoticeMessage;

/** A reply the front end sends for request `id`. */
export function okResponse(id: string, result: JSONObject): JSONObject {
  return { type: 'response', id, ok: true, result };
}

export function errorResponse(id: string, code: ErrorCode, message: string): JSONObject {
  return { type: 'response', id, ok: false, error: { code, message } };
}

/** A failure an operation reports to the kernel as `{ok: false, error: {code, message}}`. */
export class BridgeError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string
  ) {
    super(message);
  }
}

const MAX_ID = 200;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) {
    return 'null';
  }
  return Array.isArray(value) ? 'an array' : `a ${typeof value}`;
}

/** Reads one field, throwing a message that names it and what it should be. */
function field<T>(
  args: Record<string, unknown>,
  name: string,
  check: (v: unknown) => v is T,
  what: string
): T {
  const value = args[name];
  if (!check(value)) {
    throw new Error(`args.${name} must be ${what}, got ${describe(value)}`);
  }
  return value;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isInteger = (v: unknown): v is number => Number.isInteger(v);
const isNumber = (v: unknown): v is number =>
  typeof v === 'number' && Number.isFinite(v);
const isCellType = (v: unknown): v is CellType =>
  v === 'code' || v === 'markdown' || v === 'raw';

function stampOf(args: Record<string, unknown>): { agentloop?: IAgentStamp } | undefined {
  const metadata = args.metadata;
  if (metadata === undefined || metadata === null) {
    return undefined;
  }
  if (!isObject(metadata)) {
    throw new Error(`args.metadata must be an object, got ${describe(metadata)}`);
  }
  const stamp = metadata.agentloop;
  if (stamp === undefined) {
    return {};
  }
  if (!isObject(stamp)) {
    throw new Error(`args.metadata.agentloop must be an object, got ${describe(stamp)}`);
  }
  return { agentloop: stamp as IAgentStamp };
}

function parseRequest(data: Record<string, unknown>): KernelMessage {
  const id = data.id;
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID) {
    throw new Error('a request needs a non-empty string id');
  }
  const op = data.op;
  const args = data.args ?? {};
  try {
    if (!isObject(args)) {
      throw new Error(`args must be an object, got ${describe(args)}`);
    }
    switch (op) {
      case 'snapshot':
        return { kind: 'request', request: { type: 'request', id, op, args: {} } };
      case 'insert': {
        const cellType = args.cell_type ?? 'code';
        if (!isCellType(cellType)) {
          throw new Error('args.cell_type must be "code", "markdown" or "raw"');
        }
        const insert: IInsertArgs = {
          index: field(args, 'index', isInteger, 'an integer'),
          source: field(args, 'source', isString, 'a string'),
          cell_type: cellType,
          metadata: stampOf(args)
        };
        return { kind: 'request', request: { type: 'request', id, op, args: insert } };
      }
      case 'replace': {
        const replace: IReplaceArgs = {
          id: field(args, 'id', isString, 'a cell id (string)'),
          expected_source: field(args, 'expected_source', isString, 'a string'),
          source: field(args, 'source', isString, 'a string'),
          metadata: stampOf(args)
        };
        return { kind: 'request', request: { type: 'request', id, op, args: replace } };
      }
      case 'delete': {
        const del: IDeleteArgs = {
          id: field(args, 'id', isString, 'a cell id (string)'),
          expected_source: field(args, 'expected_source', isString, 'a string')
        };
        return { kind: 'request', request: { type: 'request', id, op, args: del } };
      }
      case 'run': {
        const timeout = field(args, 'timeout', isNumber, 'a number of seconds');
        if (timeout <= 0 || timeout > 86400) {
          throw new Error('args.timeout must be between 0 and 86400 seconds');
        }
        const run: IRunArgs = { id: field(args, 'id', isString, 'a cell id (string)'), timeout };
        return { kind: 'request', request: { type: 'request', id, op, args: run } };
      }
      default:
        throw new Error(
          `unknown op ${JSON.stringify(op)} (known: snapshot, insert, replace, delete, run)`
        );
    }
  } catch (error) {
    return { kind: 'bad-request', id, reason: (error as Error).message };
  }
}

function parseAgents(data: Record<string, unknown>): IAgentsMessage {
  const agents = data.agents;
  if (!Array.isArray(agents)) {
    throw new Error('an agents message needs an "agents" array');
  }
  const out: IAgentInfo[] = [];
  for (const entry of agents) {
    if (!isObject(entry) || typeof entry.name !== 'string' || typeof entry.state !== 'string') {
      throw new Error('every entry of "agents" needs a string name and state');
    }
    out.push(entry as unknown as IAgentInfo);
  }
  return { type: 'agents', agents: out };
}

/**
 * Validate one message from the kernel. Throws an `Error` whose message says what is wrong
 * when the message must be dropped; returns `bad-request` for a request that can be answered.
 */
export function parseKernelMessage(data: unknown): KernelMessage {
  if (!isObject(data)) {
    throw new Error(`a message must be an object, got ${describe(data)}`);
  }
  switch (data.type) {
    case 'welcome':
      if (typeof data.protocol !== 'number') {
        throw new Error('welcome needs a numeric protocol');
      }
      return {
        type: 'welcome',
        protocol: data.protocol,
        kernel: typeof data.kernel === 'string' ? data.kernel : ''
      };
    case 'refused':
      return { type: 'refused', reason: String(data.reason ?? '') };
    case 'request':
      return parseRequest(data);
    case 'agents':
      return parseAgents(data);
    case 'notice':
      if (typeof data.text !== 'string' || typeof data.cell_id !== 'string') {
        throw new Error('a notice needs a string text and cell_id');
      }
      return {
        type: 'notice',
        level: data.level === 'error' ? 'error' : 'info',
        text: data.text,
        cell_id: data.cell_id
      };
    default:
      throw new Error(`unknown message type ${JSON.stringify(data.type)}`);
  }
}
