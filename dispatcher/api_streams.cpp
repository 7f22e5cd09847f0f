// The API's event streams (server-sent events): GET /v1/tasks/{id}/events, the task's
// history rebuilt from Postgres and then its live events from the task feed; GET
// /v1/results, a user's result events from the feed as their tasks end.
#include "dispatcher/api.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <vector>

#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/feed_watch.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
// An event stream closes after this long; the client reconnects and gets the history again.
constexpr auto kMaxStream = std::chrono::hours(1);
// A results stream reads the rows of what the feed brought at most this often (one read
// for every result that came in the meantime), and remembers this many results it sent
// (a result published twice, by its worker and by the outbox relay, is sent once).
constexpr auto kResultsCoalesce = std::chrono::milliseconds(20);
constexpr std::size_t kResultsRemembered = 10000;
constexpr std::size_t kResultsPerRead = 500;

// One server-sent event.
std::string sse(std::string_view event, std::string_view data, int id) {
  std::string out = "id: " + std::to_string(id) + "\nevent: " + std::string(event) + "\ndata: ";
  // Data lines may not contain a newline; JSON from the codecs has none, but be safe.
  for (char c : data)
    out += c == '\n' ? ' ' : c;
  out += "\n\n";
  return out;
}

std::string json_of(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  value.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The data of an event rebuilt from the history: what a live event of the step says,
// marked replayed.
std::string replayed_json(const std::string& task_id, int step, const std::string& tool,
                          const std::string& data) {
  std::string out = "{\"task_id\":\"" + task_id + "\",\"step\":" + std::to_string(step);
  if (!tool.empty()) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.String(tool.data(), static_cast<rapidjson::SizeType>(tool.size()));
    out += ",\"tool\":" + std::string(b.GetString(), b.GetSize());
  }
  return out + ",\"replayed\":true,\"data\":" + data + "}";
}

// Events are told apart by step and kind (error and done: step -1); a stream counts the
// ones it sent by this key, so the history can fill in what the feed did not deliver.
using EventKey = std::pair<int, std::string>;
EventKey key_of(std::string_view event, int step) {
  return {event == "error" || event == "done" ? -1 : step, std::string(event)};
}

struct ReplayEvent {
  std::string event;
  int step = -1;  // -1: error and done
  std::string data;
};

// The events a client missed, rebuilt from the task's history (task_history_json), the
// same a live client got: per step its start (step), the model's text (delta), a call per
// tool call the worker sent (action) and, once they ran, an outcome per call it checked
// (execution; a refused call has no action); when the task ended, error (unless it
// succeeded) and done. `finish` is the result, not a tool call.
struct Replay {
  std::vector<ReplayEvent> events;
  int steps = 0;                // steps in the history
  bool last_tools_done = true;  // the last step's tool outcomes are in the history
  bool terminal = false;
};

Replay replay_of(const rapidjson::Document& h, const std::string& task_id) {
  Replay replay;
  const auto& steps = h["steps"];
  for (const auto& s : steps.GetArray()) {
    const int step = s["step"].GetInt();
    replay.steps = step + 1;
    replay.events.push_back({"step", step, replayed_json(task_id, step, {}, "{}")});
    const std::string content = string_member(s, "content");
    if (!content.empty()) {
      rapidjson::StringBuffer b;
      rapidjson::Writer<rapidjson::StringBuffer> w(b);
      w.StartObject();
      w.Key("text");
      w.String(content.data(), static_cast<rapidjson::SizeType>(content.size()));
      w.EndObject();
      replay.events.push_back(
          {"delta", step,
           replayed_json(task_id, step, {}, std::string(b.GetString(), b.GetSize()))});
    }
    auto action = [&](const std::string& tool, const std::string& arguments) {
      rapidjson::Document parsed;
      const bool object = codec::parse_json(parsed, arguments) && parsed.IsObject();
      replay.events.push_back(
          {"action", step, replayed_json(task_id, step, tool, object ? arguments : "{}")});
    };
    replay.last_tools_done = s["trace"].IsArray();
    if (!replay.last_tools_done) {
      for (const auto& call : s["tool_calls"].GetArray()) {
        if (string_member(call, "name") != kFinishTool)
          action(string_member(call, "name"), string_member(call, "arguments"));
      }
      continue;
    }
    // The trace has an entry per call the worker checked (with its http_status), then the
    // loop's own refusals (a finish beside other calls, a tool not allowed), which it
    // never announced.
    const auto& trace = s["trace"];
    for (const auto& t : trace.GetArray()) {
      if (t.IsObject() && t.HasMember("http_status") && string_member(t, "status") != "refused")
        action(string_member(t, "tool"), string_member(t, "arguments"));
    }
    for (const auto& t : trace.GetArray()) {
      if (!t.IsObject() || !t.HasMember("http_status"))
        continue;
      const std::string status = string_member(t, "status");
      replay.events.push_back(
          {"execution", step,
           replayed_json(task_id, step, string_member(t, "tool"),
                         std::string("{\"ok\":") + (status == "ok" ? "true" : "false") +
                             ",\"status\":\"" + (status.empty() ? "unknown" : status) + "\"}")});
    }
  }
  const auto status = parse_task_status(string_member(h, "status"));
  replay.terminal = status && is_terminal(*status);
  if (replay.terminal) {
    if (*status != TaskStatus::kSucceeded) {
      rapidjson::StringBuffer b;
      rapidjson::Writer<rapidjson::StringBuffer> w(b);
      w.StartObject();
      const std::string code = string_member(h, "error_code");
      const std::string message = string_member(h, "error");
      w.Key("code");
      const std::string code_text = code.empty() ? std::string(to_string(*status)) : code;
      w.String(code_text.c_str());
      w.Key("message");
      w.String(message.c_str());
      // As a live error event says it (docs/errors.md); code and message stay for the
      // clients that read them.
      w.Key("text");
      w.String(message.c_str());
      w.Key("error_code");
      if (code.empty())
        w.Null();
      else
        w.String(code.c_str());
      w.EndObject();
      replay.events.push_back({"error", -1, std::string(b.GetString(), b.GetSize())});
    }
    replay.events.push_back({"done", -1, json_of(h)});
  }
  return replay;
}

