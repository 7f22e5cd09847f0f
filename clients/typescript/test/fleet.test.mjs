// The client against a running fleet: AGENTFLEET_URL and AGENTFLEET_API_KEY (an admin key)
// name it; the development key af-dev-u1-key must act for u1 only. Users are this run's own
// (ts-*-<run>) and limits set here are cleared, so a shared fleet is left as it was.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { before, describe, test } from "node:test";

import { BadRequest, Client, Conflict, Forbidden, NotFound, TERMINAL_STATUSES, Unauthorized } from "../dist/index.js";

const URL_ = process.env.AGENTFLEET_URL;
const KEY = process.env.AGENTFLEET_API_KEY;
const RUN = randomUUID().slice(0, 8);
const TODO = "今天下午去买东西"; // llm-sim: create_item, then action_completed

before(() => {
  if (!URL_ || !KEY) throw new Error("AGENTFLEET_URL and AGENTFLEET_API_KEY must name a running fleet");
});

const admin = () => new Client({ url: URL_, apiKey: KEY });

// condition() once it is truthy, polled every 100 ms; fails naming `what` after timeoutS.
async function until(what, condition, timeoutS = 30) {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutS} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const rejectsWith = (promise, Class, check = () => true) =>
  assert.rejects(promise, (e) => e instanceof Class && check(e));

describe("tasks", () => {
  test("submit, stream its events, wait for its answer", async () => {
    const c = admin();
    const user = `ts-t-${RUN}`;
    const task = await c.submit(user, TODO, { idempotency_key: `ts-${RUN}-1` });
    assert.equal(task.status, "queued");
    const names = [];
    for await (const e of c.events(task.task_id, 30)) names.push(e.event);
    assert.equal(names.at(-1), "done");
    assert.ok(names.includes("action"));
    const ended = await c.wait(task.task_id, 60);
    assert.equal(ended.status, "succeeded");
    assert.equal(ended.result.type, "action_completed");
    assert.ok(ended.usage.input_tokens > 0);
    const again = await c.submit(user, TODO, { idempotency_key: `ts-${RUN}-1` });
    assert.equal(again.task_id, task.task_id);
    await rejectsWith(c.submit(user, "另一件事", { idempotency_key: `ts-${RUN}-1` }), Conflict, (e) => e.code === "idempotency_conflict");
  });

  test("the list pages through every task, newest first", async () => {
    const c = admin();
    const user = `ts-l-${RUN}`;
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await c.submit(user, TODO)).task_id);
    const listed = [];
    for await (const t of c.iterTasks(user, { pageSize: 2 })) listed.push(t.task_id);
    assert.deepEqual(listed, ids.reverse());
    assert.equal((await c.listTasks(user, { limit: 1 })).length, 1);
  });

  test("the search finds tasks by text across users", async () => {
    const c = admin();
    const word = `tssearch${RUN}`;
    const mine = [];
    for (let i = 0; i < 2; i++) mine.push((await c.submit(`ts-s${i}-${RUN}`, `${TODO} ${word.toUpperCase()}`)).task_id);
    await c.submit(`ts-s0-${RUN}`, TODO);
    const found = await c.searchTasks({ q: word, count: true });
    assert.deepEqual(found.tasks.map((t) => t.task_id), [...mine].reverse());
    assert.equal(found.total, 2);
    assert.equal(found.total_capped, false);
    assert.equal(found.next_before, null);
    const page = await c.searchTasks({ q: word, limit: 1 });
    assert.equal(page.next_before, mine[1]);
    const rest = await c.searchTasks({ q: word, limit: 1, before: page.next_before });
    assert.deepEqual(rest.tasks.map((t) => t.task_id), [mine[0]]);
    const one = await c.searchTasks({ q: word, userId: `ts-s1-${RUN}` });
    assert.deepEqual(one.tasks.map((t) => t.task_id), [mine[1]]);
    assert.match(one.tasks[0].trace_id, /^[0-9a-f]{32}$/);
  });

  test("errors carry the API's code and path", async () => {
    const c = admin();
    await rejectsWith(c.submit(`ts-e-${RUN}`, ""), BadRequest, (e) => e.path === "/text");
    await rejectsWith(new Client({ url: URL_, apiKey: "af-dev-u1-key" }).submit(`ts-e-${RUN}`, TODO), Forbidden, (e) => e.path === "/user_id");
    await rejectsWith(c.task(randomUUID()), NotFound);
    await rejectsWith(new Client({ url: URL_, apiKey: "not-a-key" }).task(randomUUID()), Unauthorized);
  });

  test("a task waiting on a limit says so, can be cancelled and retried", async (t) => {
    const c = admin();
    const user = `ts-w-${RUN}`;
    await c.setLimits(user, { requests_per_minute: 1 });
    t.after(() => c.setLimits(user, {}));
    const first = await c.submit(user, TODO);
    const second = await c.submit(user, TODO);
    const waiting = await until("the second task waits on requests_per_minute", async () => {
      const task = await c.task(second.task_id);
      return task.waiting_reason === "requests_per_minute" && task;
    });
    assert.equal(waiting.status, "queued");
    await rejectsWith(c.retry(second.task_id), Conflict, (e) => e.code === "task_not_ended");
    assert.equal((await c.cancel(second.task_id)).status, "cancelled");
    assert.equal((await c.wait(first.task_id, 60)).status, "succeeded");
    await c.setLimits(user, {});
    const retry = await c.retry(second.task_id, `ts-${RUN}-r`);
    assert.equal(retry.retry_of, second.task_id);
    assert.equal((await c.retry(second.task_id, `ts-${RUN}-r`)).task_id, retry.task_id);
    assert.equal((await c.wait(retry.task_id, 60)).status, "succeeded");
    await rejectsWith(c.cancel(retry.task_id), Conflict, (e) => e.code === "already_ended");
  });

  test("the results stream brings each task as it ends", async () => {
    const c = admin();
    const user = `ts-r-${RUN}`;
    const stream = await c.results(user, 30);
    const task = await c.submit(user, TODO);
    let seen;
    for await (const event of stream) {
      if (event.event === "result" && event.data.task_id === task.task_id) {
        seen = event.data;
        break;
      }
      if (event.event === "gap") {
        // The replica may have missed it: read the task.
        seen = await c.wait(task.task_id, 60);
        break;
      }
    }
    assert.ok(seen, "the stream ended without the task's result");
    assert.equal(seen.status, "succeeded");
  });
});

