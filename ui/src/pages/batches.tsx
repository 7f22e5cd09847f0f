/** Batches: the list of the key's batches (every user's for an admin), newest first with
 * their progress, a page at a time; open one by id; its progress, counts, waiting reason,
 * results download and cancel; upload a JSON Lines file as a new batch. */

import { useRef, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import type { Batch, BatchAccepted, BatchProgress, BatchSummary, Client } from "../api.ts";
import { DraftInput, ErrorNote, ResultBadge, StatusBadge, TaskTextCell, useAsync, usePoll } from "../components.tsx";
import { RESULT_TYPES, TASK_STATUSES, count, money, shortId, waitingText, when } from "../format.ts";
import { href } from "../router.ts";
import { UserField, defaultUser } from "./user_field.tsx";

/** A batch as the console names it: its id, and its user (batch ids are each user's; a key
 * acting for several users needs the user when more than one has a batch of the id). */
interface BatchRef {
  id: string;
  user?: string | undefined;
}

/** The console's address of a batch: its user in the query when known. */
function batchHref(batch: BatchRef): string {
  return href("batches", batch.id) + (batch.user ? `?user_id=${encodeURIComponent(batch.user)}` : "");
}

function openBatch(batch: BatchRef): void {
  location.hash = batchHref(batch).slice(1);
}

function Upload({ client, identity }: Pick<PageProps, "client" | "identity">) {
  const [file, setFile] = useState<File | null>(null);
  const [user, setUser] = useState(defaultUser(identity));
  const [batchId, setBatchId] = useState("");
  const [priority, setPriority] = useState("batch");
  const [progress, setProgress] = useState<BatchProgress | null>(null);
  const upload = useAsync<BatchAccepted>();

  const send = async (e: Event) => {
    e.preventDefault();
    if (!file) return;
    const lines = (await file.text()).split(/\r?\n/).filter((l) => l.trim() !== "");
    setProgress({ lines: 0, bytes: 0, totalLines: lines.length });
    const accepted = await upload.run(() =>
      client.submitBatch(lines, {
        userId: user || undefined,
        batchId: batchId.trim() || undefined,
        priority: priority as "batch" | "interactive",
        onProgress: setProgress,
        chunkBytes: 64 << 10,
        // Browsers stream a request body only over HTTP/2; the dispatcher speaks HTTP/1.1.
        buffer: true,
      }),
    );
    if (accepted) {
      openBatch({ id: accepted.batch_id, user: accepted.user_id });
    }
  };

  return (
    <article class="upload">
      <h2>Upload a batch</h2>
      <form onSubmit={send} class="grid-form">
        <label>
          JSON Lines file (one submission per line)
          <input name="file" type="file" accept=".jsonl,.ndjson,.json,.txt,application/x-ndjson" required onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} />
        </label>
        <UserField identity={identity} value={user} onChange={setUser} id="batch-user" everyone="named on each line" />
        <label>
          Batch id (blank: one is made up)
          <input name="batch_id" value={batchId} onInput={(e) => setBatchId(e.currentTarget.value)} />
        </label>
        <label>
          Priority
          <select name="priority" value={priority} onChange={(e) => setPriority(e.currentTarget.value)}>
            <option value="batch">batch</option>
            <option value="interactive">interactive</option>
          </select>
        </label>
        <button type="submit" disabled={!file || upload.busy} aria-busy={upload.busy}>
          Upload
        </button>
      </form>
      {progress && upload.busy ? (
        <p>
          <label for="upload-progress">
            Read {count(progress.lines)} of {count(progress.totalLines)} lines ({count(progress.bytes)} bytes); sending…
          </label>
          <progress id="upload-progress" value={progress.lines} max={progress.totalLines ?? 1} />
        </p>
      ) : null}
      <ErrorNote error={upload.error} what="Upload refused" />
    </article>
  );
}

async function downloadResults(client: Client, batchId: string, user?: string): Promise<number> {
  const lines: string[] = [];
  for await (const line of client.batchResults(batchId, 60, user)) lines.push(JSON.stringify(line));
  const blob = new Blob([lines.join("\n") + (lines.length ? "\n" : "")], { type: "application/x-ndjson" });
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = `batch-${batchId}-results.jsonl`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
  return lines.length;
}

/** A line of a batch's results, as GET /v1/batches/{id}/results sends it. */
interface ResultLine {
  line: number | null;
  text: string;
  task_id: string;
  status: string;
  result: { type: string; message: string } | null;
  error: string | null;
  error_code: string | null;
  retried_as: { task_id: string; status: string; result_type: string | null } | null;
}

const RESULTS_SHOWN = 100;

