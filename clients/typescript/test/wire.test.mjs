// The client's own rules, without a fleet: event parsing, errors from answers, and what it
// sends again, against a local HTTP server of the test's.
import assert from "node:assert/strict";
import http from "node:http";
import { after, describe, test } from "node:test";

import {
  BadRequest,
  Client,
  Conflict,
  EventParser,
  ServerError,
  TooManyRequests,
  errorFor,
} from "../dist/index.js";

describe("event parsing", () => {
  test("events, their ids and data over several lines and pieces; comments skipped", () => {
    const parser = new EventParser();
    const events = [
      ...parser.feed(": following\n\nid: 0\nevent: st"),
      ...parser.feed('ep\ndata: {"step":0}\n\nevent: delta\r\ndata: {"text":\r\ndata: "a"}\r\n\r\n'),
    ];
    assert.deepEqual(events, [
      { event: "step", data: { step: 0 }, id: "0" },
      { event: "delta", data: { text: "a" } },
    ]);
  });

  test("an event cut before its blank line is not given", () => {
    assert.deepEqual(new EventParser().feed('event: done\ndata: {"x":1}\n'), []);
  });

  test("an event over the bound is refused", () => {
    assert.throws(() => new EventParser(50).feed(`data: ${"1".repeat(100)}\n\n`));
  });
});

describe("errors from answers", () => {
  test("the API's error object gives code, message and path", () => {
    const e = errorFor(400, '{"error":{"code":"invalid_request","message":"m","path":"/text"}}');
    assert.ok(e instanceof BadRequest);
    assert.deepEqual([e.status, e.code, e.detail, e.path], [400, "invalid_request", "m", "/text"]);
  });

  test("each status has its class; a body that is not the error object is coded by status", () => {
    assert.ok(errorFor(409, '{"error":{"code":"c","message":""}}') instanceof Conflict);
    assert.ok(errorFor(429, "{}", 2) instanceof TooManyRequests);
    const e = errorFor(502, "<html>bad gateway</html>");
    assert.ok(e instanceof ServerError);
    assert.equal(e.code, "http_502");
    assert.equal(e.path, undefined);
    assert.match(e.detail, /bad gateway/);
  });
});

// A server on a free loopback port answering from a list, recording the requests.
async function serve(answers) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("error", () => {});
    req.on("end", () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
      const [status, headers, payload] = answers.shift();
      res.writeHead(status, { "Content-Type": "application/json", Connection: "close", ...headers });
      res.end(JSON.stringify(payload));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => server.close());
  return { url: `http://127.0.0.1:${server.address().port}`, requests };
}

const unavailable = (retryAfter = "0") => [503, { "Retry-After": retryAfter }, { error: { code: "unavailable", message: "m" } }];

