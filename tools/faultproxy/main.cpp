// agentfleet-faultproxy: a TCP proxy on 127.0.0.1 that injects network faults on command.
//
// Tests and chaos runs put it between two processes (worker and Postgres, worker and the
// model's HTTP endpoint, ...) and tell it over its control port to drop into a blackhole,
// add latency, cap the bandwidth, reset every connection or refuse new ones (control.hpp,
// README.md).
//
// Lifecycle:
//   1. Parse flags (bad flags or a target that is not a loopback address: exit 2).
//   2. Raise the open-files limit as far as allowed (two descriptors per connection).
//   3. With --control-port/--control-file: bind the control port on 127.0.0.1, print
//      `control.port=P`, write --control-file. Then bind the proxy port, print
//      `listen.port=P`, write --port-file last, so waiting for it is enough. Files are
//      written atomically (a temporary file, then rename). A port that cannot be bound:
//      exit 1.
//   4. Serve on one io_context thread until SIGINT/SIGTERM; then close everything, remove
//      the files and exit 0.

#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "tools/faultproxy/proxy.hpp"

namespace {

namespace asio = boost::asio;
namespace fp = agentfleet::faultproxy;
using asio::ip::tcp;

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;
// Descriptors kept for everything that is not a proxied connection.
constexpr rlim_t kSpareFiles = 64;

struct Options {
  std::string target;  // HOST:PORT
  int listen_port = 0;
  std::string port_file;
  std::optional<int> control_port;  // set: open the control port (0 picks one)
  std::string control_file;
  bool help = false;
};

const char kUsage[] =
    "usage: agentfleet-faultproxy --target HOST:PORT [options]\n"
    "A TCP proxy on 127.0.0.1 to a loopback target that injects network faults on command.\n"
    "  --target HOST:PORT    where each client's connection goes (a loopback address)\n"
    "  --listen-port N       the proxy's port on 127.0.0.1 (default 0: pick one)\n"
    "  --port-file PATH      write the proxy's port + newline to PATH once ready (last)\n"
    "  --control-port N      fault injection on 127.0.0.1:N (0 picks a port); see\n"
    "                        tools/faultproxy/README.md for the commands\n"
    "  --control-file PATH   write the control port + newline to PATH (implies\n"
    "                        --control-port 0 unless one is given)\n"
    "  --help                show this help\n"
    "Prints `control.port=P` and `listen.port=P` on stdout.\n";

std::optional<int> parse_int(std::string_view s, int lo, int hi) {
  int v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

// Returns an error message, or an empty string when the flags are valid.
std::string parse_args(int argc, char** argv, Options& opts) {
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
    const bool takes_value = arg == "--target" || arg == "--listen-port" || arg == "--port-file" ||
                             arg == "--control-port" || arg == "--control-file";
    if (!takes_value) {
      return "unknown argument: " + std::string(argv[i]);
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return "missing value for " + std::string(arg);
      }
      value = argv[++i];
    }
    if (value.empty()) {
      return "empty value for " + std::string(arg);
    }
    if (arg == "--listen-port" || arg == "--control-port") {
      auto n = parse_int(value, 0, 65535);
      if (!n) {
        return "invalid value for " + std::string(arg) + ": '" + std::string(value) + "'";
      }
      if (arg == "--listen-port") {
        opts.listen_port = *n;
      } else {
        opts.control_port = *n;
      }
    } else if (arg == "--target") {
      opts.target = std::string(value);
    } else if (arg == "--port-file") {
      opts.port_file = std::string(value);
    } else {
      opts.control_file = std::string(value);
    }
  }
  if (!opts.help && opts.target.empty()) {
    return "--target HOST:PORT is required";
  }
  if (!opts.control_file.empty() && !opts.control_port) {
    opts.control_port = 0;
  }
  return {};
}

