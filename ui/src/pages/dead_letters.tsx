/** Dead letters (admin): the messages the fleet could not handle, the last read first,
 * filtered by key, reason or source topic, and replaying chosen ones to the topics they came
 * from. Each refresh reads the whole dead-letter topic (a few seconds). */

import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import { deadLetters, replayDeadLetters, type DeadLetter, type DeadLetterFilters, type DeadLetters } from "../api.ts";
import { AdminOnly, ErrorNote, useAsync } from "../components.tsx";
import { shortId } from "../format.ts";
import { href } from "../router.ts";

const idOf = (d: DeadLetter) => `${d.partition}:${d.offset}`;
const encoder = new TextEncoder();
/** The API sends a value's first 16 KiB and its whole size. */
const isCut = (d: DeadLetter) => encoder.encode(d.value).length < d.value_bytes;

export function DeadLettersPage({ apiKey, identity }: PageProps) {
  const [limit, setLimit] = useState(100);
  const [filters, setFilters] = useState<DeadLetterFilters>({});
  const list = useAsync<DeadLetters>();
  const replay = useAsync<{ replayed: number }>();
  const [chosen, setChosen] = useState<Set<string>>(new Set());
  const [note, setNote] = useState("");

  const load = async (e?: Event) => {
    e?.preventDefault();
    // Trimmed when sent: the fields keep what was typed (spaces inside included).
    const sent: DeadLetterFilters = {};
    for (const [name, value] of Object.entries(filters)) sent[name as keyof DeadLetterFilters] = value?.trim();
    await list.run(() => deadLetters(apiKey, limit, sent));
  };
  useEffect(() => {
    if (identity.admin) void load();
  }, []);

  if (!identity.admin) return <AdminOnly what="Dead letters" />;
  const toggle = (id: string) => {
    const next = new Set(chosen);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setChosen(next);
  };
  const filter = (name: keyof DeadLetterFilters) => (e: Event) =>
    setFilters({ ...filters, [name]: (e.currentTarget as HTMLInputElement).value });
  const answer = list.value;
  const rows = answer ? [...answer.dead_letters].reverse() : [];
  const summary = answer
    ? answer.matched > answer.count
      ? `${answer.count} dead letters (the last read of ${answer.matched} in ${answer.topic})`
      : `${answer.count} dead letters in ${answer.topic}`
    : "";
  return (
    <section aria-labelledby="dl-title">
      <h1 id="dl-title">Dead letters</h1>
      <form class="filters" onSubmit={load} aria-label="Which dead letters">
        <label>
          At most
          <input name="limit" type="number" min={1} max={1000} value={limit} onInput={(e) => setLimit(Number(e.currentTarget.value) || 100)} />
        </label>
        <label>
          Key
          <input name="key" value={filters.key ?? ""} onInput={filter("key")} />
        </label>
        <label>
          Reason contains
          <input name="reason" value={filters.reason ?? ""} onInput={filter("reason")} />
        </label>
        <label>
          Source topic
          <input name="source_topic" value={filters.source_topic ?? ""} onInput={filter("source_topic")} />
        </label>
        {/* One read or replay at a time: the dispatcher serves one per replica. */}
        <button type="submit" aria-busy={list.busy} disabled={list.busy || replay.busy}>
          Refresh
        </button>
        <button
          type="button"
          disabled={chosen.size === 0 || replay.busy || list.busy}
          aria-busy={replay.busy}
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
      <p role="status" class="muted">
        {note ? `${note} ` : ""}
        {list.busy && !answer ? "Reading the dead-letter topic…" : summary}
      </p>
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
            <tr key={idOf(d)} data-dead-letter={idOf(d)}>
              <td>
                <input
                  type="checkbox"
                  id={`dl-${idOf(d)}`}
                  checked={chosen.has(idOf(d))}
                  disabled={!d.source_topic}
                  title={d.source_topic ? undefined : "It does not say where it came from"}
                  onChange={() => toggle(idOf(d))}
                  aria-label={`Replay ${idOf(d)}`}
                />
              </td>
              <td class="mono">{idOf(d)}</td>
              <td>{d.reason}</td>
              <td class="small">
                {d.source_topic ? `${d.source_topic} ${d.source_partition}:${d.source_offset}` : "unknown"}
                {d.replayed_from ? ` (replay of ${d.replayed_from})` : ""}
                {d.replays.task_id ? (
                  <div data-replayed-into={d.replays.task_id}>
                    replayed into <a href={href("tasks", d.replays.task_id)} class="mono">{shortId(d.replays.task_id)}</a>
                    {d.replays.stored > 1 ? ` (${d.replays.stored} replays, one task)` : ""}
                  </div>
                ) : null}
                {d.replays.failed_again_at.length ? <div>failed again as {d.replays.failed_again_at.join(", ")}</div> : null}
              </td>
              <td class="mono small">{d.key}</td>
              <td>
                <details>
                  <summary>{d.value.slice(0, 60)}</summary>
                  <pre>{d.value}</pre>
                  {isCut(d) ? <p class="small muted">The first part of {d.value_bytes.toLocaleString("en")} bytes.</p> : null}
                </details>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
