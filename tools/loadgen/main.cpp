// agentfleet-loadgen: submits N tasks to a running fleet over its HTTP API, as fast as C
// concurrent submitters allow, watches Postgres while they run, and prints what it saw:
// submission rate, the most tasks running at once, throughput, and run-time and queue-wait
// percentiles. Exit 0 when every task reached a terminal status within the time limit.
//
//   agentfleet-loadgen --url http://127.0.0.1:8080 --pg postgresql://... --tasks 2000
//       [--users 50] [--text "bench: steps=2 calls=1"] [--concurrency 32]
//       [--task-timeout-s 120] [--limit-s 300] [--sample-ms 100] [--key-prefix load]
//
// The figures of the last line are JSON, for scripts.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/adapters/http/client.hpp"

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string url;
  std::string pg;
  int tasks = 2000;
  int users = 50;
  std::string text = "bench: steps=2 calls=1";
  int concurrency = 32;
  int task_timeout_s = 120;
  int limit_s = 300;
  int sample_ms = 100;
  std::string key_prefix = "load";
  std::string api_key;      // --api-key, else $AGENTFLEET_API_KEY
  int max_concurrency = 0;  // > 0: set as each user's override before submitting
  double rate = 0;          // > 0: tasks per second, paced
  std::string priority = "batch";
};

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "agentfleet-loadgen: %s\n"
               "usage: agentfleet-loadgen --url URL --pg PGURL [--tasks N] [--users N] "
               "[--text TEXT] [--concurrency N] [--task-timeout-s N] [--limit-s N] "
               "[--sample-ms N] [--key-prefix P] [--api-key KEY] [--max-concurrency N] "
               "[--rate R] [--priority batch|interactive]\n",
               problem);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      usage("help");
    if (i + 1 >= argc)
      usage(("missing value for " + arg).c_str());
    const std::string value = argv[++i];
    auto number = [&](int& out) {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || v <= 0 || v > 10'000'000)
        usage((arg + " needs a positive integer").c_str());
      out = static_cast<int>(v);
    };
    if (arg == "--url") {
      o.url = value;
    } else if (arg == "--pg") {
      o.pg = value;
    } else if (arg == "--tasks") {
      number(o.tasks);
    } else if (arg == "--users") {
      number(o.users);
    } else if (arg == "--text") {
      o.text = value;
    } else if (arg == "--concurrency") {
      number(o.concurrency);
    } else if (arg == "--task-timeout-s") {
      number(o.task_timeout_s);
    } else if (arg == "--limit-s") {
      number(o.limit_s);
    } else if (arg == "--sample-ms") {
      number(o.sample_ms);
    } else if (arg == "--key-prefix") {
      o.key_prefix = value;
    } else if (arg == "--api-key") {
      o.api_key = value;
    } else if (arg == "--max-concurrency") {
      number(o.max_concurrency);
    } else if (arg == "--rate") {
      char* end = nullptr;
      o.rate = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(o.rate > 0 && o.rate <= 1e6))
        usage("--rate needs a number of tasks per second in (0, 1000000]");
    } else if (arg == "--priority") {
      if (value != "batch" && value != "interactive")
        usage("--priority is batch or interactive");
      o.priority = value;
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  if (o.url.empty() || o.pg.empty())
    usage("--url and --pg are required");
  if (o.api_key.empty()) {
    const char* key = std::getenv("AGENTFLEET_API_KEY");
    o.api_key = key ? key : "";
  }
  return o;
}

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\')
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

struct Submitted {
  std::atomic<int> next{0};
  std::atomic<int> accepted{0};
  std::atomic<int> failed{0};
};

// Each user's max_concurrency override (PUT /v1/users/{id}/limits, an admin key), so the
// per-user limits let the load through. False when the dispatcher refused.
asio::awaitable<bool> set_limits(const Options& o) {
  auto executor = co_await asio::this_coro::executor;
  for (int u = 0; u < o.users; ++u) {
    agentfleet::http::ClientRequest request;
    request.method = boost::beast::http::verb::put;
    request.url = o.url + "/v1/users/" + o.key_prefix + "-u" + std::to_string(u) + "/limits";
    request.body = "{\"max_concurrency\":" + std::to_string(o.max_concurrency) +
                   ",\"requests_per_minute\":1000000,\"tokens_per_minute\":1000000000000"
                   ",\"max_queued\":" +
                   std::to_string(o.tasks) + "}";
    request.headers.emplace_back("Authorization", "Bearer " + o.api_key);
    request.deadline = Clock::now() + std::chrono::seconds(10);
    auto response = co_await agentfleet::http::fetch(executor, std::move(request));
    if (!response.ok() || response.status != 200) {
      std::fprintf(stderr, "loadgen: setting limits failed: %d %s%s\n", response.status,
                   response.error_message.c_str(), response.body.c_str());
      co_return false;
    }
  }
  co_return true;
}

