// The fair scheduler on the embedded fleet (the ctest fixture of fleet_fixture.sh: one
// dispatcher, two workers, the embedded default configuration), checked where users see
// it: per-user concurrency is never exceeded and is really used, one user's batch of
// 20,000 tasks does not hold up another user's interactive tasks, a limit changed at run
// time applies within a pass, a spent monthly budget ends tasks without running them, and
// a task that waits past its schedule_timeout_s ends timed_out. Postgres is the truth: a
// sampler thread reads the task rows every few milliseconds on a connection of its own.
//
// Each test uses users of its own, suffixed with a run id, so the tests neither disturb
// each other nor an earlier run against the same fleet.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <rapidjson/document.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/json_text.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Verb = boost::beast::http::verb;

constexpr const char* kFast = "bench: steps=1 calls=1";  // two model calls, one tool call
constexpr const char* kSlow = "slow: steps=1";           // two 600 ms model calls, ~1.3 s
constexpr const char* kResultsTopic = "agent.tasks.results";
// Rate and token limits out of the way, so only the limit under test holds a user back.
constexpr const char* kNoRateLimits =
    R"("requests_per_minute":1000000,"tokens_per_minute":1000000000000)";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One API call with the admin key.
http::ClientResponse call(Verb method, const std::string& url, const std::string& body = {},
                          std::chrono::seconds timeout = 10s,
                          const std::string& content_type = "application/json") {
  http::ClientRequest request;
  request.method = method;
  request.url = url;
  request.body = body;
  request.content_type = content_type;
  request.headers.push_back(test::admin_auth());
  request.deadline = Clock::now() + timeout;
  return test::exchange(std::move(request));
}

// A figure for the ctest log, written at once.
__attribute__((format(printf, 1, 2))) void report(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

// A task submission: {"user_id":USER,"text":TEXT<extra>}; `extra` adds fields (",...").
std::string task_body(const std::string& user, const std::string& text,
                      const std::string& extra = "") {
  return R"({"user_id":")" + user + R"(","text":")" + text + "\"" + extra + "}";
}

// A user id of this run: "sched-conc-u1" -> "sched-conc-u1-<run>".
std::string user_of_run(const std::string& name) {
  static const std::string run =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() %
                     100000000);
  return name + "-" + run;
}

// What the tests need of the fleet.
struct Fleet {
  std::string api;
  std::string pg;
  std::string bootstrap;

  static Fleet from_env() {
    auto env = test::fleet_env();
    return Fleet{env["AGENTFLEET_URL"], env["AGENTFLEET_PG_URL"],
                 env["AGENTFLEET_KAFKA_BOOTSTRAP"]};
  }

  // PUT /v1/users/{id}/limits; `fields` is the inside of the JSON object.
  void put_limits(const std::string& user, const std::string& fields) const {
    auto response = call(Verb::put, api + "/v1/users/" + user + "/limits", "{" + fields + "}");
    EXPECT_EQ(response.status, 200) << response.error_message << response.body;
  }

  // POST /v1/tasks; returns the task id (empty when refused).
  std::string submit(const std::string& body) const {
    auto response = call(Verb::post, api + "/v1/tasks", body);
    EXPECT_EQ(response.status, 201) << response.error_message << response.body;
    if (response.status != 201)
      return {};
    return parse(response.body)["task_id"].GetString();
  }

  // POST /v1/batches of `count` lines of `text` for `user`; returns the batch id.
  std::string submit_batch(const std::string& user, const std::string& priority,
                           const std::string& text, int count) const {
    std::string lines;
    const std::string line = task_body(user, text) + "\n";
    lines.reserve(line.size() * static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i)
      lines += line;
    auto response = call(Verb::post, api + "/v1/batches?user_id=" + user + "&priority=" + priority,
                         lines, 120s, "application/x-ndjson");
    EXPECT_EQ(response.status, 201) << response.error_message << response.body;
    if (response.status != 201)
      return {};
    auto doc = parse(response.body);
    EXPECT_EQ(doc["accepted"].GetInt64(), count) << response.body;
    return doc["batch_id"].GetString();
  }

  // POST /v1/batches/{id}/cancel (its queued tasks end at once, in slices).
  http::ClientResponse cancel_batch(const std::string& batch) const {
    return call(Verb::post, api + "/v1/batches/" + batch + "/cancel", "", 120s);
  }
};

// Cancels the batches it was given when the test leaves early (a failed ASSERT) instead of
// reaching dismiss(): a failed test must not leave a backlog that keeps the fleet busy for
// the tests after it.
class CancelOnExit {
 public:
  explicit CancelOnExit(const Fleet& fleet) : fleet_(fleet) {}
  ~CancelOnExit() {
    for (const std::string& batch : batches_)
      fleet_.cancel_batch(batch);
  }
  CancelOnExit(const CancelOnExit&) = delete;
  CancelOnExit& operator=(const CancelOnExit&) = delete;

  std::string add(std::string batch) {
    if (!batch.empty())
      batches_.push_back(batch);
    return batch;
  }
  void dismiss() { batches_.clear(); }

 private:
  const Fleet& fleet_;
  std::vector<std::string> batches_;
};

// One statement in its own transaction; the row it returns.
template <typename... Args>
pqxx::row row_of(pqxx::connection& db, const std::string& sql, Args&&... args) {
  pqxx::work tx(db);
  pqxx::row row = tx.exec_params1(sql, std::forward<Args>(args)...);
  tx.commit();
  return row;
}

// Polls `done` every `every` until it holds or `limit` passes; true when it held.
bool wait_until(std::chrono::milliseconds limit, const std::function<bool()>& done,
                std::chrono::milliseconds every = 100ms) {
  const auto until = Clock::now() + limit;
  for (;;) {
    if (done())
      return true;
    if (Clock::now() >= until)
      return false;
    std::this_thread::sleep_for(every);  // the polling interval of a bounded wait
  }
}

