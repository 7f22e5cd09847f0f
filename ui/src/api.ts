/** The console's one door to the API: the project's client (clients/typescript), made for
 * the signed-in key, and a few calls the client does not have (whoami, fleet, dead
 * letters), made through the same error types. Every answer of 401 signs the user out. */

import { Client, NotFound, errorFor, type WaitingReason } from "../../clients/typescript/src/index.ts";

export * from "../../clients/typescript/src/index.ts";

/** What the signed-in key may see. */
export interface Identity {
  keyName: string;
  admin: boolean;
  /** The users the key acts for; empty for an admin (every user). */
  userIds: string[];
  /** Where a trace id links to ({trace_id} in it), when the fleet names its tracing backend. */
  traceLink?: string | null;
}

let onUnauthorized: (reason: string) => void = () => {};

/** Called when any answer is 401: the key was refused, so the console signs out. */
export function setUnauthorizedHandler(handler: (reason: string) => void): void {
  onUnauthorized = handler;
}

/** fetch, with 401 reported and, when `stop` is given, the request cut when it aborts
 * (the client's streams take no signal of their own). */
function consoleFetch(stop?: AbortSignal): typeof fetch {
  return async (input, init) => {
    let signal = init?.signal ?? undefined;
    if (stop) signal = signal ? AbortSignal.any([signal, stop]) : stop;
    const response = await fetch(input, { ...init, signal });
    if (response.status === 401) onUnauthorized("The API refused the key (401): sign in again.");
    return response;
  };
}

/** The client for `apiKey`, talking to the server that served the console. */
export function clientFor(apiKey: string, stop?: AbortSignal): Client {
  return new Client({ url: location.origin, apiKey, fetch: consoleFetch(stop) });
}

/** A call the client does not have yet: JSON in, JSON out, the client's error types. */
export async function rawCall<T>(apiKey: string, method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${apiKey}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await consoleFetch()(location.origin + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  if (response.status >= 400) throw errorFor(response.status, text);
  return (text ? JSON.parse(text) : undefined) as T;
}

/** A route the dispatcher does not serve yet answers 404 (not_found, path /path). */
export function isMissingRoute(e: unknown): boolean {
  return e instanceof NotFound;
}

interface WhoAmI {
  key_name: string;
  admin: boolean;
  any_user: boolean;
  user_ids: string[];
  trace_link?: string | null;
}

/** Who the key is (GET /v1/whoami). A caller that may act for any user without being an
 * admin (the dispatcher's auth mode `none`) names the user it works as in the sign-in form.
 * Throws the API's error (Unauthorized for an unknown key). */
export async function identify(apiKey: string, userIdHint: string): Promise<Identity | "needs_user_id"> {
  const me = await rawCall<WhoAmI>(apiKey, "GET", "/v1/whoami");
  const traceLink = me.trace_link ?? null;
  if (me.admin || me.user_ids.length > 0)
    return { keyName: me.key_name, admin: me.admin, userIds: me.user_ids, traceLink };
  const userId = userIdHint.trim();
  if (!userId) return "needs_user_id";
  await clientFor(apiKey).listTasks(userId, { limit: 1 }); // 403 when it may not act for them
  return { keyName: me.key_name, admin: false, userIds: [userId], traceLink };
}

// ---- routes the client does not have yet --------------------------------------------------

export interface FleetWorker {
  worker_id: string;
  incarnation: number;
  last_seen: string;
  started_at: string;
  in_flight: number;
  capacity: number;
  dispatch_lag: number;
  draining: boolean;
  tasks: { task_id: string; user_id: string; started_at: string | null }[];
}

export interface Fleet {
  workers: FleetWorker[];
  queued: Record<string, number>;
  queue_by_user: { user_id: string; priority: string; queued: number; waiting_reason: WaitingReason }[];
  in_flight: number;
  completions_per_s: number;
  window_s: number;
  history: { bucket_s: number; until_unix_s: number; ends: number[] };
}

export interface DeadLetter {
  partition: number;
  offset: number;
  key: string;
  value: string;
  reason: string;
  source_topic: string;
  source_partition: string;
  source_offset: string;
  replayed_from: string;
  /** TOPIC:PARTITION:OFFSET where the message was first read; a replay is keyed by it. */
  origin: string;
  headers: Record<string, string>;
  /** What became of its replays: the task they made or found, the letters they became. */
  replays:
      {task_id: string|null; first_at: string | null; stored: number; failed_again_at: string[]};
  /** The whole value's size; `value` holds its first 16 KiB. */
  value_bytes: number;
}

export interface DeadLetters {
  topic: string;
  dead_letters: DeadLetter[];
  count: number;
  /** Letters in the topic that match the filters (the answer holds the newest `limit`). */
  matched: number;
}

export interface DeadLetterFilters {
  key?: string;
  reason?: string;
  source_topic?: string;
}

export const fleet = (apiKey: string) => rawCall<Fleet>(apiKey, "GET", "/v1/fleet");

/** A dead-letter read takes up to 15 s and a replay's deliveries up to 15 s more, with the
 * reader's group to leave: a console that gave up sooner would call a sent replay failed. */
const DEAD_LETTERS_MS = 60_000;

export const deadLetters = (apiKey: string, limit: number, filters: DeadLetterFilters = {}) => {
  const query = new URLSearchParams({ limit: String(limit) });
  for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
  return rawCall<DeadLetters>(apiKey, "GET", `/v1/dead-letters?${query}`, undefined, DEAD_LETTERS_MS);
};

export const replayDeadLetters = (apiKey: string, offsets: string[]) =>
  rawCall<{ replayed: number; dry_run: boolean; sent: { partition: number; offset: number; topic: string; key: string }[] }>(
    apiKey,
    "POST",
    "/v1/dead-letters/replay",
    { offsets },
    DEAD_LETTERS_MS,
  );