// Sends the events of a fresh read of the row that the client has not had (counted in
// `sent`; those sent here are counted in `filled` too, so that the feed's copies of them
// are not sent again); false when the client is gone.
asio::awaitable<bool> send_missed(http::Exchange& exchange, const Replay& fresh, int& id,
                                  std::map<EventKey, int>& sent, std::map<EventKey, int>& filled) {
  std::map<EventKey, int> seen;
  for (const auto& e : fresh.events) {
    const EventKey key = key_of(e.event, e.step);
    if (seen[key]++ < sent[key])
      continue;
    ++sent[key];
    ++filled[key];
    if (!co_await exchange.send(sse(e.event, e.data, id++)))
      co_return false;
  }
  co_return true;
}

// An event stream, counted in the open waits while it lives.
class OpenStream {
 public:
  explicit OpenStream(metrics::DispatcherMetrics& metrics) : metrics_(metrics) {
    metrics_.wait_opened(metrics::WaitKind::kEventStream);
  }
  ~OpenStream() { metrics_.wait_closed(metrics::WaitKind::kEventStream); }
  OpenStream(const OpenStream&) = delete;
  OpenStream& operator=(const OpenStream&) = delete;

 private:
  metrics::DispatcherMetrics& metrics_;
};

// Begins a server-sent events answer; false when the client is gone.
asio::awaitable<bool> begin_events(http::Exchange& exchange) {
  http::Response start{http::Status::ok, exchange.head().version()};
  start.set(bhttp::field::content_type, "text/event-stream");
  start.set(bhttp::field::cache_control, "no-cache");
  co_return co_await exchange.begin(std::move(start));
}
}  // namespace