// Waits (bounded) until every outbox row written before this call and due by now has been
// published (the relay deletes a row once the broker has it). The relay publishes due rows
// in id order, so a test's dispatch messages queue behind whatever earlier tests left there:
// the fairness test's batch cancel leaves about 20,000 result events, tens of seconds of
// relay work on a slow sanitizer build. A test whose tasks must start promptly waits for
// that backlog first. (Rows due later, such as a worker's fallback for a result it is
// publishing itself, are not in the way.) True when it drained.
bool wait_earlier_outbox_published(pqxx::connection& db, std::chrono::seconds limit) {
  const auto last = row_of(db, "SELECT coalesce(max(id), 0) FROM outbox")[0].as<std::int64_t>();
  return wait_until(
      limit,
      [&] {
        return row_of(db, "SELECT count(*) FROM outbox WHERE id <= $1 AND publish_after <= now()",
                      last)[0]
                   .as<int>() == 0;
      },
      200ms);
}

constexpr const char* kNotEnded =
    "SELECT count(*) FROM tasks WHERE user_id = $1 "
    "AND status IN ('queued', 'dispatched', 'running')";

// Waits (bounded) until none of the user's tasks is queued, dispatched or running.
bool wait_all_ended(pqxx::connection& db, const std::string& user, std::chrono::seconds limit) {
  return wait_until(
      limit, [&] { return row_of(db, kNotEnded, user)[0].as<int>() == 0; }, 200ms);
}

// The user's tasks by status.
std::map<std::string, int> statuses(pqxx::connection& db, const std::string& user) {
  pqxx::work tx(db);
  auto rows =
      tx.exec_params("SELECT status, count(*) FROM tasks WHERE user_id = $1 GROUP BY 1", user);
  tx.commit();
  std::map<std::string, int> out;
  for (const auto& row : rows)
    out[row[0].as<std::string>()] = row[1].as<int>();
  return out;
}

std::string describe(const std::map<std::string, int>& counts) {
  std::string out;
  for (const auto& [status, n] : counts)
    out += status + "=" + std::to_string(n) + " ";
  return out;
}

// Reads, every few milliseconds on a connection of its own, how many tasks of each
// watched user are dispatched + running and how many are running (one statement: one
// snapshot), and keeps the most it saw. Starts on construction; stop() or the destructor
// ends it.
class ActiveSampler {
 public:
  struct Seen {
    int max_active = 0;   // dispatched + running
    int max_running = 0;  // running
  };

  ActiveSampler(const std::string& pg_url, const std::vector<std::string>& users) {
    std::string ids = "[";
    for (const auto& user : users)
      ids += (ids.size() > 1 ? ",\"" : "\"") + user + "\"";
    ids += "]";
    for (const auto& user : users)
      seen_[user] = Seen{};
    thread_ = std::thread([this, pg_url, ids] { run(pg_url, ids); });
  }
  ~ActiveSampler() { stop(); }
  ActiveSampler(const ActiveSampler&) = delete;
  ActiveSampler& operator=(const ActiveSampler&) = delete;