// HOST:PORT (HOST may be a name, an IPv4 address or a bracketed IPv6 one) to a loopback
// endpoint; nullopt with `error` set otherwise.
std::optional<tcp::endpoint> resolve_target(const std::string& target, std::string& error) {
  const auto colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    error = "--target must be HOST:PORT, not '" + target + "'";
    return std::nullopt;
  }
  std::string host = target.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const auto port = parse_int(std::string_view(target).substr(colon + 1), 1, 65535);
  if (!port) {
    error = "invalid port in --target '" + target + "'";
    return std::nullopt;
  }
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(host, std::to_string(*port), ec);
  if (ec) {
    error = "cannot resolve --target host '" + host + "': " + ec.message();
    return std::nullopt;
  }
  for (const auto& entry : results) {
    if (entry.endpoint().address().is_loopback()) {
      return entry.endpoint();
    }
  }
  error = "--target '" + target + "' is not a loopback address (the proxy only works on loopback)";
  return std::nullopt;
}

// Writes `content` to `path` via a temporary file in the same directory and rename(2), so a
// reader never sees a partial file.
bool write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "faultproxy: cannot create %s: %s\n", tmp.c_str(), std::strerror(errno));
    return false;
  }
  bool ok = std::fputs(content.c_str(), f) >= 0 && std::fflush(f) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
  }
  if (!ok) {
    std::fprintf(stderr, "faultproxy: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::remove(tmp.c_str());
  }
  return ok;
}

// Raises the soft open-files limit towards the hard one and returns how many connections
// fit in it (each takes two descriptors), at most kMaxConnections.
std::size_t connection_capacity() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return fp::kMaxConnections;
  }
  const rlim_t wanted = 2 * fp::kMaxConnections + kSpareFiles;
  if (limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur =
        limit.rlim_max == RLIM_INFINITY ? wanted : std::min<rlim_t>(wanted, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) {
    return fp::kMaxConnections;
  }
  return limit.rlim_cur > kSpareFiles ? static_cast<std::size_t>((limit.rlim_cur - kSpareFiles) / 2)
                                      : 1;
}

int run(const Options& opts, const tcp::endpoint& target) {
  const std::size_t capacity = connection_capacity();
  if (capacity < fp::kMaxConnections) {
    std::fprintf(stderr, "faultproxy: the open-files limit allows %zu connections\n", capacity);
  }
  asio::io_context io(1);
  fp::FaultProxy proxy(io, target, capacity);
  int rc = 0;
  std::uint16_t listen_port = 0;
  try {
    if (opts.control_port) {
      const auto port = proxy.open_control(static_cast<std::uint16_t>(*opts.control_port));
      std::printf("control.port=%u\n", port);
      std::fflush(stdout);
      if (!opts.control_file.empty() &&
          !write_file_atomically(opts.control_file, std::to_string(port) + "\n")) {
        rc = kExitFailure;
      }
    }
    if (rc == 0) {
      listen_port = proxy.open_listener(static_cast<std::uint16_t>(opts.listen_port));
    }
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "faultproxy: cannot listen: %s\n", e.what());
    rc = kExitFailure;
  }
  if (rc == 0) {
    std::printf("listen.port=%u\n", listen_port);
    std::fflush(stdout);
    // The port file comes last: whoever waits for it finds the control file there too.
    if (!opts.port_file.empty() &&
        !write_file_atomically(opts.port_file, std::to_string(listen_port) + "\n")) {
      rc = kExitFailure;
    }
  }
  if (rc == 0) {
    std::fprintf(stderr, "faultproxy: 127.0.0.1:%u -> %s:%u, mode pass\n", listen_port,
                 target.address().to_string().c_str(), target.port());
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (!ec) {
        std::fprintf(stderr, "faultproxy: %s received, shutting down\n", strsignal(sig));
        proxy.stop();
      }
    });
    proxy.start();
    io.run();
  }
  for (const std::string& file : {opts.port_file, opts.control_file}) {
    if (!file.empty()) {
      std::remove(file.c_str());
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  if (std::string err = parse_args(argc, argv, opts); !err.empty()) {
    std::fprintf(stderr, "agentfleet-faultproxy: %s\n%s", err.c_str(), kUsage);
    return kExitUsage;
  }
  if (opts.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string error;
  const auto target = resolve_target(opts.target, error);
  if (!target) {
    std::fprintf(stderr, "agentfleet-faultproxy: %s\n", error.c_str());
    return kExitUsage;
  }
  // A shell starts background jobs with SIGINT ignored; the signal_set must still see it.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGPIPE, SIG_IGN);  // a closed peer is an error code, not a death
  return run(opts, *target);
}
