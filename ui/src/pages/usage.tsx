/** Usage: cost and tokens per model and per day for a period, as charts and a table, and
 * the task statistics of the same period. The API bills a window as a whole, so the
 * console asks once per day (at most 31) for the charts. */

import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import type { Client } from "../api.ts";
import { Chart, ErrorNote, useAsync, type Series } from "../components.tsx";
import { count, duration, money, percent, utcDate, words } from "../format.ts";
import { UserField, defaultUser } from "./user_field.tsx";

interface ModelUsage {
  model: string;
  currency: string;
  calls: number;
  tasks: number;
  input_tokens: number;
  cached_input_tokens: number;
  output_tokens: number;
  cost: string;
  unreconciled_calls: number;
  unreconciled_cost: string;
  estimated_calls: number;
}

interface Usage {
  models: ModelUsage[];
  totals: Array<Omit<ModelUsage, "model" | "tasks">>;
}

interface Stats {
  tasks: number;
  ended: number;
  by_status: Record<string, number>;
  success_rate: number | null;
  action_completed_rate: number | null;
  by_result_type: Record<string, number>;
  by_strategy: Record<string, number>;
  duration_s: { avg: number | null; p95: number | null } | null;
  avg_steps: number | null;
  avg_tool_calls: number | null;
  tokens: { input: number; cached_input: number; output: number };
  cost: Array<{ currency: string; cost: string }>;
}

interface Report {
  days: string[];
  perDay: Usage[];
  whole: Usage;
  stats: Stats;
}

const DAY = 86_400_000;
const MAX_DAYS = 31;

async function report(client: Client, user: string | undefined, from: string, to: string): Promise<Report> {
  const start = new Date(from + "T00:00:00Z").getTime();
  const end = new Date(to + "T00:00:00Z").getTime() + DAY; // `to` is the last day shown
  const days: string[] = [];
  for (let t = start; t < end && days.length < MAX_DAYS; t += DAY) days.push(utcDate(new Date(t)));
  const last = utcDate(new Date(start + days.length * DAY));
  const window = { from, to: last };
  const [whole, stats] = await Promise.all([client.usage(user, window), client.stats(user, window)]);
  const perDay: Usage[] = [];
  for (let i = 0; i < days.length; i += 6) {
    const slice = days.slice(i, i + 6);
    perDay.push(
      ...((await Promise.all(
        slice.map((d) => client.usage(user, { from: d, to: utcDate(new Date(new Date(d + "T00:00:00Z").getTime() + DAY)) })),
      )) as unknown as Usage[]),
    );
  }
  return { days, perDay, whole: whole as unknown as Usage, stats: stats as unknown as Stats };
}

function byModel(r: Report, value: (m: ModelUsage) => number): Series[] {
  const models = [...new Set(r.perDay.flatMap((u) => u.models.map((m) => `${m.model} (${m.currency})`)))];
  return models.map((label) => ({
    label,
    values: r.perDay.map((u) => {
      const m = u.models.find((x) => `${x.model} (${x.currency})` === label);
      return m ? value(m) : 0;
    }),
  }));
}

