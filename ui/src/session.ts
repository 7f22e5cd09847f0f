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

/** A batch as the console names it: its id, and its user (batch ids are each user's; a key
 * acting for several users needs the user when more than one has a batch of the id). */
export interface BatchRef {
  id: string;
  user?: string | undefined;
}

export function recentBatches(): BatchRef[] {
  try {
    const list: unknown = JSON.parse(sessionStorage.getItem(BATCHES) ?? "[]");
    if (!Array.isArray(list)) return [];
    return list.flatMap((x): BatchRef[] => {
      if (typeof x === "string") return [{ id: x }];
      if (x && typeof x === "object" && typeof (x as BatchRef).id === "string") {
        const user = (x as BatchRef).user;
        return [{ id: (x as BatchRef).id, user: typeof user === "string" ? user : undefined }];
      }
      return [];
    });
  } catch {
    return [];
  }
}

const sameBatch = (a: BatchRef, b: BatchRef) => a.id === b.id && (a.user ?? "") === (b.user ?? "");

/** Puts `batch` first in the recent list (at most 20 kept). */
export function rememberBatch(batch: BatchRef): void {
  const list = [batch, ...recentBatches().filter((b) => !sameBatch(b, batch))].slice(0, 20);
  sessionStorage.setItem(BATCHES, JSON.stringify(list));
}