asio::awaitable<void> Api::task_events(http::Exchange& exchange, const Caller& caller,
                                       int& answered, std::string task_id) {
  const http::Request& head = exchange.head();
  if (!is_uuid(task_id)) {
    co_await respond(exchange, answered, not_found(head, "task", task_id));
    co_return;
  }
  auto place = waiters_.acquire(Waiter::kEventStream, caller.name);
  if (auto* refused = std::get_if<WaiterLimits::Refusal>(&place)) {
    co_await respond(exchange, answered, waiters_refused(head, *refused, "event streams"));
    co_return;
  }
  // Subscribe first, then read the history: nothing falls between the two.
  auto subscription = feed_.subscribe(task_id);
  auto history = co_await store_.task_history_json(task_id);
  if (!history.ok()) {
    co_await respond(exchange, answered, store_unavailable(head, history.error()));
    co_return;
  }
  rapidjson::Document doc;
  if (!history.value() || !codec::parse_json(doc, *history.value()) ||
      !caller.may_act_for(string_member(doc, "user_id"))) {
    co_await respond(exchange, answered, not_found(head, "task", task_id));
    co_return;
  }
  const OpenStream open(metrics_);
  if (!co_await begin_events(exchange))
    co_return;
  int id = 0;
  std::map<EventKey, int> sent;  // events the client has
  Replay replay = replay_of(doc, task_id);
  for (const auto& e : replay.events) {
    ++sent[key_of(e.event, e.step)];
    if (!co_await exchange.send(sse(e.event, e.data, id++)))
      co_return;
  }
  if (replay.terminal) {
    co_await exchange.end();
    co_return;
  }
  // Live events. Those the history already covered are skipped: every event of an earlier
  // step; of the last step, its start, text and tool calls, and its outcomes when they are
  // in the history too. The row is read again only when the feed brings the result, when it
  // may have missed something (a gap), or on the slow safety timer (feed_watch.hpp); what a
  // read finds that the client has not had is sent from it.
  const auto stream_until = clock_.now() + kMaxStream;
  const auto heartbeat = std::chrono::seconds(config_.dispatcher.stream_heartbeat_s);
  const int last = replay.steps - 1;
  RereadSchedule rereads(clock_.now());
  // Events sent from a later read of the row: the feed's copies of them are not sent again.
  std::map<EventKey, int> filled;
  std::map<EventKey, int> skipped;
  // A comment line every heartbeat, whatever else the stream does (re-reads must not hold
  // it back: proxies close a quiet stream, and a client gone is noticed on a write).
  auto next_heartbeat = clock_.now() + heartbeat;
  while (clock_.now() < stream_until) {
    const auto now = clock_.now();
    if (now >= next_heartbeat) {
      if (!co_await exchange.send(": keep-alive\n\n"))
        co_return;
      next_heartbeat = now + heartbeat;
    }
    if (subscription->take_gap())
      rereads.gap(now);
    // Not std::min({...}): GCC 12 cannot keep an initializer_list across a co_await.
    const auto wake_at = std::min(std::min(next_heartbeat, rereads.due()), stream_until);
    // Not a conditional expression around the co_await: GCC 12 miscompiles it.
    std::optional<TaskFeed::Item> item;
    if (!rereads.is_due(now))
      item = co_await subscription->next(wake_at);
    if (item && !item->result) {
      const EventKey key = key_of(item->event, item->step);
      const bool covered =
          item->step < last ||
          (item->step == last &&
           (item->event == "step" || item->event == "delta" || item->event == "action" ||
            (item->event == "execution" && replay.last_tools_done)));
      if (covered)
        continue;
      if (skipped[key] < filled[key]) {
        ++skipped[key];  // sent already, from a read of the row
        continue;
      }
      if (item->event == "error" || item->event == "done") {
        // Only the row says a task ended: an ending event while the row is not terminal (a
        // forged or garbled message on the events topic) is not passed on, nor does it end
        // the stream.
        metrics_.waiter_reread(metrics::WaitKind::kEventStream);
        auto ended = co_await store_.task_history_json(task_id);
        rapidjson::Document row;
        if (!ended.ok() || !ended.value() || !codec::parse_json(row, *ended.value()) ||
            !replay_of(row, task_id).terminal)
          continue;
      }
      if (key.first >= 0 && item->event != "step" && sent[key_of("step", item->step)] == 0) {
        // The step started after the history was read but before the subscription.
        ++sent[key_of("step", item->step)];
        if (!co_await exchange.send(
                sse("step", replayed_json(task_id, item->step, {}, "{}"), id++)))
          co_return;
      }
      if (item->event == "done") {
        // The worker's done carries the result event; the stream ends with it.
        if (co_await exchange.send(sse("done", item->json, id++)))
          co_await exchange.end();
        co_return;
      }
      ++sent[key];
      if (!co_await exchange.send(sse(item->event, item->json, id++)))
        co_return;
      continue;
    }
    if (!item && !rereads.is_due(clock_.now()))
      continue;  // the heartbeat, or a gap: both are seen to at the top
    // A result event, a gap, or the safety timer: read the row. The task may have ended
    // without its done event reaching this replica (ended by the scheduler, or the event
    // was missed), or the feed may have missed progress.
    metrics_.waiter_reread(metrics::WaitKind::kEventStream);
    auto now_history = co_await store_.task_history_json(task_id);
    rapidjson::Document fresh;
    if (!now_history.ok() || !now_history.value() ||
        !codec::parse_json(fresh, *now_history.value())) {
      rereads.read(clock_.now(), false);
      continue;
    }
    const Replay read = replay_of(fresh, task_id);
    if (!read.terminal) {
      // Progress the feed did not bring (a gap) goes out now.
      const int before = id;
      if (!co_await send_missed(exchange, read, id, sent, filled))
        co_return;
      rereads.read(clock_.now(), id != before);
      continue;
    }
    if (item && item->result) {
      // Give the worker's own done event a moment to arrive; it comes just before.
      auto more = co_await subscription->next(clock_.now() + std::chrono::milliseconds(200));
      if (more && !more->result && more->event == "done") {
        if (co_await exchange.send(sse("done", more->json, id++)))
          co_await exchange.end();
        co_return;
      }
    }
    // The result can come before the progress events the feed has yet to deliver (they
    // travel on another topic): the history gives what the client has not had.
    if (!co_await send_missed(exchange, read, id, sent, filled))
      co_return;
    co_await exchange.end();
    co_return;
  }
  co_await exchange.end();
}

