/** The agentfleet HTTP API over fetch (Node 18+ and browsers). */

import { TransportError, WaitTimeout, errorFor } from "./errors.js";
import { EventParser, type StreamEvent } from "./sse.js";

/** A task in one of these has ended and never changes again. */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "timed_out",
  "cancelled",
]);

export type TaskStatus =
  | "queued"
  | "dispatched"
  | "running"
  | "succeeded"
  | "failed"
  | "timed_out"
  | "cancelled";

export type WaitingReason =
  | "concurrency"
  | "requests_per_minute"
  | "tokens_per_minute"
  | "budget"
  | "fleet_capacity"
  | "batch_share"
  | "pass_limit"
  | "parent"
  | "scheduling";

export interface TokenUsage {
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  reasoning_tokens?: number;
}

export interface TaskResult {
  type: "action_completed" | "need_clarification" | "error";
  message: string;
  options: string[];
}

/** A task as the API answers it (GET /v1/tasks/{id}; a list gives summaries without the
 * trace). Members this version does not name are kept as they came. */
export interface Task {
  task_id: string;
  user_id: string;
  text: string;
  status: TaskStatus;
  result: TaskResult | null;
  error: string | null;
  error_code: string | null;
  waiting_reason: WaitingReason | null;
  usage: TokenUsage;
  cost: string;
  currency: string | null;
  batch_id: string | null;
  retry_of?: string | null;
  session_id?: string | null;
  /** The W3C trace id of its spans (32 hex digits); null when stored without one. */
  trace_id?: string | null;
  /** Its line of its batch upload (from 1); null for a task of no upload. */
  batch_line?: number | null;
  created_at: string;
  finished_at: string | null;
  trace?: unknown[];
  [member: string]: unknown;
}

/** The optional members of a submission (schemas/task_submission.schema.json). */
export interface SubmitOptions {
  model?: string;
  tools?: string[];
  timeout_s?: number;
  schedule_timeout_s?: number;
  max_steps?: number;
  max_tokens?: number;
  max_cost?: string;
  strategy?: "react" | "plan_execute";
  parent_task_id?: string;
  session_id?: string;
  priority?: "interactive" | "batch";
  idempotency_key?: string;
  batch_id?: string;
  metadata?: { device_id?: string; time_zone?: string; locale?: string };
}

/** A line of a batch: a submission, whose user may be left out when the batch names it. */
export type BatchLine = SubmitOptions & { text: string; user_id?: string };

export interface BatchAccepted {
  batch_id: string;
  user_id: string;
  priority: string;
  lines: number;
  accepted: number;
  duplicates: number;
}

/** What retrying a batch's failed tasks did (POST /v1/batches/{id}/retry, every slice). */
export interface BatchRetryTotals {
  retried: number;
  already_retried: number;
  not_retried: Record<string, number>;
  stopped: { code: string; message: string } | null;
}
interface BatchRetrySlice extends BatchRetryTotals {
  next_after: string | null;
}

/** The filters of a task search (GET /v1/tasks); each left out matches every task. */
export interface TaskSearch {
  /** One user's tasks; left out: every user the key acts for (all, for an operator's key). */
  userId?: string;
  status?: TaskStatus;
  resultType?: TaskResult["type"];
  errorCode?: string;
  model?: string;
  batchId?: string;
  sessionId?: string;
  /** Text the task's text holds, ignoring case. */
  q?: string;
  /** Created at or after this date or RFC 3339 time. */
  since?: string;
  /** Created before this date or RFC 3339 time. */
  until?: string;
  limit?: number;
  /** The previous page's `next_before`. */
  before?: string;
  /** Count the matches (up to 10,000: `total_capped` says more match). */
  count?: boolean;
}

/** A page of a task search: newest first; `next_before` asks for the next (null: the last). */
export interface TaskPage {
  tasks: Task[];
  next_before: string | null;
  total?: number;
  total_capped?: boolean;
}

