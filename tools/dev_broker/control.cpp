#include "tools/dev_broker/control.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

namespace agentfleet::dev_broker {

namespace {

constexpr std::size_t kMaxLine = 1024;
// A client that sends nothing for this long is dropped, so one idle connection cannot
// hold the port.
constexpr int kIdleClientMs = 60000;

// Kafka request names by API key (the ones a fault is useful for).
constexpr std::array<std::pair<std::string_view, int>, 27> kApiKeys{{
    {"Produce", 0},
    {"Fetch", 1},
    {"ListOffsets", 2},
    {"Metadata", 3},
    {"LeaderAndIsr", 4},
    {"StopReplica", 5},
    {"UpdateMetadata", 6},
    {"ControlledShutdown", 7},
    {"OffsetCommit", 8},
    {"OffsetFetch", 9},
    {"FindCoordinator", 10},
    {"JoinGroup", 11},
    {"Heartbeat", 12},
    {"LeaveGroup", 13},
    {"SyncGroup", 14},
    {"DescribeGroups", 15},
    {"ListGroups", 16},
    {"SaslHandshake", 17},
    {"ApiVersions", 18},
    {"CreateTopics", 19},
    {"DeleteTopics", 20},
    {"DeleteRecords", 21},
    {"InitProducerId", 22},
    {"OffsetForLeaderEpoch", 23},
    {"AddPartitionsToTxn", 24},
    {"AddOffsetsToTxn", 25},
    {"EndTxn", 26},
}};

std::optional<int> parse_int(std::string_view s, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) {
      ++i;
    }
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
      ++i;
    }
    if (i > start) {
      words.push_back(line.substr(start, i - start));
    }
  }
  return words;
}

std::string range_text(int lo, int hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

const char kControlHelp[] =
    "commands: brokers | broker-down ID [SECONDS] | broker-up ID | rtt ID MS [SECONDS] | "
    "request-errors API ERROR COUNT | clear-errors API | leader TOPIC PARTITION BROKER | faults | "
    "help";

std::optional<int> api_key_by_name(std::string_view name) {
  for (const auto& [api, key] : kApiKeys) {
    if (api == name) {
      return key;
    }
  }
  return parse_int(name, 0, 67);
}

std::string api_name(int api_key) {
  for (const auto& [api, key] : kApiKeys) {
    if (key == api_key)
      return std::string(api);
  }
  return std::to_string(api_key);
}

std::optional<int> error_by_name(std::string_view name) {
  if (auto n = parse_int(name, 1, 1000)) {
    return n;
  }
  if (name.starts_with("ERR_")) {
    name.remove_prefix(4);
  }
  // Broker error codes as librdkafka names them (positive codes are the wire's).
  for (int code = 1; code < 200; ++code) {
    if (name == rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(code))) {
      return code;
    }
  }
  return std::nullopt;
}

Parsed parse_control_command(std::string_view line, int brokers) {
  const auto w = words_of(line);
  if (w.empty()) {
    return {std::nullopt, "empty command; " + std::string(kControlHelp)};
  }
  const std::string_view verb = w[0];
  auto arity = [&](std::size_t lo, std::size_t hi) { return w.size() >= lo && w.size() <= hi; };
  auto broker_at = [&](std::size_t i, std::string& error) -> std::optional<int> {
    auto id = parse_int(w[i], 1, brokers);
    if (!id) {
      error = "no broker '" + std::string(w[i]) + "' (ids " + range_text(1, brokers) + ")";
    }
    return id;
  };
  auto seconds_at = [&](std::size_t i, std::string& error) -> std::optional<int> {
    if (i >= w.size()) {
      return kDefaultFaultSeconds;
    }
    auto s = parse_int(w[i], 1, kMaxFaultSeconds);
    if (!s) {
      error = "SECONDS must be " + range_text(1, kMaxFaultSeconds);
    }
    return s;
  };
  std::string error;
  if (verb == "help" && arity(1, 1)) {
    return {Help{}, {}};
  }
  if (verb == "brokers" && arity(1, 1)) {
    return {ListBrokers{}, {}};
  }
  if (verb == "faults" && arity(1, 1)) {
    return {ListFaults{}, {}};
  }
  if (verb == "broker-down" && arity(2, 3)) {
    auto id = broker_at(1, error);
    auto seconds = id ? seconds_at(2, error) : std::nullopt;
    if (id && seconds) {
      return {BrokerDown{*id, *seconds}, {}};
    }
    return {std::nullopt, error};
  }
  if (verb == "broker-up" && arity(2, 2)) {
    if (auto id = broker_at(1, error)) {
      return {BrokerUp{*id}, {}};
    }
    return {std::nullopt, error};
  }
  if (verb == "rtt" && arity(3, 4)) {
    auto id = broker_at(1, error);
    auto ms = id ? parse_int(w[2], 0, kMaxRttMs) : std::nullopt;
    if (id && !ms) {
      error = "MS must be " + range_text(0, kMaxRttMs);
    }
    auto seconds = ms ? seconds_at(3, error) : std::nullopt;
    if (id && ms && seconds) {
      return {SetRtt{*id, *ms, *seconds}, {}};
    }
    return {std::nullopt, error};
  }
  if (verb == "request-errors" && arity(4, 4)) {
    auto api = api_key_by_name(w[1]);
    if (!api) {
      return {std::nullopt, "unknown API '" + std::string(w[1]) +
                                "' (a name such as Produce, "
                                "Fetch, Metadata, or 0..67)"};
    }
    auto err = error_by_name(w[2]);
    if (!err) {
      return {std::nullopt, "unknown error '" + std::string(w[2]) +
                                "' (a name such as NOT_LEADER_FOR_PARTITION, or a code)"};
    }
    auto count = parse_int(w[3], 1, kMaxErrorCount);
    if (!count) {
      return {std::nullopt, "COUNT must be " + range_text(1, kMaxErrorCount)};
    }
    return {RequestErrors{*api, *err, *count}, {}};
  }
  if (verb == "clear-errors" && arity(2, 2)) {
    if (auto api = api_key_by_name(w[1])) {
      return {ClearErrors{*api}, {}};
    }
    return {std::nullopt, "unknown API '" + std::string(w[1]) + "'"};
  }
  if (verb == "leader" && arity(4, 4)) {
    auto partition = parse_int(w[2], 0, 100000);
    if (!partition) {
      return {std::nullopt, "PARTITION must be a number"};
    }
    if (auto id = broker_at(3, error)) {
      return {MoveLeader{std::string(w[1]), *partition, *id}, {}};
    }
    return {std::nullopt, error};
  }
  return {std::nullopt,
          "cannot read '" + std::string(line.substr(0, 80)) + "'; " + std::string(kControlHelp)};
}

