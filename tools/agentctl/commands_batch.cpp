// Batches: upload (a streamed JSON Lines body) and follow with a progress line; status,
// results (a streamed JSON Lines download), cancel.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "tools/agentctl/batch_ids.hpp"
#include "tools/agentctl/batch_progress.hpp"
#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/views.hpp"

namespace agentfleet::agentctl {

namespace {
using Clock = std::chrono::steady_clock;

// A batch's route; `user` (may be empty) names its user: batch ids are each user's, and a
// key acting for several users who each have a batch of the id must say whose.
std::string batch_path(const std::string& id, const std::string& user,
                       const std::string& suffix = "") {
  std::string path = "/v1/batches/" + path_segment(id) + suffix;
  if (!user.empty())
    path += "?" + query_string({{"user_id", user}});
  return path;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls the batch every second until every task ended, showing the progress: one line
// redrawn on a terminal, else a line every `interval`; then the summary line. Exit 0 when
// every task succeeded, 1 otherwise, 7 when `limit_s` (> 0) passed first.
int follow_batch(const Context& ctx, const std::string& id, const std::string& user,
                 std::int64_t limit_s, std::chrono::seconds interval) {
  const auto started = Clock::now();
  const bool tty = ctx.stdout_is_tty && !ctx.settings.json;
  ProgressMeter meter;
  auto last_line = started;
  const std::string target = batch_path(id, user);
  for (;;) {
    auto response = ctx.api.get(target);
    ctx.api.check(response, "GET", target);
    const auto counts = parse_batch_counts(response.body);
    if (!counts) {
      throw CommandFailure(kExitUnavailable,
                           "GET " + target + ": not a batch: " + response.body.substr(0, 200));
    }
    const auto now = Clock::now();
    meter.add(now, counts->ended);
    if (counts->finished()) {
      if (tty)
        print("\r\033[K");
      print(ctx.settings.json ? response.body + "\n"
                              : format_batch_summary(*counts, seconds_since(started)) + "\n");
      return counts->unsuccessful() > 0 || counts->batch_cancelled ? kExitNotSucceeded : kExitOk;
    }
    const std::string line =
        format_progress_line(*counts, meter.rate(), meter.eta_s(counts->total - counts->ended));
    if (tty) {
      print("\r" + line + "\033[K");
    } else if (!ctx.settings.json && now - last_line >= interval) {
      print(line + "\n");
      last_line = now;
    }
    if (limit_s > 0 && now - started >= std::chrono::seconds(limit_s)) {
      if (tty)
        print("\n");
      throw CommandFailure(kExitUnavailable,
                           "batch " + id + " still running after " + std::to_string(limit_s) +
                               " s (" + std::to_string(counts->ended) + " of " +
                               std::to_string(counts->total) + " tasks ended); it goes on");
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}
}  // namespace

NamedBatch find_batch(const Context& ctx, const std::string& given, const std::string& user) {
  const std::string target = batch_path(given, user);
  auto response = ctx.api.get(target);
  if (response.status != 404 || given.size() < kMinBatchIdPrefix) {
    if (response.status == 404) {
      throw CommandFailure(kExitNotFound,
                           "no batch '" + given + "' (the start of a batch id needs " +
                               std::to_string(kMinBatchIdPrefix) + " characters at least)");
    }
    ctx.api.check(response, "GET", target);
    return NamedBatch{given, user, std::move(response)};
  }
  std::vector<std::pair<std::string, std::string>> query = {
      {"prefix", given}, {"limit", std::to_string(kBatchPrefixCandidates)}};
  if (!user.empty())
    query.emplace_back("user_id", user);
  auto listed = ctx.api.get_json("/v1/batches?" + query_string(query));
  const BatchPrefixMatch match = match_batch_prefix(given, json::at(listed, "batches"));
  if (match.none)
    ctx.api.check(response, "GET", target);  // the 404 of the id as given
  if (!match.problem.empty())
    throw CommandFailure(kExitRejected, match.problem);
  note("batch " + match.batch_id + " of " + match.user_id + ": the one batch whose id begins '" +
       given + "'");
  const std::string found = batch_path(match.batch_id, match.user_id);
  auto answer = ctx.api.get(found);
  ctx.api.check(answer, "GET", found);
  return NamedBatch{match.batch_id, match.user_id, std::move(answer)};
}

int cmd_batch_submit(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string file = inv.args[0];
  const std::string user = inv.required("--user");
  const std::string priority = inv.value("--priority");
  if (!priority.empty() && priority != "batch" && priority != "interactive")
    throw UsageError("--priority must be batch or interactive, not '" + priority + "'");
  const std::int64_t limit_s = inv.integer("--wait-timeout-s", 0, 0, 30 * 86400);
  const std::chrono::seconds interval(inv.integer("--interval-s", 5, 1, 3600));

  std::FILE* in = file == "-" ? stdin : std::fopen(file.c_str(), "rb");
  if (in == nullptr)
    throw UsageError("cannot read " + file + ": " + std::strerror(errno));
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f != stdin)
        std::fclose(f);
    }
  } closer{in};
  int read_errno = 0;      // errno of a failed read, taken when it failed
  bool body_sent = false;  // the source reached the end of the file
  auto source = [&](std::string& out) {
    out.resize(256 * 1024);
    errno = 0;
    const std::size_t n = std::fread(out.data(), 1, out.size(), in);
    out.resize(n);
    if (std::ferror(in)) {
      read_errno = errno != 0 ? errno : EIO;  // now: the exchange goes on to use errno
      return false;
    }
    body_sent = body_sent || n == 0;
    return true;
  };
  // An id of agentctl's own when none is given, so an upload whose answer was lost can be
  // told apart from a new one: a rerun with it is refused (409 batch_exists) when it was
  // stored after all.
  const std::string batch_id = inv.has("--batch-id") ? inv.required("--batch-id") : new_uuid();
  std::vector<std::pair<std::string, std::string>> query = {{"user_id", user},
                                                            {"batch_id", batch_id}};
  if (!priority.empty())
    query.emplace_back("priority", priority);
  const std::string target = "/v1/batches?" + query_string(query);
  auto response = ctx.api.post_stream(target, source, "application/x-ndjson");
  if (read_errno != 0)
    throw UsageError("reading " + file + " failed: " + std::strerror(read_errno));
  try {
    ctx.api.check(response, "POST", target);
  } catch (const CommandFailure& e) {
    if (!response.ok() && body_sent) {
      // The dispatcher had the whole file; it may have stored the batch and the answer was
      // lost (an incomplete upload is never stored).
      throw CommandFailure(e.code, std::string(e.what()) +
                                       "; the whole file was sent, so whether batch " + batch_id +
                                       " was stored is unknown: `agentctl batch status " +
                                       batch_id + "` tells (a rerun with --batch-id " + batch_id +
                                       " is refused with 409 batch_exists if it was)");
    }
    if (response.status == 409) {
      throw CommandFailure(
          e.code, std::string(e.what()) + "; `agentctl batch status " + batch_id + "` shows it");
    }
    throw;
  }
  auto doc = ApiClient::parse(response, target);
  const std::string id = json::str(doc, "batch_id");
  const std::string summary =
      "batch " + id + " uploaded: " + std::to_string(json::num(doc, "accepted", 0)) +
      " tasks accepted of " + std::to_string(json::num(doc, "lines", 0)) + " lines, " +
      std::to_string(json::num(doc, "duplicates", 0)) + " duplicates";
  if (inv.has("--no-follow")) {
    if (ctx.settings.json) {
      print(response.body + "\n");
    } else {
      note(summary);
      print(id + "\n");
    }
    return kExitOk;
  }
  print(ctx.settings.json ? response.body + "\n" : summary + "\n");
  return follow_batch(ctx, id, user, limit_s, interval);
}

int cmd_batch_list(Context& ctx) {
  const Invocation& inv = ctx.inv;
  std::int64_t left = inv.integer("--limit", 20, 1, 100000);
  rapidjson::Document all;
  all.SetObject();
  rapidjson::Value batches(rapidjson::kArrayType);
  std::string before;
  while (left > 0) {
    const std::int64_t page = std::min<std::int64_t>(left, 100);
    std::vector<std::pair<std::string, std::string>> query = {{"limit", std::to_string(page)}};
    if (inv.has("--user"))
      query.emplace_back("user_id", inv.required("--user"));
    if (!before.empty())
      query.emplace_back("before", before);
    auto doc = ctx.api.get_json("/v1/batches?" + query_string(query));
    const auto& got = json::at(doc, "batches");
    if (!got.IsArray())
      break;
    for (const auto& b : got.GetArray()) {
      batches.PushBack(rapidjson::Value(b, all.GetAllocator()), all.GetAllocator());
      before = json::str(b, "created_at");
    }
    left -= got.Size();
    if (static_cast<std::int64_t>(got.Size()) < page || before.empty())
      break;
  }
  all.AddMember("batches", batches, all.GetAllocator());
  print(ctx.settings.json ? json::text_of(all) + "\n" : format_batch_list(all["batches"]));
  return kExitOk;
}

int cmd_batch_status(Context& ctx) {
  const NamedBatch batch = find_batch(ctx, ctx.inv.args[0], ctx.inv.value("--user"));
  auto doc = ApiClient::parse(batch.found, batch_path(batch.id, batch.user));
  print(ctx.settings.json ? batch.found.body + "\n" : format_batch(doc));
  return kExitOk;
}

int cmd_batch_results(Context& ctx) {
  const NamedBatch batch = find_batch(ctx, ctx.inv.args[0], ctx.inv.value("--user"));
  const std::string target = batch_path(batch.id, batch.user, "/results");
  std::string pending;
  bool header_shown = false;
  auto sink = [&](std::string_view piece) {
    if (ctx.settings.json) {
      print(std::string(piece));
      return true;
    }
    if (!header_shown) {
      print(batch_results_header());
      header_shown = true;
    }
    pending.append(piece);
    std::size_t start = 0;
    std::string rows;
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
      rows += format_batch_result(std::string_view(pending).substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
    print(rows);
    return true;
  };
  const auto idle =
      std::max<std::chrono::seconds>(ctx.settings.request_timeout, std::chrono::seconds(60));
  auto response = ctx.api.get_stream(target, sink, idle, Clock::now() + std::chrono::hours(24));
  ctx.api.check(response, "GET", target);
  if (!pending.empty() && !ctx.settings.json)
    print(format_batch_result(pending));
  if (!header_shown && !ctx.settings.json)
    print(batch_results_header());
  return kExitOk;
}

int cmd_batch_cancel(Context& ctx) {
  const NamedBatch batch = find_batch(ctx, ctx.inv.args[0], ctx.inv.value("--user"));
  const std::string& id = batch.id;
  const std::string target = batch_path(id, batch.user, "/cancel");
  auto response = ctx.api.post(target, "");
  ctx.api.check(response, "POST", target);
  auto doc = ApiClient::parse(response, target);
  if (ctx.settings.json) {
    print(response.body + "\n");
  } else {
    print("batch " + id +
          " cancelled: its tasks not yet running end cancelled, running ones "
          "stop\n" +
          format_batch(doc));
  }
  return kExitOk;
}

int cmd_batch_retry(Context& ctx) {
  const NamedBatch batch = find_batch(ctx, ctx.inv.args[0], ctx.inv.value("--user"));
  const std::string& id = batch.id;
  const std::string& user = batch.user;
  // Slice after slice (each the server's, up to 200 failed tasks) until every failed task
  // was looked at or a slice stopped: the totals of all of them.
  std::int64_t retried = 0, already = 0;
  std::map<std::string, std::int64_t> not_retried;
  std::string after, stopped, stopped_code;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> query;
    if (!user.empty())
      query.emplace_back("user_id", user);
    if (!after.empty())
      query.emplace_back("after", after);
    std::string target = "/v1/batches/" + path_segment(id) + "/retry";
    if (!query.empty())
      target += "?" + query_string(query);
    auto response = ctx.api.post(target, "");
    ctx.api.check(response, "POST", target);
    auto doc = ApiClient::parse(response, target);
    retried += json::num(doc, "retried", 0);
    already += json::num(doc, "already_retried", 0);
    if (const auto& codes = json::at(doc, "not_retried"); codes.IsObject()) {
      for (const auto& m : codes.GetObject())
        not_retried[m.name.GetString()] += m.value.IsInt64() ? m.value.GetInt64() : 0;
    }
    if (const auto& stop = json::at(doc, "stopped"); stop.IsObject()) {
      stopped_code = json::str(stop, "code");
      stopped = stopped_code + ": " + json::str(stop, "message");
      break;
    }
    after = json::str(doc, "next_after");
    if (after.empty())
      break;
  }
  std::string others;
  for (const auto& [code, n] : not_retried)
    others += (others.empty() ? "" : ", ") + code + " " + std::to_string(n);
  if (ctx.settings.json) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    w.StartObject();
    w.Key("retried");
    w.Int64(retried);
    w.Key("already_retried");
    w.Int64(already);
    w.Key("not_retried");
    w.StartObject();
    for (const auto& [code, n] : not_retried) {
      w.Key(code.c_str());
      w.Int64(n);
    }
    w.EndObject();
    w.Key("stopped");
    if (stopped.empty())
      w.Null();
    else
      w.String(stopped.c_str());
    w.EndObject();
    print(std::string(buffer.GetString(), buffer.GetSize()) + "\n");
  } else {
    print("batch " + id + ": " + std::to_string(retried) + " failed tasks retried now, " +
          std::to_string(already) + " retried before" +
          (others.empty() ? std::string() : ", not retried: " + others) + "\n");
    if (retried > 0)
      print("their outcomes: agentctl batch results " + id + " (RETRIED AS in MESSAGE)\n");
  }
  if (!stopped.empty()) {
    note("stopped early, the rest not retried yet (" + stopped + "); run it again later");
    return stopped_code == "queue_full" ? kExitThrottled : kExitUnavailable;
  }
  return kExitOk;
}

}  // namespace agentfleet::agentctl
