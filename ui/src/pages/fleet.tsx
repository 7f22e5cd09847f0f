/** Fleet (admin): the workers (state, start, heartbeat, dispatch lag, what each runs), the
 * queues by priority and by user with why they wait, and the tasks ended over the last half
 * hour as the dispatcher kept them, refreshed every few seconds. GET /v1/fleet is not served
 * by every dispatcher yet: 404 says so. */

import type { PageProps } from "../main.tsx";
import { fleet, isMissingRoute, type Fleet } from "../api.ts";
import { AdminOnly, Chart, ErrorNote, useAsync, usePoll } from "../components.tsx";
import { count, shortId, waitingText, when, words } from "../format.ts";
import { href } from "../router.ts";

export function FleetPage({ apiKey, identity }: PageProps) {
  const data = useAsync<Fleet>();
  const missing = isMissingRoute(data.error);

  usePoll(
    async () => {
      if (!identity.admin) return;
      await data.run(() => fleet(apiKey));
    },
    3000,
    [apiKey],
    identity.admin && !missing,
  );

  if (!identity.admin) return <AdminOnly what="Fleet" />;
  if (missing) {
    return (
      <section>
        <h1>Fleet</h1>
        <p class="notice-text" role="status" data-missing-route="fleet">
          This dispatcher does not serve the fleet's state yet.
        </p>
      </section>
    );
  }
  const f = data.value;
  // The dispatcher's history: the ends of each bucket, the last ending now; per second.
  const h = f?.history;
  const times = h ? h.ends.map((_, i) => h.until_unix_s - (h.ends.length - 1 - i) * h.bucket_s) : [];
  const rates = h ? h.ends.map((n) => n / h.bucket_s) : [];
  return (
    <section aria-labelledby="fleet-title">
      <h1 id="fleet-title">Fleet</h1>
      <ErrorNote error={data.error} what="Could not read the fleet" />
      {f ? (
        <>
          <div class="stat-cards" aria-live="polite">
            <article>
              <h3>Workers</h3>
              <p class="figure" data-stat="workers">{f.workers.length}</p>
              <small>{f.workers.filter((w) => w.draining).length} draining</small>
            </article>
            <article>
              <h3>In flight</h3>
              <p class="figure">{count(f.in_flight)}</p>
              <small>of {count(f.workers.reduce((a, w) => a + w.capacity, 0))} capacity</small>
            </article>
            {Object.entries(f.queued).map(([k, v]) => (
              <article>
                <h3>Queued, {k}</h3>
                <p class="figure">{count(v)}</p>
              </article>
            ))}
            <article>
              <h3>Completions/s</h3>
              <p class="figure">{f.completions_per_s.toFixed(1)}</p>
              <small>over {f.window_s} s</small>
            </article>
          </div>
          {times.length > 1 ? (
            <Chart
              title={`Tasks ended per second, the last ${Math.max(1, Math.round((times.length * (h?.bucket_s ?? 10)) / 60))} minutes (each point ${h?.bucket_s ?? 10} s, as this dispatcher saw them since it started)`}
              x={times}
              series={[{ label: "ended/s", values: rates }]}
              height={140}
              width={720}
            />
          ) : null}
          <table class="compact striped" id="fleet-workers">
            <caption>Workers</caption>
            <thead>
              <tr>
                <th scope="col">Worker</th>
                <th scope="col">State</th>
                <th scope="col">Started</th>
                <th scope="col">Last seen</th>
                <th scope="col" class="num">In flight</th>
                <th scope="col" class="num">Capacity</th>
                <th scope="col" class="num">Dispatch lag</th>
                <th scope="col">Running</th>
              </tr>
            </thead>
            <tbody>
              {f.workers.map((w) => (
                <tr key={`${w.worker_id}-${w.incarnation}`}>
                  <th scope="row" class="mono">
                    {w.worker_id} <small class="muted">#{w.incarnation}</small>
                  </th>
                  <td>{w.draining ? <span class="badge badge-cancelled">draining</span> : <span class="badge badge-running">taking work</span>}</td>
                  <td class="nowrap">{when(w.started_at)}</td>
                  <td class="nowrap">{when(w.last_seen)}</td>
                  <td class="num">{count(w.in_flight)}</td>
                  <td class="num">{count(w.capacity)}</td>
                  <td class="num" title="dispatch messages read but not yet claimed">{count(w.dispatch_lag)}</td>
                  <td class="small">
                    {w.tasks.map((t) => (
                      <div>
                        <a href={href("tasks", t.task_id)} class="mono">
                          {shortId(t.task_id)}
                        </a>{" "}
                        {t.user_id}
                      </div>
                    ))}
                    {w.in_flight > w.tasks.length ? <div class="muted">and {count(w.in_flight - w.tasks.length)} more</div> : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <table class="compact striped" id="fleet-queue">
            <caption>Queued, by user (the 20 with the most)</caption>
            <thead>
              <tr>
                <th scope="col">User</th>
                <th scope="col">Priority</th>
                <th scope="col" class="num">Queued</th>
                <th scope="col">Why they wait</th>
              </tr>
            </thead>
            <tbody>
              {f.queue_by_user.map((q) => (
                <tr key={`${q.user_id}-${q.priority}`}>
                  <th scope="row">
                    <a href={`${href("tasks")}?user_id=${encodeURIComponent(q.user_id)}&status=queued`}>{q.user_id}</a>
                  </th>
                  <td>{words(q.priority)}</td>
                  <td class="num">{count(q.queued)}</td>
                  <td class="waiting">{waitingText(q.waiting_reason)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {f.queue_by_user.length === 0 ? <p class="muted">Nothing is queued.</p> : null}
        </>
      ) : data.busy ? (
        <p aria-busy="true">Loading…</p>
      ) : null}
    </section>
  );
}