ControlServer::ControlServer(rd_kafka_mock_cluster_t* cluster, int brokers, FaultEffects& effects)
    : cluster_(cluster), brokers_(brokers), effects_(effects) {}

ControlServer::~ControlServer() {
  stop();
}

std::optional<int> ControlServer::start(int port, std::string& error) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || ::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 4) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    error = "control port " + std::to_string(port) + ": " + std::strerror(errno);
    return std::nullopt;
  }
  thread_ = std::thread([this] { run(); });
  return ntohs(addr.sin_port);
}

void ControlServer::stop() {
  if (stopping_.exchange(true)) {
    return;
  }
  if (wake_[1] >= 0) {
    char c = 0;
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  restore_due(true);
  for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  }
}

std::string ControlServer::apply(const ControlCommand& command) {
  const auto now = std::chrono::steady_clock::now();
  auto result = [](rd_kafka_resp_err_t err, std::string done) {
    return err == RD_KAFKA_RESP_ERR_NO_ERROR ? "ok " + done
                                             : "error " + std::string(rd_kafka_err2str(err));
  };
  auto named = [](int fault) { return " (fault " + std::to_string(fault) + ")"; };
  // Ends the faults a restore of `broker` would have ended (a broker up, its latency 0).
  auto end_restores = [&](int broker, bool up) {
    std::erase_if(restores_, [&](const Restore& r) {
      if (r.broker != broker || (up ? !r.up : !r.rtt))
        return false;
      effects_.end(r.fault);
      return true;
    });
  };
  return std::visit(
      [&](const auto& c) -> std::string {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, Help>) {
          return std::string("ok ") + kControlHelp;
        } else if constexpr (std::is_same_v<C, ListFaults>) {
          return "ok " + effects_.listing_json();
        } else if constexpr (std::is_same_v<C, ListBrokers>) {
          std::string ids;
          for (int id = 1; id <= brokers_; ++id) {
            ids += (id > 1 ? " " : "") + std::to_string(id);
          }
          return "ok " + ids;
        } else if constexpr (std::is_same_v<C, BrokerDown>) {
          // Counted from before the call: the connections close as the broker goes down.
          const int fault = effects_.add_broker_down(c.broker);
          auto err = rd_kafka_mock_broker_set_down(cluster_, c.broker);
          if (err) {
            effects_.end(fault);
            return result(err, "");
          }
          restores_.push_back(
              {now + std::chrono::seconds(c.seconds), c.broker, true, false, fault});
          return result(err, "broker " + std::to_string(c.broker) + " down for " +
                                 std::to_string(c.seconds) + " s" + named(fault));
        } else if constexpr (std::is_same_v<C, BrokerUp>) {
          end_restores(c.broker, true);
          return result(rd_kafka_mock_broker_set_up(cluster_, c.broker),
                        "broker " + std::to_string(c.broker) + " up");
        } else if constexpr (std::is_same_v<C, SetRtt>) {
          end_restores(c.broker, false);
          const int fault = c.ms > 0 ? effects_.add_rtt(c.broker, c.ms) : 0;
          auto err = rd_kafka_mock_broker_set_rtt(cluster_, c.broker, c.ms);
          if (err) {
            effects_.end(fault);
            return result(err, "");
          }
          if (c.ms == 0) {
            return result(err, "broker " + std::to_string(c.broker) + " rtt back to 0");
          }
          restores_.push_back(
              {now + std::chrono::seconds(c.seconds), c.broker, false, true, fault});
          return result(err, "broker " + std::to_string(c.broker) + " rtt " + std::to_string(c.ms) +
                                 " ms for " + std::to_string(c.seconds) + " s" + named(fault));
        } else if constexpr (std::is_same_v<C, RequestErrors>) {
          const auto error = static_cast<rd_kafka_resp_err_t>(c.error);
          std::vector<rd_kafka_resp_err_t> errors(static_cast<std::size_t>(c.count), error);
          const int fault =
              effects_.add_request_errors(api_name(c.api_key), rd_kafka_err2name(error), c.count);
          rd_kafka_mock_push_request_errors_array(cluster_, static_cast<std::int16_t>(c.api_key),
                                                  errors.size(), errors.data());
          return "ok next " + std::to_string(c.count) + " requests of API " +
                 std::to_string(c.api_key) + " fail with " + rd_kafka_err2name(error) +
                 named(fault);
        } else if constexpr (std::is_same_v<C, ClearErrors>) {
          rd_kafka_mock_clear_request_errors(cluster_, static_cast<std::int16_t>(c.api_key));
          effects_.clear(api_name(c.api_key));
          return "ok errors of API " + std::to_string(c.api_key) + " cleared";
        } else {
          auto err =
              rd_kafka_mock_partition_set_leader(cluster_, c.topic.c_str(), c.partition, c.broker);
          if (err)
            return result(err, "");
          // The partition's earlier move ends: its leader is this one now.
          const std::string where = c.topic + "/" + std::to_string(c.partition);
          for (auto it = leader_faults_.begin(); it != leader_faults_.end(); ++it) {
            if (it->first == where) {
              effects_.end(it->second);
              leader_faults_.erase(it);
              break;
            }
          }
          const int fault = effects_.add_leader_move(c.topic, c.partition, c.broker);
          leader_faults_.emplace_back(where, fault);
          if (leader_faults_.size() > FaultEffects::kMaxKept)
            leader_faults_.erase(leader_faults_.begin());
          return result(err, c.topic + " [" + std::to_string(c.partition) + "] led by broker " +
                                 std::to_string(c.broker) + named(fault));
        }
      },
      command);
}

