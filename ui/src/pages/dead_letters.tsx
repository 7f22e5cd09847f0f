/** Dead letters (admin): the messages the fleet could not handle, and replaying chosen
 * ones. GET /v1/dead-letters is not served by every dispatcher yet: 404 says so. */

import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import { deadLetters, isMissingRoute, replayDeadLetters, type DeadLetter } from "../api.ts";
import { AdminOnly, ErrorNote, useAsync } from "../components.tsx";

const idOf = (d: DeadLetter) => `${d.partition}:${d.offset}`;

export function DeadLettersPage({ apiKey, identity }: PageProps) {
  const [limit, setLimit] = useState(100);
  const list = useAsync<DeadLetter[]>();
  const replay = useAsync<{ replayed: number }>();
  const [chosen, setChosen] = useState<Set<string>>(new Set());
  const [note, setNote] = useState("");

  const load = async (e?: Event) => {
    e?.preventDefault();
    await list.run(async () => (await deadLetters(apiKey, limit)).dead_letters);
  };
  useEffect(() => {
    if (identity.admin) void load();
  }, []);

  if (!identity.admin) return <AdminOnly what="Dead letters" />;
  if (isMissingRoute(list.error)) {
    return (
      <section>
        <h1>Dead letters</h1>
        <p class="notice-text" role="status" data-missing-route="dead-letters">
          This dispatcher does not serve dead letters yet.
        </p>
      </section>
    );
  }
  const toggle = (id: string) => {
    const next = new Set(chosen);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setChosen(next);
  };
  const rows = list.value ?? [];
  return (
    <section aria-labelledby="dl-title">
      <h1 id="dl-title">Dead letters</h1>
      <form class="filters" onSubmit={load} aria-label="How many">
        <label>
          Newest
          <input name="limit" type="number" min={1} max={1000} value={limit} onInput={(e) => setLimit(Number(e.currentTarget.value) || 100)} />
        </label>
        <button type="submit" aria-busy={list.busy}>
          Refresh
        </button>
        <button
          type="button"
          disabled={chosen.size === 0 || replay.busy}
          onClick={async () => {
            const r = await replay.run(() => replayDeadLetters(apiKey, [...chosen]));
            if (r) {
              setNote(`Replayed ${r.replayed} of ${chosen.size}.`);
              setChosen(new Set());
              void load();
            }
          }}
        >
          Replay {chosen.size || ""} chosen
        </button>
      </form>
      <ErrorNote error={list.error} what="Could not read the dead letters" />
      <ErrorNote error={replay.error} what="Not replayed" />
      <p role="status" class="muted">{note || `${rows.length} dead letters`}</p>
      <table class="compact striped">
        <thead>
          <tr>
            <th scope="col">Replay</th>
            <th scope="col">Partition:offset</th>
            <th scope="col">Reason</th>
            <th scope="col">From</th>
            <th scope="col">Key</th>
            <th scope="col">Value</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((d) => (
            <tr key={idOf(d)}>
              <td>
                <input type="checkbox" id={`dl-${idOf(d)}`} checked={chosen.has(idOf(d))} onChange={() => toggle(idOf(d))} aria-label={`Replay ${idOf(d)}`} />
              </td>
              <td class="mono">{idOf(d)}</td>
              <td>{d.reason}</td>
              <td class="small">
                {d.source_topic} {d.source_partition}:{d.source_offset}
                {d.replayed_from ? ` (replay of ${d.replayed_from})` : ""}
              </td>
              <td class="mono small">{d.key}</td>
              <td>
                <details>
                  <summary>{d.value.slice(0, 60)}</summary>
                  <pre>{d.value}</pre>
                </details>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
