// agentfleet-dev-broker: a Kafka "broker" for development and tests.
//
// It hosts librdkafka's in-process mock cluster (librdkafka/rdkafka_mock.h), which speaks
// the real Kafka protocol on 127.0.0.1 ports chosen by the kernel. Other processes (the
// dispatcher, workers, kcat, tests) connect to it like to any Kafka cluster, using the
// bootstrap servers this program prints. It supports produce (keys, headers,
// idempotence), fetch, metadata for several brokers, and consumer groups with
// rebalancing and committed offsets. Everything is in memory: data is lost on exit.
//
// Lifecycle:
//   1. Parse flags (bad flags: message on stderr, exit 2).
//   2. Block SIGINT/SIGTERM in every thread (before librdkafka starts its threads).
//   3. Create a producer handle (the mock cluster needs one for bookkeeping), create the
//      mock cluster with --brokers brokers, create each topic.
//   4. Probe: a separate client fetches metadata through the bootstrap servers, as an
//      external process would, and checks that every broker and topic is visible.
//   5. Print `bootstrap.servers=<list>` and one line per topic on stdout; write the
//      bootstrap list to --bootstrap-file (atomically: temporary file + rename).
//   6. With --control-port or --control-file: start the fault-injection port
//      (control.hpp), print `control.port=P`, write P to --control-file.
//   7. Wait in sigwait() for SIGINT/SIGTERM; then stop the control port (restoring any
//      fault still in force), remove the files, destroy the cluster and the handle, exit
//      0. Runtime failures exit 1.

#include "tools/dev_broker/control.hpp"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;
constexpr int kProbeTimeoutMs = 10000;

const char* const kDefaultTopics[] = {"agent.tasks.submit", "agent.tasks.dispatch",
                                      "agent.tasks.results", "agent.tasks.events",
                                      "agent.tasks.dlq"};

struct TopicSpec {
  std::string name;
  int partitions = 0;  // 0: use --partitions
};

struct Options {
  int brokers = 3;
  int partitions = 6;
  int replication = 0;  // 0: min(3, brokers)
  std::vector<TopicSpec> topics;
  std::string bootstrap_file;
  std::optional<int> control_port;  // set: start the control port (0 picks one)
  std::string control_file;
  bool help = false;
};

const char kUsage[] =
    "usage: agentfleet-dev-broker [options]\n"
    "Hosts librdkafka's mock Kafka cluster on 127.0.0.1 until SIGINT/SIGTERM.\n"
    "  --brokers N              number of brokers (default 3)\n"
    "  --partitions N           default partitions per topic (default 6)\n"
    "  --replication N          replication factor (default min(3, brokers))\n"
    "  --topic NAME[:PARTS]     create a topic (repeatable); without any, creates\n"
    "                           agent.tasks.{submit,dispatch,results,events,dlq}\n"
    "  --bootstrap-file PATH    write the bootstrap servers + newline to PATH once ready\n"
    "  --control-port N         fault injection on 127.0.0.1:N (0 picks a port); see\n"
    "                           tools/dev_broker/README.md for the commands\n"
    "  --control-file PATH      write the control port + newline to PATH once ready\n"
    "                           (implies --control-port 0 unless one is given)\n"
    "  --help                   show this help\n"
    "Prints `bootstrap.servers=<list>` and one `topic=...` line per topic on stdout.\n";

