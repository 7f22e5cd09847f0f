/** Tasks: one user's tasks, newest first, filtered, paged with the API's cursor, kept
 * fresh by polling while the page is visible; a small form to submit a task. */

import { useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import type { Client, Task, TaskStatus } from "../api.ts";
import { ErrorNote, ResultBadge, StatusBadge, useAsync, usePoll } from "../components.tsx";
import { RESULT_TYPES, STRATEGIES, TASK_STATUSES, money, shortBatch, shortId, waitingText, when, words } from "../format.ts";
import { currentRoute, href } from "../router.ts";
import { UserField, defaultUser } from "./user_field.tsx";

const PAGE_SIZE = 50;
const POLL_MS = 3000;

interface Filters {
  user: string;
  status: string;
  resultType: string;
  strategy: string;
  batchId: string;
  from: string;
  to: string;
}

/** A task's strategy never changes, and the list does not carry it: asked once per task. */
const strategies = new Map<string, string>();

async function strategiesOf(client: Client, tasks: Task[]): Promise<void> {
  const missing = tasks.filter((t) => !strategies.has(t.task_id));
  for (let i = 0; i < missing.length; i += 4) {
    await Promise.all(
      missing.slice(i, i + 4).map(async (t) => {
        const full = await client.task(t.task_id);
        strategies.set(t.task_id, (full.strategy as string | null) ?? "default");
      }),
    );
  }
}

function matches(t: Task, f: Filters): boolean {
  if (f.resultType && t.result?.type !== f.resultType) return false;
  if (f.from && new Date(t.created_at) < new Date(f.from)) return false;
  if (f.to && new Date(t.created_at) >= new Date(f.to)) return false;
  if (f.strategy && strategies.get(t.task_id) !== f.strategy) return false;
  return true;
}

function SubmitTask({ client, user, onSubmitted }: { client: Client; user: string; onSubmitted: (t: Task) => void }) {
  const [text, setText] = useState("");
  const [model, setModel] = useState("");
  const [strategy, setStrategy] = useState("");
  const submit = useAsync<Task>();
  const send = async (e: Event) => {
    e.preventDefault();
    const task = await submit.run(() =>
      client.submit(user, text, {
        ...(model ? { model } : {}),
        ...(strategy ? { strategy: strategy as "react" | "plan_execute" } : {}),
      }),
    );
    if (task) {
      setText("");
      onSubmitted(task);
    }
  };
  return (
    <details class="submit-task">
      <summary>Submit a task as {user || "…"}</summary>
      <form onSubmit={send} class="grid-form">
        <label>
          Text
          <input name="text" required value={text} onInput={(e) => setText(e.currentTarget.value)} />
        </label>
        <label>
          Model (blank: the default)
          <input name="model" value={model} onInput={(e) => setModel(e.currentTarget.value)} />
        </label>
        <label>
          Strategy
          <select name="strategy" value={strategy} onChange={(e) => setStrategy(e.currentTarget.value)}>
            <option value="">default</option>
            <option value="react">react</option>
            <option value="plan_execute">plan_execute</option>
          </select>
        </label>
        <button type="submit" disabled={!user || submit.busy} aria-busy={submit.busy}>
          Submit
        </button>
      </form>
      <ErrorNote error={submit.error} what="Not submitted" />
      {submit.value ? (
        <p role="status">
          Submitted <a href={href("tasks", submit.value.task_id)}>task {shortId(submit.value.task_id)}</a>.
        </p>
      ) : null}
    </details>
  );
}

export function TasksPage({ client, identity }: PageProps) {
  const q = currentRoute().query;
  const [filters, setFilters] = useState<Filters>({
    user: q.get("user_id") ?? defaultUser(identity),
    status: q.get("status") ?? "",
    resultType: q.get("result_type") ?? "",
    strategy: q.get("strategy") ?? "",
    batchId: q.get("batch_id") ?? "",
    from: "",
    to: "",
  });
  const [cursors, setCursors] = useState<string[]>([]); // the `before` of each page seen
  const [tick, setTick] = useState(0);
  const list = useAsync<Task[]>();
  const [updated, setUpdated] = useState<Date | null>(null);
  const before = cursors[cursors.length - 1];
  const set = (patch: Partial<Filters>) => {
    setFilters({ ...filters, ...patch });
    setCursors([]);
  };

  usePoll(
    async () => {
      if (!filters.user) return;
      const tasks = await list.run(async () => {
        const page = await client.listTasks(filters.user, {
          status: (filters.status || undefined) as TaskStatus | undefined,
          limit: PAGE_SIZE,
          before,
          batchId: filters.batchId.trim() || undefined,
        });
        if (filters.strategy) await strategiesOf(client, page);
        return page;
      });
      if (tasks) setUpdated(new Date());
    },
    POLL_MS,
    [filters.user, filters.status, filters.batchId, filters.strategy, before, tick],
  );

  const page = list.value ?? [];
  const shown = page.filter((t) => matches(t, filters));
  const clientSide = filters.resultType || filters.from || filters.to || filters.strategy;

  return (
    <section aria-labelledby="tasks-title">
      <h1 id="tasks-title">Tasks</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <UserField identity={identity} value={filters.user} onChange={(user) => set({ user })} />
        <label>
          Status
          <select name="status" value={filters.status} onChange={(e) => set({ status: e.currentTarget.value })}>
            <option value="">any</option>
            {TASK_STATUSES.map((s) => (
              <option value={s}>{words(s)}</option>
            ))}
          </select>
        </label>
        <label>
          Result type
          <select name="result_type" value={filters.resultType} onChange={(e) => set({ resultType: e.currentTarget.value })}>
            <option value="">any</option>
            {RESULT_TYPES.map((s) => (
              <option value={s}>{words(s)}</option>
            ))}
          </select>
        </label>
        <label>
          Strategy
          <select name="strategy" value={filters.strategy} onChange={(e) => set({ strategy: e.currentTarget.value })}>
            <option value="">any</option>
            <option value="default">default</option>
            {STRATEGIES.map((s) => (
              <option value={s}>{words(s)}</option>
            ))}
          </select>
        </label>
        <label>
          Batch id
          <input name="batch_id" value={filters.batchId} onChange={(e) => set({ batchId: e.currentTarget.value })} />
        </label>
        <label>
          Created from
          <input name="from" type="datetime-local" value={filters.from} onChange={(e) => set({ from: e.currentTarget.value })} />
        </label>
        <label>
          Created before
          <input name="to" type="datetime-local" value={filters.to} onChange={(e) => set({ to: e.currentTarget.value })} />
        </label>
      </form>
      <SubmitTask client={client} user={filters.user} onSubmitted={() => setTick(tick + 1)} />
      <ErrorNote error={list.error} what="Could not list tasks" />
      <p class="muted" aria-live="polite">
        {filters.user ? (
          <>
            {shown.length} of {page.length} tasks on this page
            {clientSide ? " match (result type, strategy and dates are filtered in the console, a page at a time)" : ""}
            {updated ? ` · updated ${when(updated.toISOString()).slice(11)}` : ""}
          </>
        ) : (
          "Name a user to list their tasks."
        )}
      </p>
      <table class="compact striped" aria-describedby="tasks-title">
        <thead>
          <tr>
            <th scope="col">Task</th>
            <th scope="col">Created</th>
            <th scope="col">Status</th>
            <th scope="col">Result</th>
            <th scope="col">Text / message</th>
            <th scope="col" class="num">Steps</th>
            <th scope="col" class="num">Cost</th>
            <th scope="col">Batch</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((t) => (
            <tr key={t.task_id} data-task-id={t.task_id}>
              <td>
                <a href={href("tasks", t.task_id)} class="mono">
                  {shortId(t.task_id)}
                </a>
              </td>
              <td class="nowrap">{when(t.created_at)}</td>
              <td>
                <StatusBadge status={t.status} />
                {t.status === "queued" && t.waiting_reason ? (
                  <div class="waiting small">waiting: {waitingText(t.waiting_reason)}</div>
                ) : null}
              </td>
              <td>
                <ResultBadge type={t.result?.type} />
              </td>
              <td class="text-cell">
                <div>{t.text}</div>
                {t.result?.message ? <div class="muted small">{t.result.message}</div> : null}
                {t.error ? (
                  <div class="error-text small">
                    {t.error_code ? <code>{t.error_code}</code> : null} {t.error}
                  </div>
                ) : null}
              </td>
              <td class="num">{t.steps as number}</td>
              <td class="num nowrap">{money(t.cost, t.currency)}</td>
              <td>
                {t.batch_id ? (
                  <a href={href("batches", t.batch_id)} title={t.batch_id} class="mono">
                    {shortBatch(t.batch_id)}
                  </a>
                ) : (
                  ""
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <nav class="pager" aria-label="Pages">
        <button type="button" class="secondary" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
          Newer
        </button>
        <button
          type="button"
          class="secondary"
          disabled={page.length < PAGE_SIZE}
          onClick={() => setCursors([...cursors, page[page.length - 1]!.task_id])}
        >
          Older
        </button>
      </nav>
    </section>
  );
}