describe("sending again", () => {
  test("a submission is sent again after a 503 with the same idempotency key", async () => {
    const s = await serve([unavailable(), [201, {}, { task_id: "t", status: "queued" }]]);
    const task = await new Client({ url: s.url, apiKey: "k", backoffS: 0.01 }).submit("u", "text");
    assert.equal(task.task_id, "t");
    assert.equal(s.requests.length, 2);
    const keys = s.requests.map((r) => JSON.parse(r.body).idempotency_key);
    assert.equal(keys[0], keys[1]);
    assert.equal(s.requests[0].headers.authorization, "Bearer k");
  });

  test("tries are bounded and the last error is thrown", async () => {
    const s = await serve([unavailable(), unavailable(), unavailable()]);
    const client = new Client({ url: s.url, apiKey: "k", maxRetries: 2, backoffS: 0.01 });
    await assert.rejects(client.task("t"), (e) => e instanceof ServerError && e.code === "unavailable");
    assert.equal(s.requests.length, 3);
  });

  test("a 400 is not sent again", async () => {
    const s = await serve([[400, {}, { error: { code: "invalid_request", message: "m", path: "/text" } }]]);
    await assert.rejects(new Client({ url: s.url, apiKey: "k" }).submit("u", ""), BadRequest);
    assert.equal(s.requests.length, 1);
  });

  test("a Retry-After past the deadline gives the answer at once", async () => {
    const s = await serve([unavailable("60")]);
    const started = Date.now();
    await assert.rejects(
      new Client({ url: s.url, apiKey: "k", timeoutS: 2, maxBackoffS: 60 }).task("t"),
      (e) => e instanceof ServerError && e.code === "unavailable" && e.retryAfter === 60,
    );
    assert.ok(Date.now() - started < 2000);
    assert.equal(s.requests.length, 1);
  });

  test("a Retry-After longer than maxBackoffS is not cut short", async () => {
    const s = await serve([[429, { "Retry-After": "10" }, { error: { code: "queue_full", message: "m" } }]]);
    await assert.rejects(
      new Client({ url: s.url, apiKey: "k", maxBackoffS: 5 }).submit("u", "text"),
      (e) => e instanceof TooManyRequests && e.retryAfter === 10,
    );
    assert.equal(s.requests.length, 1);
  });

  test("a stream's idle bound counts only while waiting for the server", async () => {
    const server = http.createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write('event: step\ndata: {"n":1}\n\nevent: step\ndata: {"n":2}\n\n');
      setTimeout(() => res.end('event: done\ndata: {"n":3}\n\n'), 100);
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    after(() => server.close());
    const client = new Client({ url: `http://127.0.0.1:${server.address().port}`, apiKey: "k" });
    const seen = [];
    for await (const e of client.events("t", 0.5)) {
      seen.push(e.data.n);
      await new Promise((r) => setTimeout(r, 700)); // a slow reader: longer than the bound
    }
    assert.deepEqual(seen, [1, 2, 3]);
  });

  test("a batch is streamed in pieces with progress and not sent again", async () => {
    const s = await serve([unavailable()]);
    const seen = [];
    const lines = Array.from({ length: 10 }, (_, i) => ({ text: `line ${i}` }));
    const client = new Client({ url: s.url, apiKey: "k", backoffS: 0.01 });
    await assert.rejects(client.submitBatch(lines, { userId: "u 1", chunkBytes: 40, onProgress: (p) => seen.push(p) }), ServerError);
    assert.equal(s.requests.length, 1);
    const { method, url, headers, body } = s.requests[0];
    assert.deepEqual([method, url], ["POST", "/v1/batches?user_id=u+1"]);
    assert.equal(headers["transfer-encoding"], "chunked");
    assert.deepEqual(body.trim().split("\n").map((l) => JSON.parse(l)), lines);
    assert.ok(seen.length > 2);
    assert.deepEqual(seen.map((p) => p.lines), [...seen.map((p) => p.lines)].sort((a, b) => a - b));
    assert.deepEqual(seen.at(-1), { lines: 10, bytes: Buffer.byteLength(body), totalLines: 10 });
  });

  test("an address that is not http is refused", () => {
    assert.throws(() => new Client({ url: "ftp://host", apiKey: "k" }), TypeError);
  });
});

test("a line with a line break is refused", async () => {
  const s = await serve([[201, {}, {}]]);
  await assert.rejects(
    new Client({ url: s.url, apiKey: "k" }).submitBatch([{ text: "a" }, '{"text":\n"x"}']),
    (e) => e instanceof TypeError && /line 2 holds a line break/.test(e.message),
  );
});

test("a batch read into one body first is sent with its length, not chunked", async () => {
  const s = await serve([[201, {}, { batch_id: "b", accepted: 3 }]]);
  const seen = [];
  const lines = [{ text: "a" }, { text: "b" }, { text: "c" }];
  const answer = await new Client({ url: s.url, apiKey: "k" }).submitBatch(lines, {
    buffer: true,
    chunkBytes: 10,
    onProgress: (p) => seen.push(p.lines),
  });
  assert.equal(answer.accepted, 3);
  assert.equal(s.requests[0].headers["transfer-encoding"], undefined);
  assert.equal(Number(s.requests[0].headers["content-length"]), Buffer.byteLength(s.requests[0].body));
  assert.deepEqual(s.requests[0].body.trim().split("\n").map((l) => JSON.parse(l)), lines);
  assert.deepEqual(seen, [1, 2, 3]);
});