  void stop() {
    stopping_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  std::map<std::string, Seen> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  long samples() const { return samples_.load(); }
  std::string error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  void run(const std::string& pg_url, const std::string& ids) {
    try {
      pqxx::connection db(pg_url);
      while (!stopping_) {
        pqxx::work tx(db);
        auto rows = tx.exec_params(
            "SELECT user_id, count(*), count(*) FILTER (WHERE status = 'running') FROM tasks "
            "WHERE status IN ('dispatched', 'running') "
            "AND user_id IN (SELECT jsonb_array_elements_text($1::jsonb)) GROUP BY user_id",
            ids);
        tx.commit();
        {
          std::lock_guard lock(mutex_);
          for (const auto& row : rows) {
            Seen& s = seen_[row[0].as<std::string>()];
            s.max_active = std::max(s.max_active, row[1].as<int>());
            s.max_running = std::max(s.max_running, row[2].as<int>());
          }
        }
        ++samples_;
        std::this_thread::sleep_for(2ms);  // the sampling period
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      error_ = e.what();
    }
  }

  mutable std::mutex mutex_;
  std::map<std::string, Seen> seen_;
  std::string error_;
  std::atomic<long> samples_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Reads a topic with librdkafka: where each partition ends now, and every message after
// given offsets up to the current end.
class TopicReader {
 public:
  TopicReader(const std::string& bootstrap, std::string topic) : topic_(std::move(topic)) {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", "scheduler-test-reader", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    EXPECT_NE(rk_, nullptr) << errstr;
  }
  ~TopicReader() {
    if (rk_) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }
  TopicReader(const TopicReader&) = delete;
  TopicReader& operator=(const TopicReader&) = delete;

  // Partition -> the offset the next message will get.
  std::map<int, std::int64_t> ends() {
    std::map<int, std::int64_t> out;
    if (!rk_)
      return out;
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk_, topic_.c_str(), nullptr);
    EXPECT_EQ(rd_kafka_metadata(rk_, 0, handle, &metadata, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int t = 0; metadata && t < metadata->topic_cnt; ++t) {
      for (int p = 0; p < metadata->topics[t].partition_cnt; ++p) {
        const int partition = metadata->topics[t].partitions[p].id;
        std::int64_t low = 0, high = 0;
        EXPECT_EQ(
            rd_kafka_query_watermark_offsets(rk_, topic_.c_str(), partition, &low, &high, 10000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
        out[partition] = high;
      }
    }
    if (metadata)
      rd_kafka_metadata_destroy(metadata);
    rd_kafka_topic_destroy(handle);
    return out;
  }

  // The values of the messages from `from` (per partition) up to the current ends.
  std::vector<std::string> read_since(const std::map<int, std::int64_t>& from) {
    std::vector<std::string> values;
    if (!rk_)
      return values;
    const auto end = ends();
    rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(8);
    std::map<int, std::int64_t> next;
    for (const auto& [partition, high] : end) {
      const auto it = from.find(partition);
      const std::int64_t start = it == from.end() ? 0 : it->second;
      next[partition] = start;
      if (high > start)
        rd_kafka_topic_partition_list_add(assignment, topic_.c_str(), partition)->offset = start;
    }
    rd_kafka_assign(rk_, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
    auto done = [&] {
      for (const auto& [partition, high] : end) {
        if (next[partition] < high)
          return false;
      }
      return true;
    };
    const auto until = Clock::now() + 30s;
    while (!done() && Clock::now() < until) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 200);
      if (!m)
        continue;
      if (!m->err) {
        values.emplace_back(static_cast<const char*>(m->payload), m->len);
        next[m->partition] = m->offset + 1;
      }
      rd_kafka_message_destroy(m);
    }
    EXPECT_TRUE(done()) << "could not read " << topic_ << " to its end within 30 s";
    rd_kafka_assign(rk_, nullptr);
    return values;
  }

 private:
  std::string topic_;
  rd_kafka_t* rk_ = nullptr;
};

// The result events of `task_ids` published after `marks`, by task id (waits, bounded, for
// the outbox relay to publish one for each).
std::map<std::string, std::vector<rapidjson::Document>> result_events(
    const Fleet& fleet, const std::map<int, std::int64_t>& marks,
    const std::vector<std::string>& task_ids) {
  std::map<std::string, std::vector<rapidjson::Document>> events;
  const std::set<std::string> wanted(task_ids.begin(), task_ids.end());
  wait_until(
      30s,
      [&] {
        events.clear();
        TopicReader reader(fleet.bootstrap, kResultsTopic);
        for (const std::string& value : reader.read_since(marks)) {
          rapidjson::Document doc;
          if (codec::validate_json_text(value, "result_event.schema.json", &doc))
            continue;
          const std::string id = doc["task_id"].GetString();
          if (wanted.count(id))
            events[id].push_back(std::move(doc));
        }
        return events.size() == wanted.size();
      },
      500ms);
  return events;
}

TEST(SchedulerConcurrency, NoUserEverHasMoreTasksActiveThanItsMaxConcurrencyAndEachReachesIt) {
  const Fleet fleet = Fleet::from_env();
  struct User {
    std::string id;
    int limit;
    int tasks;
  };
  // 200 tasks each; half are interactive and half batch: both draw on the one limit.
  const std::vector<User> users = {{user_of_run("sched-conc-u1"), 1, 200},
                                   {user_of_run("sched-conc-u2"), 2, 200},
                                   {user_of_run("sched-conc-u5"), 5, 200}};
  std::vector<std::string> ids;
  int total = 0;
  for (const User& u : users) {
    fleet.put_limits(u.id, "\"max_concurrency\":" + std::to_string(u.limit) +
                               ",\"max_queued\":100000," + kNoRateLimits);
    ids.push_back(u.id);
    total += u.tasks;
  }
  pqxx::connection db(fleet.pg);
  ASSERT_TRUE(wait_earlier_outbox_published(db, 120s))
      << "earlier tests' outbox rows still unpublished after 120 s";
  ActiveSampler sampler(fleet.pg, ids);
  CancelOnExit backlog(fleet);
  const auto started = Clock::now();
  for (const User& u : users) {
    ASSERT_FALSE(backlog.add(fleet.submit_batch(u.id, "interactive", kFast, u.tasks / 2)).empty());
    ASSERT_FALSE(
        backlog.add(fleet.submit_batch(u.id, "batch", kFast, u.tasks - u.tasks / 2)).empty());
  }

  std::map<std::string, double> took;
  const bool ended = wait_until(150s, [&] {
    int left = 0;
    for (const User& u : users) {
      const int n = row_of(db, kNotEnded, u.id)[0].as<int>();
      if (n == 0 && !took.count(u.id))
        took[u.id] = seconds_since(started);
      left += n;
    }
    return left == 0;
  });
  sampler.stop();
  ASSERT_TRUE(sampler.error().empty()) << sampler.error();
  EXPECT_TRUE(ended) << "tasks still queued, dispatched or running after 150 s";
  if (ended)
    backlog.dismiss();

  const auto seen = sampler.seen();
  report("[ concurrency ] %ld samples in %.1f s\n", sampler.samples(), seconds_since(started));
  int succeeded = 0;
  for (const User& u : users) {
    SCOPED_TRACE(u.id);
    const auto counts = statuses(db, u.id);
    succeeded += counts.count("succeeded") ? counts.at("succeeded") : 0;
    EXPECT_EQ(counts.size(), 1u) << describe(counts);
    const ActiveSampler::Seen s = seen.count(u.id) ? seen.at(u.id) : ActiveSampler::Seen{};
    report(
        "[ concurrency ] max_concurrency %d: most dispatched+running seen %d, running %d; "
        "%d tasks done in %.1f s\n",
        u.limit, s.max_active, s.max_running, u.tasks, took.count(u.id) ? took[u.id] : -1.0);
    EXPECT_LE(s.max_active, u.limit) << "dispatched + running above the user's limit";
    EXPECT_LE(s.max_running, u.limit);
    EXPECT_GE(s.max_active, u.limit) << "the limit was never reached: the test proves nothing";
  }
  EXPECT_EQ(succeeded, total);
}

// p in [0, 1] of sorted values, nearest rank.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty())
    return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

TEST(SchedulerFairness, AnInteractiveUserWaitsNoLongerBehindAnotherUsersBatchOf20000) {
  const Fleet fleet = Fleet::from_env();
  const std::string a = user_of_run("sched-fair-a");
  const std::string b = user_of_run("sched-fair-b");
  constexpr int kBatch = 20000;
  constexpr int kALimit = 10;
  fleet.put_limits(a, "\"max_concurrency\":10,\"max_queued\":30000," + std::string(kNoRateLimits));
  // B's own limit never binds: only A's backlog could make B wait.
  fleet.put_limits(b, "\"max_concurrency\":50,\"max_queued\":1000," + std::string(kNoRateLimits));
  pqxx::connection db(fleet.pg);
  ASSERT_TRUE(wait_earlier_outbox_published(db, 120s))
      << "earlier tests' outbox rows still unpublished after 120 s";

  ActiveSampler sampler(fleet.pg, {a, b});
  const auto uploading = Clock::now();
  CancelOnExit backlog(fleet);
  const std::string batch = backlog.add(fleet.submit_batch(a, "batch", kFast, kBatch));
  ASSERT_FALSE(batch.empty());
  report("[ fairness ] A's batch of %d uploaded in %.1f s\n", kBatch, seconds_since(uploading));
  const char* kActive =
      "SELECT count(*) FROM tasks WHERE user_id = $1 AND status IN ('dispatched', 'running')";
  // The upload's tasks move into the queue a slice at a time; on a slow database a slice
  // can pass the statement timeout, and the scheduler's sweep finishes the move once the
  // upload's deadline (60 s) passes. A reaches its limit once enough of its tasks are queued.
  ASSERT_TRUE(wait_until(
      120s, [&] { return row_of(db, kActive, a)[0].as<int>() == kALimit; }, 5ms))
      << "A never had " << kALimit << " tasks dispatched or running";

  const char* kSucceeded = "SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'succeeded'";
  const int a_before = row_of(db, kSucceeded, a)[0].as<int>();
  const auto window = Clock::now();
  int a_active = 0;  // summed after each of B's submissions
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_until(window + i * 100ms);  // B's pace: one task every 100 ms
    ASSERT_FALSE(fleet.submit(task_body(b, kFast)).empty());
    a_active += row_of(db, kActive, a)[0].as<int>();
  }
  const int a_after = row_of(db, kSucceeded, a)[0].as<int>();
  const double window_s = seconds_since(window);

  // Every B task ran; its queue wait is dispatched_at - created_at.
  EXPECT_TRUE(wait_all_ended(db, b, 30s)) << describe(statuses(db, b));
  sampler.stop();
  ASSERT_TRUE(sampler.error().empty()) << sampler.error();
  const auto b_counts = statuses(db, b);
  EXPECT_EQ(b_counts.size(), 1u) << describe(b_counts);
  EXPECT_EQ(b_counts.count("succeeded") ? b_counts.at("succeeded") : 0, 100);
  std::vector<double> waits;
  {
    pqxx::work tx(db);
    for (const auto& row :
         tx.exec_params("SELECT extract(epoch FROM dispatched_at - created_at)::float8 FROM tasks "
                        "WHERE user_id = $1 AND dispatched_at IS NOT NULL",
                        b))
      waits.push_back(row[0].as<double>());
    tx.commit();
  }
  ASSERT_EQ(waits.size(), 100u);
  std::sort(waits.begin(), waits.end());
  EXPECT_GE(waits.front(), 0.0) << "a task was dispatched before it was created";
  const double p50 = percentile(waits, 0.5), p99 = percentile(waits, 0.99);
  const double a_rate = (a_after - a_before) / window_s;
  report("[ fairness ] B's queue wait over %zu tasks: p50 %.3f s, p99 %.3f s, max %.3f s\n",
         waits.size(), p50, p99, waits.back());
  report(
      "[ fairness ] A meanwhile: %d tasks succeeded in %.1f s (%.1f tasks/s), on average "
      "%.1f dispatched+running\n",
      a_after - a_before, window_s, a_rate, a_active / 100.0);
  // In first-come order B would wait behind 20,000 tasks run 10 at a time: many minutes.
  EXPECT_LT(p99, 2.0) << "B waited behind A's batch";
  EXPECT_GE(a_after - a_before, 10) << "A's batch made (almost) no progress meanwhile";
  const auto seen = sampler.seen();
  report("[ fairness ] most dispatched+running seen: A %d, B %d (%ld samples)\n",
         seen.at(a).max_active, seen.at(b).max_active, sampler.samples());
  EXPECT_LE(seen.at(a).max_active, kALimit) << "A above its max_concurrency";

  // Cancelling the batch ends its queued tasks at once and stops its running ones.
  const auto cancelling = Clock::now();
  backlog.dismiss();
  auto cancel = fleet.cancel_batch(batch);
  ASSERT_EQ(cancel.status, 200) << cancel.error_message << cancel.body;
  const double cancel_s = seconds_since(cancelling);
  EXPECT_TRUE(wait_all_ended(db, a, 60s)) << describe(statuses(db, a));
  report("[ fairness ] the batch's cancel answered in %.1f s; every task of A ended in %.1f s\n",
         cancel_s, seconds_since(cancelling));
  // The cancel announced each task it ended: a result event per task, in the outbox until
  // the relay has published it. Tens of thousands of them take the relay a while on a slow
  // build, and the next test's dispatch messages would queue behind them: wait (bounded).
  const auto publishing = Clock::now();
  EXPECT_TRUE(wait_until(
      120s,
      [&] {
        return row_of(db, "SELECT count(*) FROM outbox WHERE message_key = $1", a)[0].as<int>() ==
               0;
      },
      200ms))
      << "A's result events still in the outbox 120 s after its tasks ended";
  report("[ fairness ] the relay published A's result events in %.1f s more\n",
         seconds_since(publishing));
  const auto a_counts = statuses(db, a);
  int a_total = 0;
  for (const auto& [status, n] : a_counts) {
    a_total += n;
    EXPECT_TRUE(status == "succeeded" || status == "cancelled") << describe(a_counts);
  }
  EXPECT_EQ(a_total, kBatch);
  auto view = call(Verb::get, fleet.api + "/v1/batches/" + batch);
  ASSERT_EQ(view.status, 200) << view.body;
  auto doc = parse(view.body);
  EXPECT_TRUE(doc["cancelled"].GetBool());
  EXPECT_EQ(doc["total"].GetInt64(), kBatch);
  EXPECT_EQ(doc["ended"].GetInt64(), kBatch) << view.body;
  std::int64_t counted = 0;
  for (const auto& m : doc["counts"].GetObject())
    counted += m.value.GetInt64();
  EXPECT_EQ(counted, kBatch) << view.body;
  EXPECT_EQ(doc["counts"]["succeeded"].GetInt64() + doc["counts"]["cancelled"].GetInt64(), kBatch)
      << view.body;
  EXPECT_EQ(doc["counts"]["succeeded"].GetInt64(),
            a_counts.count("succeeded") ? a_counts.at("succeeded") : 0);
}

TEST(SchedulerLimits, ARaisedMaxConcurrencyAppliesWithinASecondWhileTasksRun) {
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("sched-live-u1");
  fleet.put_limits(user, "\"max_concurrency\":1,\"max_queued\":1000," + std::string(kNoRateLimits));
  pqxx::connection db(fleet.pg);
  // The backlog's first dispatch message must not queue behind what earlier tests left in
  // the outbox (the fairness test's batch cancel: 20,000 result events).
  ASSERT_TRUE(wait_earlier_outbox_published(db, 120s))
      << "earlier tests' outbox rows still unpublished after 120 s";
  CancelOnExit backlog(fleet);
  const std::string batch = backlog.add(fleet.submit_batch(user, "interactive", kSlow, 15));
  ASSERT_FALSE(batch.empty());
  const char* kActive =
      "SELECT count(*), count(*) FILTER (WHERE status = 'running') FROM tasks "
      "WHERE user_id = $1 AND status IN ('dispatched', 'running')";
  // Only the precondition: the first task runs (the bound is not what is measured).
  ASSERT_TRUE(wait_until(
      60s, [&] { return row_of(db, kActive, user)[1].as<int>() == 1; }, 10ms))
      << "no task of the backlog started within 60 s: " << describe(statuses(db, user));
  EXPECT_EQ(row_of(db, kActive, user)[0].as<int>(), 1) << "max_concurrency 1 before the change";

  fleet.put_limits(user, "\"max_concurrency\":5,\"max_queued\":1000," + std::string(kNoRateLimits));
  const auto answered = Clock::now();
  int most = 0;
  double reached = -1;
  // Sampled for 1.5 s: it must reach 5 within the first second, and never pass it.
  while (seconds_since(answered) < 1.5) {
    const int active = row_of(db, kActive, user)[0].as<int>();
    most = std::max(most, active);
    if (active >= 5 && reached < 0)
      reached = seconds_since(answered);
    std::this_thread::sleep_for(2ms);  // the sampling period
  }
  report("[ limits ] dispatched+running reached 5 %.3f s after the PUT was answered\n", reached);
  EXPECT_GE(reached, 0.0) << "never reached the raised limit; most seen " << most;
  EXPECT_LT(reached, 1.0);
  EXPECT_EQ(most, 5) << "the most dispatched+running seen after the raise";

  backlog.dismiss();
  auto cancel = fleet.cancel_batch(batch);
  ASSERT_EQ(cancel.status, 200) << cancel.error_message << cancel.body;
  EXPECT_TRUE(wait_all_ended(db, user, 30s)) << describe(statuses(db, user));
  const auto counts = statuses(db, user);
  for (const auto& [status, n] : counts)
    EXPECT_TRUE(status == "succeeded" || status == "cancelled") << describe(counts);
  EXPECT_GE(counts.count("cancelled") ? counts.at("cancelled") : 0, 1) << describe(counts);
}

TEST(SchedulerBudget, ASpentMonthlyBudgetEndsLaterTasksQuotaExceededWithoutRunningThem) {
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("sched-budget-u1");
  // A budget the first task cannot pass (each model call is checked against it too), then
  // one the first task has passed.
  fleet.put_limits(
      user, "\"monthly_budget\":\"1000\",\"max_concurrency\":5," + std::string(kNoRateLimits));
  pqxx::connection db(fleet.pg);
  ASSERT_TRUE(wait_earlier_outbox_published(db, 120s))
      << "earlier tests' outbox rows still unpublished after 120 s";
  const char* kTask =
      "SELECT status, coalesce(result_type, ''), coalesce(error_code, ''), coalesce(error, ''), "
      "coalesce(result_message, ''), steps, started_at IS NULL, dispatched_at IS NULL, "
      "(SELECT count(*) FROM usage_ledger l WHERE l.task_id = t.task_id), cost > 0 "
      "FROM tasks t WHERE task_id = $1::uuid";
  auto ended = [&](const std::string& id) {
    const std::string status = row_of(db, kTask, id)[0].as<std::string>();
    return status != "queued" && status != "dispatched" && status != "running";
  };

  // Nothing spent yet: the first task runs, and is billed.
  const std::string first = fleet.submit(task_body(user, kFast));
  ASSERT_FALSE(first.empty());
  ASSERT_TRUE(wait_until(60s, [&] { return ended(first); })) << "the first task did not end";
  auto ran = row_of(db, kTask, first);
  EXPECT_EQ(ran[0].as<std::string>(), "succeeded");
  EXPECT_GE(ran[8].as<int>(), 1) << "ledger rows";
  EXPECT_TRUE(ran[9].as<bool>()) << "billed";
  auto spent = row_of(db,
                      "SELECT coalesce(sum(cost), 0) > 0.000001 FROM usage_ledger "
                      "WHERE user_id = $1",
                      user);
  ASSERT_TRUE(spent[0].as<bool>()) << "the first task did not spend the budget";
  fleet.put_limits(
      user, "\"monthly_budget\":\"0.000001\",\"max_concurrency\":5," + std::string(kNoRateLimits));

  // Spent: later tasks, interactive and batch, end failed without running.
  TopicReader marks_reader(fleet.bootstrap, kResultsTopic);
  const auto marks = marks_reader.ends();
  std::vector<std::string> later;
  const auto submitted = Clock::now();
  for (const char* priority : {"interactive", "interactive", "batch"}) {
    later.push_back(
        fleet.submit(task_body(user, kFast, R"(,"priority":")" + std::string(priority) + "\"")));
    ASSERT_FALSE(later.back().empty());
  }
  ASSERT_TRUE(wait_until(15s, [&] { return std::all_of(later.begin(), later.end(), ended); }));
  report("[ budget ] %zu tasks over budget submitted and ended in %.2f s\n", later.size(),
         seconds_since(submitted));
  for (const std::string& id : later) {
    SCOPED_TRACE(id);
    auto row = row_of(db, kTask, id);
    EXPECT_EQ(row[0].as<std::string>(), "failed");
    EXPECT_EQ(row[1].as<std::string>(), "error");
    EXPECT_EQ(row[2].as<std::string>(), "quota_exceeded");
    EXPECT_NE(row[3].as<std::string>().find("budget"), std::string::npos) << row[3].c_str();
    EXPECT_NE(row[4].as<std::string>().find("budget"), std::string::npos) << row[4].c_str();
    EXPECT_EQ(row[5].as<int>(), 0) << "steps";
    EXPECT_TRUE(row[6].as<bool>()) << "started_at is set: it ran";
    EXPECT_TRUE(row[7].as<bool>()) << "dispatched_at is set";
    EXPECT_EQ(row[8].as<int>(), 0) << "ledger rows";
  }

  // Announced like any other end: one result event each.
  auto events = result_events(fleet, marks, later);
  for (const std::string& id : later) {
    SCOPED_TRACE(id);
    ASSERT_EQ(events[id].size(), 1u) << "result events";
    const auto& event = events[id].front();
    EXPECT_STREQ(event["status"].GetString(), "failed");
    ASSERT_TRUE(event.HasMember("error_code"));
    EXPECT_STREQ(event["error_code"].GetString(), "quota_exceeded");
    ASSERT_TRUE(event.HasMember("result"));
    EXPECT_STREQ(event["result"]["type"].GetString(), "error");
    EXPECT_EQ(event["steps"].GetInt(), 0);
  }
}

TEST(SchedulerBudget, AUserWithoutTheBudgetForOneCallIsStoppedBeforeItsFirstModelCall) {
  // Nothing spent, so the scheduler admits the task; but its first model call could cost
  // more than the budget: the worker ends it before making the call.
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("sched-budget-u2");
  fleet.put_limits(
      user, "\"monthly_budget\":\"0.000001\",\"max_concurrency\":5," + std::string(kNoRateLimits));
  pqxx::connection db(fleet.pg);
  const std::string id = fleet.submit(task_body(user, kFast));
  ASSERT_FALSE(id.empty());
  const char* kTask =
      "SELECT status, coalesce(error_code, ''), coalesce(error, ''), steps, started_at IS NULL, "
      "(SELECT count(*) FROM usage_ledger l WHERE l.task_id = t.task_id), "
      "(SELECT count(*) FROM usage_unreconciled l WHERE l.task_id = t.task_id) "
      "FROM tasks t WHERE task_id = $1::uuid";
  ASSERT_TRUE(wait_until(60s, [&] {
    const std::string status = row_of(db, kTask, id)[0].as<std::string>();
    return status != "queued" && status != "dispatched" && status != "running";
  })) << "the task did not end";
  auto row = row_of(db, kTask, id);
  EXPECT_EQ(row[0].as<std::string>(), "failed");
  EXPECT_EQ(row[1].as<std::string>(), "quota_exceeded");
  EXPECT_NE(row[2].as<std::string>().find("the next model call could pass the monthly budget"),
            std::string::npos)
      << row[2].c_str();
  EXPECT_EQ(row[3].as<int>(), 0) << "steps";
  EXPECT_FALSE(row[4].as<bool>()) << "it was claimed and began";
  EXPECT_EQ(row[5].as<int>(), 0) << "no model call was made";
  EXPECT_EQ(row[6].as<int>(), 0) << "not even one lost";
}

TEST(SchedulerQueueTimeout, ATaskWaitingPastScheduleTimeoutEndsTimedOutWithoutRunning) {
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("sched-qto-u1");
  fleet.put_limits(user, "\"max_concurrency\":1,\"max_queued\":1000," + std::string(kNoRateLimits));
  pqxx::connection db(fleet.pg);
  ASSERT_TRUE(wait_earlier_outbox_published(db, 120s))
      << "earlier tests' outbox rows still unpublished after 120 s";
  const char* kTask =
      "SELECT status, coalesce(error_code, ''), coalesce(error, ''), steps, started_at IS NULL, "
      "dispatched_at IS NULL, extract(epoch FROM finished_at - created_at)::float8 "
      "FROM tasks WHERE task_id = $1::uuid";

  // Six 600 ms model answers: the only slot stays taken for about 4 s.
  const std::string slow = fleet.submit(task_body(user, "slow: steps=5"));
  ASSERT_FALSE(slow.empty());
  ASSERT_TRUE(wait_until(
      20s, [&] { return row_of(db, kTask, slow)[0].as<std::string>() == "running"; }, 10ms))
      << "the slow task did not start";

  TopicReader marks_reader(fleet.bootstrap, kResultsTopic);
  const auto marks = marks_reader.ends();
  const std::string waiting = fleet.submit(task_body(user, kFast, R"(,"schedule_timeout_s":1)"));
  ASSERT_FALSE(waiting.empty());
  ASSERT_TRUE(wait_until(
      10s, [&] { return row_of(db, kTask, waiting)[0].as<std::string>() != "queued"; }, 10ms))
      << "still queued 10 s after a schedule_timeout_s of 1";
  // The slot was still taken when `waiting` timed out: read from the rows' end times, not
  // from the status whenever this thread gets to look (the slow task may end meanwhile).
  const bool slot_taken =
      row_of(db,
             "SELECT coalesce(s.finished_at IS NULL OR s.finished_at > w.finished_at, false) "
             "FROM tasks s, tasks w WHERE s.task_id = $1::uuid AND w.task_id = $2::uuid",
             slow, waiting)[0]
          .as<bool>();
  auto row = row_of(db, kTask, waiting);
  EXPECT_EQ(row[0].as<std::string>(), "timed_out");
  EXPECT_EQ(row[1].as<std::string>(), "schedule_timeout");
  EXPECT_NE(row[2].as<std::string>().find("schedule_timeout_s"), std::string::npos)
      << row[2].c_str();
  EXPECT_EQ(row[3].as<int>(), 0) << "steps";
  EXPECT_TRUE(row[4].as<bool>()) << "started_at is set: it ran";
  EXPECT_TRUE(row[5].as<bool>()) << "dispatched_at is set";
  const double waited = row[6].is_null() ? -1 : row[6].as<double>();
  report("[ queue timeout ] ended timed_out %.2f s after it was submitted\n", waited);
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 4.0);
  EXPECT_TRUE(slot_taken) << "the slot was free before the timeout: the test proves nothing";

  auto events = result_events(fleet, marks, {waiting});
  ASSERT_EQ(events[waiting].size(), 1u) << "result events";
  EXPECT_STREQ(events[waiting].front()["status"].GetString(), "timed_out");
  ASSERT_TRUE(events[waiting].front().HasMember("error_code"));
  EXPECT_STREQ(events[waiting].front()["error_code"].GetString(), "schedule_timeout");

  EXPECT_TRUE(wait_until(20s, [&] {
    return row_of(db, kTask, slow)[0].as<std::string>() == "succeeded";
  })) << "the slow task did not succeed";
}

TEST(SchedulerQueueTimeout, AHandedBackTaskWhoseDeadlinePassedInTheQueueEndsWithoutWaitingItsTurn) {
  // A task its worker handed back (it had started: started_at and deadline_at are set) whose
  // deadline passed while it waited. Its parent has not ended, so the scheduler would not
  // admit it however long it waited: only the scheduler's deadline check can end it.
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("sched-hb-u1");
  pqxx::connection db(fleet.pg);
  TopicReader marks_reader(fleet.bootstrap, kResultsTopic);
  const auto marks = marks_reader.ends();
  std::string parent, handed_back;
  {
    pqxx::work tx(db);
    parent = tx.exec_params1(
                   R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s,
                                            schedule_timeout_s, max_steps, priority,
                                            request_canonical, status, dispatched_at)
                         VALUES (gen_random_uuid(), $1, 'x', 'sim-model', 30, 3600, 10,
                                 'interactive', '{}', 'dispatched', now())
                         RETURNING task_id::text)SQL",
                   user)[0]
                 .as<std::string>();
    handed_back = tx.exec_params1(
                        R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s,
                                                 schedule_timeout_s, max_steps, priority,
                                                 request_canonical, status, attempt, releases,
                                                 started_at, deadline_at, parent_task_id)
                              VALUES (gen_random_uuid(), $1, 'x', 'sim-model', 5, 3600, 10,
                                      'interactive', '{}', 'queued', 1, 1,
                                      now() - interval '6 s', now() - interval '1 s', $2::uuid)
                              RETURNING task_id::text)SQL",
                        user, parent)[0]
                      .as<std::string>();
    tx.commit();
  }
  const char* kTask =
      "SELECT status, coalesce(error_code, ''), coalesce(error, ''), attempt "
      "FROM tasks WHERE task_id = $1::uuid";
  const bool ended = wait_until(
      30s, [&] { return row_of(db, kTask, handed_back)[0].as<std::string>() != "queued"; }, 20ms);
  {
    // The parent is left for no one to run.
    pqxx::work tx(db);
    tx.exec_params0(
        "UPDATE tasks SET status = 'cancelled', finished_at = now() "
        "WHERE task_id = $1::uuid",
        parent);
    tx.commit();
  }
  ASSERT_TRUE(ended) << "a handed-back task past its deadline still queued after 30 s";
  const auto row = row_of(db, kTask, handed_back);
  EXPECT_EQ(row[0].as<std::string>(), "timed_out");
  EXPECT_EQ(row[1].as<std::string>(), "deadline");
  EXPECT_NE(row[2].as<std::string>().find("while it waited to run again"), std::string::npos)
      << row[2].c_str();
  EXPECT_EQ(row[3].as<int>(), 1) << "not claimed again";
  auto events = result_events(fleet, marks, {handed_back});
  ASSERT_EQ(events[handed_back].size(), 1u) << "result events";
  EXPECT_STREQ(events[handed_back].front()["status"].GetString(), "timed_out");
  EXPECT_STREQ(events[handed_back].front()["error_code"].GetString(), "deadline");
}

