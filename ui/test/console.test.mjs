// The console in a real browser against a running fleet, clicked through as a person would.
//
//   AGENTFLEET_CONSOLE_URL=http://127.0.0.1:5174/ui/ npm test
//
// Keys: AGENTFLEET_CONSOLE_USER_KEY (default af-dev-u1-key) acting for
// AGENTFLEET_CONSOLE_USER (u1), AGENTFLEET_CONSOLE_ADMIN_KEY (af-dev-admin-key).
// Screenshots of every page (1280x800) go to $AGENTFLEET_CONSOLE_SCREENSHOTS
// (ui/test/screenshots/). Fails on any CSP violation, page error or console error other
// than the browser's own note of an API answer >= 400. Chromium: /usr/bin/chromium.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const BASE = process.env.AGENTFLEET_CONSOLE_URL ?? "http://127.0.0.1:5174/ui/";
const ORIGIN = new URL(BASE).origin;
const USER_KEY = process.env.AGENTFLEET_CONSOLE_USER_KEY ?? "af-dev-u1-key";
const USER = process.env.AGENTFLEET_CONSOLE_USER ?? "u1";
const ADMIN_KEY = process.env.AGENTFLEET_CONSOLE_ADMIN_KEY ?? "af-dev-admin-key";
const EDIT_USER = `console-${Date.now()}`; // whose limits the admin edits
const DLQ_KEY = process.env.AGENTFLEET_CONSOLE_DLQ_KEY ?? ""; // a dead letter's key, made for the test
const SHOTS = process.env.AGENTFLEET_CONSOLE_SCREENSHOTS ?? fileURLToPath(new URL("./screenshots/", import.meta.url));
const STEP_MS = 20_000; // any one wait
const TEST_MS = 300_000; // the whole run

/** The API, through the same origin as the console (the dispatcher, or the dev server). */
async function api(key, method, path, body) {
  const response = await fetch(ORIGIN + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(STEP_MS),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** Polls `probe` until it returns a truthy value, at most `ms`. */
async function until(what, probe, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await probe();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms (last: ${last})`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Waits for `locator`'s text to match `pattern`; a failure says what the text was. */
async function expectText(locator, pattern, ms = STEP_MS) {
  await locator.first().waitFor({ timeout: ms });
  let seen = "";
  try {
    return await until(`text ${pattern}`, async () => pattern.test((seen = await locator.first().innerText())), ms);
  } catch (e) {
    e.message += ` (the text: ${JSON.stringify(seen.slice(0, 300))})`;
    throw e;
  }
}

/** Chromium with a fresh profile, a 1280x800 page, and the CSP violations, page errors and
 * console errors it reports collected into `problems`. */
async function openBrowser() {
  mkdirSync(SHOTS, { recursive: true });
  const profile = mkdtempSync(join(tmpdir(), "agentfleet-console-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1280, height: 800 },
    acceptDownloads: true,
    timeout: STEP_MS,
  });
  const problems = [];
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_MS);
  page.setDefaultNavigationTimeout(STEP_MS);
  // A CSP violation is reported in the console too; the event catches those that are not.
  await page.addInitScript(() => {
    document.addEventListener("securitypolicyviolation", (e) =>
      console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`),
    );
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    const text = m.text();
    if (/Content.Security.Policy|CSP violation|Refused to/i.test(text)) problems.push(`CSP: ${text}`);
    else if (m.type() === "error" && !/Failed to load resource: the server responded with a status of \d+/.test(text)) {
      problems.push(`console error: ${text}`);
    }
  });
  return { profile, context, page, problems };
}