void ControlServer::restore_due(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Restore> keep;
  for (const Restore& r : restores_) {
    if (!all && r.at > now) {
      keep.push_back(r);
      continue;
    }
    if (r.up) {
      rd_kafka_mock_broker_set_up(cluster_, r.broker);
      std::fprintf(stderr, "dev-broker: control: broker %d up again\n", r.broker);
    }
    if (r.rtt) {
      rd_kafka_mock_broker_set_rtt(cluster_, r.broker, 0);
      std::fprintf(stderr, "dev-broker: control: broker %d rtt back to 0\n", r.broker);
    }
    effects_.end(r.fault);
  }
  restores_ = std::move(keep);
}

int ControlServer::next_wait_ms() const {
  int wait = 1000;
  const auto now = std::chrono::steady_clock::now();
  for (const Restore& r : restores_) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(r.at - now).count();
    wait = std::min<int>(wait, static_cast<int>(std::max<long long>(0, ms)));
  }
  return wait;
}

void ControlServer::run() {
  while (!stopping_) {
    restore_due(false);
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = ::poll(fds, 2, next_wait_ms());
    if (n <= 0 || stopping_) {
      continue;
    }
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        serve(fd);
        ::close(fd);
      }
    }
  }
}

void ControlServer::serve(int fd) {
  std::string buffer;
  auto idle_since = std::chrono::steady_clock::now();
  while (!stopping_) {
    restore_due(false);
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = ::poll(fds, 2, next_wait_ms());
    if (n < 0 && errno != EINTR) {
      return;
    }
    if (n <= 0) {
      if (std::chrono::steady_clock::now() - idle_since >
          std::chrono::milliseconds(kIdleClientMs)) {
        write_all(fd, "error idle for too long; closing\n");
        return;
      }
      continue;
    }
    if (fds[1].revents & POLLIN) {
      return;
    }
    char chunk[512];
    ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return;
    }
    idle_since = std::chrono::steady_clock::now();
    buffer.append(chunk, static_cast<std::size_t>(got));
    std::size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      Parsed parsed = parse_control_command(line, brokers_);
      std::string reply = parsed.command ? apply(*parsed.command) : "error " + parsed.error;
      std::fprintf(stderr, "dev-broker: control: %s -> %s\n", line.c_str(), reply.c_str());
      if (!write_all(fd, reply + "\n")) {
        return;
      }
    }
    if (buffer.size() > kMaxLine) {
      write_all(fd, "error line longer than 1024 bytes; closing\n");
      return;
    }
  }
}

}  // namespace agentfleet::dev_broker