// One submitter: takes the next index until none is left; a refused or failed request is
// retried (bounded, backing off) so a busy dispatcher slows the load instead of losing it.
asio::awaitable<void> submitter(const Options& o, Submitted& s, Clock::time_point start,
                                agentfleet::http::ConnectionPool& connections) {
  auto executor = co_await asio::this_coro::executor;
  for (int i = s.next++; i < o.tasks; i = s.next++) {
    if (o.rate > 0) {
      asio::steady_timer due(executor, start + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(i / o.rate)));
      boost::system::error_code ec;
      co_await due.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    const std::string body = "{\"user_id\":\"" + o.key_prefix + "-u" + std::to_string(i % o.users) +
                             "\",\"text\":\"" + json_escape(o.text) + "\",\"priority\":\"" +
                             o.priority + "\",\"timeout_s\":" + std::to_string(o.task_timeout_s) +
                             ",\"idempotency_key\":\"" + o.key_prefix + "-" + std::to_string(i) +
                             "\"}";
    bool done = false;
    for (int attempt = 0; attempt < 6 && !done; ++attempt) {
      agentfleet::http::ClientRequest request;
      request.url = o.url + "/v1/tasks";
      request.body = body;
      request.headers.emplace_back("Authorization", "Bearer " + o.api_key);
      request.deadline = Clock::now() + std::chrono::seconds(10);
      auto response = co_await agentfleet::http::fetch(executor, std::move(request), &connections);
      if (response.ok() && (response.status == 201 || response.status == 200)) {
        done = true;
        break;
      }
      asio::steady_timer pause(executor, std::chrono::milliseconds(100 << attempt));
      boost::system::error_code ec;
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ++(done ? s.accepted : s.failed);
  }
}

struct Observed {
  long max_running = 0;
  double first_running_s = -1;
  double all_terminal_s = -1;
  long terminal = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const auto started = Clock::now();
  auto seconds_since = [&](Clock::time_point from) {
    return std::chrono::duration<double>(Clock::now() - from).count();
  };

  // Watch Postgres on a thread of its own while the submitters run, until as many tasks
  // ended as were accepted (all of them until the submission is over).
  std::atomic<bool> stop{false};
  std::atomic<int> expected{o.tasks};
  Observed seen;
  std::string watch_error;
  // Its users' ids as a Postgres array: the progress reads below find their tasks through
  // the (user_id, idempotency_key) index instead of scanning every task, which under a
  // large backlog took CPU from the fleet being measured.
  std::string user_ids = "{";
  for (int u = 0; u < o.users; ++u) {
    user_ids += u ? ",\"" : "\"";
    for (char ch : o.key_prefix + "-u" + std::to_string(u)) {
      if (ch == '"' || ch == '\\')
        user_ids += '\\';
      user_ids += ch;
    }
    user_ids += '"';
  }
  user_ids += '}';
  std::thread watcher([&] {
    try {
      pqxx::connection db(o.pg);
      const auto limit = started + std::chrono::seconds(o.limit_s);
      while (!stop && Clock::now() < limit) {
        pqxx::nontransaction tx(db);
        auto row = tx.exec_params1(
            "SELECT count(*) FILTER (WHERE status = 'running'), "
            "count(*) FILTER (WHERE status IN ('succeeded','failed','timed_out','cancelled')) "
            "FROM tasks WHERE user_id = ANY($2::text[]) AND idempotency_key LIKE $1 || '-%'",
            o.key_prefix, user_ids);
        const long running = row[0].as<long>();
        seen.terminal = row[1].as<long>();
        if (running > 0 && seen.first_running_s < 0)
          seen.first_running_s = seconds_since(started);
        seen.max_running = std::max(seen.max_running, running);
        if (seen.terminal >= expected.load()) {
          seen.all_terminal_s = seconds_since(started);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(o.sample_ms));
      }
    } catch (const std::exception& e) {
      watch_error = e.what();
    }
  });

  if (o.max_concurrency > 0) {
    asio::io_context io(1);
    auto ok = asio::co_spawn(io, set_limits(o), asio::use_future);
    io.run();
    bool limits_set = false;
    try {
      limits_set = ok.get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loadgen: setting limits failed: %s\n", e.what());
    }
    if (!limits_set) {
      stop = true;
      watcher.join();
      return 1;
    }
  }
  Submitted submitted;
  const auto submit_start = Clock::now();
  {
    asio::io_context io(1);
    // Keep-alive, as an upstream service submits: one connection per submitter at most.
    agentfleet::http::ConnectionPool connections(agentfleet::http::ConnectionPoolOptions{
        static_cast<std::size_t>(o.concurrency), std::chrono::milliseconds(30000)});
    for (int i = 0; i < o.concurrency; ++i)
      asio::co_spawn(io, submitter(o, submitted, submit_start, connections), asio::detached);
    io.run();
    std::fprintf(stderr, "loadgen: %llu connections opened for %d submissions\n",
                 static_cast<unsigned long long>(connections.stats().opened),
                 submitted.accepted.load() + submitted.failed.load());
    connections.clear();
  }
  expected = submitted.accepted.load();
  const double submit_s = seconds_since(submit_start);
  std::printf("submitted %d of %d tasks in %.2f s (%.0f/s), %d refused or failed\n",
              submitted.accepted.load(), o.tasks, submit_s, submitted.accepted / submit_s,
              submitted.failed.load());
  std::fflush(stdout);
  watcher.join();
  if (!watch_error.empty()) {
    std::fprintf(stderr, "agentfleet-loadgen: watching Postgres failed: %s\n", watch_error.c_str());
    return 1;
  }

  try {
    pqxx::connection db(o.pg);
    pqxx::nontransaction tx(db);
    auto r = tx.exec_params1(
        R"SQL(
SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'timed_out'), count(*) FILTER (WHERE status = 'cancelled'),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)), 0),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)), 0),
       coalesce(extract(epoch FROM max(finished_at) - min(started_at)), 0),
       coalesce(max(attempt), 0)
