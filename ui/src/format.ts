/** How the console writes the API's values in words. */

import type { WaitingReason } from "./api.ts";

export const TASK_STATUSES = ["queued", "dispatched", "running", "succeeded", "failed", "timed_out", "cancelled"] as const;
export const RESULT_TYPES = ["action_completed", "need_clarification", "error"] as const;
export const STRATEGIES = ["react", "plan_execute", "plan_only"] as const;

/** What each waiting_reason means (the contract's description of WaitingReason). */
export const WAITING_REASONS: Record<WaitingReason, string> = {
  concurrency: "the user's max_concurrency tasks are already dispatched or running",
  requests_per_minute: "the user's requests-per-minute limit has no room for one more task this minute",
  tokens_per_minute: "the user's tokens-per-minute limit has no room for one more task this minute",
  budget: "the user's monthly budget is spent (the task ends failed, quota_exceeded, in the next pass)",
  fleet_capacity: "the workers' capacity, or the fleet's max_active_tasks, is in use",
  batch_share: "batch work waits behind interactive work beyond its guaranteed share of the fleet",
  pass_limit: "the scheduler admitted all it may in one pass; the next pass follows at once",
  parent: "a follow-up waiting for the task it follows to end",
  scheduling: "no pass has held it back yet (submitted just now, or the next pass admits it)",
};

export function waitingText(reason: WaitingReason | null | undefined): string {
  if (!reason) return "";
  return `${reason.replace(/_/g, " ")}: ${WAITING_REASONS[reason] ?? "unknown reason"}`;
}

export const words = (code: string) => code.replace(/_/g, " ");

/** A timestamp as local date and time to the second, with the zone ("2026-11-28 21:06:32 UTC+08:00"). */
export function when(ts: string | null | undefined): string {
  if (!ts) return "—";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  const pad = (n: number) => String(n).padStart(2, "0");
  // The browser's zone, named: a time without one is read in whatever zone the reader
  // assumes.
  const offset = -d.getTimezoneOffset();
  const zone =
    offset === 0 ? "UTC" : `UTC${offset > 0 ? "+" : "-"}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zone}`;
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

export function between(from: string | null | undefined, to: string | null | undefined): number | null {
  if (!from || !to) return null;
  return new Date(to).getTime() - new Date(from).getTime();
}

export const count = (n: number | null | undefined) => (n === null || n === undefined ? "—" : n.toLocaleString("en-US"));

export function money(cost: string | null | undefined, currency: string | null | undefined): string {
  if (cost === null || cost === undefined) return "—";
  return currency ? `${cost} ${currency}` : cost;
}

export const shortId = (id: string) => id.slice(0, 8);

/** "2026-11-28" of a Date, in UTC (the API reads a bare date as UTC midnight). */
export const utcDate = (d: Date) => d.toISOString().slice(0, 10);

/** A batch id short enough for a table cell (a made-up one is a UUID). */
export const shortBatch = (id: string) => (id.length > 12 ? `${id.slice(0, 8)}…` : id);

/** A rate of 0 to 1 as a percentage with one decimal; "—" for none. */
export function percent(rate: number | null | undefined): string {
  return rate === null || rate === undefined ? "—" : `${(rate * 100).toFixed(1)}%`;
}
