/** A task: its fields in words, its trace as a timeline, its live events while it runs,
 * Cancel (after a confirmation) and Retry; a question the task asked back is answered here
 * by a follow-up that continues its conversation. */

import { useEffect, useRef, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import { TERMINAL_STATUSES, clientFor, type Client, type StreamEvent, type Task } from "../api.ts";
import { ErrorNote, ResultBadge, StatusBadge, useAsync, usePoll } from "../components.tsx";
import { between, count, duration, money, shortId, waitingText, when, words } from "../format.ts";
import { href, navigate } from "../router.ts";

interface ToolCall {
  call_id?: string;
  tool?: string;
  arguments?: string;
  status?: string;
  http_status?: number;
  result?: string;
  latency_ms?: number;
  at?: string;
}

interface TraceStep {
  step: number;
  attempt: number;
  role: string | null;
  content: string | null;
  reasoning: string | null;
  tool_calls: ToolCall[];
  usage: { input_tokens?: number; cached_input_tokens?: number; output_tokens?: number; reasoning_tokens?: number } | null;
  /** The provider sent no usage: the tokens and the bill are the worker's estimate. */
  usage_estimated: boolean | null;
  model_latency_ms: number;
  at: string;
}

/** One bar of the timeline: a model call or a tool call. */
interface Span {
  key: string;
  kind: "model" | "tool";
  label: string;
  start: number; // ms since epoch
  ms: number;
  step: TraceStep;
  call?: ToolCall;
}

/** A step's `at` is when its model answer was recorded, so the model call spans the
 * latency before it; a tool call's `at` is when it was sent. */
function spansOf(trace: TraceStep[]): Span[] {
  const spans: Span[] = [];
  for (const s of trace) {
    const end = new Date(s.at).getTime();
    if (s.usage !== null || s.model_latency_ms > 0) {
      spans.push({ key: `m${s.step}.${s.attempt}`, kind: "model", label: `step ${s.step} · model`, start: end - s.model_latency_ms, ms: s.model_latency_ms, step: s });
    }
    s.tool_calls.forEach((c, i) => {
      const at = c.at ? new Date(c.at).getTime() : end;
      spans.push({ key: `t${s.step}.${i}`, kind: "tool", label: `step ${s.step} · ${c.tool ?? "tool"}`, start: at, ms: c.latency_ms ?? 0, step: s, call: c });
    });
  }
  return spans;
}

function Timeline({ task }: { task: Task }) {
  const trace = (task.trace ?? []) as TraceStep[];
  const spans = spansOf(trace);
  if (spans.length === 0) return <p class="muted">No steps yet.</p>;
  const t0 = Math.min(new Date((task.started_at as string | null) ?? task.created_at).getTime(), ...spans.map((s) => s.start));
  const t1 = Math.max(task.finished_at ? new Date(task.finished_at).getTime() : Date.now(), ...spans.map((s) => s.start + s.ms));
  const total = Math.max(1, t1 - t0);
  const W = 1000;
  return (
    <table class="compact timeline" aria-describedby="timeline-title">
      <thead>
        <tr>
          <th scope="col">Step</th>
          <th scope="col" class="num">Start</th>
          <th scope="col" class="num">Duration</th>
          <th scope="col" class="num">Tokens in / cached / out</th>
          <th scope="col" class="bar-col">
            Time (0 – {duration(total)})
          </th>
          <th scope="col">Details</th>
        </tr>
      </thead>
      <tbody>
        {spans.map((s) => {
          const x = ((s.start - t0) / total) * W;
          const w = Math.max(3, (s.ms / total) * W);
          const failed = s.call && s.call.status !== "ok";
          return (
            <tr key={s.key} class={`span-${s.kind}`}>
              <th scope="row" class="nowrap">
                {s.label}
                {s.call ? (
                  <>
                    {" "}
                    <span class={`badge ${failed ? "badge-failed" : "badge-succeeded"}`}>{words(s.call.status ?? "?")}</span>
                  </>
                ) : null}
              </th>
              <td class="num nowrap">+{duration(s.start - t0)}</td>
              <td class="num nowrap">{duration(s.ms)}</td>
              <td class="num nowrap">
                {s.kind === "model" && s.step.usage
                  ? `${count(s.step.usage.input_tokens)} / ${count(s.step.usage.cached_input_tokens)} / ${count(s.step.usage.output_tokens)}`
                  : ""}
                {s.kind === "model" && s.step.usage_estimated ? (
                  <span class="small muted" title="The provider sent no usage: these tokens and the bill are estimated" data-usage-estimated>
                    {" "}estimated
                  </span>
                ) : null}
              </td>
              <td class="bar-col">
                <svg class="bar" viewBox={`0 0 ${W} 12`} preserveAspectRatio="none" aria-hidden="true">
                  <rect class="track" x="0" y="0" width={W} height="12" />
                  <rect class={`fill ${s.kind}${failed ? " failed" : ""}`} x={x} y="1" width={Math.min(w, W - x)} height="10" />
                </svg>
              </td>
              <td>
                <details>
                  <summary>{s.kind === "model" ? "text" : "arguments and result"}</summary>
                  {s.kind === "model" ? (
                    <>
                      {s.step.reasoning ? <pre class="reasoning">{s.step.reasoning}</pre> : null}
                      <pre>{s.step.content || "(no text: tool calls only)"}</pre>
                    </>
                  ) : (
                    <>
                      <div class="small">arguments</div>
                      <pre>{s.call?.arguments ?? "(refused before it was sent)"}</pre>
                      <div class="small">
                        {s.call?.status === "ok" ? "result" : "error"}
                        {s.call?.http_status ? ` (HTTP ${s.call.http_status})` : ""}
                      </div>
                      <pre>{s.call?.result ?? "—"}</pre>
                    </>
                  )}
                </details>
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

interface LiveLine {
  key: number;
  kind: string;
  step?: number;
  text: string;
}

/** The task's event stream while it runs: model text as it streams, tool calls, the end. */
function LiveEvents({ apiKey, taskId, onEnd }: { apiKey: string; taskId: string; onEnd: () => void }) {
  const [lines, setLines] = useState<LiveLine[]>([]);
  const [state, setState] = useState<"connecting" | "open" | "ended" | "failed">("connecting");
  const [error, setError] = useState<unknown>(null);
  // The newest event stays in view (the list scrolls within its box): the end is not hidden.
  const list = useRef<HTMLOListElement>(null);
  useEffect(() => {
    if (list.current) list.current.scrollTop = list.current.scrollHeight;
  }, [lines]);

  useEffect(() => {
    const stop = new AbortController();
    const client = clientFor(apiKey, stop.signal);
    let n = 0;
    const add = (e: StreamEvent) => {
      const d = (e.data ?? {}) as Record<string, unknown>;
      const data = (d.data ?? {}) as Record<string, unknown>;
      const step = typeof d.step === "number" ? d.step : undefined;
      const tool = typeof d.tool === "string" ? d.tool : "";
      setLines((prev) => {
        const last = prev[prev.length - 1];
        if (e.event === "delta") {
          const text = String(data.text ?? "");
          if (last && last.kind === "delta" && last.step === step) {
            return [...prev.slice(0, -1), { ...last, text: last.text + text }];
          }
          return [...prev, { key: n++, kind: "delta", step, text }];
        }
        let text = "";
        if (e.event === "step") text = `${step ?? "?"}: the model is called`;
        else if (e.event === "action") text = `${tool} called with ${JSON.stringify(data.arguments ?? data)}`;
        else if (e.event === "execution") {
          const outcome = data.ok === false ? "failed" : "ok";
          // The status in brackets only when it says more than the outcome.
          const status = data.status && String(data.status) !== outcome ? ` (${String(data.status)})` : "";
          text = `${tool}: ${outcome}${status}`;
        }
        else if (e.event === "error") text = `error ${String(d.error_code ?? data.error_code ?? d.code ?? "")}: ${String(data.text ?? d.message ?? d.text ?? "")}`;
        else if (e.event === "done") text = `done: ${String(d.status ?? data.status ?? "")} ${String(((data.result ?? d.result) as { type?: string } | null)?.type ?? "")}`.trim();
        else text = e.event;
        return [...prev, { key: n++, kind: e.event, step, text }];
      });
    };
    (async () => {
      try {
        const events = client.events(taskId, 90);
        setState("open");
        for await (const e of events) {
          add(e);
          if (e.event === "done") break;
        }
        setState("ended");
        onEnd();
      } catch (e) {
        if (!stop.signal.aborted) {
          setError(e);
          setState("failed");
        }
      }
    })();
    return () => stop.abort();
  }, [apiKey, taskId]);

  return (
    <section aria-labelledby="live-title" class="live">
      <h2 id="live-title">
        Live events <small class="muted">({state === "open" ? "streaming" : state})</small>
      </h2>
      <ErrorNote error={error} what="The event stream stopped" />
      <ol class="events" ref={list} aria-live="polite" aria-relevant="additions text">
        {lines.map((l) => (
          <li key={l.key} class={`event-${l.kind}`} data-event={l.kind}>
            <span class="event-name">{l.kind}</span> <span class="event-text">{l.text}</span>
          </li>
        ))}
      </ol>
    </section>
  );
}

function Row({ name, children }: { name: string; children: preact.ComponentChildren }) {
  return (
    <tr>
      <th scope="row">{name}</th>
      <td>{children}</td>
    </tr>
  );
}

/** The answer to a task that asked a question back (result need_clarification): a follow-up
 * of the user's with the task as its parent, so the model sees the conversation (the options
 * it offered among it). An option's button puts it in the answer; the page of the new task
 * opens once it is submitted. */
function AnswerQuestion({ client, task }: { client: Client; task: Task }) {
  const [answer, setAnswer] = useState("");
  const sent = useAsync<Task>();
  const options = task.result?.options ?? [];
  return (
    <form
      class="answer"
      aria-labelledby="answer-title"
      onSubmit={async (e) => {
        e.preventDefault();
        const text = answer.trim();
        if (!text) return;
        const next = await sent.run(() => client.submit(task.user_id, text, { parent_task_id: task.task_id }));
        if (next) navigate("tasks", next.task_id);
      }}
    >
      <h2 id="answer-title" class="small-heading">
        Answer its question
      </h2>
      {options.length ? (
        <div class="option-choices" role="group" aria-label="Its options">
          {options.map((o, i) => (
            <button type="button" class="outline" onClick={() => setAnswer(o)} title="Use this option as the answer">
              {i + 1}. {o}
            </button>
          ))}
        </div>
      ) : null}
      <div role="group">
        <input name="answer" aria-label="Your answer" placeholder="Your answer (a follow-up of this task)" value={answer} onInput={(e) => setAnswer(e.currentTarget.value)} />
        <button type="submit" disabled={!answer.trim() || sent.busy} aria-busy={sent.busy}>
          Send answer
        </button>
      </div>
      <ErrorNote error={sent.error} what="The answer was not submitted" />
    </form>
  );
}

/** A trace id, linked to the tracing backend when the fleet names one (telemetry.trace_link). */
function TraceId({ id, link }: { id: string | null | undefined; link: string | null | undefined }) {
  if (!id) return <span class="muted">none</span>;
  if (!link) return <span class="mono">{id}</span>;
  return (
    <a class="mono" href={link.replaceAll("{trace_id}", id)} target="_blank" rel="noopener noreferrer">
      {id}
    </a>
  );
}

export function TaskPage({ client, apiKey, identity, taskId }: PageProps & { taskId: string }) {
  const task = useAsync<Task>();
  const action = useAsync<Task>();
  const [actionNote, setActionNote] = useState("");
  const t = task.value;
  const ended = t ? TERMINAL_STATUSES.has(t.status) : false;
  // The live events stay on the page once shown, after the task ended too.
  const [live, setLive] = useState<boolean | null>(null);
  useEffect(() => {
    if (t && live === null) setLive(!ended);
  }, [t, live, ended]);

  const load = async () => {
    await task.run(() => client.task(taskId));
  };
  // A cancel asked of a running task is news only until the task ends.
  useEffect(() => {
    if (ended) setActionNote((note) => (note.startsWith("Cancel requested") ? "" : note));
  }, [ended]);
  usePoll(load, 2000, [taskId], !ended);

  const cancel = async () => {
    if (!confirm(`Cancel task ${shortId(taskId)}? A task not yet running ends cancelled; a running one is stopped.`)) return;
    const after = await action.run(() => client.cancel(taskId));
    if (after) {
      setActionNote(after.status === "cancelled" ? "Cancelled." : "Cancel requested: its worker stops it shortly.");
      task.setValue(() => after);
      void load();
    }
  };
  const retry = async () => {
    const next = await action.run(() => client.retry(taskId));
    if (next) navigate("tasks", next.task_id);
  };

  if (!t) {
    return (
      <section>
        <h1>Task {shortId(taskId)}</h1>
        {task.error ? <ErrorNote error={task.error} what="Could not load the task" /> : <p aria-busy="true">Loading…</p>}
      </section>
    );
  }
  const opts = [
    ["model", t.model],
    ["strategy", t.strategy ?? "default"],
    ["priority", t.priority],
    ["tools", Array.isArray(t.tools) ? (t.tools as string[]).join(", ") : "every tool"],
    ["timeout", `${t.timeout_s} s (scheduling ${t.schedule_timeout_s} s)`],
    ["max steps", t.max_steps],
    ["max tokens", t.max_tokens ?? "no limit"],
    ["max cost", t.max_cost ?? "no limit"],
    ["session", t.session_id ?? "—"],
  ] as Array<[string, unknown]>;

  return (
    <section aria-labelledby="task-title">
      <p class="crumbs">
        <a href={href("tasks")}>Tasks</a> / <span class="mono">{t.task_id}</span>
      </p>
      <h1 id="task-title">
        Task {shortId(t.task_id)} <StatusBadge status={t.status} />
        {/* Succeeded with an error answer or a question back says so beside its status. */}
        {t.result && t.result.type !== "action_completed" ? <ResultBadge type={t.result.type} /> : null}
      </h1>
      <div class="actions">
        <button type="button" class="secondary" onClick={cancel} disabled={ended || action.busy}>
          Cancel
        </button>
        <button type="button" onClick={retry} disabled={!ended || action.busy}>
          Retry
        </button>
        <span role="status" class="muted">{actionNote}</span>
      </div>
      <ErrorNote error={action.error} what="Not done" />
      <ErrorNote error={task.error} what="Could not refresh the task" />
      {live ? <LiveEvents apiKey={apiKey} taskId={t.task_id} onEnd={load} /> : null}
      {ended && t.result?.type === "need_clarification" ? <AnswerQuestion client={client} task={t} /> : null}
      <div class="columns">
        <table class="compact fields" aria-label="Task">
          <tbody>
            <Row name="Text">{t.text}</Row>
            <Row name="User">{t.user_id}</Row>
            <Row name="Status">
              <StatusBadge status={t.status} />
              {t.cancel_requested && !ended ? " (cancel requested)" : ""}
            </Row>
            {t.status === "queued" ? (
              <Row name="Waiting">
                <span class="waiting">{t.waiting_reason ? waitingText(t.waiting_reason) : "not held back"}</span>
              </Row>
            ) : null}
            <Row name="Result">
              <ResultBadge type={t.result?.type} /> {t.result?.message ?? ""}
              {t.result?.options?.length ? (
                <ul class="options">
                  {t.result.options.map((o) => (
                    <li>{o}</li>
                  ))}
                </ul>
              ) : null}
            </Row>
            {t.error || t.error_code ? (
              <Row name="Error">
                <span class="error-text">
                  {t.error_code ? <code>{t.error_code}</code> : null} {t.error}
                </span>
              </Row>
            ) : null}
            <Row name="Usage">
              {count(t.usage.input_tokens)} input ({count(t.usage.cached_input_tokens)} cached), {count(t.usage.output_tokens)} output tokens ·{" "}
              {t.steps as number} steps, {t.tool_calls as number} tool calls
            </Row>
            <Row name="Cost">{money(t.cost, t.currency)}</Row>
            <Row name="Attempts">{t.attempt as number}</Row>
            {t.batch_id ? (
              <Row name="Batch">
                <a href={`${href("batches", t.batch_id)}?user_id=${encodeURIComponent(t.user_id)}`}>{t.batch_id}</a>
                {t.batch_line ? ` · line ${t.batch_line}` : ""}
              </Row>
            ) : null}
            <Row name="Trace id">
              <TraceId id={t.trace_id} link={identity.traceLink} />
            </Row>
            {t.parent_task_id ? (
              <Row name="Follows">
                <a href={href("tasks", t.parent_task_id as string)} class="mono">{shortId(t.parent_task_id as string)}</a>
              </Row>
            ) : null}
            {t.retry_of ? (
              <Row name="Retry of">
                <a href={href("tasks", t.retry_of)} class="mono">{shortId(t.retry_of)}</a>
              </Row>
            ) : null}
          </tbody>
        </table>
        <table class="compact fields" aria-label="Times and options">
          <tbody>
            <Row name="Created">{when(t.created_at)}</Row>
            <Row name="Dispatched">{when(t.dispatched_at as string | null)}</Row>
            <Row name="Started">{when(t.started_at as string | null)}</Row>
            <Row name="Finished">
              {when(t.finished_at)}
              {t.finished_at ? ` (ran ${duration(between(t.started_at as string | null, t.finished_at))}, queued ${duration(between(t.created_at, t.dispatched_at as string | null))})` : ""}
            </Row>
            {opts.map(([k, v]) => (
              <Row name={k}>{String(v)}</Row>
            ))}
          </tbody>
        </table>
      </div>
      <h2 id="timeline-title">Trace</h2>
      <Timeline task={t} />
    </section>
  );
}