// Parses a decimal integer in [lo, hi]; nullopt on anything else.
std::optional<int> ParseInt(std::string_view s, int lo, int hi) {
  int v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

// Kafka topic names: 1..249 characters of [a-zA-Z0-9._-].
bool ValidTopicName(std::string_view s) {
  if (s.empty() || s.size() > 249 || s == "." || s == "..") {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Returns an error message, or an empty string when the flags are valid.
std::string ParseArgs(int argc, char** argv, Options& opts) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "--help" || arg == "-h") {
      opts.help = true;
      continue;
    }
    const bool takes_value =
        arg == "--brokers" || arg == "--partitions" || arg == "--replication" || arg == "--topic" ||
        arg == "--bootstrap-file" || arg == "--control-port" || arg == "--control-file";
    if (!takes_value) {
      return "unknown argument: " + std::string(argv[i]);
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return "missing value for " + std::string(arg);
      }
      value = argv[++i];
    }
    if (arg == "--brokers" || arg == "--partitions" || arg == "--replication") {
      auto n = ParseInt(value, 1, arg == "--partitions" ? 10000 : 100);
      if (!n) {
        return "invalid value for " + std::string(arg) + ": '" + std::string(value) + "'";
      }
      (arg == "--brokers"      ? opts.brokers
       : arg == "--partitions" ? opts.partitions
                               : opts.replication) = *n;
    } else if (arg == "--control-port") {
      auto n = ParseInt(value, 0, 65535);
      if (!n) {
        return "invalid value for --control-port: '" + std::string(value) + "'";
      }
      opts.control_port = *n;
    } else if (arg == "--control-file") {
      if (value.empty()) {
        return "empty value for --control-file";
      }
      opts.control_file = std::string(value);
    } else if (arg == "--topic") {
      TopicSpec spec;
      std::string_view name = value;
      if (auto colon = value.rfind(':'); colon != std::string_view::npos) {
        name = value.substr(0, colon);
        auto n = ParseInt(value.substr(colon + 1), 1, 10000);
        if (!n) {
          return "invalid partition count in --topic '" + std::string(value) + "'";
        }
        spec.partitions = *n;
      }
      if (!ValidTopicName(name)) {
        return "invalid topic name in --topic '" + std::string(value) + "'";
      }
      spec.name = std::string(name);
      opts.topics.push_back(std::move(spec));
    } else {
      if (value.empty()) {
        return "empty value for --bootstrap-file";
      }
      opts.bootstrap_file = std::string(value);
    }
  }
  if (opts.replication == 0) {
    opts.replication = std::min(3, opts.brokers);
  }
  if (!opts.control_file.empty() && !opts.control_port) {
    opts.control_port = 0;
  }
  if (opts.replication > opts.brokers) {
    return "--replication " + std::to_string(opts.replication) + " exceeds --brokers " +
           std::to_string(opts.brokers);
  }
  if (opts.topics.empty()) {
    for (const char* name : kDefaultTopics) {
      opts.topics.push_back({name, 0});
    }
  }
  for (auto& t : opts.topics) {
    if (t.partitions == 0) {
      t.partitions = opts.partitions;
    }
  }
  return {};
}

// Writes `content` to `path` via a temporary file in the same directory and rename(2),
// so a reader never sees a partial file.
bool WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "dev-broker: cannot create %s: %s\n", tmp.c_str(), std::strerror(errno));
    return false;
  }
  bool ok = std::fputs(content.c_str(), f) >= 0 && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
  }
  if (!ok) {
    std::fprintf(stderr, "dev-broker: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::remove(tmp.c_str());
  }
  return ok;
}

// Connects to the cluster through `bootstraps` with a separate client, as another
// process would, and checks that all brokers and topics (with their partition counts)
// are visible in the metadata.
bool ProbeCluster(const std::string& bootstraps, const Options& opts) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    std::fprintf(stderr, "dev-broker: probe config: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return false;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    std::fprintf(stderr, "dev-broker: probe client: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return false;
  }
  const struct rd_kafka_metadata* md = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &md, kProbeTimeoutMs);
  bool ok = err == RD_KAFKA_RESP_ERR_NO_ERROR;
  if (!ok) {
    std::fprintf(stderr, "dev-broker: probe metadata: %s\n", rd_kafka_err2str(err));
  } else {
    if (md->broker_cnt != opts.brokers) {
      std::fprintf(stderr, "dev-broker: probe sees %d brokers, expected %d\n", md->broker_cnt,
                   opts.brokers);
      ok = false;
    }
    for (const auto& want : opts.topics) {
      const auto* begin = md->topics;
      const auto* end = md->topics + md->topic_cnt;
      const auto* it = std::find_if(
          begin, end, [&](const rd_kafka_metadata_topic& t) { return want.name == t.topic; });
      if (it == end || it->err != RD_KAFKA_RESP_ERR_NO_ERROR ||
          it->partition_cnt != want.partitions) {
        std::fprintf(stderr, "dev-broker: probe: topic %s missing or incomplete\n",
                     want.name.c_str());
        ok = false;
      }
    }
    rd_kafka_metadata_destroy(md);
  }
  rd_kafka_destroy(rk);
  return ok;
}

// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForStopSignal(const sigset_t& stop_signals) {
  for (;;) {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) == 0) {
      return sig;
    }
  }
}