FROM tasks WHERE user_id = ANY($2::text[]) AND idempotency_key LIKE $1 || '-%')SQL",
        o.key_prefix, user_ids);
    const long succeeded = r[0].as<long>(), failed = r[1].as<long>(), timed_out = r[2].as<long>(),
               cancelled = r[3].as<long>();
    const double span = r[8].as<double>();
    const double throughput = span > 0 ? (succeeded + failed + timed_out + cancelled) / span : 0;
    // What a benchmark may call throughput: the tasks that succeeded, over the same span.
    const double succeeded_per_s = span > 0 ? succeeded / span : 0;
    std::printf(
        "terminal %ld of %d (succeeded %ld, failed %ld, timed_out %ld, cancelled %ld); "
        "most running at once %ld; %.1f tasks/s ended, %.1f succeeded, from first start to "
        "last finish\n"
        "run time p50 %.3f s, p99 %.3f s; queue wait p50 %.3f s, p99 %.3f s\n",
        seen.terminal, o.tasks, succeeded, failed, timed_out, cancelled, seen.max_running,
        throughput, succeeded_per_s, r[4].as<double>(), r[5].as<double>(), r[6].as<double>(),
        r[7].as<double>());
    std::printf(
        "{\"tasks\":%d,\"submitted\":%d,\"submit_s\":%.3f,\"terminal\":%ld,\"succeeded\":%ld,"
        "\"failed\":%ld,\"timed_out\":%ld,\"cancelled\":%ld,\"max_running\":%ld,"
        "\"all_terminal_s\":%.3f,\"tasks_per_s\":%.2f,\"succeeded_per_s\":%.2f,\"run_p50_s\":%.3f,"
        "\"run_p99_s\":%.3f,"
        "\"queue_wait_p50_s\":%.3f,\"queue_wait_p99_s\":%.3f,\"max_attempt\":%d}\n",
        o.tasks, submitted.accepted.load(), submit_s, seen.terminal, succeeded, failed, timed_out,
        cancelled, seen.max_running, seen.all_terminal_s, throughput, succeeded_per_s,
        r[4].as<double>(), r[5].as<double>(), r[6].as<double>(), r[7].as<double>(), r[9].as<int>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentfleet-loadgen: reading the results failed: %s\n", e.what());
    return 1;
  }
  return seen.terminal >= o.tasks && submitted.accepted == o.tasks ? 0 : 1;
}
