#!/usr/bin/env python3
"""A local OpenTelemetry collector for the fleet's tests and for development: it takes
OTLP/HTTP JSON export requests (POST /v1/traces) and appends every span it receives to a
JSON Lines file, one line per span: {"resource": {attributes}, "scope": name, "span": span}.

    otlp_receiver.py --port-file FILE --out SPANS.jsonl [--port N] [--fail-first N]

It listens on 127.0.0.1 (an ephemeral port unless --port), writes the port it took to
--port-file once it listens, and answers 200 with an empty ExportTraceServiceResponse. A body
that is not OTLP JSON is 400; one over 16 MiB is 413. --fail-first N answers the first N
requests 503 with Retry-After: 0 (a collector starting up), to watch the exporter send again.

GET /traces/<trace id> shows one trace, as a tracing backend's trace page would: its spans
received so far, oldest first, each with its name, times, duration, status and attributes
(JSON; 404 when none arrived). The quickstart links each task's trace id here
(telemetry.trace_link). Standard library only.
"""
import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 * 1024 * 1024


def attributes(items):
    out = {}
    for a in items or []:
        value = a.get("value", {})
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if kind in value:
                v = value[kind]
                out[a["key"]] = int(v) if kind == "intValue" else v
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args()
    lock = threading.Lock()
    state = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, body=b"{}", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 (the handler's name is http.server's)
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/traces":
                self.rfile.read(min(length, MAX_BODY))
                return self.answer(404, b'{"message":"only /v1/traces"}')
            if length > MAX_BODY:
                self.close_connection = True
                return self.answer(413, b'{"message":"over 16 MiB"}')
            body = self.rfile.read(length)
            with lock:
                state["requests"] += 1
                if state["requests"] <= args.fail_first:
                    return self.answer(503, b'{"message":"starting"}', [("Retry-After", "0")])
            if not self.headers.get("Content-Type", "").startswith("application/json"):
                return self.answer(415, b'{"message":"JSON only"}')
            try:
                request = json.loads(body)
                lines = []
                for rs in request["resourceSpans"]:
                    resource = attributes(rs.get("resource", {}).get("attributes"))
                    for ss in rs.get("scopeSpans", []):
                        scope = ss.get("scope", {}).get("name", "")
                        for span in ss.get("spans", []):
                            if len(span["traceId"]) != 32 or len(span["spanId"]) != 16:
                                raise ValueError("ids must be 32 and 16 hex digits")
                            lines.append(json.dumps({"resource": resource, "scope": scope,
                                                     "span": span}, ensure_ascii=False))
            except (ValueError, KeyError, TypeError) as e:
                return self.answer(400, json.dumps({"message": str(e)}).encode())
            with lock, open(args.out, "a", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in lines))
            return self.answer(200)

        def do_GET(self):  # noqa: N802
            prefix = "/traces/"
            trace_id = self.path[len(prefix):] if self.path.startswith(prefix) else ""
            if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
                return self.answer(404, b'{"message":"GET /traces/<32 hex digits>"}')
            spans = []
            with lock:
                try:
                    with open(args.out, encoding="utf-8") as f:
                        lines = f.readlines()
                except FileNotFoundError:
                    lines = []
            for line in lines:
                record = json.loads(line)
                span = record["span"]
                if span.get("traceId") != trace_id:
                    continue
                start, end = int(span.get("startTimeUnixNano", 0)), int(span.get("endTimeUnixNano", 0))
                spans.append({"name": span.get("name"), "span_id": span.get("spanId"),
                              "parent_span_id": span.get("parentSpanId") or None,
                              "service": record["resource"].get("service.name"),
                              "start_unix_nano": start, "duration_ms": (end - start) / 1e6,
                              "status": span.get("status", {}),
                              "attributes": attributes(span.get("attributes"))})
            if not spans:
                return self.answer(404, json.dumps({"message": f"no span of trace {trace_id} arrived"}).encode())
            spans.sort(key=lambda s: s["start_unix_nano"])
            body = json.dumps({"trace_id": trace_id, "spans": spans}, ensure_ascii=False, indent=1)
            return self.answer(200, body.encode())

        def log_message(self, fmt, *a):
            sys.stderr.write("otlp-receiver: " + (fmt % a) + "\n")

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