/** A batch in GET /v1/batches: its progress without its usage and waiting reason. */
export interface BatchSummary {
  batch_id: string;
  user_id: string;
  priority: string;
  total: number;
  ended: number;
  counts: Record<TaskStatus, number>;
  result_types: Record<TaskResult["type"], number>;
  cancelled: boolean;
  created_at: string;
  cancelled_at: string | null;
}

/** GET /v1/batches/{id}: a batch's progress, why its queued tasks wait, its usage. */
export interface Batch extends BatchSummary {
  waiting_reason: WaitingReason | null;
  usage: Array<Record<string, unknown>>;
  [member: string]: unknown;
}

/** How much of a batch upload has been sent; `totalLines` when the lines were an array. */
export interface BatchProgress {
  lines: number;
  bytes: number;
  totalLines?: number;
}

export interface ClientOptions {
  /** The dispatcher's address, such as `http://127.0.0.1:8080`. */
  url: string;
  /** Sent as `Authorization: Bearer`. */
  apiKey: string;
  /** Bounds every call that is not a wait or a stream, in seconds (30). */
  timeoutS?: number;
  /** How many times a call safe to repeat is sent again (3). */
  maxRetries?: number;
  /** The first pause before sending again, in seconds, doubling (0.2), at most maxBackoffS (5). */
  backoffS?: number;
  maxBackoffS?: number;
  /** The fetch to use (the global one by default). */
  fetch?: typeof fetch;
}

type Query = Record<string, string | number | boolean | undefined | null>;

interface CallOptions {
  query?: Query;
  body?: unknown;
  /** A JSON Lines body sent as it is read, or whole (never sent again). */
  stream?: ReadableStream<Uint8Array>;
  raw?: Blob;
  timeoutS?: number;
  retries?: number;
}