// GET /v1/tasks/{id}: the task's waiting_reason ("null" when it has none, "" on failure).
std::string waiting_reason_of(const Fleet& fleet, const std::string& task_id) {
  auto response = call(Verb::get, fleet.api + "/v1/tasks/" + task_id);
  if (response.status != 200)
    return "";
  auto doc = parse(response.body);
  if (!doc.IsObject() || !doc.HasMember("waiting_reason"))
    return "";
  return doc["waiting_reason"].IsString() ? doc["waiting_reason"].GetString() : "null";
}

void cancel_all(const Fleet& fleet, const std::vector<std::string>& ids) {
  for (const std::string& id : ids)
    call(Verb::post, fleet.api + "/v1/tasks/" + id + "/cancel");
}

TEST(SchedulerWaiting, AQueuedTaskSaysWhichOfItsUsersLimitsHoldsItAndAFollowUpItsParent) {
  const Fleet fleet = Fleet::from_env();
  // One admission a minute: the first task goes, the second waits for the rate limit, and
  // so does a batch, whose second line follows the second task: that one waits for its
  // parent (which waits for the minute to pass).
  const std::string rpm = user_of_run("wait-rpm");
  fleet.put_limits(rpm, R"("max_concurrency":10,"requests_per_minute":1,)"
                        R"("tokens_per_minute":1000000000000)");
  std::vector<std::string> ids;
  ids.push_back(fleet.submit(task_body(rpm, kFast)));
  const std::string held = fleet.submit(task_body(rpm, kFast));
  ids.push_back(held);
  auto uploaded = call(Verb::post, fleet.api + "/v1/batches?user_id=" + rpm,
                       task_body(rpm, kFast) + "\n" +
                           task_body(rpm, kFast, R"(,"parent_task_id":")" + held + "\"") + "\n",
                       30s, "application/x-ndjson");
  ASSERT_EQ(uploaded.status, 201) << uploaded.body;
  const std::string batch = parse(uploaded.body)["batch_id"].GetString();
  pqxx::connection db(fleet.pg);
  const std::string follow_up =
      row_of(db,
             "SELECT task_id::text FROM tasks WHERE batch_id = $1 AND user_id = $2 "
             "AND parent_task_id IS NOT NULL",
             batch, rpm)[0]
          .as<std::string>();
  ids.push_back(follow_up);
  // 1,000 tokens a minute: the first task's estimate takes them; the second waits.
  const std::string tpm = user_of_run("wait-tpm");
  fleet.put_limits(tpm, R"("max_concurrency":10,"requests_per_minute":1000000,)"
                        R"("tokens_per_minute":1000)");
  ids.push_back(fleet.submit(task_body(tpm, kFast)));
  const std::string tokens = fleet.submit(task_body(tpm, kFast));
  ids.push_back(tokens);
  ASSERT_EQ(std::count(ids.begin(), ids.end(), std::string()), 0);

  // The scheduler's next pass names the limit (before it: "scheduling").
  std::string seen_rpm, seen_tpm;
  EXPECT_TRUE(wait_until(30s,
                         [&] {
                           seen_rpm = waiting_reason_of(fleet, held);
                           seen_tpm = waiting_reason_of(fleet, tokens);
                           return seen_rpm == "requests_per_minute" &&
                                  seen_tpm == "tokens_per_minute";
                         }))
      << "rpm: " << seen_rpm << ", tpm: " << seen_tpm;
  EXPECT_EQ(waiting_reason_of(fleet, follow_up), "parent");
  EXPECT_EQ(waiting_reason_of(fleet, ids[0]), "null") << "admitted: it waits for nothing";
  // The list says the same.
  auto list = call(Verb::get, fleet.api + "/v1/tasks?user_id=" + rpm + "&status=queued");
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_NE(list.body.find(R"("waiting_reason":"requests_per_minute")"), std::string::npos)
      << list.body;
  // The batch's queued tasks wait for the same limit.
  auto shown = call(Verb::get, fleet.api + "/v1/batches/" + batch);
  ASSERT_EQ(shown.status, 200) << shown.body;
  EXPECT_STREQ(parse(shown.body)["waiting_reason"].GetString(), "requests_per_minute")
      << shown.body;
  cancel_all(fleet, ids);
  EXPECT_EQ(fleet.cancel_batch(batch).status, 200);
}

