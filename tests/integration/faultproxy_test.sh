#!/usr/bin/env bash
# The fault proxy (tools/faultproxy) does to real sockets what its commands say, seen by
# stock clients (curl, and a small python client that tells a timeout from a reset from an
# end of stream), between them and a python HTTP/1.1 server of its own (no fleet):
#   pass forwards; blackhole makes a request hang (no reset, no EOF) on an existing and on
#   a new connection, and `pass` lets it through, the held request included; latency adds
#   its delay in each direction; bandwidth caps a download; reset fails an open connection
#   with a reset; refuse fails new connections while a keep-alive one still works; a timed
#   blackhole ends by itself; status counts; bad commands get an error line; SIGTERM exits
#   0 and removes the files; fleet_start_faultproxy / fleet_fault (tools/lib/fleet.sh) work
#   and fleet_stop stops the proxy. Every wait is bounded.
#   faultproxy_test.sh FAULTPROXY_BINARY
set -euo pipefail
proxy_bin=$(readlink -f "${1:?usage: faultproxy_test.sh FAULTPROXY_BINARY}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../tools/lib/common.sh
source "$here/../../tools/lib/common.sh"
# shellcheck source=../../tools/lib/fleet.sh
source "$here/../../tools/lib/fleet.sh"

dir=$(mktemp -d)
target_pid="" proxy_pid="" session_pid=""
cleanup() {
  set +e # a process killed here exits 143: not a reason to leave the rest behind
  for pid in $session_pid $proxy_pid $target_pid; do
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [[ -f $dir/run/pids ]] && fleet_stop "$dir/run" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- proxy log:" >&2
  tail -30 "$dir/proxy.log" >&2 || true
  exit 1
}

# The target: HTTP/1.1 with keep-alive; GET /bytes/N answers N bytes. It binds port 0 and
# writes its port to a file (renamed into place), so there is no race for a port.
cat >"$dir/target.py" <<'EOF'
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path[len("/bytes/"):]) if self.path.startswith("/bytes/") else 5
        body = b"hello" if n == 5 else b"x" * n
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{server.server_address[1]}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
EOF

# The client. `once PORT PATH TIMEOUT_S`: one request on a new connection. `session PORT`:
# one keep-alive connection driven by lines on stdin: `get PATH TIMEOUT_S` sends a request
# and waits for its response, `read TIMEOUT_S` keeps waiting for a response still due,
# `recv TIMEOUT_S` waits for anything at all. Each prints one line:
#   ok STATUS BODY_BYTES ELAPSED_MS | timeout ELAPSED_MS | reset ELAPSED_MS | eof ELAPSED_MS
# A session opens a new connection for its next `get` once its connection has ended.
cat >"$dir/client.py" <<'EOF'
import socket, sys, time

class Conn:
    def __init__(self, port):
        self.port, self.sock, self.buf = port, None, b""

    def result(self, kind, t0, extra=""):
        return f"{kind}{extra} {int((time.monotonic() - t0) * 1000)}"

    def response(self, t0, timeout):
        # Waits for one whole response in self.buf; returns its result line.
        deadline = t0 + timeout
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                lines = head.split(b"\r\n")
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) >= length:
                    self.buf = rest[length:]
                    return self.result("ok", t0, f" {int(lines[0].split()[1])} {length}")
            left = deadline - time.monotonic()
            if left <= 0:
                return self.result("timeout", t0)
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return self.result("timeout", t0)
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                return self.result("reset", t0)
            if not data:
                self.close()
                return self.result("eof", t0)
            self.buf += data

    def get(self, path, timeout):
        t0 = time.monotonic()
        try:
            if self.sock is None:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
            self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: proxy\r\n\r\n".encode())
        except socket.timeout:
            return self.result("timeout", t0)
        except (ConnectionResetError, BrokenPipeError):
            self.close()
            return self.result("reset", t0)
        except ConnectionRefusedError:
            self.close()
            return self.result("refused", t0)
        return self.response(t0, timeout)

    def recv(self, timeout):
        t0 = time.monotonic()
        if self.sock is None:
            return self.result("eof", t0)
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return self.result("timeout", t0)
        except ConnectionResetError:
            self.close()
            return self.result("reset", t0)
        if not data:
            self.close()
            return self.result("eof", t0)
        self.buf += data
        return self.result("data", t0, f" {len(data)}")

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buf = None, b""

if sys.argv[1] == "once":
    print(Conn(int(sys.argv[2])).get(sys.argv[3], float(sys.argv[4])), flush=True)