asio::awaitable<void> Api::results(http::Exchange& exchange, const Caller& caller, int& answered) {
  const http::Request& head = exchange.head();
  const std::string target(head.target());
  auto user = http::query_param(target, "user_id");
  if (!user || user->empty()) {
    co_await respond(exchange, answered,
                     http::make_error(head, http::Status::bad_request, "invalid_request",
                                      "user_id is required", "/query/user_id"));
    co_return;
  }
  if (auto refused = check_query_user(head, caller, *user)) {
    co_await respond(exchange, answered, std::move(*refused));
    co_return;
  }
  auto place = waiters_.acquire(Waiter::kEventStream, caller.name);
  if (auto* refused = std::get_if<WaiterLimits::Refusal>(&place)) {
    co_await respond(exchange, answered, waiters_refused(head, *refused, "event streams"));
    co_return;
  }
  auto subscription = feed_.subscribe_user(*user);
  const OpenStream open(metrics_);
  if (!co_await begin_events(exchange))
    co_return;
  // A first comment: the client knows the stream is open before any result comes.
  if (!co_await exchange.send(": following\n\n"))
    co_return;
  const auto stream_until = clock_.now() + kMaxStream;
  const auto heartbeat = std::chrono::seconds(config_.dispatcher.stream_heartbeat_s);
  int id = 0;
  bool in_gap = false;
  std::unordered_set<std::string> sent;
  std::deque<std::string> sent_order;
  // A gap is told once, when it opens: the client may have missed results and can list
  // the user's tasks to catch up.
  auto gap_event = [&](const char* reason) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.StartObject();
    w.Key("user_id");
    w.String(user->data(), static_cast<rapidjson::SizeType>(user->size()));
    w.Key("reason");
    w.String(reason);
    w.EndObject();
    return sse("gap", std::string_view(b.GetString(), b.GetSize()), id++);
  };
  while (clock_.now() < stream_until) {
    if (subscription->take_gap()) {
      if (!in_gap) {
        in_gap = true;
        if (!co_await exchange.send(gap_event("feed")))
          co_return;
      }
    } else {
      in_gap = false;
    }
    const auto now = clock_.now();
    auto item = co_await subscription->next(std::min(now + heartbeat, stream_until));
    if (!item) {
      if (!co_await exchange.send(": keep-alive\n\n"))
        co_return;
      continue;
    }
    // What else comes within the coalescing window is checked with it, in one read.
    std::vector<TaskFeed::Item> items;
    items.push_back(std::move(*item));
    const auto gather_until = clock_.now() + kResultsCoalesce;
    while (items.size() < kResultsPerRead) {
      auto more = co_await subscription->next(gather_until);
      if (!more)
        break;
      items.push_back(std::move(*more));
    }
    std::vector<std::string> ids;
    for (const auto& i : items) {
      if (is_uuid(i.task_id) && !sent.contains(i.task_id))
        ids.push_back(i.task_id);
    }
    if (ids.empty())
      continue;
    auto ended = co_await store_.ended_of_user(*user, ids);
    if (!ended.ok()) {
      // Not passed on unchecked: the client is told it may have missed these.
      if (!co_await exchange.send(gap_event("store_unavailable")))
        co_return;
      continue;
    }
    const std::set<std::string> truly(ended.value().begin(), ended.value().end());
    for (auto& i : items) {
      // Only the row says a task ended (a forged result on the topic is dropped).
      if (!truly.contains(i.task_id) || sent.contains(i.task_id))
        continue;
      sent.insert(i.task_id);
      sent_order.push_back(i.task_id);
      if (sent_order.size() > kResultsRemembered) {
        sent.erase(sent_order.front());
        sent_order.pop_front();
      }
      if (!co_await exchange.send(sse("result", i.json, id++)))
        co_return;
    }
  }
  co_await exchange.end();
}

}  // namespace agentfleet::dispatcher