TEST(SchedulerWaiting, TasksBeyondTheUsersConcurrencyWaitForItWhileTheFirstRuns) {
  const Fleet fleet = Fleet::from_env();
  const std::string user = user_of_run("wait-conc");
  fleet.put_limits(user, "\"max_concurrency\":1," + std::string(kNoRateLimits));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(fleet.submit(task_body(user, "slow: steps=3")));
  ASSERT_EQ(std::count(ids.begin(), ids.end(), std::string()), 0);
  // One runs at a time, for seconds each: while the others wait, each says why. A task
  // just submitted may not have met a pass yet ("scheduling"); nothing else may show.
  std::string wrong;
  EXPECT_TRUE(wait_until(30s, [&] {
    auto list = call(Verb::get, fleet.api + "/v1/tasks?user_id=" + user + "&status=queued");
    if (list.status != 200)
      return false;
    auto doc = parse(list.body);
    bool said = false;
    for (const auto& task : doc["tasks"].GetArray()) {
      const std::string reason =
          task["waiting_reason"].IsString() ? task["waiting_reason"].GetString() : "null";
      said = said || reason == "concurrency";
      if (reason != "concurrency" && reason != "scheduling")
        wrong = reason;
    }
    return said;
  })) << "no queued task said concurrency";
  EXPECT_EQ(wrong, "") << "a queued task gave another reason";
  cancel_all(fleet, ids);
}

}  // namespace
}  // namespace agentfleet
