"""The client against a running fleet: AGENTFLEET_URL and AGENTFLEET_API_KEY (an admin key)
name it; the development key af-dev-u1-key must act for u1 only. Users are this run's own
(py-*-<run>) and limits set here are cleared, so a shared fleet is left as it was."""

import os
import time
import unittest
import uuid

from agentfleet import (
    TERMINAL_STATUSES,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
)

URL = os.environ.get("AGENTFLEET_URL")
KEY = os.environ.get("AGENTFLEET_API_KEY")
RUN = uuid.uuid4().hex[:8]
TODO = "今天下午去买东西"  # llm-sim: create_item, then action_completed


def setUpModule():
    if not URL or not KEY:
        raise RuntimeError("AGENTFLEET_URL and AGENTFLEET_API_KEY must name a running fleet")


def admin() -> Client:
    return Client(URL, KEY, timeout=30)


def until(what, condition, timeout=30.0):
    """condition() once it is true, polled every 0.1 s; fails naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


class Tasks(unittest.TestCase):
    def test_submit_stream_its_events_and_wait_for_its_answer(self):
        c, user = admin(), f"py-t-{RUN}"
        task = c.submit(user, TODO, idempotency_key=f"py-{RUN}-1")
        self.assertEqual(task["status"], "queued")
        names = [e.event for e in c.events(task["task_id"], idle_timeout=30)]
        self.assertEqual(names[-1], "done")
        self.assertIn("action", names)
        ended = c.wait(task["task_id"], timeout=60)
        self.assertEqual(ended["status"], "succeeded")
        self.assertEqual(ended["result"]["type"], "action_completed")
        self.assertGreater(ended["usage"]["input_tokens"], 0)
        again = c.submit(user, TODO, idempotency_key=f"py-{RUN}-1")
        self.assertEqual(again["task_id"], task["task_id"])
        with self.assertRaises(Conflict) as raised:
            c.submit(user, "另一件事", idempotency_key=f"py-{RUN}-1")
        self.assertEqual(raised.exception.code, "idempotency_conflict")

    def test_list_pages_through_every_task_newest_first(self):
        c, user = admin(), f"py-l-{RUN}"
        ids = [c.submit(user, TODO)["task_id"] for _ in range(3)]
        listed = [t["task_id"] for t in c.iter_tasks(user, page_size=2)]
        self.assertEqual(listed, list(reversed(ids)))
        self.assertEqual(len(c.list_tasks(user, limit=1)), 1)

    def test_search_finds_tasks_by_text_across_users(self):
        c, word = admin(), f"pysearch{RUN}"
        mine = [c.submit(f"py-s{i}-{RUN}", f"{TODO} {word.upper()}")["task_id"] for i in range(2)]
        c.submit(f"py-s0-{RUN}", TODO)
        found = c.search_tasks(q=word, count=True)
        self.assertEqual([t["task_id"] for t in found["tasks"]], list(reversed(mine)))
        self.assertEqual((found["total"], found["total_capped"]), (2, False))
        self.assertIsNone(found["next_before"])
        page = c.search_tasks(q=word, limit=1)
        self.assertEqual(page["next_before"], mine[1])
        rest = c.search_tasks(q=word, limit=1, before=page["next_before"])
        self.assertEqual([t["task_id"] for t in rest["tasks"]], [mine[0]])
        one = c.search_tasks(q=word, user_id=f"py-s1-{RUN}")
        self.assertEqual([t["task_id"] for t in one["tasks"]], [mine[1]])
        self.assertRegex(one["tasks"][0]["trace_id"], "^[0-9a-f]{32}$")

    def test_errors_carry_the_api_code_and_path(self):
        c = admin()
        with self.assertRaises(BadRequest) as raised:
            c.submit(f"py-e-{RUN}", "")
        self.assertEqual(raised.exception.path, "/text")
        with self.assertRaises(Forbidden) as raised:
            Client(URL, "af-dev-u1-key").submit(f"py-e-{RUN}", TODO)
        self.assertEqual(raised.exception.path, "/user_id")
        with self.assertRaises(NotFound):
            c.task(str(uuid.uuid4()))
        with self.assertRaises(Unauthorized):
            Client(URL, "not-a-key").task(str(uuid.uuid4()))

    def test_a_task_waiting_on_a_limit_says_so_can_be_cancelled_and_retried(self):
        c, user = admin(), f"py-w-{RUN}"
        c.set_limits(user, {"requests_per_minute": 1})
        self.addCleanup(c.set_limits, user, {})
        first = c.submit(user, TODO)
        second = c.submit(user, TODO)
        waiting = until(
            "the second task waits on requests_per_minute",
            lambda: (t := c.task(second["task_id"]))["waiting_reason"] == "requests_per_minute"
            and t,
        )
        self.assertEqual(waiting["status"], "queued")
        with self.assertRaises(Conflict) as raised:
            c.retry(second["task_id"])
        self.assertEqual(raised.exception.code, "task_not_ended")
        self.assertEqual(c.cancel(second["task_id"])["status"], "cancelled")
        self.assertEqual(c.wait(first["task_id"], timeout=60)["status"], "succeeded")
        c.set_limits(user, {})
        retry = c.retry(second["task_id"], idempotency_key=f"py-{RUN}-r")
        self.assertEqual(retry["retry_of"], second["task_id"])
        self.assertEqual(c.retry(second["task_id"], idempotency_key=f"py-{RUN}-r")["task_id"],
                         retry["task_id"])
        self.assertEqual(c.wait(retry["task_id"], timeout=60)["status"], "succeeded")
        with self.assertRaises(Conflict) as raised:
            c.cancel(retry["task_id"])
        self.assertEqual(raised.exception.code, "already_ended")

    def test_the_results_stream_brings_each_task_as_it_ends(self):
        c, user = admin(), f"py-r-{RUN}"
        stream = c.results(user, idle_timeout=30)
        seen = None
        try:
            task = c.submit(user, TODO)
            for event in stream:
                if event.event == "result" and event.data["task_id"] == task["task_id"]:
                    seen = event.data
                    break
                if event.event == "gap":  # the replica may have missed it: read the task
                    seen = c.wait(task["task_id"], timeout=60)
                    break
        finally:
            stream.close()
        self.assertIsNotNone(seen, "the stream ended without the task's result")
        self.assertEqual(seen["status"], "succeeded")


class Batches(unittest.TestCase):
    def test_upload_with_progress_wait_count_result_types_and_read_results(self):
        c, user = admin(), f"py-b-{RUN}"
        lines = [{"text": TODO, "idempotency_key": f"b{i}"} for i in range(30)]
        lines[4] = {"text": "无法理解的一句话 xyz", "idempotency_key": "b4"}
        progress = []
        answer = c.submit_batch(lines, user_id=user, chunk_bytes=256, on_progress=progress.append)
        self.assertEqual((answer["lines"], answer["accepted"]), (30, 30))
        self.assertGreater(len(progress), 2)
        self.assertEqual(progress[-1].lines, 30)
        seen = []
        batch = c.wait_batch(answer["batch_id"], timeout=120, interval=0.5, on_progress=seen.append)
        self.assertEqual(batch["ended"], 30)
        self.assertEqual(sum(batch["result_types"].values()), 30)
        self.assertEqual(batch["result_types"]["action_completed"], 29)
        results = list(c.batch_results(answer["batch_id"]))
        self.assertEqual(len(results), 30)
        self.assertTrue(all(r["status"] in TERMINAL_STATUSES for r in results))
        # In the order of the lines, each naming its line and its text.
        self.assertEqual([r["line"] for r in results], list(range(1, 31)))
        self.assertEqual([r["text"] for r in results], [line["text"] for line in lines])
        failed = sum(1 for r in results
                     if r["status"] in ("failed", "timed_out") or (r["result"] or {}).get("type") == "error")
        retried = c.retry_batch(answer["batch_id"], slice_size=2)
        self.assertEqual((retried["retried"], retried["stopped"]), (failed, None))
        again = c.retry_batch(answer["batch_id"])
        self.assertEqual((again["retried"], again["already_retried"]), (0, failed))
        sent_again = c.submit_batch(lines, user_id=user)
        self.assertEqual((sent_again["accepted"], sent_again["duplicates"]), (0, 30))
        with self.assertRaises(Conflict) as raised:
            c.submit_batch(lines, user_id=user, batch_id=answer["batch_id"])
        self.assertEqual(raised.exception.code, "batch_exists")
        # Another user's batch of that id is theirs; the admin's key then names whose.
        other = f"py-b2-{RUN}"
        c.submit_batch(lines[:2], user_id=other, batch_id=answer["batch_id"])
        with self.assertRaises(Conflict) as raised:
            c.batch(answer["batch_id"])
        self.assertEqual(raised.exception.code, "ambiguous_id")
        self.assertEqual(c.batch(answer["batch_id"], user_id=other)["total"], 2)
        self.assertEqual(len(list(c.batch_results(answer["batch_id"], user_id=user))), 30)
        listed = c.list_batches(other, limit=5)
        self.assertEqual([(b["batch_id"], b["total"]) for b in listed], [(answer["batch_id"], 2)])
        # Found by the start of its id: both users' batches of it, the newest first.
        found = c.list_batches(prefix=answer["batch_id"][:8])
        self.assertEqual([(b["user_id"], b["total"]) for b in found], [(other, 2), (user, 30)])

    def test_a_bad_line_names_its_number_and_nothing_is_stored(self):
        c, user, batch_id = admin(), f"py-bb-{RUN}", str(uuid.uuid4())
        with self.assertRaises(BadRequest) as raised:
            c.submit_batch([{"text": TODO}, {"text": ""}], user_id=user, batch_id=batch_id)
        self.assertEqual(raised.exception.path, "/line/2/text")
        with self.assertRaises(NotFound):
            c.batch(batch_id)
        self.assertEqual(c.list_tasks(user), [])

    def test_a_cancelled_batch_starts_nothing_more(self):
        c, user = admin(), f"py-bc-{RUN}"
        c.set_limits(user, {"requests_per_minute": 1})
        self.addCleanup(c.set_limits, user, {})
        answer = c.submit_batch([{"text": TODO}] * 4, user_id=user)
        c.cancel_batch(answer["batch_id"])
        batch = c.wait_batch(answer["batch_id"], timeout=60, interval=0.5)
        self.assertTrue(batch["cancelled"])
        self.assertGreaterEqual(batch["counts"]["cancelled"], 3)


class Account(unittest.TestCase):
    def test_usage_stats_tools_and_a_plan(self):
        c, user = admin(), f"py-u-{RUN}"
        c.wait(c.submit(user, TODO)["task_id"], timeout=60)
        usage = c.usage(user)
        self.assertEqual(usage["user_id"], user)
        self.assertGreater(usage["totals"][0]["calls"], 0)
        self.assertIsNone(c.usage()["user_id"])
        stats = c.stats(user)
        self.assertEqual((stats["tasks"], stats["by_status"].get("succeeded")), (1, 1))
        tools = {t["name"]: t for t in c.tools(user)}
        self.assertIn("create_item", tools)
        self.assertIn("permitted", tools["create_item"])
        self.assertIn("max_concurrency", c.limits(user)["effective"])
        plan = c.plan(user, "计划：创建待办「整理周报」", wait_s=30)
        self.assertEqual(plan["status"], "succeeded")
        self.assertEqual(plan["plan"]["total_steps"], len(plan["plan"]["steps"]))


if __name__ == "__main__":
    unittest.main()