describe("batches", () => {
  test("upload with progress, wait, count result types, read the results", async () => {
    const c = admin();
    const user = `ts-b-${RUN}`;
    const lines = Array.from({ length: 30 }, (_, i) => ({ text: TODO, idempotency_key: `b${i}` }));
    lines[4] = { text: "无法理解的一句话 xyz", idempotency_key: "b4" };
    const progress = [];
    const answer = await c.submitBatch(lines, { userId: user, chunkBytes: 256, onProgress: (p) => progress.push(p) });
    assert.deepEqual([answer.lines, answer.accepted], [30, 30]);
    assert.ok(progress.length > 2);
    assert.equal(progress.at(-1).lines, 30);
    const batch = await c.waitBatch(answer.batch_id, { timeoutS: 120, intervalS: 0.5 });
    assert.equal(batch.ended, 30);
    assert.equal(Object.values(batch.result_types).reduce((a, b) => a + b, 0), 30);
    assert.equal(batch.result_types.action_completed, 29);
    const results = [];
    for await (const r of c.batchResults(answer.batch_id)) results.push(r);
    assert.equal(results.length, 30);
    assert.ok(results.every((r) => TERMINAL_STATUSES.has(r.status)));
    // In the order of the lines, each naming its line and its text.
    assert.deepEqual(results.map((r) => r.line), Array.from({ length: 30 }, (_, i) => i + 1));
    assert.deepEqual(results.map((r) => r.text), lines.map((l) => l.text));
    const failed = results.filter((r) => r.status === "failed" || r.status === "timed_out" || r.result?.type === "error").length;
    const retried = await c.retryBatch(answer.batch_id, undefined, 2);
    assert.deepEqual([retried.retried, retried.stopped], [failed, null]);
    const again = await c.retryBatch(answer.batch_id);
    assert.deepEqual([again.retried, again.already_retried], [0, failed]);
    const sentAgain = await c.submitBatch(lines, { userId: user });
    assert.deepEqual([sentAgain.accepted, sentAgain.duplicates], [0, 30]);
    await rejectsWith(c.submitBatch(lines, { userId: user, batchId: answer.batch_id }), Conflict, (e) => e.code === "batch_exists");
    // Another user's batch of that id is theirs; the admin's key then names whose.
    const other = `ts-b2-${RUN}`;
    await c.submitBatch(lines.slice(0, 2), { userId: other, batchId: answer.batch_id });
    await rejectsWith(c.batch(answer.batch_id), Conflict, (e) => e.code === "ambiguous_id");
    assert.equal((await c.batch(answer.batch_id, other)).total, 2);
    let theirs = 0;
    for await (const r of c.batchResults(answer.batch_id, 60, user)) theirs += r ? 1 : 0;
    assert.equal(theirs, 30);
    const listed = await c.listBatches({ userId: other, limit: 5 });
    assert.deepEqual(listed.map((b) => [b.batch_id, b.total]), [[answer.batch_id, 2]]);
    // Found by the start of its id: both users' batches of it, the newest first.
    const found = await c.listBatches({ prefix: answer.batch_id.slice(0, 8) });
    assert.deepEqual(found.map((b) => [b.user_id, b.total]), [[other, 2], [user, 30]]);
  });

  test("a bad line names its number and nothing is stored", async () => {
    const c = admin();
    const user = `ts-bb-${RUN}`;
    const batchId = randomUUID();
    await rejectsWith(c.submitBatch([{ text: TODO }, { text: "" }], { userId: user, batchId }), BadRequest, (e) => e.path === "/line/2/text");
    await rejectsWith(c.batch(batchId), NotFound);
    assert.deepEqual(await c.listTasks(user), []);
  });

  test("a cancelled batch starts nothing more", async (t) => {
    const c = admin();
    const user = `ts-bc-${RUN}`;
    await c.setLimits(user, { requests_per_minute: 1 });
    t.after(() => c.setLimits(user, {}));
    const answer = await c.submitBatch(Array(4).fill({ text: TODO }), { userId: user });
    await c.cancelBatch(answer.batch_id);
    const batch = await c.waitBatch(answer.batch_id, { timeoutS: 60, intervalS: 0.5 });
    assert.ok(batch.cancelled);
    assert.ok(batch.counts.cancelled >= 3);
  });
});

describe("account", () => {
  test("usage, stats, tools and a plan", async () => {
    const c = admin();
    const user = `ts-u-${RUN}`;
    await c.wait((await c.submit(user, TODO)).task_id, 60);
    const usage = await c.usage(user);
    assert.equal(usage.user_id, user);
    assert.ok(usage.totals[0].calls > 0);
    assert.equal((await c.usage()).user_id, null);
    const stats = await c.stats(user);
    assert.deepEqual([stats.tasks, stats.by_status.succeeded], [1, 1]);
    const tools = Object.fromEntries((await c.tools(user)).map((t) => [t.name, t]));
    assert.ok("permitted" in tools.create_item);
    assert.ok("max_concurrency" in (await c.limits(user)).effective);
    const plan = await c.plan(user, "计划：创建待办「整理周报」", { wait_s: 30 });
    assert.equal(plan.status, "succeeded");
    assert.equal(plan.plan.total_steps, plan.plan.steps.length);
  });
});
