/** What the console keeps in sessionStorage: the key and who it is (gone when the tab
 * closes), and the batch ids seen lately (there is no route listing batches). */

import type { Identity } from "./api.ts";

export interface Session {
  apiKey: string;
  identity: Identity;
}

const SESSION = "agentfleet.console.session";
const BATCHES = "agentfleet.console.batches";

export function loadSession(): Session | null {
  try {
    const text = sessionStorage.getItem(SESSION);
    return text ? (JSON.parse(text) as Session) : null;
  } catch {
    return null;
  }
}

export function saveSession(session: Session | null): void {
  if (session) sessionStorage.setItem(SESSION, JSON.stringify(session));
  else sessionStorage.removeItem(SESSION);
}

export function recentBatches(): string[] {
  try {
    const list: unknown = JSON.parse(sessionStorage.getItem(BATCHES) ?? "[]");
    return Array.isArray(list) ? list.filter((x): x is string => typeof x === "string") : [];
  } catch {
    return [];
  }
}

/** Puts `batchId` first in the recent list (at most 20 kept). */
export function rememberBatch(batchId: string): void {
  const list = [batchId, ...recentBatches().filter((b) => b !== batchId)].slice(0, 20);
  sessionStorage.setItem(BATCHES, JSON.stringify(list));
}
