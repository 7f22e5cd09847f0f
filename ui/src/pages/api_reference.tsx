/** The API reference: the OpenAPI document the dispatcher serves (GET /v1/openapi.json, no
 * key needed), rendered here: every operation by tag with its parameters, body, answers and
 * examples, then every schema with its members. Nothing is loaded from elsewhere; it needs no
 * sign-in (#/api). */

import { useEffect, useState } from "preact/hooks";
import { ErrorNote } from "../components.tsx";

type Json = Record<string, unknown>;

interface Operation {
  method: string;
  path: string;
  op: Json;
  shared: Json[];
}

const METHODS = ["get", "post", "put", "delete", "patch"];

/** A schema's name when it is a reference to one of the document's, else its type in words. */
function typeOf(schema: unknown): string {
  if (!schema || typeof schema !== "object") return "";
  const s = schema as Json;
  if (typeof s.$ref === "string") return s.$ref.split("/").pop()!.replace(/\.schema\.json$/, "");
  if (Array.isArray(s.oneOf)) return s.oneOf.map(typeOf).join(" | ");
  const type = Array.isArray(s.type) ? s.type.join(" | ") : String(s.type ?? "");
  if (type === "array") return `array of ${typeOf(s.items)}`;
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  return type + (s.format ? ` (${s.format})` : "");
}

function SchemaLink({ schema }: { schema: unknown }) {
  const name = typeOf(schema);
  const ref = (schema as Json | undefined)?.$ref;
  if (typeof ref === "string" && ref.startsWith("#/components/schemas/"))
    return (
      <a href={`#/api/schema-${name}`} class="mono">
        {name}
      </a>
    );
  return <span class="mono">{name}</span>;
}

/** An example as JSON text, whichever shape the document gives it in. */
function examplesOf(media: Json | undefined): Array<[string, unknown]> {
  if (!media) return [];
  if ("example" in media) return [["example", media.example]];
  const many = media.examples as Record<string, Json> | undefined;
  return many ? Object.entries(many).map(([name, e]) => [String(e.summary ?? name), e.value]) : [];
}

function resolve(doc: Json, item: Json): Json {
  const ref = item.$ref;
  if (typeof ref !== "string" || !ref.startsWith("#/")) return item;
  let at: unknown = doc;
  for (const part of ref.slice(2).split("/")) at = (at as Json | undefined)?.[part];
  return { ...((at as Json) ?? {}), ...Object.fromEntries(Object.entries(item).filter(([k]) => k !== "$ref")) };
}