function Tally({ caption, counts }: { caption: string; counts: Record<string, number> }) {
  const entries = Object.entries(counts);
  return (
    <table class="compact">
      <caption>{caption}</caption>
      <tbody>
        {entries.length ? (
          entries.map(([k, v]) => (
            <tr>
              <th scope="row">{words(k)}</th>
              <td class="num">{count(v)}</td>
            </tr>
          ))
        ) : (
          <tr>
            <td class="muted">none</td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

export function UsagePage({ client, identity }: PageProps) {
  const today = new Date();
  const [from, setFrom] = useState(utcDate(new Date(today.getTime() - 6 * DAY)));
  const [to, setTo] = useState(utcDate(today));
  const [user, setUser] = useState(identity.admin ? "" : defaultUser(identity));
  const data = useAsync<Report>();

  const load = (e?: Event) => {
    e?.preventDefault();
    void data.run(() => report(client, user || undefined, from, to));
  };
  useEffect(() => load(), []);

  const r = data.value;
  const x = r ? r.days.map((d) => new Date(d + "T00:00:00Z").getTime() / 1000) : [];
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      <form class="filters" onSubmit={load} aria-label="Period">
        <UserField identity={identity} value={user} onChange={setUser} id="usage-user" everyone="every user" />
        <label>
          From (UTC day)
          <input name="from" type="date" required value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
        </label>
        <label>
          To (UTC day, included)
          <input name="to" type="date" required value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </label>
        <button type="submit" aria-busy={data.busy} disabled={data.busy}>
          Show
        </button>
      </form>
      <ErrorNote error={data.error} what="Could not read the usage" />
      {r ? (
        <>
          <p class="muted" aria-live="polite">
            {user ? `User ${user}` : "Every user"}, {r.days[0]} to {r.days[r.days.length - 1]}
            {r.days.length === MAX_DAYS ? ` (at most ${MAX_DAYS} days are charted)` : ""}.
          </p>
          <div class="charts">
            <Chart title="Cost per day, per model" x={x} series={byModel(r, (m) => Number(m.cost))} bars yLabel="cost" width={600} />
            <Chart title="Tokens per day (input + output), per model" x={x} series={byModel(r, (m) => m.input_tokens + m.output_tokens)} bars yLabel="tokens" width={600} />
          </div>
          <table class="compact striped">
            <caption>Per model, for the whole period</caption>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col" class="num">Calls</th>
                <th scope="col" class="num">Tasks</th>
                <th scope="col" class="num">Input</th>
                <th scope="col" class="num">Cached input</th>
                <th scope="col" class="num">Output</th>
                <th scope="col" class="num">Cost</th>
                <th scope="col" class="num">Unreconciled</th>
                <th scope="col" class="num">Estimated calls</th>
              </tr>
            </thead>
            <tbody>
              {r.whole.models.map((m) => (
                <tr>
                  <th scope="row">{m.model}</th>
                  <td class="num">{count(m.calls)}</td>
                  <td class="num">{count(m.tasks)}</td>
                  <td class="num">{count(m.input_tokens)}</td>
                  <td class="num">{count(m.cached_input_tokens)}</td>
                  <td class="num">{count(m.output_tokens)}</td>
                  <td class="num">{money(m.cost, m.currency)}</td>
                  <td class="num">
                    {count(m.unreconciled_calls)} ({money(m.unreconciled_cost, m.currency)})
                  </td>
                  <td class="num">{count(m.estimated_calls)}</td>
                </tr>
              ))}
            </tbody>
            <tfoot>
              {r.whole.totals.map((t) => (
                <tr>
                  <th scope="row">Total ({t.currency})</th>
                  <td class="num">{count(t.calls)}</td>
                  <td />
                  <td class="num">{count(t.input_tokens)}</td>
                  <td class="num">{count(t.cached_input_tokens)}</td>
                  <td class="num">{count(t.output_tokens)}</td>
                  <td class="num">{money(t.cost, t.currency)}</td>
                  <td class="num">
                    {count(t.unreconciled_calls)} ({money(t.unreconciled_cost, t.currency)})
                  </td>
                  <td class="num">{count(t.estimated_calls)}</td>
                </tr>
              ))}
            </tfoot>
          </table>
          <h2 id="stats-title">Task statistics</h2>
          <div class="stat-cards" aria-labelledby="stats-title">
            <article>
              <h3>Tasks</h3>
              <p class="figure" data-stat="tasks">{count(r.stats.tasks)}</p>
              <small>{count(r.stats.ended)} ended</small>
            </article>
            <article>
              <h3>Done as asked</h3>
              <p class="figure" data-stat="action_completed_rate">{percent(r.stats.action_completed_rate)}</p>
              <small>action completed, of ended</small>
            </article>
            <article>
              <h3>Succeeded</h3>
              <p class="figure" data-stat="success_rate">{percent(r.stats.success_rate)}</p>
              <small>
                of ended; {count(r.stats.by_result_type?.error ?? 0)} ended with an error answer,{" "}
                {count(r.stats.by_result_type?.need_clarification ?? 0)} with a question
              </small>
            </article>
            <article>
              <h3>Duration</h3>
              <p class="figure">{duration(r.stats.duration_s?.avg == null ? null : r.stats.duration_s.avg * 1000)}</p>
              <small>average; p95 {duration(r.stats.duration_s?.p95 == null ? null : r.stats.duration_s.p95 * 1000)}</small>
            </article>
            <article>
              <h3>Steps / tool calls</h3>
              <p class="figure">
                {r.stats.avg_steps?.toFixed(2) ?? "—"} / {r.stats.avg_tool_calls?.toFixed(2) ?? "—"}
              </p>
              <small>average per task</small>
            </article>
            <article>
              <h3>Tokens</h3>
              <p class="figure">{count(r.stats.tokens.input + r.stats.tokens.output)}</p>
              <small>
                {count(r.stats.tokens.input)} in ({count(r.stats.tokens.cached_input)} cached), {count(r.stats.tokens.output)} out
              </small>
            </article>
            <article>
              <h3>Cost</h3>
              <p class="figure">{r.stats.cost.map((c) => money(c.cost, c.currency)).join(", ") || "—"}</p>
              <small>of these tasks</small>
            </article>
          </div>
          <div class="columns">
            <Tally caption="By status" counts={r.stats.by_status} />
            <Tally caption="By result type" counts={r.stats.by_result_type} />
            <Tally caption="By strategy" counts={r.stats.by_strategy} />
          </div>
        </>
      ) : data.busy ? (
        <p aria-busy="true">Loading…</p>
      ) : null}
    </section>
  );
}