test("the console, clicked through against a running fleet", { timeout: TEST_MS }, async (t) => {
  mkdirSync(SHOTS, { recursive: true });
  const { profile, context, page, problems } = await openBrowser();
  const shot = (name) => page.screenshot({ path: join(SHOTS, `${name}.png`) });
  // A cancel asks first: each question is kept, and answered yes.
  const asked = [];
  page.on("dialog", (d) => {
    asked.push(d.message());
    void d.accept();
  });
  const nav = (name) => page.getByRole("navigation", { name: "Main" }).getByRole("link", { name, exact: true });

  async function signIn(key, userId) {
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    const askUser = page.getByLabel("User id this key acts for");
    const signedIn = page.getByRole("button", { name: "Sign out" });
    await until("signed in, or asked for the user id", async () => (await signedIn.isVisible()) || (await askUser.isVisible()));
    if (await askUser.isVisible()) {
      assert.ok(userId, "the console asked an admin key for a user id");
      await askUser.fill(userId); // a key that may act for anyone (auth mode none)
      await page.getByRole("button", { name: "Sign in" }).click();
    }
    await signedIn.waitFor();
  }

  const whoami = await api(USER_KEY, "GET", "/v1/whoami");
  const limitsBefore = await api(ADMIN_KEY, "GET", `/v1/users/${USER}/limits`);
  assert.equal(limitsBefore.status, 200, "the admin key reads limits");

  try {
    await t.test("sign in with a user key", async () => {
      await page.goto(BASE);
      await page.getByLabel("API key").waitFor();
      await shot("01-sign-in");
      await signIn(USER_KEY, USER);
      await expectText(page.locator(".who"), new RegExp(USER));
      if (whoami.status === 200) assert.equal(whoami.body.admin, false);
      assert.equal(await nav("Fleet").count(), 0, "a user key sees no Fleet page in the navigation");
      assert.equal(await nav("Dead letters").count(), 0);
    });

    let taskId;
    await t.test("submit a task and find it in the list with filters", async () => {
      await nav("Tasks").click();
      await page.getByText(`Submit a task as ${USER}`).click();
      await page.getByLabel("Text", { exact: true }).fill("2月8日会议改到晚上8点");
      await page.getByRole("button", { name: "Submit", exact: true }).click();
      const link = page.getByRole("status").getByRole("link", { name: /^task / });
      await link.waitFor();
      taskId = (await link.getAttribute("href")).split("/").pop();
      await page.getByLabel("Status").selectOption("succeeded");
      await page.getByLabel("Result type").selectOption("action_completed");
      const row = page.locator(`tr[data-task-id="${taskId}"]`);
      await expectText(row, /succeeded[\s\S]*action completed/);
      await shot("02-tasks");
    });

    await t.test("the task page shows its fields and its trace as a timeline", async () => {
      await page.locator(`tr[data-task-id="${taskId}"] a`).first().click();
      await expectText(page.locator("#task-title"), /succeeded/);
      await expectText(page.locator("table.fields").first(), /action completed/);
      const timeline = page.locator("table.timeline");
      await expectText(timeline, /step 0 · model/);
      await expectText(timeline, /search_items/);
      await expectText(timeline, /update_item/);
      assert.ok((await timeline.locator("svg.bar rect.fill").count()) >= 4, "a bar per model and tool call");
      const call = timeline.locator("tr", { hasText: "search_items" });
      await call.getByText("arguments and result").click();
      await expectText(call.locator("pre").first(), /item_type/);
      await shot("03-task");
    });

    await t.test("retry an ended task: the new task names the first", async () => {
      await page.getByRole("button", { name: "Retry" }).click();
      await until("the retry's page", async () => !page.url().includes(taskId) && /#\/tasks\/[0-9a-f-]{36}$/.test(page.url()));
      await expectText(page.locator("table.fields").first(), new RegExp(`Retry of\\s+${taskId.slice(0, 8)}`));
      await expectText(page.locator("#task-title"), /succeeded/);
    });

    await t.test("a running task streams its events live and can be cancelled", async () => {
      const slow = await api(USER_KEY, "POST", "/v1/tasks", { user_id: USER, text: "slow: steps=40", model: "sim-stream-model" });
      assert.equal(slow.status, 201, JSON.stringify(slow.body));
      await page.goto(`${BASE}#/tasks/${slow.body.task_id}`);
      await page.locator("ol.events li[data-event='action']").first().waitFor();
      await expectText(page.locator("#live-title"), /streaming/);
      await shot("04-task-live");
      await page.getByRole("button", { name: "Cancel" }).click();
      assert.match(asked.at(-1) ?? "", /^Cancel task /, "the cancel asked first");
      await expectText(page.locator("#task-title"), /cancelled/, 30_000);
      await page.locator("ol.events li[data-event='done'], ol.events li[data-event='error']").first().waitFor();
      // The end is in view in the events' box, and no note of a cancel still on its way.
      const scrolled = await page.locator("ol.events").evaluate((ol) => ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 2);
      assert.ok(scrolled, "the events box shows its last line");
      await until("no cancel-requested note", async () => !/Cancel requested/.test(await page.locator(".actions").innerText()));
      await expectText(page.locator("table[aria-label='Times and options']"), /\d\d:\d\d:\d\d (UTC|UTC[+-]\d\d:\d\d)/);
    });

    let batchId;
    await t.test("upload a batch, watch it end, read its results in input order, retry its failure", async () => {
      const file = join(profile, "batch.jsonl");
      // Three that succeed, and one that fails (more steps than it may take).
      const texts = ["2月8日会议改到晚上8点", "今天下午去买东西", "无法理解的话", "bench: steps=3 calls=1"];
      writeFileSync(file, texts.map((text, i) => JSON.stringify(i === 3 ? { text, max_steps: 1 } : { text })).join("\n") + "\n");
      await nav("Batches").click();
      await page.getByLabel(/JSON Lines file/).setInputFiles(file);
      await page.getByRole("button", { name: "Upload" }).click();
      await until("the batch's page", async () => /#\/batches\/.+/.test(page.url()));
      // #/batches/ID?user_id=U: the batch's user rides along (batch ids are each user's).
      const opened = /#\/batches\/([^?]+)\?user_id=(.+)$/.exec(page.url());
      assert.ok(opened, page.url());
      batchId = decodeURIComponent(opened[1]);
      await expectText(page.locator("label[for='batch-progress']"), /4 of 4 tasks ended/, 30_000);
      // The list shows it with its progress, and opens it.
      const listed = page.getByRole("region", { name: "Batches, newest first" });
      await expectText(listed, new RegExp(batchId));
      await expectText(listed.getByRole("row").filter({ hasText: batchId }), /4 of 4/);
      // Found by the start of its id: only the batches whose ids begin so are listed.
      const filter = listed.getByLabel("Id begins with");
      await filter.fill(batchId.slice(0, 8));
      await filter.press("Enter");
      await until("the list filtered", async () => (await listed.locator("tbody tr").count()) === 1);
      await expectText(listed.locator("tbody tr"), new RegExp(batchId));
      await listed.scrollIntoViewIfNeeded();
      await shot("05b-batch-list");
      await filter.fill("no-such-batch-");
      await filter.press("Enter");
      await expectText(listed, /No batch's id begins “no-such-batch-”/);
      await filter.fill("");
      await filter.press("Enter");
      await expectText(listed.getByRole("row").filter({ hasText: batchId }), /4 of 4/);
      await page.evaluate(() => window.scrollTo(0, 0));
      const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: /Download results/ }).click()]);
      const saved = join(profile, "results.jsonl");
      await download.saveAs(saved);
      const lines = readFileSync(saved, "utf8").trim().split("\n").map((l) => JSON.parse(l));
      assert.equal(lines.length, 4);
      assert.deepEqual(lines.map((l) => [l.line, l.text, l.status]), texts.map((text, i) => [i + 1, text, i === 3 ? "failed" : "succeeded"]));
      await expectText(page.getByRole("status").filter({ hasText: "Downloaded" }), /Downloaded 4 result lines/);
      // The page's results: each line in its order, with its text.
      const results = page.locator("#batch-results tbody tr");
      await until("the results table", async () => (await results.count()) === 4);
      assert.deepEqual(await results.evaluateAll((rows) => rows.map((r) => r.getAttribute("data-line"))), ["1", "2", "3", "4"]);
      await expectText(results.nth(3), /bench: steps=3 calls=1[\s\S]*max_steps/);
      await shot("05-batch");
      // "Retry the failed ones" (line 4, and any line that ended with an error answer): asked
      // first, then each of them names its retry.
      const failed = lines.filter((l) => l.status !== "succeeded" || l.result?.type === "error");
      const retry = page.getByRole("button", { name: `Retry failed (${failed.length})`, exact: true });
      await retry.click();
      assert.match(asked.at(-1) ?? "", new RegExp(`^Retry the ${failed.length} failed tasks of batch `));
      await expectText(page.getByRole("status").filter({ hasText: "Retried" }), new RegExp(`Retried ${failed.length} failed tasks\\.`));
      for (const l of failed) await expectText(page.locator(`#batch-results tbody tr[data-line='${l.line}'] td`).last(), /[0-9a-f]{8}/, 15_000);
      await page.locator("#results-title").scrollIntoViewIfNeeded();
      await shot("05c-batch-retried");
      await page.evaluate(() => window.scrollTo(0, 0));
    });

    await t.test("cancel a batch still running", async () => {
      const file = join(profile, "slow.jsonl");
      writeFileSync(file, Array.from({ length: 4 }, () => JSON.stringify({ text: "slow: steps=30" })).join("\n") + "\n");
      await nav("Batches").click();
      await page.getByLabel(/JSON Lines file/).setInputFiles(file);
      await page.getByRole("button", { name: "Upload" }).click();
      await until("the batch's page", async () => /#\/batches\/.+/.test(page.url()) && !page.url().includes(`/batches/${encodeURIComponent(batchId)}?`));
      await page.getByRole("button", { name: "Cancel batch" }).click();
      assert.match(asked.at(-1) ?? "", /^Cancel batch /, "the batch's cancel asked first");
      await expectText(page.locator("#batch-title"), /cancelled/);
      await expectText(page.getByRole("status").filter({ hasText: "Batch cancelled" }), /no task of it starts/);
    });

    await t.test("usage: charts, table and statistics", async () => {
      await nav("Usage").click();
      await page.locator("figure.chart canvas").first().waitFor();
      assert.equal(await page.locator("figure.chart").count(), 2);
      await expectText(page.locator("table caption", { hasText: "Per model" }).locator(".."), /sim/);
      await expectText(page.locator("[data-stat='tasks']"), /^[1-9][\d,]*$/);
      // A task that succeeded with an error answer (the batch's third line) is not done as
      // asked: the two rates tell them apart.
      await expectText(page.locator("[data-stat='action_completed_rate']"), /^\d+\.\d%$/);
      const done = parseFloat(await page.locator("[data-stat='action_completed_rate']").innerText());
      const succeeded = parseFloat(await page.locator("[data-stat='success_rate']").innerText());
      assert.ok(done < succeeded, `done as asked ${done}% is not below succeeded ${succeeded}%`);
      await shot("06-usage");
    });

    await t.test("limits: a user key reads its own, cannot change them", async () => {
      await nav("Limits").click();
      await expectText(page.locator("table caption", { hasText: "Effective limits" }), new RegExp(USER));
      await page.getByText("Changing limits needs an admin key").waitFor();
      assert.equal(await page.getByRole("button", { name: "Save overrides" }).count(), 0);
      await shot("07-limits-user");
    });

    await t.test("admin pages are hidden from a user key", async () => {
      await page.goto(`${BASE}#/fleet`);
      await page.getByText("This page needs an admin key").waitFor();
      await page.goto(`${BASE}#/dead-letters`);
      await page.getByText("This page needs an admin key").waitFor();
    });

    await t.test("sign out", async () => {
      await page.getByRole("button", { name: "Sign out" }).click();
      await page.getByLabel("API key").waitFor();
      await page.getByText("You signed out.").waitFor();
      assert.equal(await page.evaluate(() => sessionStorage.getItem("agentfleet.console.session")), null);
    });

    await t.test("an admin key sees every page and edits limits, errors next to their field", async () => {
      await signIn(ADMIN_KEY);
      await expectText(page.locator(".who"), /admin/);
      await nav("Fleet").waitFor();
      await nav("Dead letters").waitFor();
      await nav("Limits").click();
      // A user of this run's own: the limits it sets touch nobody else's tasks.
      const user = page.getByLabel("User", { exact: true });
      await user.fill(EDIT_USER);
      await user.press("Tab");
      const maxQueued = page.getByLabel("Max queued");
      await maxQueued.fill("0");
      await page.getByRole("button", { name: "Save overrides" }).click();
      await expectText(page.locator("#limit-max_queued-error"), /\/max_queued/);
      assert.equal(await maxQueued.getAttribute("aria-invalid"), "true");
      await shot("08-limits-error");
      await maxQueued.fill("4321");
      await page.getByRole("button", { name: "Save overrides" }).click();
      await page.getByText("Saved: takes effect at the next scheduler pass.").waitFor();
      await expectText(page.locator("table caption", { hasText: "Effective limits" }).locator(".."), /max queued\s+4,321\s+override/);
      // A budget of 0 is none: it says so instead of a 0 that reads as nothing left.
      await expectText(page.locator("table caption", { hasText: "Effective limits" }).locator(".."), /monthly budget\s+unlimited\s+tier/);
      await shot("08-limits-admin");
    });

    await t.test("admin: every user's tasks, searched by user and by text, filters in the URL", async () => {
      // A task of this run's own user, whom no other test submits for: the integration tests
      // beside this one submit tasks for the shared users (u1) all the time, and any of theirs
      // may push a task off the list's first page (its 50 newest) between a look and the
      // list's answer.
      const own = await api(ADMIN_KEY, "POST", "/v1/tasks", { user_id: EDIT_USER, text: `今天下午3点提醒我开会 ${EDIT_USER}` });
      assert.equal(own.status, 201, JSON.stringify(own.body));
      await nav("Tasks").click();
      await expectText(page.locator("#tasks-count"), /tasks? match[\s\S]*every user/);
      const user = page.getByLabel("User", { exact: true });
      await user.fill(EDIT_USER);
      await user.press("Tab");
      await page.locator(`tr[data-task-id="${own.body.task_id}"]`).waitFor();
      assert.match(page.url(), new RegExp(`[?&]user_id=${EDIT_USER}`), "the filter is in the URL");
      // Every user's tasks again, found by a word of the text: the server's search, counted.
      await user.fill("");
      await user.press("Tab");
      const text = page.getByLabel("Text contains");
      await text.fill(EDIT_USER.toUpperCase());
      await text.press("Tab");
      await expectText(page.locator("#tasks-count"), /^1 task matches/);
      await page.locator(`tr[data-task-id="${own.body.task_id}"]`).waitFor();
      assert.match(page.url(), /[?&]q=/);
      await shot("02b-tasks-search");
      // A reload keeps the search.
      await page.reload();
      await expectText(page.locator("#tasks-count"), /^1 task matches/);
    });

    await t.test("a task's question answered from its page, as a follow-up of it", async () => {
      // Three meetings on 8 February (of this year, in the tools' zone) for this run's own
      // user: changing "the meeting" asks which.
      const year = new Intl.DateTimeFormat("en", { timeZone: "Asia/Shanghai", year: "numeric" }).format(new Date());
      for (const [title, start, end] of [["晨会", "09:00", "10:00"], ["团队会议", "14:00", "15:00"], ["项目评审", "16:00", "17:00"]]) {
        const made = await api(ADMIN_KEY, "POST", "/v1/tools/create_item:call", {
          user_id: EDIT_USER,
          arguments: { item_type: "event", title, date: `${year}-02-08`, start_time: start, end_time: end },
        });
        assert.equal(made.status, 200, JSON.stringify(made.body));
      }
      const question = await api(ADMIN_KEY, "POST", "/v1/tasks", { user_id: EDIT_USER, text: "2月8日的会议改到晚上8点" });
      assert.equal(question.status, 201, JSON.stringify(question.body));
      await page.goto(`${BASE}#/tasks/${question.body.task_id}`);
      await expectText(page.locator("table.fields").first(), /need clarification/, 30_000);
      await expectText(page.locator("#task-title"), /succeeded[\s\S]*need clarification/);
      const form = page.getByRole("form", { name: "Answer its question" });
      await expectText(form.getByRole("group", { name: "Its options" }), /团队会议/);
      await form.getByLabel("Your answer").fill("改第二个");
      await shot("03b-task-question");
      await form.getByRole("button", { name: "Send answer" }).click();
      await until("the answer's page", async () => !page.url().includes(question.body.task_id) && /#\/tasks\/[0-9a-f-]{36}$/.test(page.url()));
      await expectText(page.locator("table.fields").first(), new RegExp(`Follows\\s+${question.body.task_id.slice(0, 8)}`));
      await expectText(page.locator("#task-title"), /succeeded/, 30_000);
      await expectText(page.locator("table.fields").first(), /action completed[\s\S]*团队会议/);
    });

    await t.test("fleet: each worker's state and tasks, the queue by user, the ends of the last half hour", async () => {
      // A slow task of this run's own user: a worker runs it while the page is looked at.
      const slow = await api(ADMIN_KEY, "POST", "/v1/tasks", { user_id: EDIT_USER, text: "slow: steps=40", model: "sim-stream-model" });
      assert.equal(slow.status, 201, JSON.stringify(slow.body));
      const probe = await api(ADMIN_KEY, "GET", "/v1/fleet");
      assert.equal(probe.status, 200);
      assert.ok(probe.body.history.ends.length >= 2, "the dispatcher keeps the history since it started");
      await nav("Fleet").click();
      await expectText(page.locator("[data-stat='workers']"), new RegExp(`^${probe.body.workers.length}$`));
      const workers = page.locator("#fleet-workers");
      await expectText(workers, new RegExp(probe.body.workers[0].worker_id));
      await expectText(workers, /taking work|draining/);
      // The slow task shows under the worker that runs it, and links to its page.
      await expectText(workers, new RegExp(slow.body.task_id.slice(0, 8)), 30_000);
      await page.locator("#fleet-queue").waitFor();
      // The chart is the dispatcher's, drawn at once: the tests before this one ended tasks.
      await page.locator("figure.chart canvas").waitFor();
      await expectText(page.locator("figure.chart figcaption"), /Tasks ended per second, the last \d+ minutes/);
      await shot("09-fleet");
      await api(ADMIN_KEY, "POST", `/v1/tasks/${slow.body.task_id}/cancel`);
    });

    await t.test("dead letters: a real one listed, chosen, replayed, and back as a replay of itself", async () => {
      // console_test.sh sent a submission the dispatcher cannot read, keyed DLQ_KEY; the
      // dispatcher dead-letters it on its own time.
      assert.ok(DLQ_KEY, "AGENTFLEET_CONSOLE_DLQ_KEY names the dead letter made for the test");
      const listed = await until("the dead letter", async () => {
        const r = await api(ADMIN_KEY, "GET", `/v1/dead-letters?key=${encodeURIComponent(DLQ_KEY)}`);
        return r.status === 200 && r.body.count >= 1 ? r.body : null;
      }, 60_000);
      const first = `${listed.dead_letters[0].partition}:${listed.dead_letters[0].offset}`;
      await nav("Dead letters").click();
      await page.getByLabel("Key").fill(DLQ_KEY);
      await page.getByRole("button", { name: "Refresh" }).click();
      await expectText(page.getByRole("status").filter({ hasText: "dead letters" }), /^1 dead letters in /);
      const row = page.locator(`tr[data-dead-letter="${first}"]`);
      await expectText(row, /invalid JSON/);
      await shot("10-dead-letters");
      await page.getByLabel(`Replay ${first}`).check();
      // Disabled while a read runs (the one of the first visit, or of Refresh): the click
      // waits for it.
      await page.getByRole("button", { name: /Replay 1 chosen/ }).click({ timeout: 30_000 });
      const done = page.getByText("Replayed 1 of 1.").or(page.getByRole("alert"));
      await done.first().waitFor({ timeout: 40_000 });
      assert.equal(await page.getByRole("alert").count(), 0, `the replay failed: ${await page.getByRole("alert").allInnerTexts()}`);
      assert.equal(await page.getByLabel(`Replay ${first}`).isChecked(), false, "the choice is cleared after a replay");
      // The replay went back to the submit topic and failed again: a new letter naming it.
      // Refresh is disabled while a read runs, and a click waits for it to be enabled.
      await until("the replay, dead-lettered again", async () => {
        await page.getByRole("button", { name: "Refresh" }).click({ timeout: 30_000 });
        return (await page.getByText(`(replay of ${first})`).count()) === 1;
      }, 90_000);
    });

    await t.test("an answer of 401 sends the user back to sign in", async () => {
      await page.evaluate(() => {
        const s = JSON.parse(sessionStorage.getItem("agentfleet.console.session"));
        s.apiKey = "not-a-key";
        sessionStorage.setItem("agentfleet.console.session", JSON.stringify(s));
      });
      await page.goto(`${BASE}#/usage`);
      await page.reload();
      await page.getByText("The API refused the key (401): sign in again.").waitFor();
    });

    await t.test("the API reference, without a key: every operation of the document, its schemas linked", async () => {
      const document = await api(ADMIN_KEY, "GET", "/v1/openapi.json");
      assert.equal(document.status, 200);
      const operations = Object.values(document.body.paths).flatMap((item) => ["get", "post", "put", "delete", "patch"].filter((m) => item[m]));
      await page.getByRole("link", { name: "The API reference" }).click();
      await expectText(page.locator("#api-title"), /agentfleet/);
      await until("every operation", async () => (await page.locator("article.operation").count()) === operations.length);
      const search = page.locator("article[data-operation='listTasks']");
      await expectText(search, /GET\s+\/v1\/tasks/);
      await expectText(search, /result_type/);
      await search.getByRole("link", { name: "TaskList" }).click();
      await until("the schema's place", async () => page.url().endsWith("#/api/schema-TaskList"));
      await expectText(page.locator("#schema-TaskList"), /next_before/);
      await shot("11-api-reference");
    });

    assert.deepEqual(problems, [], "no CSP violation, page error or console error");
  } finally {
    // The fleet is shared: put the user's overrides back as they were.
    await api(ADMIN_KEY, "PUT", `/v1/users/${USER}/limits`, limitsBefore.body.overrides).catch(() => {});
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
});
