/** Pieces every page uses: status badges, error notes, polling, charts. */

import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import { AgentfleetError, ApiError } from "./api.ts";
import { words } from "./format.ts";

/** A status with its colour AND its word, so colour is never the only signal. */
export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge badge-${status}`}>{words(status)}</span>;
}

export function ResultBadge({ type }: { type: string | null | undefined }) {
  if (!type) return <span class="muted">—</span>;
  return <span class={`badge result-${type}`}>{words(type)}</span>;
}

/** An error in words with its code (and the field its path names). */
export function ErrorNote({ error, what }: { error: unknown; what?: string }) {
  if (!error) return null;
  let text: ComponentChildren;
  if (error instanceof ApiError) {
    text = (
      <>
        {error.detail || words(error.code)} <code>{error.code}</code>
        {error.path ? <> at <code>{error.path}</code></> : null} (HTTP {error.status})
      </>
    );
  } else if (error instanceof AgentfleetError) {
    text = <>The API did not answer: {error.message}</>;
  } else {
    text = String((error as Error)?.message ?? error);
  }
  return (
    <p class="error-note" role="alert">
      {what ? <strong>{what}: </strong> : null}
      {text}
    </p>
  );
}

/** A page that needs an admin key, seen with another. */
export function AdminOnly({ what }: { what: string }) {
  return (
    <article class="notice" role="status">
      <h2>{what}</h2>
      <p>This page needs an admin key; the key you signed in with acts for its own users only.</p>
    </article>
  );
}

/** Runs `load` now and every `intervalMs` while the page is visible (and `active`). */
export function usePoll(load: () => Promise<void> | void, intervalMs: number, deps: unknown[], active = true): void {
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      if (stopped) return;
      if (document.visibilityState === "visible") {
        try {
          await loadRef.current();
        } catch {
          // the page shows its own errors
        }
      }
      if (!stopped && active) timer = setTimeout(tick, intervalMs);
    };
    void tick();
    const visible = () => {
      if (document.visibilityState === "visible" && active) {
        clearTimeout(timer);
        void tick();
      }
    };
    document.addEventListener("visibilitychange", visible);
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", visible);
    };
  }, [...deps, active, intervalMs]);
}

/** State for one async load: its value, its error, whether it runs. */
export function useAsync<T>() {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const run = async (work: () => Promise<T>): Promise<T | null> => {
    setBusy(true);
    try {
      const v = await work();
      setValue(() => v);
      setError(null);
      return v;
    } catch (e) {
      setError(e);
      return null;
    } finally {
      setBusy(false);
    }
  };
  return { value, setValue, error, setError, busy, run };
}

export interface Series {
  label: string;
  values: Array<number | null>;
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

/** A uPlot chart (it styles its own elements through the CSSOM, which the CSP allows). */
export function Chart(props: {
  title: string;
  x: number[];
  series: Series[];
  width?: number;
  height?: number;
  bars?: boolean;
  sparkline?: boolean;
  yLabel?: string;
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!box.current) return;
    const width = props.width ?? Math.max(300, box.current.clientWidth || 600);
    const options: uPlot.Options = {
      width,
      height: props.height ?? 220,
      legend: { show: !props.sparkline },
      cursor: { show: !props.sparkline },
      scales: {
        // Bars are centred on their x: pad the axis half a step each side so none is cut.
        x: props.bars
          ? { time: true, range: (_u, min, max) => {
              const step = props.x.length > 1 ? props.x[1]! - props.x[0]! : 86_400;
              return [min - step / 2, max + step / 2];
            } }
          : { time: true },
      },
      axes: props.sparkline
        ? [{ show: false }, { show: true, size: 40 }]
        : [{}, { label: props.yLabel, size: 60 }],
      series: [
        {},
        ...props.series.map((s, i) => ({
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          fill: props.bars ? PALETTE[i % PALETTE.length] + "55" : undefined,
          width: 2,
          paths: props.bars ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined,
          points: { show: !props.bars && props.x.length < 40 },
        })),
      ],
    };
    const data = [props.x, ...props.series.map((s) => s.values)] as uPlot.AlignedData;
    const plot = new uPlot(options, data, box.current);
    return () => plot.destroy();
  }, [JSON.stringify([props.x, props.series]), props.width, props.height]);
  return (
    <figure class="chart">
      <div ref={box} role="img" aria-label={props.title} />
      <figcaption>{props.title}</figcaption>
    </figure>
  );
}

/** A text input whose value is the caller's only once it is committed (on change: leaving the
 * field, or Enter). What is typed meanwhile is the input's own: a page re-rendered by its
 * polling in the middle of the typing does not put the committed value back over it. */
export function DraftInput(props: {
  name: string;
  value: string;
  onCommit: (value: string) => void;
  id?: string;
  placeholder?: string;
}) {
  const [draft, setDraft] = useState(props.value);
  const committed = useRef(props.value);
  // A value changed from elsewhere (a link, a reset) replaces the draft.
  useEffect(() => {
    if (props.value !== committed.current) {
      committed.current = props.value;
      setDraft(props.value);
    }
  }, [props.value]);
  return (
    <input
      id={props.id}
      name={props.name}
      value={draft}
      placeholder={props.placeholder}
      onInput={(e) => setDraft(e.currentTarget.value)}
      onChange={(e) => {
        committed.current = e.currentTarget.value;
        props.onCommit(e.currentTarget.value);
      }}
    />
  );
}

/** A task's text, with under it its answer's message or its error and error code: the cell
 * of the task lists and of a batch's results. */
export function TaskTextCell({ task }: { task: { text: string; result?: { message: string } | null; error?: string | null; error_code?: string | null } }) {
  return (
    <td class="text-cell">
      <div>{task.text}</div>
      {task.result?.message ? <div class="muted small">{task.result.message}</div> : null}
      {task.error ? (
        <div class="error-text small">
          {task.error_code ? <code>{task.error_code}</code> : null} {task.error}
        </div>
      ) : null}
    </td>
  );
}
