/** What the console keeps in sessionStorage: the key and who it is (gone when the tab
 * closes). */

import type { Identity } from "./api.ts";

export interface Session {
  apiKey: string;
  identity: Identity;
}

const SESSION = "agentfleet.console.session";

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
