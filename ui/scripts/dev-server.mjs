// The console for developers working against a running fleet: serves dist/ at /ui/ with
// the Content-Security-Policy the dispatcher will send, and passes /v1/* through to
// $AGENTFLEET_URL, streaming answers as they come (server-sent events, JSON Lines).
//
//   AGENTFLEET_URL=http://127.0.0.1:8080 PORT=5174 npm run dev     (after npm run build)
import { createServer, request } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; connect-src 'self'";

const dist = fileURLToPath(new URL("../dist/", import.meta.url));
const upstream = new URL(process.env.AGENTFLEET_URL ?? "http://127.0.0.1:8080");
const port = Number(process.env.PORT ?? 5174);
const host = process.env.HOST ?? "127.0.0.1";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
  ".map": "application/json",
};

async function serveAsset(req, res) {
  const rel = decodeURIComponent(new URL(req.url, "http://x").pathname.slice("/ui/".length)) || "index.html";
  const file = normalize(join(dist, rel));
  if (!file.startsWith(dist) || rel.includes(`..${sep}`)) {
    res.writeHead(400).end();
    return;
  }
  try {
    const body = await readFile(file);
    res.writeHead(200, {
      "Content-Type": TYPES[extname(file)] ?? "application/octet-stream",
      "Content-Security-Policy": CSP,
      "X-Content-Type-Options": "nosniff",
      "Cache-Control": rel === "index.html" ? "no-cache" : "max-age=31536000, immutable",
    });
    res.end(body);
  } catch {
    res.writeHead(404, { "Content-Type": "text/plain", "Content-Security-Policy": CSP }).end("not found\n");
  }
}

function proxy(req, res) {
  const headers = { ...req.headers, host: upstream.host };
  delete headers.connection;
  const out = request(
    { protocol: upstream.protocol, hostname: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      res.flushHeaders();
      answer.pipe(res); // pipes chunk by chunk: event streams arrive as they are written
    },
  );
  out.on("error", (e) => {
    if (!res.headersSent) {
      res.writeHead(502, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ error: { code: "bad_gateway", message: `dev server: ${e.message}` } }));
    } else res.destroy();
  });
  res.on("close", () => out.destroy()); // the browser went away: close the upstream stream
  req.pipe(out);
}

const server = createServer((req, res) => {
  const path = new URL(req.url ?? "/", "http://x").pathname;
  if (path.startsWith("/v1/")) proxy(req, res);
  else if (path === "/ui") res.writeHead(301, { Location: "/ui/" }).end();
  else if (path.startsWith("/ui/")) void serveAsset(req, res);
  else if (path === "/") res.writeHead(302, { Location: "/ui/" }).end();
  else res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
});
server.listen(port, host, () => {
  console.log(`console at http://${host}:${server.address().port}/ui/ (API: ${upstream.origin})`);
});
