/** Tasks: the search every operator starts from. Every user's tasks (an admin's key; else
 * every user the key acts for), newest first, filtered by the server (user, status, result
 * type, error code, model, batch, session, text, time range), counted, paged with the API's
 * cursor and kept fresh by polling while the page is visible; the filters live in the URL.
 * Tasks picked on the page can be cancelled or retried together; a small form submits one. */

import { useRef, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import type { Client, Task, TaskPage, TaskSearch, TaskStatus } from "../api.ts";
import { DraftInput, ErrorNote, ResultBadge, StatusBadge, TaskTextCell, useAsync, usePoll } from "../components.tsx";
import { RESULT_TYPES, TASK_STATUSES, count, money, shortBatch, shortId, waitingText, when, words } from "../format.ts";
import { currentRoute, href } from "../router.ts";
import { UserField } from "./user_field.tsx";

const PAGE_SIZE = 50;
const POLL_MS = 3000;

/** The filters, as the URL's query names them (#/tasks?q=...). */
const FILTERS = ["user_id", "status", "result_type", "error_code", "model", "batch_id", "session_id", "q", "since", "until"] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

function filtersOf(query: URLSearchParams, identity: PageProps["identity"]): Filters {
  const f = Object.fromEntries(FILTERS.map((k) => [k, query.get(k) ?? ""])) as Filters;
  // A key of one user reads that user's; every other starts from every user it acts for.
  if (!f.user_id && !identity.admin && identity.userIds.length === 1) f.user_id = identity.userIds[0]!;
  return f;
}

/** The filters into the URL without a new history entry (a reload or a shared link keeps them). */
function keepInUrl(f: Filters): void {
  const query = new URLSearchParams();
  for (const k of FILTERS) if (f[k].trim()) query.set(k, f[k].trim());
  const text = query.toString();
  history.replaceState(null, "", `#/tasks${text ? `?${text}` : ""}`);
}

/** A datetime-local value (the browser's zone) as an RFC 3339 time; "" stays "". */
function instant(local: string): string | undefined {
  if (!local) return undefined;
  const t = new Date(local);
  return Number.isNaN(t.getTime()) ? undefined : t.toISOString();
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

/** What a bulk action did to the tasks picked: how many of each outcome. */
async function onEach(ids: string[], act: (id: string) => Promise<unknown>): Promise<string> {
  const outcomes = new Map<string, number>();
  for (const id of ids) {
    let outcome = "done";
    try {
      await act(id);
    } catch (e) {
      outcome = (e as { code?: string }).code ?? "failed";
    }
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
  }
  return [...outcomes].map(([k, n]) => `${n} ${words(k)}`).join(", ");
}

export function TasksPage({ client, identity }: PageProps) {
  const [filters, setFilters] = useState<Filters>(() => filtersOf(currentRoute().query, identity));
  const [cursors, setCursors] = useState<string[]>([]); // the `before` of each page seen
  const [tick, setTick] = useState(0);
  const [picked, setPicked] = useState<Set<string>>(new Set());
  // Each page answered is kept with the search and cursor it answers: an answer to a search
  // changed meanwhile (its request was under way) is never shown as the new search's.
  const list = useAsync<TaskPage & { key: string }>();
  const bulk = useAsync<string>();
  const [updated, setUpdated] = useState<Date | null>(null);
  // The count of a search is asked for once per search (it may read many rows), not at every
  // refresh: the search it was counted for, and the count.
  const counted = useRef<{ key: string; total: number; capped: boolean } | null>(null);
  const searchKey = JSON.stringify(filters);
  const before = cursors[cursors.length - 1];
  const pageKey = `${searchKey}\n${before ?? ""}`;
  const set = (patch: Partial<Filters>) => {
    const next = { ...filters, ...patch };
    setFilters(next);
    setCursors([]);
    setPicked(new Set());
    keepInUrl(next);
  };

  usePoll(
    async () => {
      const wantCount = counted.current?.key !== searchKey;
      const key = pageKey;
      const page = await list.run(async () => ({
        key,
        ...(await client.searchTasks({
          userId: filters.user_id || undefined,
          status: (filters.status || undefined) as TaskStatus | undefined,
          resultType: (filters.result_type || undefined) as TaskSearch["resultType"],
          errorCode: filters.error_code.trim() || undefined,
          model: filters.model.trim() || undefined,
          batchId: filters.batch_id.trim() || undefined,
          sessionId: filters.session_id.trim() || undefined,
          q: filters.q.trim() || undefined,
          since: instant(filters.since),
          until: instant(filters.until),
          limit: PAGE_SIZE,
          before,
          count: wantCount,
        })),
      }));
      if (page && wantCount && page.total !== undefined && (!counted.current || counted.current.key !== searchKey))
        counted.current = { key: searchKey, total: page.total, capped: page.total_capped ?? false };
      if (page) setUpdated(new Date());
    },
    POLL_MS,
    [JSON.stringify(filters), before, tick],
  );

  const current = list.value?.key === pageKey ? list.value : null;
  const page = current?.tasks ?? [];
  const total = counted.current?.key === searchKey ? counted.current.total : undefined;
  const capped = counted.current?.capped ?? false;
  const pickedHere = page.filter((t) => picked.has(t.task_id)).map((t) => t.task_id);
  const toggle = (id: string) => {
    const next = new Set(picked);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setPicked(next);
  };
  const act = async (what: "cancel" | "retry") => {
    const ids = pickedHere;
    if (!ids.length) return;
    if (!confirm(`${what === "cancel" ? "Cancel" : "Retry"} ${ids.length} task${ids.length === 1 ? "" : "s"}?`)) return;
    await bulk.run(async () => {
      const done = await onEach(ids, (id) => (what === "cancel" ? client.cancel(id) : client.retry(id)));
      return `${what === "cancel" ? "Cancel" : "Retry"} of ${ids.length}: ${done}.`;
    });
    setPicked(new Set());
    setTick(tick + 1);
  };
  const text = (name: keyof Filters, label: string, placeholder = "") => (
    <label>
      {label}
      <DraftInput name={name} value={filters[name]} placeholder={placeholder} onCommit={(value) => set({ [name]: value })} />
    </label>
  );

  return (
    <section aria-labelledby="tasks-title">
      <h1 id="tasks-title">Tasks</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        {text("q", "Text contains", "words of the task")}
        <UserField identity={identity} value={filters.user_id} everyone="every user" onChange={(user) => set({ user_id: user })} />
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
          <select name="result_type" value={filters.result_type} onChange={(e) => set({ result_type: e.currentTarget.value })}>
            <option value="">any</option>
            {RESULT_TYPES.map((s) => (
              <option value={s}>{words(s)}</option>
            ))}
          </select>
        </label>
        {text("error_code", "Error code")}
        {text("model", "Model")}
        {text("batch_id", "Batch id")}
        {text("session_id", "Session")}
        <label>
          Created from
          <input name="since" type="datetime-local" value={filters.since} onChange={(e) => set({ since: e.currentTarget.value })} />
        </label>
        <label>
          Created before
          <input name="until" type="datetime-local" value={filters.until} onChange={(e) => set({ until: e.currentTarget.value })} />
        </label>
      </form>
      <SubmitTask client={client} user={filters.user_id} onSubmitted={() => setTick(tick + 1)} />
      <ErrorNote error={list.error} what="Could not search tasks" />
      <p class="muted" aria-live="polite" id="tasks-count" title="counted when the search was made; the page itself refreshes every few seconds">
        {total === undefined
          ? ""
          : `${capped ? `more than ${count(total)}` : count(total)} ${total === 1 && !capped ? "task matches" : "tasks match"} · page ${cursors.length + 1}`}
        {filters.user_id ? ` · user ${filters.user_id}` : identity.admin ? " · every user" : " · every user of this key"}
        {updated ? ` · updated ${when(updated.toISOString()).slice(11)}` : ""}
      </p>
      <div class="bulk" role="group" aria-label="Picked tasks">
        <span>{pickedHere.length} picked</span>
        <button type="button" class="secondary" disabled={!pickedHere.length || bulk.busy} onClick={() => act("cancel")}>
          Cancel picked
        </button>
        <button type="button" class="secondary" disabled={!pickedHere.length || bulk.busy} onClick={() => act("retry")}>
          Retry picked
        </button>
        {bulk.value ? <span role="status">{bulk.value}</span> : null}
        <ErrorNote error={bulk.error} what="Not done" />
      </div>
      <table class="compact striped" aria-describedby="tasks-title">
        <thead>
          <tr>
            <th scope="col">
              <input
                type="checkbox"
                aria-label="Pick every task on the page"
                checked={page.length > 0 && pickedHere.length === page.length}
                onChange={(e) => setPicked(e.currentTarget.checked ? new Set(page.map((t) => t.task_id)) : new Set())}
              />
            </th>
            <th scope="col">Task</th>
            <th scope="col">User</th>
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
          {page.map((t) => (
            <tr key={t.task_id} data-task-id={t.task_id}>
              <td>
                <input type="checkbox" aria-label={`Pick task ${shortId(t.task_id)}`} checked={picked.has(t.task_id)} onChange={() => toggle(t.task_id)} />
              </td>
              <td>
                <a href={href("tasks", t.task_id)} class="mono">
                  {shortId(t.task_id)}
                </a>
              </td>
              <td class="nowrap">{t.user_id}</td>
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
              <TaskTextCell task={t} />
              <td class="num">{t.steps as number}</td>
              <td class="num nowrap">{money(t.cost, t.currency)}</td>
              <td>
                {t.batch_id ? (
                  <a href={`${href("batches", t.batch_id)}?user_id=${encodeURIComponent(t.user_id)}`} title={t.batch_id} class="mono">
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
      {page.length === 0 && current ? <p class="muted">No task matches.</p> : null}
      <nav class="pager" aria-label="Pages">
        <button type="button" class="secondary" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
          Newer
        </button>
        <button
          type="button"
          class="secondary"
          disabled={!current?.next_before}
          onClick={() => setCursors([...cursors, current!.next_before!])}
        >
          Older
        </button>
      </nav>
    </section>
  );
}
