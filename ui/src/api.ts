/** The console's one door to the API: the project's client (clients/typescript), made for
 * the signed-in key, and a few calls the client does not have yet (whoami, fleet, dead
 * letters), made through the same error types. Every answer of 401 signs the user out. */

import { ApiError, Client, NotFound, errorFor } from "../../clients/typescript/src/index.ts";

export * from "../../clients/typescript/src/index.ts";

/** What the signed-in key may see. */
export interface Identity {
  keyName: string;
  admin: boolean;
  /** The users the key acts for; empty for an admin (every user). */
  userIds: string[];
  /** "whoami" when the dispatcher said so; "fallback" when the console worked it out. */
  source: "whoami" | "fallback";
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
export async function rawCall<T>(apiKey: string, method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${apiKey}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await consoleFetch()(location.origin + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
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
  user_ids: string[];
}

/** Who the key is: GET /v1/whoami, or, while the dispatcher lacks that route, the
 * fallback below. Throws the API's error (Unauthorized for an unknown key). */
export async function identify(apiKey: string, userIdHint: string): Promise<Identity | "needs_user_id"> {
  try {
    const me = await rawCall<WhoAmI>(apiKey, "GET", "/v1/whoami");
    return { keyName: me.key_name, admin: me.admin, userIds: me.user_ids, source: "whoami" };
  } catch (e) {
    if (!isMissingRoute(e)) throw e;
  }
  // FALLBACK until GET /v1/whoami lands: GET /v1/usage is admin-only (200: admin, 403: not);
  // a user key names its user in the sign-in form, checked by listing one of its tasks.
  const client = clientFor(apiKey);
  try {
    await client.usage(undefined, { from: new Date().toISOString().slice(0, 10) });
    return { keyName: "admin key", admin: true, userIds: [], source: "fallback" };
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) throw e;
  }
  const userId = userIdHint.trim();
  if (!userId) return "needs_user_id";
  await client.listTasks(userId, { limit: 1 }); // 403 when the key may not act for the user
  return { keyName: `key for ${userId}`, admin: false, userIds: [userId], source: "fallback" };
}

// ---- routes the client does not have yet --------------------------------------------------

export interface FleetWorker {
  worker_id: string;
  incarnation: number;
  last_seen: string;
  in_flight: number;
  capacity: number;
}

export interface Fleet {
  workers: FleetWorker[];
  queued: Record<string, number>;
  in_flight: number;
  completions_per_s: number;
  window_s: number;
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
  headers: Record<string, string>;
}

export const fleet = (apiKey: string) => rawCall<Fleet>(apiKey, "GET", "/v1/fleet");

export const deadLetters = (apiKey: string, limit: number) =>
  rawCall<{ dead_letters: DeadLetter[] }>(apiKey, "GET", `/v1/dead-letters?limit=${limit}`);

export const replayDeadLetters = (apiKey: string, offsets: string[]) =>
  rawCall<{ replayed: number }>(apiKey, "POST", "/v1/dead-letters/replay", { offsets });