const ENDED = new Set(["succeeded", "failed", "timed_out", "cancelled"]);

/** The first results of a batch in the order of its upload's lines: each line's number, its
 * text, how it ended and, once retried, its retry. Read again every 5 s until the batch has
 * ended and every retry shown has too (`version` changes after a retry: read again). */
function BatchResults({
  client,
  batchId,
  user,
  version,
  ended,
}: {
  client: Client;
  batchId: string;
  user: string;
  version: number;
  ended: boolean;
}) {
  const rows = useAsync<ResultLine[]>();
  const settled = ended && rows.value !== null && rows.value.every((r) => !r.retried_as || ENDED.has(r.retried_as.status));
  usePoll(
    async () => {
      await rows.run(async () => {
        const out: ResultLine[] = [];
        for await (const r of client.batchResults(batchId, 60, user)) {
          out.push(r as unknown as ResultLine);
          if (out.length >= RESULTS_SHOWN) break;
        }
        return out;
      });
    },
    5000,
    [batchId, user, version],
    !settled,
  );
  const shown = rows.value ?? [];
  return (
    <section aria-labelledby="results-title">
      <h3 id="results-title">Results in input order</h3>
      <ErrorNote error={rows.error} what="Could not read the results" />
      <p class="muted">
        {shown.length >= RESULTS_SHOWN ? `The first ${RESULTS_SHOWN} lines; download the results for every line.` : `${shown.length} lines.`}
      </p>
      <table class="compact striped" id="batch-results">
        <thead>
          <tr>
            <th scope="col" class="num">Line</th>
            <th scope="col">Task</th>
            <th scope="col">Status</th>
            <th scope="col">Result</th>
            <th scope="col">Text / message</th>
            <th scope="col">Retried as</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((r) => (
            <tr key={r.task_id} data-line={r.line ?? ""}>
              <td class="num">{r.line ?? "—"}</td>
              <td>
                <a href={href("tasks", r.task_id)} class="mono">
                  {shortId(r.task_id)}
                </a>
              </td>
              <td>
                <StatusBadge status={r.status} />
              </td>
              <td>
                <ResultBadge type={r.result?.type} />
              </td>
              <TaskTextCell task={r} />
              <td>
                {r.retried_as ? (
                  <>
                    <a href={href("tasks", r.retried_as.task_id)} class="mono">
                      {shortId(r.retried_as.task_id)}
                    </a>{" "}
                    <StatusBadge status={r.retried_as.status} />
                  </>
                ) : (
                  ""
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function BatchView({ client, batchId, user }: { client: Client; batchId: string; user?: string | undefined }) {
  const batch = useAsync<Batch>();
  const action = useAsync<unknown>();
  const [note, setNote] = useState("");
  const [version, setVersion] = useState(0);
  const b = batch.value;
  const done = b ? b.ended >= b.total : false;
  usePoll(
    async () => {
      await batch.run(() => client.batch(batchId, user));
    },
    3000,
    [batchId, user],
    !done,
  );

  if (!b) {
    return batch.error ? <ErrorNote error={batch.error} what={`Could not open batch ${batchId}`} /> : <p aria-busy="true">Loading…</p>;
  }
  const pct = b.total ? Math.round((b.ended / b.total) * 100) : 100;
  // What "retry the failed ones" retries: tasks that failed or timed out, and those that
  // succeeded with an error for an answer.
  const failed = (b.counts.failed ?? 0) + (b.counts.timed_out ?? 0) + (b.result_types.error ?? 0);
  return (
    <article aria-labelledby="batch-title">
      <h2 id="batch-title">
        Batch <span class="mono">{b.batch_id}</span> {b.cancelled ? (
          <StatusBadge status="cancelled" />
        ) : done ? (
          <span class="badge badge-succeeded">ended</span>
        ) : (
          <StatusBadge status="running" />
        )}
      </h2>
      <p class="muted">
        user {b.user_id} · priority {b.priority} · created {when(b.created_at as string)}
        {b.cancelled ? ` · cancelled ${when(b.cancelled_at as string | null)}` : ""} ·{" "}
        <a href={`${href("tasks")}?user_id=${encodeURIComponent(b.user_id)}&batch_id=${encodeURIComponent(b.batch_id)}`}>its tasks</a>
      </p>
      <label for="batch-progress" aria-live="polite">
        {count(b.ended)} of {count(b.total)} tasks ended ({pct}%)
      </label>
      <progress id="batch-progress" value={b.ended} max={b.total || 1} />
      {b.waiting_reason ? <p class="waiting">Queued tasks wait: {waitingText(b.waiting_reason)}</p> : null}
      <div class="actions">
        <button
          type="button"
          onClick={async () => {
            const n = await action.run(() => downloadResults(client, batchId, b.user_id));
            if (n !== null) setNote(`Downloaded ${n} result lines.`);
          }}
          disabled={action.busy}
          aria-busy={action.busy}
        >
          Download results (JSON Lines)
        </button>
        <button
          type="button"
          class="secondary"
          disabled={done || b.cancelled || action.busy}
          onClick={async () => {
            if (!confirm(`Cancel batch ${b.batch_id}? Its tasks not yet running end cancelled; running ones are stopped.`)) return;
            const after = await action.run(() => client.cancelBatch(batchId, b.user_id));
            if (after) {
              setNote("Batch cancelled: no task of it starts any more.");
              batch.setValue(() => after as Batch);
            }
          }}
        >
          Cancel batch
        </button>
        <button
          type="button"
          class="secondary"
          disabled={failed === 0 || action.busy}
          onClick={async () => {
            if (!confirm(`Retry the ${failed} failed tasks of batch ${b.batch_id}? Each runs once more as a new task.`)) return;
            const done = await action.run(() => client.retryBatch(batchId, b.user_id));
            if (done) {
              const d = done as Awaited<ReturnType<Client["retryBatch"]>>;
              const others = Object.entries(d.not_retried).map(([code, n]) => `${n} ${code}`);
              setNote(
                `Retried ${d.retried} failed tasks` +
                  (d.already_retried ? `, ${d.already_retried} retried before` : "") +
                  (others.length ? `; not retried: ${others.join(", ")}` : "") +
                  (d.stopped ? `; stopped early: ${d.stopped.message}` : "") +
                  ".",
              );
              setVersion(version + 1);
            }
          }}
        >
          Retry failed ({count(failed)})
        </button>
        <span role="status" class="muted">{note}</span>
      </div>
      <ErrorNote error={action.error} what="Not done" />
      <div class="columns">
        <table class="compact">
          <caption>Tasks per status</caption>
          <thead>
            <tr>
              <th scope="col">Status</th>
              <th scope="col" class="num">Tasks</th>
            </tr>
          </thead>
          <tbody>
            {TASK_STATUSES.map((s) => (
              <tr>
                <th scope="row">
                  <StatusBadge status={s} />
                </th>
                <td class="num">{count(b.counts[s])}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <table class="compact">
          <caption>Tasks per result type</caption>
          <thead>
            <tr>
              <th scope="col">Result type</th>
              <th scope="col" class="num">Tasks</th>
            </tr>
          </thead>
          <tbody>
            {RESULT_TYPES.map((r) => (
              <tr>
                <th scope="row">
                  <ResultBadge type={r} />
                </th>
                <td class="num">{count(b.result_types[r])}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <table class="compact">
        <caption>Usage per model</caption>
        <thead>
          <tr>
            <th scope="col">Model</th>
            <th scope="col" class="num">Calls</th>
            <th scope="col" class="num">Input</th>
            <th scope="col" class="num">Cached</th>
            <th scope="col" class="num">Output</th>
            <th scope="col" class="num">Cost</th>
          </tr>
        </thead>
        <tbody>
          {b.usage.map((u) => (
            <tr>
              <th scope="row">{String(u.model)}</th>
              <td class="num">{count(u.calls as number)}</td>
              <td class="num">{count(u.input_tokens as number)}</td>
              <td class="num">{count(u.cached_input_tokens as number)}</td>
              <td class="num">{count(u.output_tokens as number)}</td>
              <td class="num">{money(u.cost as string, u.currency as string)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <BatchResults client={client} batchId={batchId} user={b.user_id} version={version} ended={done} />
    </article>
  );
}

const PAGE = 20;

/** The batches the key may see, newest first, each with its progress, those whose id begins
 * with the filter's text when one is given; "More" reads the next page (those created before
 * the last shown). Polled while the page is open. */
function BatchList({ client, current }: { client: Client; current?: BatchRef | undefined }) {
  const [prefix, setPrefix] = useState("");
  // The filter as it is now, for answers that come back after it changed (never shown).
  const currentPrefix = useRef(prefix);
  currentPrefix.current = prefix;
  const [more, setMore] = useState<BatchSummary[]>([]);
  const first = useAsync<{ prefix: string; batches: BatchSummary[] }>();
  const next = useAsync<BatchSummary[]>();
  const [exhausted, setExhausted] = useState(false);
  usePoll(
    async () => {
      const asked = prefix;
      await first.run(async () => ({
        prefix: asked,
        batches: await client.listBatches({ limit: PAGE, prefix: asked || undefined }),
      }));
    },
    5000,
    [prefix],
  );
  const listed = first.value && first.value.prefix === prefix ? first.value.batches : null;
  const shown = [...(listed ?? []), ...more.filter((b) => !(listed ?? []).some((f) => f.batch_id === b.batch_id && f.user_id === b.user_id))];
  const last = more.length ? more[more.length - 1] : listed?.[listed.length - 1];
  return (
    <section aria-labelledby="batch-list-title" class="batch-list">
      <h2 id="batch-list-title" class="small-heading">
        Batches, newest first
      </h2>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Find a batch">
        <label>
          Id begins with
          <DraftInput
            name="prefix"
            value={prefix}
            placeholder="nightly-"
            onCommit={(value) => {
              setPrefix(value.trim());
              setMore([]);
              setExhausted(false);
            }}
          />
        </label>
      </form>
      {shown.length ? (
        <table class="compact">
          <thead>
            <tr>
              <th scope="col">Batch</th>
              <th scope="col">User</th>
              <th scope="col">Created</th>
              <th scope="col" class="num">Ended</th>
              <th scope="col" class="num">Succeeded</th>
              <th scope="col" class="num">Not succeeded</th>
              <th scope="col">Results</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((b) => {
              const notSucceeded = b.counts.failed + b.counts.timed_out + b.counts.cancelled;
              const isCurrent = current && current.id === b.batch_id && (!current.user || current.user === b.user_id);
              return (
                <tr aria-current={isCurrent ? "page" : undefined}>
                  <th scope="row">
                    <a href={batchHref({ id: b.batch_id, user: b.user_id })} class="mono">
                      {b.batch_id}
                    </a>
                    {b.cancelled ? <StatusBadge status="cancelled" /> : null}
                  </th>
                  <td>{b.user_id}</td>
                  <td>{when(b.created_at)}</td>
                  <td class="num">
                    {count(b.ended)} of {count(b.total)}
                  </td>
                  <td class="num">{count(b.counts.succeeded)}</td>
                  <td class="num">{count(notSucceeded)}</td>
                  <td>
                    {RESULT_TYPES.filter((r) => b.result_types[r] > 0).map((r) => (
                      <span class="result-count">
                        <ResultBadge type={r} /> {count(b.result_types[r])}
                      </span>
                    ))}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      ) : listed ? (
        <p class="muted">{prefix ? `No batch's id begins “${prefix}”.` : "No batches yet: upload one below."}</p>
      ) : first.error ? null : (
        <p aria-busy="true">Loading…</p>
      )}
      {listed && listed.length === PAGE && !exhausted && last ? (
        <button
          type="button"
          class="secondary"
          disabled={next.busy}
          aria-busy={next.busy}
          onClick={async () => {
            const asked = prefix;
            const page = await next.run(() =>
              client.listBatches({ limit: PAGE, before: last.created_at, prefix: asked || undefined }),
            );
            if (page && asked === currentPrefix.current) {
              setMore((m) => [...m, ...page]);
              if (page.length < PAGE) setExhausted(true);
            }
          }}
        >
          More
        </button>
      ) : null}
      <ErrorNote error={first.error ?? next.error} what="Could not list the batches" />
    </section>
  );
}

export function BatchesPage({
  client,
  identity,
  batchId,
  batchUser,
}: PageProps & { batchId?: string | undefined; batchUser?: string | undefined }) {
  const [typed, setTyped] = useState("");
  const [typedUser, setTypedUser] = useState("");
  return (
    <section aria-labelledby="batches-title">
      <h1 id="batches-title">Batches</h1>
      <div class="columns">
        <form
          class="open-batch"
          onSubmit={(e) => {
            e.preventDefault();
            if (typed.trim()) openBatch({ id: typed.trim(), user: typedUser.trim() || undefined });
          }}
        >
          <label for="open-batch-id">Batch id</label>
          <div role="group">
            <input id="open-batch-id" name="batch_id" required value={typed} onInput={(e) => setTyped(e.currentTarget.value)} />
            <button type="submit">Open</button>
          </div>
          <label for="open-batch-user">Its user (needed when several users you act for have a batch of this id)</label>
          <input id="open-batch-user" name="user_id" value={typedUser} onInput={(e) => setTypedUser(e.currentTarget.value)} />
        </form>
      </div>
      {batchId ? <BatchView client={client} batchId={batchId} user={batchUser} key={`${batchId}\n${batchUser ?? ""}`} /> : null}
      <BatchList client={client} current={batchId ? { id: batchId, user: batchUser } : undefined} />
      <Upload client={client} identity={identity} />
    </section>
  );
}
