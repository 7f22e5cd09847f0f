"""The client's own rules, without a fleet: event parsing, errors from answers, and what
it sends again, against a local HTTP server of the test's."""

import http.server
import json
import threading
import time
import unittest

from agentfleet import (
    BadRequest,
    Client,
    Conflict,
    ServerError,
    TooManyRequests,
    TransportError,
)
from agentfleet import sse
from agentfleet.errors import error_for


class EventParsing(unittest.TestCase):
    def test_events_their_ids_and_multi_line_data_comments_skipped(self):
        stream = [
            b": following\n",
            b"\n",
            b"id: 0\n",
            b"event: step\n",
            b'data: {"step":0}\n',
            b"\n",
            b"event: delta\r\n",
            b'data: {"text":\r\n',
            b'data: "a"}\r\n',
            b"\r\n",
        ]
        events = list(sse.parse(stream))
        self.assertEqual(
            events,
            [sse.Event("step", {"step": 0}, "0"), sse.Event("delta", {"text": "a"}, None)],
        )

    def test_an_event_cut_before_its_blank_line_is_not_given(self):
        self.assertEqual(list(sse.parse([b"event: done\n", b'data: {"x":1}\n'])), [])

    def test_an_event_over_the_bound_is_refused(self):
        with self.assertRaises(ValueError):
            list(sse.parse([b"data: " + b"1" * 100 + b"\n", b"\n"], max_event_bytes=50))


class ErrorsFromAnswers(unittest.TestCase):
    def test_the_api_error_object_gives_code_message_and_path(self):
        e = error_for(400, b'{"error":{"code":"invalid_request","message":"m","path":"/text"}}')
        self.assertIsInstance(e, BadRequest)
        self.assertEqual((e.status, e.code, e.message, e.path), (400, "invalid_request", "m", "/text"))

    def test_each_status_has_its_class(self):
        self.assertIsInstance(error_for(409, b'{"error":{"code":"c","message":""}}'), Conflict)
        self.assertIsInstance(error_for(429, b"{}", 2.0), TooManyRequests)
        self.assertIsInstance(error_for(502, b"<html>bad gateway</html>"), ServerError)

    def test_a_body_that_is_not_the_error_object_is_coded_by_its_status(self):
        e = error_for(502, b"<html>bad gateway</html>")
        self.assertEqual((e.code, e.path), ("http_502", None))
        self.assertIn("bad gateway", e.message)


class _Server:
    """An HTTP server on a free loopback port answering from a list, recording requests."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self):
                body = b""
                if self.headers.get("Transfer-Encoding") == "chunked":
                    while True:
                        head = self.rfile.readline().strip()
                        if not head:  # the client stopped mid-body
                            return
                        size = int(head, 16)
                        chunk = self.rfile.read(size + 2)[:size]
                        if size == 0:
                            break
                        body += chunk
                elif self.headers.get("Content-Length"):
                    body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, payload = outer.answers.pop(0)
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _answer

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _unavailable(retry_after="0"):
    return (503, {"Retry-After": retry_after}, {"error": {"code": "unavailable", "message": "m"}})


class SendingAgain(unittest.TestCase):
    def test_a_submission_is_sent_again_after_a_503_with_the_same_idempotency_key(self):
        server = _Server([_unavailable(), (201, {}, {"task_id": "t", "status": "queued"})])
        self.addCleanup(server.close)
        task = Client(server.url, "k", backoff=0.01).submit("u", "text")
        self.assertEqual(task["task_id"], "t")
        self.assertEqual(len(server.requests), 2)
        keys = [json.loads(r[3])["idempotency_key"] for r in server.requests]
        self.assertEqual(keys[0], keys[1])
        self.assertEqual(server.requests[0][2]["Authorization"], "Bearer k")

    def test_tries_are_bounded_and_the_last_error_is_raised(self):
        server = _Server([_unavailable()] * 3)
        self.addCleanup(server.close)
        with self.assertRaises(ServerError) as raised:
            Client(server.url, "k", max_retries=2, backoff=0.01).task("t")
        self.assertEqual(raised.exception.code, "unavailable")
        self.assertEqual(len(server.requests), 3)

    def test_a_400_is_not_sent_again(self):
        server = _Server([(400, {}, {"error": {"code": "invalid_request", "message": "m", "path": "/text"}})])
        self.addCleanup(server.close)
        with self.assertRaises(BadRequest):
            Client(server.url, "k", backoff=0.01).submit("u", "")
        self.assertEqual(len(server.requests), 1)

    def test_a_retry_after_past_the_deadline_gives_the_answer_at_once(self):
        server = _Server([_unavailable("60")])
        self.addCleanup(server.close)
        started = time.monotonic()
        with self.assertRaises(ServerError) as raised:
            Client(server.url, "k", timeout=2, max_backoff=60).task("t")
        self.assertEqual((raised.exception.code, raised.exception.retry_after), ("unavailable", 60))
        self.assertLess(time.monotonic() - started, 2)
        self.assertEqual(len(server.requests), 1)

    def test_a_retry_after_longer_than_max_backoff_is_not_cut_short(self):
        server = _Server([(429, {"Retry-After": "10"}, {"error": {"code": "queue_full", "message": "m"}})])
        self.addCleanup(server.close)
        with self.assertRaises(TooManyRequests) as raised:
            Client(server.url, "k", timeout=30, max_backoff=5).submit("u", "text")
        self.assertEqual(raised.exception.retry_after, 10)
        self.assertEqual(len(server.requests), 1)

    def test_an_answer_that_trickles_past_the_deadline_is_cut(self):
        import socket

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)

        def trickle():
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                for _ in range(30):  # a byte every 0.2 s: each read is quick, the whole is not
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return
                    time.sleep(0.2)

        threading.Thread(target=trickle, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with self.assertRaises(TransportError):
            Client(url, "k", timeout=1, max_retries=0).task("t")
        self.assertLess(time.monotonic() - started, 2)

    def test_a_batch_is_streamed_in_pieces_with_progress_and_not_sent_again(self):
        server = _Server([_unavailable()])
        self.addCleanup(server.close)
        seen = []
        lines = [{"text": f"line {i}"} for i in range(10)]
        with self.assertRaises(ServerError):
            Client(server.url, "k", backoff=0.01).submit_batch(
                lines, user_id="u 1", chunk_bytes=40, on_progress=seen.append
            )
        self.assertEqual(len(server.requests), 1)
        method, path, headers, body = server.requests[0]
        self.assertEqual((method, path), ("POST", "/v1/batches?user_id=u+1"))
        self.assertEqual(headers["Transfer-Encoding"], "chunked")
        self.assertEqual([json.loads(x) for x in body.splitlines()], lines)
        self.assertGreater(len(seen), 2)
        self.assertEqual([p.lines for p in seen], sorted(p.lines for p in seen))
        self.assertEqual((seen[-1].lines, seen[-1].bytes, seen[-1].total_lines), (10, len(body), 10))

    def test_a_line_with_a_line_break_is_refused_before_sending_it(self):
        server = _Server([])
        self.addCleanup(server.close)
        with self.assertRaises(ValueError):
            Client(server.url, "k").submit_batch(['{"text":"a"}', '{"text":\n"x"}'])
        self.assertEqual(server.requests, [])

    def test_an_address_that_is_not_http_is_refused(self):
        with self.assertRaises(ValueError):
            Client("ftp://host", "k")


if __name__ == "__main__":
    unittest.main()
