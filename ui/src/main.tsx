/** The console: sign-in, the top navigation, and the page the hash names. */

import "./style.css";
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { clientFor, identify, setUnauthorizedHandler, type Client, type Identity } from "./api.ts";
import { ErrorNote } from "./components.tsx";
import { href, useRoute } from "./router.ts";
import { loadSession, saveSession, type Session } from "./session.ts";
import { TasksPage } from "./pages/tasks.tsx";
import { TaskPage } from "./pages/task.tsx";
import { BatchesPage } from "./pages/batches.tsx";
import { UsagePage } from "./pages/usage.tsx";
import { LimitsPage } from "./pages/limits.tsx";
import { DeadLettersPage } from "./pages/dead_letters.tsx";
import { FleetPage } from "./pages/fleet.tsx";
import { ApiReference } from "./pages/api_reference.tsx";

/** What every page gets: the client for the key, who the key is, and its key (for the
 * calls the client does not have yet). */
export interface PageProps {
  client: Client;
  identity: Identity;
  apiKey: string;
}

function SignIn({ onSignedIn, notice }: { onSignedIn: (s: Session) => void; notice: string }) {
  const [apiKey, setApiKey] = useState("");
  const [userId, setUserId] = useState("");
  const [askUser, setAskUser] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const who = await identify(apiKey.trim(), userId);
      if (who === "needs_user_id") setAskUser(true);
      else onSignedIn({ apiKey: apiKey.trim(), identity: who });
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="container signin">
      <article>
        <header>
          <h1>agentfleet console</h1>
        </header>
        {notice ? <p role="status" class="notice-text">{notice}</p> : null}
        <form onSubmit={submit}>
          <label for="api-key">API key</label>
          <input
            id="api-key"
            name="api-key"
            type="password"
            autocomplete="off"
            required
            value={apiKey}
            onInput={(e) => setApiKey(e.currentTarget.value)}
          />
          {askUser ? (
            // FALLBACK until GET /v1/whoami: the dispatcher cannot say whose key this is.
            <>
              <label for="user-id">User id this key acts for</label>
              <input id="user-id" name="user-id" required value={userId} onInput={(e) => setUserId(e.currentTarget.value)} />
              <small id="user-id-help">This dispatcher does not say which users a key acts for yet (no /v1/whoami).</small>
            </>
          ) : null}
          <button type="submit" aria-busy={busy} disabled={busy}>
            Sign in
          </button>
        </form>
        <ErrorNote error={error} what="Could not sign in" />
        <footer>
          <small>The key stays in this tab's session storage until you sign out or close the tab.</small>{" "}
          <small>
            <a href={href("api")}>The API reference</a> needs no key.
          </small>
        </footer>
      </article>
    </main>
  );
}

const PAGES: Array<{ path: string; label: string; admin?: boolean }> = [
  { path: "tasks", label: "Tasks" },
  { path: "batches", label: "Batches" },
  { path: "usage", label: "Usage" },
  { path: "limits", label: "Limits" },
  { path: "dead-letters", label: "Dead letters", admin: true },
  { path: "fleet", label: "Fleet", admin: true },
  { path: "api", label: "API" },
];

function Console({ session, signOut }: { session: Session; signOut: () => void }) {
  const route = useRoute();
  const client = useMemo(() => clientFor(session.apiKey), [session.apiKey]);
  const { identity, apiKey } = session;
  const props: PageProps = { client, identity, apiKey };
  const [page = "tasks", id] = route.parts;

  useEffect(() => {
    const label = PAGES.find((p) => p.path === page)?.label ?? "Tasks";
    document.title = `${id ? `${label}: ${id.slice(0, 8)}` : label} · agentfleet`;
  }, [page, id]);

  let body;
  if (page === "tasks" && id) body = <TaskPage {...props} taskId={id} key={id} />;
  else if (page === "batches") {
    const batchUser = route.query.get("user_id") ?? undefined;
    body = <BatchesPage {...props} batchId={id} batchUser={batchUser} key={`${id ?? ""}\n${batchUser ?? ""}`} />;
  }
  else if (page === "usage") body = <UsagePage {...props} />;
  else if (page === "limits") body = <LimitsPage {...props} />;
  else if (page === "dead-letters") body = <DeadLettersPage {...props} />;
  else if (page === "fleet") body = <FleetPage {...props} />;
  else if (page === "api") body = <ApiReference anchor={id} />;
  else body = <TasksPage {...props} />;

  return (
    <>
      <header class="topbar">
        <nav class="container-fluid" aria-label="Main">
          <ul>
            <li>
              <a href={href("tasks")} class="brand">
                <strong>agentfleet</strong>
              </a>
            </li>
          </ul>
          <ul>
            {PAGES.filter((p) => !p.admin || identity.admin).map((p) => (
              <li key={p.path}>
                <a href={href(p.path)} aria-current={page === p.path ? "page" : undefined}>
                  {p.label}
                </a>
              </li>
            ))}
          </ul>
          <ul>
            <li>
              <span class="who">
                {identity.keyName}
                {identity.admin ? " (admin)" : identity.userIds.length ? ` · ${identity.userIds.join(", ")}` : ""}
              </span>
            </li>
            <li>
              <button type="button" class="secondary outline small" onClick={signOut}>
                Sign out
              </button>
            </li>
          </ul>
        </nav>
      </header>
      <main class="container-fluid page">{body}</main>
    </>
  );
}

function App() {
  const [session, setSession] = useState<Session | null>(loadSession);
  const [notice, setNotice] = useState("");

  const change = (next: Session | null, why = "") => {
    saveSession(next);
    setSession(next);
    setNotice(why);
  };

  useEffect(() => setUnauthorizedHandler((reason) => change(null, reason)), []);
  const route = useRoute();

  // The API reference needs no key.
  if (!session && route.parts[0] === "api")
    return (
      <main class="container-fluid page">
        <p>
          <a href={href("tasks")}>Sign in to the console</a>
        </p>
        <ApiReference anchor={route.parts[1]} />
      </main>
    );
  if (!session) return <SignIn notice={notice} onSignedIn={(s) => change(s)} />;
  return <Console session={session} signOut={() => change(null, "You signed out.")} />;
}

render(<App />, document.getElementById("app")!);