function OperationView({ doc, o }: { doc: Json; o: Operation }) {
  const params = [...o.shared, ...((o.op.parameters as Json[]) ?? [])].map((p) => resolve(doc, p));
  const body = o.op.requestBody ? resolve(doc, o.op.requestBody as Json) : undefined;
  const bodyMedia = body ? Object.entries((body.content as Record<string, Json>) ?? {}) : [];
  const responses = Object.entries((o.op.responses as Record<string, Json>) ?? {}).map(([code, r]) => [code, resolve(doc, r)] as const);
  const id = String(o.op.operationId ?? `${o.method}-${o.path}`);
  return (
    <article class="operation" id={`op-${id}`} data-operation={id}>
      <h4>
        <span class={`badge method-${o.method}`}>{o.method.toUpperCase()}</span> <code>{o.path}</code> <small class="muted">{String(o.op.summary ?? "")}</small>
      </h4>
      {o.op.description ? <p>{String(o.op.description)}</p> : null}
      {params.length ? (
        <table class="compact">
          <caption>Parameters</caption>
          <tbody>
            {params.map((p) => (
              <tr>
                <th scope="row" class="mono nowrap">
                  {String(p.name)}
                  {p.required ? " *" : ""}
                </th>
                <td class="nowrap">{String(p.in)}</td>
                <td class="nowrap">
                  <SchemaLink schema={p.schema} />
                </td>
                <td class="small">{String(p.description ?? "")}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {bodyMedia.map(([type, media]) => (
        <div>
          <p>
            Body ({type}): <SchemaLink schema={media.schema} />
          </p>
          {examplesOf(media).map(([name, value]) => (
            <details>
              <summary>Example body: {name}</summary>
              <pre>{typeof value === "string" ? value : JSON.stringify(value, null, 2)}</pre>
            </details>
          ))}
        </div>
      ))}
      <table class="compact">
        <caption>Answers</caption>
        <tbody>
          {responses.map(([code, r]) => {
            const media = Object.entries((r.content as Record<string, Json>) ?? {});
            return (
              <tr>
                <th scope="row" class="mono">{code}</th>
                <td class="small">
                  {String(r.description ?? "")}
                  {media.map(([type, m]) => (
                    <div>
                      <span class="muted">{type}</span> <SchemaLink schema={m.schema} />
                      {examplesOf(m).map(([name, value]) => (
                        <details>
                          <summary>Example: {name}</summary>
                          <pre>{typeof value === "string" ? value : JSON.stringify(value, null, 2)}</pre>
                        </details>
                      ))}
                    </div>
                  ))}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </article>
  );
}

function SchemaView({ name, schema }: { name: string; schema: Json }) {
  const props = Object.entries((schema.properties as Record<string, Json>) ?? {});
  const required = new Set((schema.required as string[]) ?? []);
  return (
    <article id={`schema-${name}`} class="schema">
      <h4 class="mono">{name}</h4>
      {schema.description ? <p>{String(schema.description)}</p> : null}
      {props.length ? (
        <table class="compact">
          <tbody>
            {props.map(([member, s]) => (
              <tr>
                <th scope="row" class="mono nowrap">
                  {member}
                  {required.has(member) ? " *" : ""}
                </th>
                <td class="nowrap">
                  <SchemaLink schema={s} />
                </td>
                <td class="small">{String(s.description ?? "")}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p class="muted mono">{typeOf(schema)}</p>
      )}
    </article>
  );
}

export function ApiReference({ anchor }: { anchor?: string | undefined }) {
  const [doc, setDoc] = useState<Json | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    fetch(`${location.origin}/v1/openapi.json`)
      .then(async (r) => {
        if (!r.ok) throw new Error(`GET /v1/openapi.json answered ${r.status}`);
        setDoc((await r.json()) as Json);
      })
      .catch(setError);
  }, []);
  useEffect(() => {
    if (doc && anchor) document.getElementById(anchor)?.scrollIntoView();
  }, [doc, anchor]);
  if (!doc) return error ? <ErrorNote error={error} what="Could not read the API's document" /> : <p aria-busy="true">Loading…</p>;

  const info = (doc.info as Json) ?? {};
  const byTag = new Map<string, Operation[]>();
  for (const [path, item] of Object.entries((doc.paths as Record<string, Json>) ?? {})) {
    const shared = (item.parameters as Json[]) ?? [];
    for (const method of METHODS) {
      const op = item[method] as Json | undefined;
      if (!op) continue;
      const tag = String(((op.tags as string[]) ?? ["other"])[0]);
      byTag.set(tag, [...(byTag.get(tag) ?? []), { method, path, op, shared }]);
    }
  }
  const schemas = Object.entries(((doc.components as Json)?.schemas as Record<string, Json>) ?? {});
  return (
    <section aria-labelledby="api-title" class="api-reference">
      <h1 id="api-title">
        {String(info.title ?? "API")} <small class="muted">{String(info.version ?? "")}</small>
      </h1>
      {info.description ? <p>{String(info.description)}</p> : null}
      <p class="muted">
        Rendered from <a href="/v1/openapi.json">/v1/openapi.json</a>; members marked * are required.
      </p>
      <nav aria-label="Operations">
        {[...byTag].map(([tag, ops]) => (
          <p>
            <strong>{tag}</strong>:{" "}
            {ops.map((o, i) => (
              <>
                {i ? " · " : ""}
                <a href={`#/api/op-${String(o.op.operationId)}`}>{String(o.op.operationId)}</a>
              </>
            ))}
          </p>
        ))}
      </nav>
      {[...byTag].map(([tag, ops]) => (
        <section aria-label={`${tag} operations`}>
          <h2>{tag}</h2>
          {ops.map((o) => (
            <OperationView doc={doc} o={o} />
          ))}
        </section>
      ))}
      <h2>Schemas</h2>
      {schemas.map(([name, s]) => (
        <SchemaView name={name} schema={s} />
      ))}
    </section>
  );
}