// The hosting handle's log: the mock cluster's debug lines feed the faults' effects
// (fault_effects.hpp); warnings and errors reach stderr as librdkafka writes them.
void OnLog(const rd_kafka_t* rk, int level, const char* facility, const char* line) {
  if (level <= 4) {
    std::fprintf(stderr, "%%%d|%s|%s\n", level, facility, line);
    return;
  }
  if (std::strcmp(facility, "MOCK") == 0) {
    if (auto* effects = static_cast<agentfleet::dev_broker::FaultEffects*>(rd_kafka_opaque(rk)))
      effects->on_log_line(line);
  }
}

int Run(const Options& opts, const sigset_t& stop_signals) {
  char errstr[512];
  agentfleet::dev_broker::FaultEffects effects;
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  // The handle only hosts the cluster; it never connects anywhere itself. Its "mock" debug
  // lines (a line a request) go to OnLog only; the notice about the missing
  // bootstrap.servers goes nowhere.
  for (const auto& [name, value] : {std::pair{"log_level", "7"}, std::pair{"debug", "mock"}}) {
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
      std::fprintf(stderr, "dev-broker: %s: %s\n", name, errstr);
  }
  rd_kafka_conf_set_log_cb(conf, OnLog);
  rd_kafka_conf_set_opaque(conf, &effects);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    std::fprintf(stderr, "dev-broker: rd_kafka_new: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return kExitFailure;
  }
  rd_kafka_mock_cluster_t* mcluster = rd_kafka_mock_cluster_new(rk, opts.brokers);
  if (mcluster == nullptr) {
    std::fprintf(stderr, "dev-broker: rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return kExitFailure;
  }
  int rc = 0;
  for (const auto& t : opts.topics) {
    rd_kafka_resp_err_t err =
        rd_kafka_mock_topic_create(mcluster, t.name.c_str(), t.partitions, opts.replication);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "dev-broker: cannot create topic %s: %s\n", t.name.c_str(),
                   rd_kafka_err2str(err));
      rc = kExitFailure;
      break;
    }
  }
  const std::string bootstraps = rd_kafka_mock_cluster_bootstraps(mcluster);
  if (rc == 0 && !ProbeCluster(bootstraps, opts)) {
    rc = kExitFailure;
  }
  if (rc == 0) {
    std::printf("bootstrap.servers=%s\n", bootstraps.c_str());
    for (const auto& t : opts.topics) {
      std::printf("topic=%s partitions=%d replication=%d\n", t.name.c_str(), t.partitions,
                  opts.replication);
    }
    std::fflush(stdout);
  }
  agentfleet::dev_broker::ControlServer control(mcluster, opts.brokers, effects);
  if (rc == 0 && opts.control_port) {
    std::string error;
    if (auto port = control.start(*opts.control_port, error)) {
      std::printf("control.port=%d\n", *port);
      std::fflush(stdout);
      if (!opts.control_file.empty() &&
          !WriteFileAtomically(opts.control_file, std::to_string(*port) + "\n")) {
        rc = kExitFailure;
      }
    } else {
      std::fprintf(stderr, "dev-broker: %s\n", error.c_str());
      rc = kExitFailure;
    }
  }
  // The bootstrap file comes last: whoever waits for it finds the control file there too.
  if (rc == 0 && !opts.bootstrap_file.empty() &&
      !WriteFileAtomically(opts.bootstrap_file, bootstraps + "\n")) {
    rc = kExitFailure;
  }
  if (rc == 0) {
    int sig = WaitForStopSignal(stop_signals);
    std::fprintf(stderr, "dev-broker: %s received, shutting down\n", strsignal(sig));
  }
  control.stop();
  for (const std::string& file : {opts.bootstrap_file, opts.control_file}) {
    if (!file.empty()) {
      std::remove(file.c_str());
    }
  }
  rd_kafka_mock_cluster_destroy(mcluster);
  rd_kafka_destroy(rk);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  if (std::string err = ParseArgs(argc, argv, opts); !err.empty()) {
    std::fprintf(stderr, "agentfleet-dev-broker: %s\n%s", err.c_str(), kUsage);
    return kExitUsage;
  }
  if (opts.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  // Block the stop signals before librdkafka creates threads, so they inherit the mask
  // and the signals are delivered only to sigwait() in this thread.
  // A shell starts background jobs with SIGINT ignored, and an ignored signal is
  // discarded even while blocked; restore the default so that sigwait() sees it.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int e = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); e != 0) {
    std::fprintf(stderr, "dev-broker: pthread_sigmask: %s\n", std::strerror(e));
    return kExitFailure;
  }
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the cluster
  return Run(opts, stop_signals);
}
