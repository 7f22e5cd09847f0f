/** Fleet (admin): the workers, the queues and the completions per second, refreshed every
 * few seconds, with a sparkline kept in memory. GET /v1/fleet is not served by every
 * dispatcher yet: 404 says so. */

import { useRef, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import { fleet, isMissingRoute, type Fleet } from "../api.ts";
import { AdminOnly, Chart, ErrorNote, useAsync, usePoll } from "../components.tsx";
import { count, when } from "../format.ts";

const KEEP = 120;

export function FleetPage({ apiKey, identity }: PageProps) {
  const data = useAsync<Fleet>();
  const history = useRef<{ t: number[]; v: number[] }>({ t: [], v: [] });
  const [, setSamples] = useState(0);
  const missing = isMissingRoute(data.error);

  usePoll(
    async () => {
      if (!identity.admin) return;
      const f = await data.run(() => fleet(apiKey));
      if (f) {
        const h = history.current;
        h.t.push(Date.now() / 1000);
        h.v.push(f.completions_per_s);
        if (h.t.length > KEEP) {
          h.t.shift();
          h.v.shift();
        }
        setSamples(h.t.length);
      }
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
  const h = history.current;
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
          {h.t.length > 1 ? (
            <Chart title="Completions per second, as seen from this page" x={[...h.t]} series={[{ label: "completions/s", values: [...h.v] }]} height={120} width={600} sparkline />
          ) : null}
          <table class="compact striped">
            <caption>Workers</caption>
            <thead>
              <tr>
                <th scope="col">Worker</th>
                <th scope="col" class="num">Incarnation</th>
                <th scope="col">Last seen</th>
                <th scope="col" class="num">In flight</th>
                <th scope="col" class="num">Capacity</th>
              </tr>
            </thead>
            <tbody>
              {f.workers.map((w) => (
                <tr key={w.worker_id}>
                  <th scope="row" class="mono">{w.worker_id}</th>
                  <td class="num">{w.incarnation}</td>
                  <td>{when(w.last_seen)}</td>
                  <td class="num">{count(w.in_flight)}</td>
                  <td class="num">{count(w.capacity)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : data.busy ? (
        <p aria-busy="true">Loading…</p>
      ) : null}
    </section>
  );
}