else:
    conn = Conn(int(sys.argv[2]))
    for line in sys.stdin:
        words = line.split()
        if words[0] == "get":
            print(conn.get(words[1], float(words[2])), flush=True)
        elif words[0] == "read":
            print(conn.response(time.monotonic(), float(words[1])), flush=True)
        elif words[0] == "recv":
            print(conn.recv(float(words[1])), flush=True)
EOF

python3 "$dir/target.py" "$dir/target.port" 2>"$dir/target.log" &
target_pid=$!
af_wait_file "$dir/target.port" 10 || fail "the target server did not start"
target_port=$(cat "$dir/target.port")

"$proxy_bin" --target "127.0.0.1:$target_port" --port-file "$dir/proxy.port" \
  --control-file "$dir/proxy.control" >"$dir/proxy.out" 2>"$dir/proxy.log" &
proxy_pid=$!
af_wait_file "$dir/proxy.port" 10 || fail "no port file after 10 s"
[[ -s $dir/proxy.control ]] || fail "the port file came before the control file"
port=$(cat "$dir/proxy.port")
control=$(cat "$dir/proxy.control")
grep -qx "listen.port=$port" "$dir/proxy.out" || fail "listen.port=$port not printed"
grep -qx "control.port=$control" "$dir/proxy.out" || fail "control.port=$control not printed"

exec 3<>"/dev/tcp/127.0.0.1/$control"
say() {
  echo "$1" >&3
  IFS= read -r -t 10 reply <&3 || fail "no reply to '$1'"
  echo "> $1  < $reply"
}
# Polls `status` (at most 10 s) until its reply matches the regex $1.
await_status() {
  local deadline=$(($(af_now_ms) + 10000))
  while true; do
    say status
    [[ $reply =~ $1 ]] && return 0
    (($(af_now_ms) < deadline)) || fail "status never matched '$1': $reply"
    sleep 0.1
  done
}
once() { # once PATH TIMEOUT_S: one request on a new connection
  local line
  line=$(timeout 30 python3 "$dir/client.py" once "$port" "$1" "$2") || fail "the client failed"
  echo "  once $*: $line" >&2
  echo "$line"
}
# The keep-alive session, a coprocess fed line by line.
coproc SESSION { exec python3 "$dir/client.py" session "$port"; }
session_pid=$SESSION_PID
session() { # session COMMAND...: prints the session's answer
  echo "$*" >&"${SESSION[1]}"
  local line
  IFS= read -r -t 30 line <&"${SESSION[0]}" || fail "no answer from the session to '$*'"
  echo "  session $*: $line" >&2
  echo "$line"
}
ms_of() { echo "${1##* }"; } # the elapsed milliseconds at the end of a result line
connections=0 # connections the clients opened to the proxy

say status
[[ $reply == "ok mode=pass connections=0 accepted=0 bytes_up=0 bytes_down=0" ]] ||
  fail "initial status: $reply"

# pass: forwards, and status counts the connection, its bytes, and its end.
body=$(curl -sS --max-time 10 "http://127.0.0.1:$port/") || fail "curl through the proxy failed"
connections=$((connections + 1))
[[ $body == hello ]] || fail "pass: got '$body'"
await_status '^ok mode=pass connections=0 accepted=1 bytes_up=[1-9][0-9]* bytes_down=[1-9][0-9]*$'
r=$(session get /bytes/5 5)
connections=$((connections + 1))
[[ $r == "ok 200 5 "* ]] || fail "pass, keep-alive: $r"

# blackhole: nothing moves on the open connection nor on a new one, and nothing is closed.
say blackhole
[[ $reply == "ok mode=blackhole until pass" ]] || fail "blackhole: $reply"
r=$(session get /bytes/5 2)
[[ $r == timeout* ]] || fail "blackhole, keep-alive connection: $r (expected a timeout)"
(($(ms_of "$r") >= 1900)) || fail "blackhole: gave up early: $r"
r=$(once /bytes/5 2)
connections=$((connections + 1))
[[ $r == timeout* ]] || fail "blackhole, new connection: $r (expected a timeout)"
rc=0
curl -sS --max-time 2 -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null || rc=$?
connections=$((connections + 1))
((rc == 28)) || fail "blackhole: curl exited $rc, not 28 (timed out)"
say status
[[ $reply =~ ^ok\ mode=blackhole\ connections=[1-9] ]] || fail "blackhole status: $reply"
# pass: a new request goes through, and the one held on the keep-alive connection arrives.
say pass
[[ $reply == "ok mode=pass" ]] || fail "pass: $reply"
r=$(once /bytes/5 5)
connections=$((connections + 1))
[[ $r == "ok 200 5 "* ]] || fail "after the blackhole, a new request: $r"
r=$(session read 5)
[[ $r == "ok 200 5 "* ]] || fail "after the blackhole, the held request's response: $r"
grep -q "mode blackhole -> pass" "$dir/proxy.log" || fail "the mode change was not logged"

