/** Limits: a user's effective limits and overrides; an admin key edits the overrides (PUT
 * replaces them: a blank field has no override, the tier's value applies). An error's
 * path is shown next to the field it names. */

import { useEffect, useState } from "preact/hooks";
import type { PageProps } from "../main.tsx";
import { ApiError } from "../api.ts";
import { ErrorNote, useAsync } from "../components.tsx";
import { count } from "../format.ts";
import { UserField, defaultUser } from "./user_field.tsx";

interface Limits {
  user_id: string;
  tier: string;
  effective: Record<string, string | number>;
  overrides: Record<string, string | number>;
}

/** The fields of LimitsUpdate in the contract. */
const FIELDS: Array<{ name: string; label: string; kind: "int" | "text" | "decimal" | "permission"; help: string }> = [
  { name: "tier", label: "Tier", kind: "text", help: "the name of a configured tier" },
  { name: "max_concurrency", label: "Max concurrency", kind: "int", help: "tasks dispatched or running at once (≥ 1)" },
  { name: "requests_per_minute", label: "Requests per minute", kind: "int", help: "tasks started per minute (≥ 1)" },
  { name: "tokens_per_minute", label: "Tokens per minute", kind: "int", help: "model tokens per minute (≥ 1)" },
  { name: "max_queued", label: "Max queued", kind: "int", help: "tasks waiting in the queue (≥ 1)" },
  { name: "monthly_budget", label: "Monthly budget", kind: "decimal", help: 'a decimal, at most 6 places ("0": unlimited)' },
  { name: "tool_permission", label: "Tool permission", kind: "permission", help: "read < write < execute < admin" },
];

/** The limits whose 0 means none: shown as "unlimited", not as a 0 that reads as "nothing". */
const ZERO_IS_UNLIMITED = new Set(["monthly_budget", "requests_per_minute", "tokens_per_minute"]);

function limitText(name: string, value: string | number): string {
  if (ZERO_IS_UNLIMITED.has(name) && Number(value) === 0) return "unlimited";
  return typeof value === "number" ? count(value) : value;
}

export function LimitsPage({ client, identity }: PageProps) {
  const [user, setUser] = useState(defaultUser(identity));
  const limits = useAsync<Limits>();
  const save = useAsync<Limits>();
  const [form, setForm] = useState<Record<string, string>>({});
  const [saved, setSaved] = useState("");

  const fill = (l: Limits) => setForm(Object.fromEntries(FIELDS.map((f) => [f.name, l.overrides[f.name] === undefined ? "" : String(l.overrides[f.name])])));

  const load = async () => {
    setSaved("");
    save.setError(null);
    if (!user) return;
    const l = await limits.run(async () => (await client.limits(user)) as unknown as Limits);
    if (l) fill(l);
  };
  useEffect(() => void load(), [user]);

  const submit = async (e: Event) => {
    e.preventDefault();
    const body: Record<string, unknown> = {};
    for (const f of FIELDS) {
      const v = (form[f.name] ?? "").trim();
      if (v === "") continue;
      body[f.name] = f.kind === "int" && /^-?\d+$/.test(v) ? Number(v) : v;
    }
    const l = await save.run(async () => (await client.setLimits(user, body)) as unknown as Limits);
    if (l) {
      limits.setValue(() => l);
      fill(l);
      setSaved(`Saved: takes effect at the next scheduler pass.`);
    }
  };

  const errPath = save.error instanceof ApiError ? save.error.path : undefined;
  const fieldError = (name: string) => (errPath === `/${name}` ? (save.error as ApiError) : null);
  const l = limits.value;

  return (
    <section aria-labelledby="limits-title">
      <h1 id="limits-title">Limits</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Whose limits">
        <UserField identity={identity} value={user} onChange={setUser} id="limits-user" />
      </form>
      <ErrorNote error={limits.error} what="Could not read the limits" />
      {l ? (
        <div class="columns">
          <table class="compact">
            <caption>
              Effective limits of {l.user_id} (tier {l.tier})
            </caption>
            <tbody>
              {Object.entries(l.effective).map(([k, v]) => (
                <tr>
                  <th scope="row">{k.replace(/_/g, " ")}</th>
                  <td class="num">{limitText(k, v)}</td>
                  <td class="muted small">{l.overrides[k] !== undefined ? "override" : "tier"}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {identity.admin ? (
            <form onSubmit={submit} class="limits-form" aria-labelledby="overrides-title" noValidate>
              <h2 id="overrides-title">Overrides</h2>
              <p class="muted small">A blank field has no override: the tier's value applies. Saving replaces every override.</p>
              <div class="fields-grid">
              {FIELDS.map((f) => {
                const err = fieldError(f.name);
                const id = `limit-${f.name}`;
                const describedBy = err ? `${id}-error` : `${id}-help`;
                const common = {
                  id,
                  name: f.name,
                  value: form[f.name] ?? "",
                  "aria-invalid": err ? ("true" as const) : undefined,
                  "aria-describedby": describedBy,
                };
                return (
                  <div class="field" key={f.name}>
                    <label for={id}>{f.label}</label>
                    {f.kind === "permission" ? (
                      <select {...common} onChange={(e) => setForm({ ...form, [f.name]: e.currentTarget.value })}>
                        <option value="">(the tier's)</option>
                        {["read", "write", "execute", "admin"].map((p) => (
                          <option value={p}>{p}</option>
                        ))}
                      </select>
                    ) : (
                      <input
                        {...common}
                        inputMode={f.kind === "int" ? "numeric" : f.kind === "decimal" ? "decimal" : undefined}
                        placeholder={`tier: ${l.effective[f.name] ?? l.tier}`}
                        onInput={(e) => setForm({ ...form, [f.name]: e.currentTarget.value })}
                      />
                    )}
                    {err ? (
                      <small id={`${id}-error`} class="field-error" role="alert">
                        {err.detail} (<code>{err.code}</code> at <code>{err.path}</code>)
                      </small>
                    ) : (
                      <small id={`${id}-help`}>{f.help}</small>
                    )}
                  </div>
                );
              })}
              </div>
              <button type="submit" aria-busy={save.busy} disabled={save.busy}>
                Save overrides
              </button>
              {save.error && !FIELDS.some((f) => fieldError(f.name)) ? <ErrorNote error={save.error} what="Not saved" /> : null}
              <p role="status" class="muted">{saved}</p>
            </form>
          ) : (
            <p class="notice-text" role="note">
              Changing limits needs an admin key.
            </p>
          )}
        </div>
      ) : limits.busy ? (
        <p aria-busy="true">Loading…</p>
      ) : null}
    </section>
  );
}
