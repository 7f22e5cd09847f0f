#pragma once
// The OpenAI-compatible chat completions client (a ports::ModelClient), built on the
// policies of core/limits.
//
// A model has one or more endpoints. Each endpoint has its own circuit breaker, its own
// request and token buckets (the provider account's per-minute limits), a cool-down that a
// 429's Retry-After sets, and an out-of-quota mark. A call goes round robin to an endpoint
// that is healthy and has room; when none has, it waits for the first to have room, but
// never past the call's deadline (the request's, already min(call timeout, task deadline)).
//
// Retried (bounded by max_retries and the deadline): 429, 500, 502, 503, 504, connection
// failures, timeouts of one attempt, and a 2xx body that is not a chat completion. After
// such a failure the call fails over at once to another endpoint that has not failed in
// this call, else waits (the server's Retry-After, never shorter, else full-jitter backoff)
// and tries again; a wait that would end past the deadline ends the call now instead.
// Not retried: other 4xx (the error names the status and the provider's message;
// 401/403/404 are kFatal, a misconfiguration, the rest kInvalid), and TLS / URL errors.
// Out of money (402, insufficient_quota and the like): the endpoint leaves the rotation for
// quota_cooloff_s and the call fails over, or ends with an "out of quota" error (kFatal).
//
// Connections are kept alive in a pool the client owns (see client.hpp).
//
// Thread-safety: NONE. The client, its endpoint state and its pool are used from one io
// thread (the worker's executor); no locks. Calls interleave at their co_awaits, which is
// safe on one thread. The client must outlive its calls.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/adapters/http/stream_client.hpp"
#include "core/config/config.hpp"
#include "core/limits/circuit_breaker.hpp"
#include "core/limits/clock.hpp"
#include "core/limits/retry_policy.hpp"
#include "core/ports/model_client.hpp"

namespace agentfleet::http {

enum class ModelOutcome {
  kOk,
  kRateLimited,     // 429 (not out of quota)
  kServerError,     // 500, 502, 503, 504
  kTimeout,         // the attempt ran out of time
  kConnectError,    // resolve, connect, TLS, write or read failed
  kBadResponse,     // 2xx whose body is not a chat completion
  kRejected,        // other statuses (400, 401, 403, ...): not retried
  kQuotaExhausted,  // the account is out of money
  kCircuitOpen,     // no HTTP: every usable endpoint's breaker is open
  kThrottled,       // no HTTP: the endpoints' request/token buckets have no room
};
inline constexpr std::size_t kModelOutcomeCount = 10;
std::string_view to_string(ModelOutcome outcome);

// Reported once per HTTP attempt; also, without HTTP (status 0), when a call first has to
// wait because no endpoint can take it (kThrottled / kCircuitOpen with retry_follows) and
// when it ends for that reason.
// The views point into the client's configuration: copy them to keep them past the call.
struct ModelAttempt {
  std::string_view model;
  std::string_view endpoint;  // the endpoint's configured name
  ModelOutcome outcome = ModelOutcome::kOk;
  int http_status = 0;  // 0 when no response
  std::chrono::milliseconds latency{0};
  bool retry_follows = false;  // another attempt (or a wait for one) follows in this call
};
using ModelAttemptObserver = std::function<void(const ModelAttempt&)>;

// Cumulative, since construction; for a closing report.
struct ModelClientCounters {
  std::uint64_t calls = 0;
  std::uint64_t calls_failed = 0;
  std::uint64_t attempts = 0;        // HTTP attempts
  std::uint64_t retries = 0;         // attempts made after a retryable failure (waits + failovers)
  std::uint64_t failovers = 0;       // of which went at once to another endpoint (incl. quota)
  std::uint64_t waits_for_room = 0;  // calls that waited because no endpoint could take them
  std::array<std::uint64_t, kModelOutcomeCount> by_outcome{};         // every report
  std::array<std::uint64_t, kModelOutcomeCount> retries_by_reason{};  // the failure retried
};

// Seams for tests; production leaves them all empty.
struct ModelClientHooks {
  // Sends one attempt; fetch() over the client's pool when empty.
  std::function<boost::asio::awaitable<ClientResponse>(ClientRequest)> transport;
  // Sends one attempt of a model that streams, handing a 2xx body to the sink piece by piece;
  // fetch_stream() (a connection of its own) when empty.
  std::function<boost::asio::awaitable<ClientResponse>(ClientRequest, BodySink)> stream_transport;
  const limits::Clock* clock = nullptr;  // SteadyClock when null; must outlive the client
  // Waits; an Asio steady_timer when empty (a fake advances a ManualClock instead).
  std::function<boost::asio::awaitable<void>(std::chrono::milliseconds)> sleep;
  limits::RandomSource random;  // a randomly seeded std::mt19937_64 when empty
  // Wall clock, for Retry-After HTTP-dates; std::chrono::system_clock::now when empty.
  std::function<std::chrono::system_clock::time_point()> wall_clock;
  ConnectionPoolOptions pool;
};

class OpenAiModelClient : public ports::ModelClient {
 public:
  OpenAiModelClient(boost::asio::any_io_executor executor, std::vector<config::ModelConfig> models,
                    ModelClientHooks hooks = {});
  ~OpenAiModelClient() override;

  boost::asio::awaitable<Result<ModelReply>> complete(ports::ModelRequest request) override;

  // Called synchronously on the io thread, once per ModelAttempt; must not throw.
  void set_observer(ModelAttemptObserver observer) { observer_ = std::move(observer); }
  const ModelClientCounters& counters() const { return counters_; }
  const ConnectionPool& pool() const { return pool_; }

  struct EndpointHealth {
    std::string model;
    std::string endpoint;
    limits::CircuitBreaker::State breaker = limits::CircuitBreaker::State::kClosed;
    bool out_of_quota = false;
  };
  std::vector<EndpointHealth> endpoint_health() const;

 private:
  struct Endpoint;
  struct Model;
  struct Choice;

  Choice choose(Model& model, limits::Clock::time_point now, int prefer,
                const std::vector<bool>& failed_here, const std::vector<bool>& broken_here,
                std::int64_t tokens);
  void report(const Model& model, std::string_view endpoint, ModelOutcome outcome, int status,
              std::chrono::milliseconds latency, bool retry_follows);
  boost::asio::awaitable<ClientResponse> send(ClientRequest request);
  // One attempt of a model that streams: its answer assembled (codec::ChatStreamAssembler)
  // into `body` as a whole answer would be, its text handed to `on_text` as it comes. A 2xx
  // stream that ends before its end is a lost connection of a request that was sent; one
  // that is not a chat completion stream is a 2xx body that does not parse.
  boost::asio::awaitable<ClientResponse> send_streamed(
      ClientRequest request, const std::function<void(std::string_view)>& on_text);
  boost::asio::awaitable<void> sleep(std::chrono::milliseconds duration);

  boost::asio::any_io_executor executor_;
  ModelClientHooks hooks_;
  const limits::Clock* clock_;
  ConnectionPool pool_;
  std::vector<std::unique_ptr<Model>> models_;
  ModelAttemptObserver observer_;
  ModelClientCounters counters_;
};

}  // namespace agentfleet::http