# latency 300: each direction waits 300 ms, so a round trip takes at least 600 ms.
say "latency 300"
[[ $reply == "ok mode=latency:300ms until pass" ]] || fail "latency: $reply"
r=$(session get /bytes/5 10)
[[ $r == "ok 200 5 "* ]] || fail "latency: $r"
(($(ms_of "$r") >= 600)) || fail "latency 300: a round trip took $(ms_of "$r") ms"
say pass
r=$(session get /bytes/5 10)
[[ $r == "ok 200 5 "* ]] || fail "after latency: $r"
(($(ms_of "$r") < 600)) || fail "latency still there after pass: $r"

# bandwidth 100000 B/s: 200 KB take about 2 s (at least 0.7 x).
say "bandwidth 100000"
[[ $reply == "ok mode=bandwidth:100000B/s until pass" ]] || fail "bandwidth: $reply"
out=$(curl -sS --max-time 20 -o /dev/null -w '%{size_download} %{time_total}' \
  "http://127.0.0.1:$port/bytes/200000") || fail "bandwidth: the download failed"
connections=$((connections + 1))
read -r size seconds <<<"$out"
echo "  200000 bytes at 100000 B/s: $size bytes in $seconds s"
((size == 200000)) || fail "bandwidth: $size bytes arrived"
python3 -c "import sys; sys.exit(0 if float('$seconds') >= 1.4 else 1)" ||
  fail "bandwidth 100000: 200 KB took only $seconds s"
say pass

# reset: an open connection fails with a reset; the mode stays.
say "latency 1"
r=$(session get /bytes/5 5)
[[ $r == "ok 200 5 "* ]] || fail "before reset: $r"
say reset
[[ $reply =~ ^ok\ reset\ [1-9][0-9]*\ connections\;\ mode=latency:1ms$ ]] || fail "reset: $reply"
r=$(session recv 5)
[[ $r == reset* ]] || fail "an open connection after reset: $r (expected a reset)"
await_status '^ok mode=latency:1ms connections=0 '
say pass

# refuse: new connections fail with a reset; the open keep-alive one still works.
r=$(session get /bytes/5 5)
connections=$((connections + 1))
[[ $r == "ok 200 5 "* ]] || fail "before refuse: $r"
say refuse
[[ $reply == "ok mode=refuse until pass" ]] || fail "refuse: $reply"
r=$(once /bytes/5 5)
connections=$((connections + 1))
[[ $r == reset* || $r == eof* ]] || fail "refuse, a new connection: $r"
[[ $r == reset* ]] || fail "refuse closed a new connection without a reset: $r"
r=$(session get /bytes/5 5)
[[ $r == "ok 200 5 "* ]] || fail "refuse, the open keep-alive connection: $r"
say pass

# A timed blackhole ends by itself: requests sent into it, on the open connection and on a
# new one (held, then connected), complete when it ends.
say "blackhole 2"
[[ $reply == "ok mode=blackhole for 2 s" ]] || fail "blackhole 2: $reply"
once /bytes/5 10 >"$dir/held.result" &
held_pid=$!
r=$(session get /bytes/5 10)
[[ $r == "ok 200 5 "* ]] || fail "a request into a 2 s blackhole: $r"
(($(ms_of "$r") >= 1500)) || fail "a request into a 2 s blackhole took only $(ms_of "$r") ms"
wait "$held_pid" || fail "the client on a new connection failed"
connections=$((connections + 1))
r=$(cat "$dir/held.result")
[[ $r == "ok 200 5 "* ]] || fail "a new connection into a 2 s blackhole: $r"
await_status '^ok mode=pass '
grep -q "time is up for blackhole" "$dir/proxy.log" || fail "the blackhole's end was not logged"

# status counts every connection, the open one included.
await_status "^ok mode=pass connections=1 accepted=$connections bytes_up=[0-9]+ bytes_down=[0-9]+$"
[[ $reply =~ bytes_down=([0-9]+) ]] || fail "no bytes_down in '$reply'"
((BASH_REMATCH[1] > 200000)) || fail "status did not count the 200 KB download: $reply"