/** The longest line of a JSON Lines answer read (a result line). */
const MAX_LINE = 16 << 20;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function retryAfterOf(response: Response): number | undefined {
  const value = response.headers.get("Retry-After");
  if (value === null) return undefined;
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

// Web Crypto: global in browsers and Node 19+; Node 18 has it as node:crypto's webcrypto,
// loaded only there (the specifier is a variable, so bundlers for browsers leave it alone).
type RandomSource = { randomUUID?: () => string; getRandomValues?: (a: Uint8Array) => Uint8Array };
let nodeCrypto: RandomSource | undefined;
async function randomSource(): Promise<RandomSource | undefined> {
  const global = (globalThis as { crypto?: RandomSource }).crypto;
  if (global?.getRandomValues) return global;
  if (nodeCrypto === undefined) {
    const specifier = "node:crypto";
    try {
      nodeCrypto = ((await import(specifier)) as { webcrypto: RandomSource }).webcrypto;
    } catch {
      nodeCrypto = undefined;
    }
  }
  return nodeCrypto;
}

/** A random version 4 UUID: the idempotency keys the client makes up. `randomUUID` needs a
 * secure context in browsers; `getRandomValues` does not. */
async function newKey(): Promise<string> {
  const source = await randomSource();
  if (source?.randomUUID) return source.randomUUID();
  if (!source?.getRandomValues) throw new Error("no cryptographic random source to make an idempotency key");
  const b = source.getRandomValues(new Uint8Array(16));
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** A batch's route; `userId` names its user (batch ids are each user's). */
function batchPath(batchId: string, userId?: string, suffix = ""): string {
  const path = `/v1/batches/${encodeURIComponent(batchId)}${suffix}`;
  return userId ? `${path}?user_id=${encodeURIComponent(userId)}` : path;
}

/**
 * A client of one fleet. A call safe to send again (every call but a batch upload) is sent
 * again after a failed connection, a 503, or a 429 with `Retry-After`, at most `maxRetries`
 * times, backing off (doubling, with jitter, never less than `Retry-After`); a pause longer
 * than `maxBackoffS` or than the time left throws the answer's error at once. Submissions and retries carry an idempotency key (made up
 * when none is given), so sending one again never makes a second task.
 */
export class Client {
  private readonly base: string;
  private readonly apiKey: string;
  private readonly timeoutS: number;
  private readonly maxRetries: number;
  private readonly backoffS: number;
  private readonly maxBackoffS: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    const url = new URL(options.url);
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new TypeError(`url must be http(s)://host[:port], not ${options.url}`);
    }
    this.base = options.url.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.timeoutS = options.timeoutS ?? 30;
    this.maxRetries = options.maxRetries ?? 3;
    this.backoffS = options.backoffS ?? 0.2;
    this.maxBackoffS = options.maxBackoffS ?? 5;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // ---- tasks ----------------------------------------------------------------------------

  /** POST /v1/tasks: the task as stored (`queued` when new; the first one for a key sent
   * again with the same body). */
  async submit(userId: string, text: string, options: SubmitOptions = {}): Promise<Task> {
    const body = { ...options, user_id: userId, text };
    body.idempotency_key ??= await newKey();
    return this.call("POST", "/v1/tasks", { body });
  }

  /** GET /v1/tasks/{id}: the task with its trace; with `waitS` (0-30) the answer comes the
   * moment it ends, or after `waitS` seconds with the task as it is. */
  task(taskId: string, waitS?: number): Promise<Task> {
    // Rounded up: a wait of 0 with time left would poll without pause.
    const query = waitS === undefined ? undefined : { wait: Math.max(0, Math.min(30, Math.ceil(waitS))) };
    return this.call("GET", `/v1/tasks/${encodeURIComponent(taskId)}`, {
      query,
      timeoutS: this.timeoutS + (waitS ?? 0),
    });
  }

  /** The task once ended (the API's long wait, repeated); WaitTimeout past `timeoutS`. */
  async wait(taskId: string, timeoutS = 300): Promise<Task> {
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      const task = await this.task(taskId, Math.max(0, Math.min(30, left)));
      if (TERMINAL_STATUSES.has(task.status)) return task;
      if (Date.now() >= deadline) {
        throw new WaitTimeout(`task ${taskId} is still ${task.status} after ${timeoutS} s`, task);
      }
    }
  }

  /** GET /v1/tasks: one page of the user's tasks, newest first (summaries). */
  async listTasks(
    userId: string,
    options: { status?: TaskStatus; limit?: number; before?: string; batchId?: string } = {},
  ): Promise<Task[]> {
    const { batchId, ...rest } = options;
    const answer = await this.call<{ tasks: Task[] }>("GET", "/v1/tasks", {
      query: { user_id: userId, ...rest, batch_id: batchId },
    });
    return answer.tasks;
  }

  /** GET /v1/tasks: one page of the tasks the filters find, newest first (summaries), across
   * every user the key acts for unless `userId` names one. */
  searchTasks(search: TaskSearch = {}): Promise<TaskPage> {
    return this.call<TaskPage>("GET", "/v1/tasks", {
      query: {
        user_id: search.userId,
        status: search.status,
        result_type: search.resultType,
        error_code: search.errorCode,
        model: search.model,
        batch_id: search.batchId,
        session_id: search.sessionId,
        q: search.q,
        since: search.since,
        until: search.until,
        limit: search.limit,
        before: search.before,
        count: search.count ? "true" : undefined,
      },
    });
  }

  /** Every task of the user, newest first, a page at a time. */
  async *iterTasks(
    userId: string,
    options: { status?: TaskStatus; pageSize?: number } = {},
  ): AsyncGenerator<Task> {
    const limit = options.pageSize ?? 100;
    let before: string | undefined;
    for (;;) {
      const page = await this.listTasks(userId, { status: options.status, limit, before });
      yield* page;
      if (page.length < limit) return;
      before = page[page.length - 1]!.task_id;
    }
  }

  /** POST /v1/tasks/{id}/cancel: `cancelled` when it had not started; a running task is
   * being stopped (wait for it). Conflict `already_ended` when it ended otherwise. */
  cancel(taskId: string): Promise<Task> {
    return this.call("POST", `/v1/tasks/${encodeURIComponent(taskId)}/cancel`);
  }

  /** POST /v1/tasks/{id}/retry: a new task asking what the ended one asked, `retry_of`
   * naming it. Conflict `task_not_ended` while it is queued or running. */
  async retry(taskId: string, idempotencyKey?: string): Promise<Task> {
    return this.call("POST", `/v1/tasks/${encodeURIComponent(taskId)}/retry`, {
      body: { idempotency_key: idempotencyKey ?? (await newKey()) },
    });
  }

  /** GET /v1/tasks/{id}/events: the task's events (those so far first, rebuilt from its
   * trace), ending after `done`. `idleTimeoutS` bounds the silence between two reads. */
  events(taskId: string, idleTimeoutS = 60): AsyncGenerator<StreamEvent> {
    return this.stream(`/v1/tasks/${encodeURIComponent(taskId)}/events`, {}, idleTimeoutS);
  }

  /** GET /v1/results: a `result` event for each of the user's tasks as it ends, from the
   * moment the stream is open (`gap` when some may have been missed). Resolves once it is
   * open, so a task submitted afterwards is not missed. */
  async results(userId: string, idleTimeoutS = 60): Promise<AsyncGenerator<StreamEvent>> {
    const opened = await this.open("/v1/results", { user_id: userId }, idleTimeoutS);
    return this.readEvents(opened);
  }

  // ---- batches --------------------------------------------------------------------------

  /** POST /v1/batches: the lines streamed as JSON Lines (with `userId`, a line may leave
   * its user out), `onProgress` called after each piece. A bad line is BadRequest naming
   * `/line/N/...` and nothing is stored. Never sent again by the client: lines with their
   * own `idempotency_key` may be sent again safely (those stored count as `duplicates`). */
  async submitBatch(
    lines: Iterable<BatchLine | string> | AsyncIterable<BatchLine | string>,
    options: {
      userId?: string;
      batchId?: string;
      priority?: "interactive" | "batch";
      onProgress?: (progress: BatchProgress) => void;
      chunkBytes?: number;
      timeoutS?: number;
      /** Read every line into one body before sending (browsers over HTTP/1.1). */
      buffer?: boolean;
    } = {},
  ): Promise<BatchAccepted> {
    const chunkBytes = options.chunkBytes ?? 256 << 10;
    const totalLines = Array.isArray(lines) ? lines.length : undefined;
    const encoder = new TextEncoder();
    const source = (async function* () {
      yield* lines as AsyncIterable<BatchLine | string>;
    })();
    let sentLines = 0;
    let sentBytes = 0;
    let number = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const pieces: Uint8Array[] = [];
        let size = 0;
        let count = 0;
        while (size < chunkBytes) {
          const next = await source.next();
          if (next.done) break;
          number += 1;
          const text = typeof next.value === "string" ? next.value : JSON.stringify(next.value);
          if (/[\r\n]/.test(text)) throw new TypeError(`line ${number} holds a line break`);
          const bytes = encoder.encode(text + "\n");
          pieces.push(bytes);
          size += bytes.length;
          count += 1;
        }
        if (count > 0) {
          const piece = new Uint8Array(size);
          let at = 0;
          for (const p of pieces) {
            piece.set(p, at);
            at += p.length;
          }
          controller.enqueue(piece);
          sentLines += count;
          sentBytes += size;
          options.onProgress?.({ lines: sentLines, bytes: sentBytes, totalLines });
        }
        if (size < chunkBytes) controller.close();
      },
    });
    const query = { user_id: options.userId, batch_id: options.batchId, priority: options.priority };
    if (options.buffer) {
      const whole = await new Response(body).blob();
      return this.call("POST", "/v1/batches", {
        query,
        raw: whole,
        timeoutS: options.timeoutS ?? 3600,
        retries: 0,
      });
    }
    return this.call("POST", "/v1/batches", {
      query,
      stream: body,
      timeoutS: options.timeoutS ?? 3600,
      retries: 0,
    });
  }

  /** GET /v1/batches: one page of batches, newest first, with their progress: of `userId`,
   * else of every user the key acts for. `before`: the `created_at` of the last of the
   * previous page. `prefix`: only those whose id begins with it (a batch found by the start
   * of its id). */
  async listBatches(
    options: { userId?: string; limit?: number; before?: string; prefix?: string } = {},
  ): Promise<BatchSummary[]> {
    const answer = await this.call<{ batches: BatchSummary[] }>("GET", "/v1/batches", {
      query: {
        user_id: options.userId,
        limit: options.limit,
        before: options.before,
        prefix: options.prefix,
      },
    });
    return answer.batches;
  }

  /** GET /v1/batches/{id}: counts per status and result type, `ended` of `total`. Batch ids
   * are each user's: `userId` tells whose when the key acts for several (else Conflict
   * `ambiguous_id`). */
  batch(batchId: string, userId?: string): Promise<Batch> {
    return this.call("GET", batchPath(batchId, userId));
  }

  /** The batch once all its tasks ended (polled every `intervalS`); WaitTimeout past
   * `timeoutS`. */
  async waitBatch(
    batchId: string,
    options: {
      timeoutS?: number;
      intervalS?: number;
      onProgress?: (batch: Batch) => void;
      userId?: string;
    } = {},
  ): Promise<Batch> {
    const timeoutS = options.timeoutS ?? 3600;
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      const batch = await this.batch(batchId, options.userId);
      options.onProgress?.(batch);
      if (batch.ended >= batch.total) return batch;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new WaitTimeout(
          `batch ${batchId}: ${batch.ended} of ${batch.total} ended after ${timeoutS} s`,
          batch,
        );
      }
      await sleep(Math.min((options.intervalS ?? 1) * 1000, left));
    }
  }

  /** GET /v1/batches/{id}/results: one object per task, as they stream in. */
  async *batchResults(
    batchId: string,
    idleTimeoutS = 60,
    userId?: string,
  ): AsyncGenerator<Record<string, unknown>> {
    const opened = await this.open(batchPath(batchId, userId, "/results"), {}, idleTimeoutS);
    let rest = "";
    for await (const text of this.texts(opened)) {
      rest += text;
      let end: number;
      while ((end = rest.indexOf("\n")) >= 0) {
        const line = rest.slice(0, end);
        rest = rest.slice(end + 1);
        if (line.trim() !== "") yield JSON.parse(line) as Record<string, unknown>;
      }
      if (rest.length > MAX_LINE) throw new TransportError(`a line of the answer is over ${MAX_LINE} characters`);
    }
    if (rest.trim() !== "") yield JSON.parse(rest) as Record<string, unknown>;
  }

  /** POST /v1/batches/{id}/cancel: tasks not yet running end cancelled, none starts after. */
  cancelBatch(batchId: string, userId?: string): Promise<Record<string, unknown>> {
    return this.call("POST", batchPath(batchId, userId, "/cancel"));
  }

  /** POST /v1/batches/{id}/retry, slice after slice: retries each task of the batch that
   * failed (failed, timed_out, or succeeded with an error result), each at most once however
   * often it is asked (the server's keys). `stopped` says why it stopped early (queue_full:
   * the user's queue is full); null when every failed task was seen. */
  async retryBatch(batchId: string, userId?: string, sliceSize = 200): Promise<BatchRetryTotals> {
    const totals: BatchRetryTotals = { retried: 0, already_retried: 0, not_retried: {}, stopped: null };
    let after: string | undefined;
    for (;;) {
      const done = await this.call<BatchRetrySlice>("POST", `/v1/batches/${encodeURIComponent(batchId)}/retry`, {
        query: { user_id: userId, after, limit: sliceSize },
      });
      totals.retried += done.retried;
      totals.already_retried += done.already_retried;
      for (const [code, n] of Object.entries(done.not_retried)) totals.not_retried[code] = (totals.not_retried[code] ?? 0) + n;
      if (done.stopped !== null || done.next_after === null) {
        totals.stopped = done.stopped;
        return totals;
      }
      after = done.next_after;
    }
  }

  // ---- usage, limits, tools, stats, plans -------------------------------------------------

  /** The bill from the ledger: a user's (GET /v1/users/{id}/usage), or every user's
   * together without `userId` (GET /v1/usage, an admin key). */
  usage(userId?: string, window: { from?: string; to?: string } = {}): Promise<Record<string, unknown>> {
    const path = userId === undefined ? "/v1/usage" : `/v1/users/${encodeURIComponent(userId)}/usage`;
    return this.call("GET", path, { query: window });
  }

  /** GET /v1/users/{id}/limits: the effective limits and the overrides. */
  limits(userId: string): Promise<Record<string, unknown>> {
    return this.call("GET", `/v1/users/${encodeURIComponent(userId)}/limits`);
  }

  /** PUT /v1/users/{id}/limits (admin): replaces the overrides; `{}` clears them. */
  setLimits(userId: string, overrides: Record<string, unknown>): Promise<Record<string, unknown>> {
    return this.call("PUT", `/v1/users/${encodeURIComponent(userId)}/limits`, { body: overrides });
  }

  /** GET /v1/tools: the tool registry (with `permitted` for `userId`). */
  async tools(userId?: string): Promise<Array<Record<string, unknown>>> {
    const answer = await this.call<{ tools: Array<Record<string, unknown>> }>("GET", "/v1/tools", {
      query: { user_id: userId },
    });
    return answer.tools;
  }

  /** GET /v1/stats: success statistics of the tasks created in the window. */
  stats(userId?: string, window: { from?: string; to?: string } = {}): Promise<Record<string, unknown>> {
    return this.call("GET", "/v1/stats", { query: { user_id: userId, ...window } });
  }

  /** POST /v1/plan: the planner alone; the plan once made, or the task id to poll when it
   * took longer than `wait_s`. */
  async plan(
    userId: string,
    text: string,
    options: { model?: string; tools?: string[]; timeout_s?: number; wait_s?: number; idempotency_key?: string } = {},
  ): Promise<Record<string, unknown>> {
    const body = { ...options, user_id: userId, text };
    body.idempotency_key ??= await newKey();
    return this.call("POST", "/v1/plan", { body, timeoutS: this.timeoutS + (options.wait_s ?? 30) });
  }

  // ---- the wire ---------------------------------------------------------------------------

  private target(path: string, query?: Query): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) params.append(k, String(v));
    }
    const text = params.toString();
    return this.base + path + (text ? `?${text}` : "");
  }

  private headers(json: boolean): Record<string, string> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}` };
    if (json) headers["Content-Type"] = "application/json";
    return headers;
  }

  private async call<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    const timeoutS = options.timeoutS ?? this.timeoutS;
    const retries = options.retries ?? this.maxRetries;
    const deadline = Date.now() + timeoutS * 1000;
    const url = this.target(path, options.query);
    for (let attempt = 0; ; attempt++) {
      const left = deadline - Date.now();
      if (left <= 0) throw new TransportError(`${method} ${path}: no answer within ${timeoutS} s`);
      let response: Response;
      let text: string;
      try {
        const init: RequestInit & { duplex?: "half" } = {
          method,
          headers: this.headers(options.body !== undefined),
          signal: AbortSignal.timeout(left),
        };
        if (options.stream || options.raw) {
          init.body = options.stream ?? options.raw!;
          if (options.stream) init.duplex = "half";
          (init.headers as Record<string, string>)["Content-Type"] = "application/x-ndjson";
        } else if (options.body !== undefined) {
          init.body = JSON.stringify(options.body);
        }
        response = await this.fetchImpl(url, init);
        text = await response.text();
      } catch (e) {
        if (e instanceof TypeError && /line break/.test(e.message)) throw e;
        const cause = (e as { cause?: unknown }).cause;
        if (cause instanceof TypeError && /line break/.test(cause.message)) throw cause;
        if (attempt >= retries || !(await this.pause(attempt, undefined, deadline))) {
          throw new TransportError(`${method} ${path}: ${(e as Error).message}`, { cause: e });
        }
        continue;
      }
      if (response.status < 400) return (text ? JSON.parse(text) : undefined) as T;
      const retryAfter = retryAfterOf(response);
      const error = errorFor(response.status, text, retryAfter);
      const again = response.status === 503 || (response.status === 429 && retryAfter !== undefined);
      if (!again || attempt >= retries || !(await this.pause(attempt, retryAfter, deadline))) throw error;
    }
  }

  /** Sleeps before the next try and resolves true; false (no sleep) when the pause, or the
   * server's Retry-After, is longer than maxBackoffS or than the time left. */
  private async pause(attempt: number, retryAfterS: number | undefined, deadline: number): Promise<boolean> {
    let wait = Math.min(this.maxBackoffS, this.backoffS * 2 ** attempt) * (0.5 + Math.random() / 2);
    if (retryAfterS !== undefined) wait = Math.max(wait, retryAfterS);
    if (wait > this.maxBackoffS || Date.now() + wait * 1000 >= deadline) return false;
    await sleep(wait * 1000);
    return true;
  }

  /** Opens a streamed answer; its reader is cut when nothing came for `idleTimeoutS`. */
  private async open(path: string, query: Query, idleTimeoutS: number): Promise<Opened> {
    const abort = new AbortController();
    let timer = setTimeout(() => abort.abort(), idleTimeoutS * 1000);
    let response: Response;
    try {
      response = await this.fetchImpl(this.target(path, query), {
        headers: this.headers(false),
        signal: abort.signal,
      });
    } catch (e) {
      clearTimeout(timer);
      throw new TransportError(`GET ${path}: ${(e as Error).message}`, { cause: e });
    }
    if (response.status >= 400) {
      clearTimeout(timer);
      throw errorFor(response.status, await response.text(), retryAfterOf(response));
    }
    const rearm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => abort.abort(), idleTimeoutS * 1000);
    };
    return { response, abort, rearm, stop: () => clearTimeout(timer) };
  }

  private async *texts(opened: Opened): AsyncGenerator<string> {
    const reader = opened.response.body!.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        opened.rearm(); // the idle bound counts only while waiting for the server
        try {
          chunk = await reader.read();
        } catch (e) {
          throw new TransportError(
            opened.abort.signal.aborted ? "the stream was silent past its idle timeout" : `the stream was cut: ${(e as Error).message}`,
            { cause: e },
          );
        }
        opened.stop();
        if (chunk.done) break;
        yield decoder.decode(chunk.value, { stream: true });
      }
      const tail = decoder.decode();
      if (tail) yield tail;
    } finally {
      opened.stop();
      opened.abort.abort();
    }
  }

  private async *readEvents(opened: Opened): AsyncGenerator<StreamEvent> {
    const parser = new EventParser();
    for await (const text of this.texts(opened)) yield* parser.feed(text);
  }

  private async *stream(path: string, query: Query, idleTimeoutS: number): AsyncGenerator<StreamEvent> {
    yield* this.readEvents(await this.open(path, query, idleTimeoutS));
  }
}

interface Opened {
  response: Response;
  abort: AbortController;
  rearm: () => void;
  stop: () => void;
}