# Bad commands get an error line, the connection stays usable; a second control connection
# works meanwhile; an overlong line closes the connection.
say "latency 60001"
[[ $reply == "error MS must be 0..60000" ]] || fail "latency 60001: $reply"
say "blackhole 0"
[[ $reply == "error SECONDS must be 1..3600" ]] || fail "blackhole 0: $reply"
say "bandwidth 0"
[[ $reply == "error BYTES_PER_S must be 1..1000000000" ]] || fail "bandwidth 0: $reply"
say "drop-tables"
[[ $reply == "error cannot read 'drop-tables'; commands: "* ]] || fail "unknown command: $reply"
r=$(fleet_fault "$control" help) || fail "help on a second control connection: $r"
[[ $r == "ok commands: pass | blackhole [SECONDS] | "* ]] || fail "help: $r"
if r=$(fleet_fault "$control" latency 99999); then
  fail "fleet_fault succeeded on an error reply: $r"
fi
[[ $r == "error MS must be 0..60000" ]] || fail "fleet_fault printed '$r'"
say status
[[ $reply == "ok mode=pass "* ]] || fail "the connection is not usable after errors: $reply"
printf '%0300d\n' 0 >&3
IFS= read -r -t 10 reply <&3 || fail "no reply to an overlong line"
[[ $reply == "error line longer than 256 bytes; closing" ]] || fail "overlong line: $reply"
if IFS= read -r -t 10 reply <&3; then
  fail "the control connection stayed open after an overlong line: $reply"
fi
exec 3>&-

# SIGTERM: exit 0 within 10 s, files removed.
kill -TERM "$proxy_pid"
for _ in $(seq 1 100); do
  kill -0 "$proxy_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$proxy_pid" 2>/dev/null && fail "the proxy did not exit within 10 s of SIGTERM"
wait "$proxy_pid" && rc=0 || rc=$?
proxy_pid=""
((rc == 0)) || fail "the proxy exited $rc after SIGTERM"
[[ ! -e $dir/proxy.port && ! -e $dir/proxy.control ]] || fail "the port or control file was left behind"
# In a sanitizer build a report would not change what the clients saw.
if grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$dir/proxy.log" >&2; then
  fail "the sanitizers reported an error"
fi

# Bad flags exit 2; a target that is not loopback is a bad flag; a port in use exits 1.
rc=0
"$proxy_bin" --listen-port 0 >/dev/null 2>&1 || rc=$?
((rc == 2)) || fail "no --target: exit $rc, not 2"
rc=0
"$proxy_bin" --target 192.0.2.1:80 >/dev/null 2>&1 || rc=$?
((rc == 2)) || fail "a target off loopback: exit $rc, not 2"
rc=0
timeout 10 "$proxy_bin" --target "127.0.0.1:$target_port" --listen-port "$target_port" \
  >/dev/null 2>&1 || rc=$?
((rc == 1)) || fail "a listen port in use: exit $rc, not 1"

# fleet.sh: fleet_start_faultproxy spawns a proxy fleet_stop stops; fleet_fault drives it.
build_dir=$(cd "$(dirname "$proxy_bin")/../.." && pwd)
if [[ $build_dir/tools/faultproxy/agentfleet-faultproxy -ef $proxy_bin ]]; then
  mkdir -p "$dir/run/logs"
  : >"$dir/run/pids"
  fleet_start_faultproxy "$dir/run" "$build_dir" target-proxy "127.0.0.1:$target_port" ||
    fail "fleet_start_faultproxy failed"
  fleet_pid=$FLEET_LAST_PID
  [[ $FLEET_LAST_PROXY_PORT == "$(cat "$dir/run/target-proxy.port")" ]] ||
    fail "FLEET_LAST_PROXY_PORT is not the proxy's port"
  body=$(curl -sS --max-time 10 "http://127.0.0.1:$FLEET_LAST_PROXY_PORT/") ||
    fail "curl through the fleet's proxy failed"
  [[ $body == hello ]] || fail "the fleet's proxy forwarded '$body'"
  r=$(fleet_fault "$FLEET_LAST_PROXY_CONTROL" status) || fail "fleet_fault status: $r"
  [[ $r =~ ^ok\ mode=pass\ connections=[01]\ accepted=1\  ]] || fail "fleet_fault status: $r"
  fleet_stop "$dir/run"
  kill -0 "$fleet_pid" 2>/dev/null && fail "fleet_stop left the proxy running"
  [[ ! -e $dir/run/target-proxy.port ]] || fail "the fleet's proxy left its port file"
else
  echo "note: $proxy_bin is not in a build tree's tools/faultproxy; fleet.sh part skipped"
fi
echo "ok: the fault proxy's faults work and are bounded"
