#include "core/adapters/http/model_client.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include "core/codec/chat_stream.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/provider_error.hpp"
#include "core/codec/react_json_codec.hpp"
#include "core/codec/text_tool_calls.hpp"
#include "core/limits/retry_after.hpp"
#include "core/limits/token_bucket.hpp"
#include "core/react/context_budget.hpp"

namespace agentfleet::http {

namespace asio = boost::asio;
using limits::Clock;
using std::chrono::milliseconds;

std::string_view to_string(ModelOutcome outcome) {
  switch (outcome) {
    case ModelOutcome::kOk:
      return "ok";
    case ModelOutcome::kRateLimited:
      return "rate_limited";
    case ModelOutcome::kServerError:
      return "server_error";
    case ModelOutcome::kTimeout:
      return "timeout";
    case ModelOutcome::kConnectError:
      return "connect_error";
    case ModelOutcome::kBadResponse:
      return "bad_response";
    case ModelOutcome::kRejected:
      return "rejected";
    case ModelOutcome::kQuotaExhausted:
      return "quota_exhausted";
    case ModelOutcome::kCircuitOpen:
      return "circuit_open";
    case ModelOutcome::kThrottled:
      return "throttled";
  }
  return "unknown";
}

struct OpenAiModelClient::Endpoint {
  Endpoint(const config::ModelEndpoint& c, const config::ModelConfig& m, Clock::time_point now)
      : config(c),
        breaker(
            {m.circuit_breaker.failure_threshold, std::chrono::seconds(m.circuit_breaker.open_s)}),
        limits(c.requests_per_minute, c.tokens_per_minute, now) {}

  config::ModelEndpoint config;
  limits::CircuitBreaker breaker;
  limits::ProviderLimits limits;
  Clock::time_point cool_until{};   // a Retry-After asked us to stay away until then
  std::string cool_reason;          // e.g. "HTTP 429 asked to retry after 4000 ms"
  int rate_limited_streak = 0;      // 429s in a row: the adaptive back-off without Retry-After
  Clock::time_point cool_set_at{};  // when the adaptive cool-down last began
  Clock::time_point quota_until{};  // out of money until then

  bool out_of_quota(Clock::time_point now) const { return now < quota_until; }
};

struct OpenAiModelClient::Model {
  config::ModelConfig config;
  std::set<codec::TextCallFormat> text_calls;  // function_calling: calls read from text
  limits::RetryPolicy retry;
  std::vector<Endpoint> endpoints;
  std::size_t cursor = 0;  // round robin
};

// The endpoint a call should use now, or else when one will be able to take it and why
// not sooner.
struct OpenAiModelClient::Choice {
  int index = -1;
  bool all_out_of_quota = false;
  Clock::time_point ready_at{};
  ModelOutcome blocked_by = ModelOutcome::kThrottled;  // kThrottled or kCircuitOpen
  int blocked_endpoint = -1;
};

OpenAiModelClient::OpenAiModelClient(asio::any_io_executor executor,
                                     std::vector<config::ModelConfig> models,
                                     ModelClientHooks hooks)
    : executor_(std::move(executor)),
      hooks_(std::move(hooks)),
      clock_(hooks_.clock ? hooks_.clock : &limits::SteadyClock::instance()),
      pool_(hooks_.pool) {
  if (!hooks_.random) {
    auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
    hooks_.random = [engine] { return (*engine)(); };
  }
  if (!hooks_.wall_clock)
    hooks_.wall_clock = [] { return std::chrono::system_clock::now(); };
  const auto now = clock_->now();
  for (auto& m : models) {
    auto model = std::make_unique<Model>();
    model->retry.base = milliseconds(m.retry.base_ms);
    model->retry.cap = milliseconds(m.retry.max_ms);
    model->retry.max_retries = m.max_retries;
    for (const auto& e : m.endpoints)
      model->endpoints.emplace_back(e, m, now);
    for (const auto& name : m.text_tool_calls) {
      if (auto format = codec::parse_text_call_format(name))
        model->text_calls.insert(*format);
    }
    model->config = std::move(m);
    models_.push_back(std::move(model));
  }
}

OpenAiModelClient::~OpenAiModelClient() = default;

std::vector<OpenAiModelClient::EndpointHealth> OpenAiModelClient::endpoint_health() const {
  std::vector<EndpointHealth> out;
  const auto now = clock_->now();
  for (const auto& m : models_) {
    for (const auto& e : m->endpoints) {
      EndpointHealth h;
      h.model = m->config.name;
      h.endpoint = e.config.name;
      h.breaker = e.breaker.state(now);
      h.out_of_quota = e.out_of_quota(now);
      out.push_back(std::move(h));
    }
  }
  return out;
}

void OpenAiModelClient::report(const Model& model, std::string_view endpoint, ModelOutcome outcome,
                               int status, milliseconds latency, bool retry_follows) {
  ++counters_.by_outcome[static_cast<std::size_t>(outcome)];
  if (outcome != ModelOutcome::kCircuitOpen && outcome != ModelOutcome::kThrottled)
    ++counters_.attempts;
  if (!observer_)
    return;
  ModelAttempt attempt;
  attempt.model = model.config.name;
  attempt.endpoint = endpoint;
  attempt.outcome = outcome;
  attempt.http_status = status;
  attempt.latency = latency;
  attempt.retry_follows = retry_follows;
  observer_(attempt);
}

asio::awaitable<ClientResponse> OpenAiModelClient::send(ClientRequest request) {
  if (hooks_.transport)
    co_return co_await hooks_.transport(std::move(request));
  co_return co_await fetch(executor_, std::move(request), &pool_);
}

asio::awaitable<ClientResponse> OpenAiModelClient::send_streamed(
    ClientRequest request, const std::function<void(std::string_view)>& on_text) {
  codec::ChatStreamAssembler stream;
  stream.on_text = on_text;
  BodySink sink = [&stream](std::string_view piece) { return stream.feed(piece); };
  ClientResponse response;
  if (hooks_.stream_transport) {
    response = co_await hooks_.stream_transport(std::move(request), std::move(sink));
  } else {
    StreamOptions options;
    options.on_body = std::move(sink);
    response = co_await fetch_stream(executor_, std::move(request), std::move(options));
  }
  if (!response.ok() || response.status < 200 || response.status >= 300)
    co_return response;
  if (!stream.error().empty()) {
    // Not a chat completion: read as a 2xx body that does not parse (retried, billed).
    response.body = "stream: " + stream.error();
  } else if (!stream.done() && !stream.finished()) {
    response.error = ClientErrorKind::kProtocol;
    response.error_message = "the answer's stream ended before its end";
    response.sent = true;
  } else {
    response.body = stream.completion_json();
  }
  co_return response;
}

asio::awaitable<void> OpenAiModelClient::sleep(milliseconds duration) {
  if (hooks_.sleep) {
    co_await hooks_.sleep(duration);
    co_return;
  }
  asio::steady_timer timer(executor_, duration);
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

OpenAiModelClient::Choice OpenAiModelClient::choose(Model& model, Clock::time_point now, int prefer,
                                                    const std::vector<bool>& failed_here,
                                                    const std::vector<bool>& broken_here,
                                                    std::int64_t tokens) {
  // An endpoint broken in this call (TLS or URL) is never chosen again by it.
  auto index_of = [&](const Endpoint& e) {
    return static_cast<std::size_t>(&e - &model.endpoints[0]);
  };
  auto usable_now = [&](Endpoint& e) {
    return !broken_here[index_of(e)] && !e.out_of_quota(now) && now >= e.cool_until &&
           e.breaker.can_pass(now) && e.limits.wait_for(tokens, now) == milliseconds(0);
  };
  Choice choice;
  const std::size_t n = model.endpoints.size();
  if (prefer >= 0 && usable_now(model.endpoints[static_cast<std::size_t>(prefer)])) {
    choice.index = prefer;
    return choice;
  }
  // Round robin: first among endpoints that have not failed in this call, then any.
  const std::size_t start = model.cursor++;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t j = (start + k) % n;
      if ((pass == 1 || !failed_here[j]) && usable_now(model.endpoints[j])) {
        choice.index = static_cast<int>(j);
        return choice;
      }
    }
  }
  // Nothing now: when will an endpoint (not out of money) be able to take it?
  choice.all_out_of_quota = true;
  for (std::size_t j = 0; j < n; ++j) {
    Endpoint& e = model.endpoints[j];
    if (e.out_of_quota(now) || broken_here[j])
      continue;
    choice.all_out_of_quota = false;
    Clock::time_point ready = std::max(now, e.cool_until);
    ModelOutcome why = ModelOutcome::kThrottled;
    if (!e.breaker.can_pass(now) && e.breaker.next_probe_at() > ready) {
      ready = e.breaker.next_probe_at();
      why = ModelOutcome::kCircuitOpen;
    }
    const milliseconds room = e.limits.wait_for(tokens, now);
    if (room == milliseconds::max()) {
      ready = Clock::time_point::max();
    } else if (now + room > ready) {
      ready = now + room;
      why = ModelOutcome::kThrottled;
    }
    if (choice.blocked_endpoint < 0 || ready < choice.ready_at) {
      choice.ready_at = ready;
      choice.blocked_by = why;
      choice.blocked_endpoint = static_cast<int>(j);
    }
  }
  return choice;
}

namespace {
limits::AttemptFailure failure_of(ModelOutcome outcome) {
  switch (outcome) {
    case ModelOutcome::kRateLimited:
      return limits::AttemptFailure::kRateLimited;
    case ModelOutcome::kServerError:
      return limits::AttemptFailure::kServerError;
    case ModelOutcome::kTimeout:
      return limits::AttemptFailure::kTimeout;
    case ModelOutcome::kConnectError:
      return limits::AttemptFailure::kConnectError;
    case ModelOutcome::kBadResponse:
      return limits::AttemptFailure::kBadResponse;
    case ModelOutcome::kQuotaExhausted:
      return limits::AttemptFailure::kQuotaExhausted;
    default:
      return limits::AttemptFailure::kRejected;
  }
}

std::string describe(const codec::ProviderError& e) {
  std::string out = e.message.empty() ? "(no message)" : e.message;
  if (!e.type.empty() || !e.code.empty()) {
    out += " [";
    out += e.type;
    if (!e.type.empty() && !e.code.empty())
      out += ", ";
    out += e.code;
    out += "]";
  }
  return out;
}

// What an answer without usage is billed: the request's estimated tokens as input (its whole
// body: the messages and the tools, as providers count them) and the answer's as output.
TokenUsage estimated_usage(std::int64_t request_tokens, const ModelReply& reply) {
  TokenUsage usage;
  usage.input = request_tokens;
  usage.reasoning = react::estimate_tokens(reply.reasoning);
  usage.output = react::estimate_tokens(reply.content) + usage.reasoning;
  for (const ToolCall& call : reply.tool_calls)
    usage.output += react::estimate_tokens(call.name) + react::estimate_tokens(call.arguments);
  return usage;
}

// A waiting call looks again at least this often: a half-open breaker's probe or another
// call's correction can free an endpoint sooner than the computed time.
constexpr milliseconds kMaxWaitSlice(1000);
}  // namespace

asio::awaitable<Result<ModelReply>> OpenAiModelClient::complete(ports::ModelRequest request) {
  auto it = std::find_if(models_.begin(), models_.end(), [&](const std::unique_ptr<Model>& m) {
    return m->config.name == request.model;
  });
  if (it == models_.end()) {
    co_return Error{ErrorKind::kInvalid, "unknown model '" + request.model + "'",
                    ErrorCode::kUnknownModel};
  }
  Model& model = **it;
  codec::ChatRequestOptions options;
  options.provider_model =
      model.config.provider_model.empty() ? model.config.name : model.config.provider_model;
  options.max_tokens = model.config.max_output_tokens;
  if (request.max_output_tokens > 0 && request.max_output_tokens < options.max_tokens)
    options.max_tokens = static_cast<int>(request.max_output_tokens);
  options.protocol = codec::chat_protocol(model.config.protocol);
  options.reasoning_echo = model.config.reasoning_echo;
  options.stream = model.config.stream;
  // A conversation the caller keeps encoded as this model wants it is spliced in, not
  // encoded again.
  const std::string body =
      options.protocol == codec::ChatProtocol::kFunctionCalling && !request.messages_json.empty() &&
              request.messages_echo == options.reasoning_echo
          ? codec::assemble_chat_request(options, request.messages_json, request.tools_json)
          : codec::build_chat_request(options, *request.messages, *request.tools);
  const std::int64_t estimate = limits::estimate_request_tokens(body.size(), options.max_tokens);
  const std::string what = "model '" + model.config.name + "'";
  // What the request is estimated to cost as input, for an attempt the provider may have
  // charged for without saying how much.
  // (Counted only when needed: it reads the whole body.)
  std::optional<std::int64_t> counted;
  auto request_tokens = [&] {
    if (!counted)
      counted = react::estimate_tokens(body);
    return *counted;
  };
  auto lost = [&](ChargeLoss reason, std::optional<TokenUsage> usage) {
    if (request.lost == nullptr)
      return;
    LostCharge charge;
    charge.reason = reason;
    charge.estimated = !usage;
    if (usage) {
      charge.usage = *usage;
    } else {
      charge.usage.input = request_tokens();
    }
    request.lost->push_back(charge);
  };

  ++counters_.calls;
  std::vector<bool> failed_here(model.endpoints.size(), false);
  std::vector<bool> broken_here(model.endpoints.size(), false);  // TLS or URL failures
  int retries = 0;
  int tries = 0;  // sent (or about to be)
  int prefer = -1;
  bool waited = false;
  std::string last_failure = "no attempt made";
  auto fail = [&](ErrorKind kind, std::string message, ErrorCode code) {
    ++counters_.calls_failed;
    return Error{kind, std::move(message), code};
  };

  for (;;) {
    Clock::time_point now = clock_->now();
    if (now >= request.deadline) {
      co_return fail(ErrorKind::kTimeout,
                     what + ": the deadline passed (last failure: " + last_failure + ")",
                     ErrorCode::kDeadline);
    }
    const Choice choice = choose(model, now, prefer, failed_here, broken_here, estimate);
    prefer = -1;
    if (choice.index < 0) {
      if (choice.all_out_of_quota) {
        const bool any_broken =
            std::find(broken_here.begin(), broken_here.end(), true) != broken_here.end();
        co_return fail(ErrorKind::kFatal,
                       what +
                           (any_broken ? ": no usable endpoint left (last failure: "
                                       : ": out of quota on every endpoint (last failure: ") +
                           last_failure + ")",
                       any_broken ? ErrorCode::kModelUnavailable : ErrorCode::kModelOutOfQuota);
      }
      const std::string_view blocked =
          model.endpoints[static_cast<std::size_t>(choice.blocked_endpoint)].config.name;
      if (choice.ready_at >= request.deadline) {
        // Nothing can be sent before the deadline: the call cannot succeed in time.
        report(model, blocked, choice.blocked_by, 0, milliseconds(0), false);
        const Endpoint& first = model.endpoints[static_cast<std::size_t>(choice.blocked_endpoint)];
        std::string why = choice.blocked_by == ModelOutcome::kCircuitOpen
                              ? std::string("circuit breakers open")
                              : std::string("provider rate limits or Retry-After");
        if (choice.blocked_by != ModelOutcome::kCircuitOpen && !first.cool_reason.empty() &&
            first.cool_until > now) {
          why = std::string(first.config.name) + ": " + first.cool_reason;
        }
        co_return fail(ErrorKind::kTimeout,
                       what +
                           ": no endpoint can take the call before the "
                           "deadline (" +
                           why + "; last failure: " + last_failure + ")",
                       ErrorCode::kDeadline);
      }
      if (!waited) {  // one report per call, however many slices the wait takes
        report(model, blocked, choice.blocked_by, 0, milliseconds(0), true);
        ++counters_.waits_for_room;
        waited = true;
      }
      const auto wait = std::chrono::ceil<milliseconds>(choice.ready_at - now);
      co_await sleep(std::clamp(wait, milliseconds(1), kMaxWaitSlice));
      continue;
    }

    const auto index = static_cast<std::size_t>(choice.index);
    Endpoint& endpoint = model.endpoints[index];
    if (request.before_send) {
      // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
      const std::int64_t input_tokens = request_tokens();
      Status recorded = co_await request.before_send(input_tokens);
      if (!recorded.ok()) {
        co_return fail(recorded.error().kind, what + ": not sent: " + recorded.error().message,
                       ErrorCode::kModelUnavailable);
      }
      now = clock_->now();
    }
    endpoint.breaker.try_pass(now);
    endpoint.limits.try_acquire(estimate, now);

    ClientRequest call;
    call.url = endpoint.config.url;
    call.body = body;
    call.deadline = request.deadline;
    if (!endpoint.config.api_key.empty())
      call.headers.emplace_back("Authorization", "Bearer " + endpoint.config.api_key);
    if (!request.traceparent.empty())
      call.headers.emplace_back("traceparent", request.traceparent);
    ++tries;
    if (!request.call_id.empty())
      call.headers.emplace_back("X-Client-Request-Id",
                                request.call_id + ":" + std::to_string(tries));
    const Clock::time_point started = clock_->now();
    ClientResponse response;
    if (model.config.stream)
      response = co_await send_streamed(std::move(call), request.on_text);
    else
      response = co_await send(std::move(call));
    now = clock_->now();
    const auto latency = std::chrono::duration_cast<milliseconds>(now - started);
    const std::string where = what + " endpoint '" + endpoint.config.name + "'";

    // Classify the attempt; a success or a final refusal returns from here.
    ModelOutcome outcome = ModelOutcome::kOk;
    std::optional<milliseconds> server_delay;
    Error final_error{ErrorKind::kInvalid, ""};
    if (!response.ok()) {
      if (response.error == ClientErrorKind::kBadUrl ||
          response.error == ClientErrorKind::kUnsupported ||
          response.error == ClientErrorKind::kTls) {
        // Misconfiguration (URL, TLS trust): trying this endpoint again cannot help, but
        // another endpoint (another provider or region) may be fine.
        last_failure =
            where + ": " + std::string(to_string(response.error)) + ": " + response.error_message;
        endpoint.breaker.record_failure(now);
        failed_here[index] = true;
        broken_here[index] = true;
        // Any endpoint not broken and not out of money may still answer (after its own
        // cool-down or retry); only when none is left is this fatal.
        bool elsewhere = false;
        for (std::size_t j = 0; j < model.endpoints.size(); ++j) {
          elsewhere = elsewhere || (!broken_here[j] && !model.endpoints[j].out_of_quota(now));
        }
        report(model, endpoint.config.name, ModelOutcome::kConnectError, 0, latency, elsewhere);
        if (!elsewhere)
          co_return fail(ErrorKind::kFatal, last_failure, ErrorCode::kModelUnavailable);
        ++counters_.failovers;
        continue;
      }
      outcome = response.error == ClientErrorKind::kTimeout ? ModelOutcome::kTimeout
                                                            : ModelOutcome::kConnectError;
      // A request the provider got may have been answered, and charged, after we stopped
      // waiting or lost the connection; one that was never sent whole reached no provider.
      if (response.sent) {
        lost(outcome == ModelOutcome::kTimeout ? ChargeLoss::kTimeout : ChargeLoss::kConnectionLost,
             std::nullopt);
      }
      last_failure =
          where + ": " + std::string(to_string(response.error)) + ": " + response.error_message;
      endpoint.breaker.record_failure(now);
      if (response.error == ClientErrorKind::kConnect)
        endpoint.limits.correct(estimate, 0, now);  // nothing reached the provider
    } else if (response.status >= 200 && response.status < 300) {
      auto reply = codec::parse_chat_response(response.body);
      if (reply.ok() && options.protocol == codec::ChatProtocol::kReactJson) {
        // The step number makes the synthetic call id; replaying a checkpoint reads the same.
        const int step = static_cast<int>(
            std::count_if(request.messages->begin(), request.messages->end(),
                          [](const Message& m) { return m.role == Role::kAssistant; }));
        reply = codec::read_react_json_reply(std::move(reply).value(), step);
      } else if (reply.ok() && !request.tools->empty()) {
        // Calls a model served without a tool-call parser wrote as text are calls (where
        // the request offered tools: a planner's or critic's JSON is an answer).
        reply = codec::with_text_tool_calls(std::move(reply).value(), model.text_calls);
      }
      if (reply.ok()) {
        endpoint.breaker.record_success();
        endpoint.rate_limited_streak = 0;
        if (reply.value().usage_estimated)
          reply.value().usage = estimated_usage(request_tokens(), reply.value());
        const TokenUsage& usage = reply.value().usage;
        if (usage.input + usage.output > 0)
          endpoint.limits.correct(estimate, usage.input + usage.output, now);
        report(model, endpoint.config.name, ModelOutcome::kOk, response.status, latency, false);
        co_return reply;
      }
      outcome = ModelOutcome::kBadResponse;
      last_failure = where + ": HTTP " + std::to_string(response.status) +
                     " but not a chat completion: " + reply.error().message;
      lost(ChargeLoss::kUnreadable, codec::parse_usage(response.body));
      endpoint.breaker.record_failure(now);
    } else {
      const codec::ProviderError provider =
          codec::parse_provider_error(response.status, response.body);
      const int s = response.status;
      last_failure = where + ": HTTP " + std::to_string(s) + ": " + describe(provider);
      // The endpoint answered: it is up, whatever it said.
      if (provider.quota_exhausted) {
        outcome = ModelOutcome::kQuotaExhausted;
        endpoint.breaker.record_success();
        endpoint.quota_until = now + std::chrono::seconds(model.config.quota_cooloff_s);
        last_failure += " (out of quota; endpoint out of rotation for " +
                        std::to_string(model.config.quota_cooloff_s) + " s)";
      } else if (s == 429 || s == 500 || s == 502 || s == 503 || s == 504) {
        outcome = s == 429 ? ModelOutcome::kRateLimited : ModelOutcome::kServerError;
        if (s == 429) {
          endpoint.breaker.record_success();
        } else {
          endpoint.breaker.record_failure(now);
        }
        server_delay = limits::parse_retry_after(
            response.header("retry-after-ms"), response.header("retry-after"), hooks_.wall_clock());
        // A 429 without Retry-After to a request sent after the last cool-down began adds to
        // the streak; answers to requests already in flight then do not count again.
        if (s == 429 && !server_delay && now - latency >= endpoint.cool_set_at)
          ++endpoint.rate_limited_streak;
        if (server_delay && now + *server_delay > endpoint.cool_until) {
          endpoint.cool_until = now + *server_delay;
          endpoint.cool_reason = "HTTP " + std::to_string(s) + " asked to retry after " +
                                 std::to_string(server_delay->count()) + " ms";
        } else if (s == 429 && !server_delay) {
          // Adaptive back-off: a 429 without Retry-After keeps every call away from this
          // endpoint for base * 2^(streak - 1), capped; a success resets the streak.
          const auto base = std::chrono::milliseconds(model.config.retry.base_ms);
          const auto cap = std::chrono::milliseconds(model.config.retry.max_ms);
          const int doublings = std::clamp(endpoint.rate_limited_streak - 1, 0, 20);
          const std::chrono::milliseconds pause = std::min(cap, base * (1L << doublings));
          if (now + pause > endpoint.cool_until) {
            endpoint.cool_until = now + pause;
            endpoint.cool_set_at = now;
            endpoint.cool_reason =
                "HTTP 429 without Retry-After (" + std::to_string(endpoint.rate_limited_streak) +
                " in a row): backing off " + std::to_string(pause.count()) + " ms";
          }
        }
      } else {
        outcome = ModelOutcome::kRejected;
        endpoint.breaker.record_success();
        // 401/403/404: the key or the URL is wrong, an operator must act.
        final_error.kind = s == 401 || s == 403 || s == 404 || s < 400 || s >= 500
                               ? ErrorKind::kFatal
                               : ErrorKind::kInvalid;
        final_error.message = last_failure + " (not retried)";
      }
    }

    failed_here[index] = true;
    bool other = false;
    for (std::size_t j = 0; j < model.endpoints.size(); ++j) {
      if (j == index)
        continue;
      Endpoint& e = model.endpoints[j];
      if (outcome == ModelOutcome::kQuotaExhausted) {
        other = other || !e.out_of_quota(now);  // worth a wait for room, if need be
      } else {
        other = other ||
                (!failed_here[j] && !e.out_of_quota(now) && now >= e.cool_until &&
                 e.breaker.can_pass(now) && e.limits.wait_for(estimate, now) == milliseconds(0));
      }
    }
    limits::RetryInput input;
    input.retries_done = retries;
    input.failure = failure_of(outcome);
    input.server_delay = server_delay;
    input.now = now;
    input.deadline = request.deadline;
    input.other_endpoint_available = other;
    const limits::RetryDecision decision = decide_retry(model.retry, input, hooks_.random);
    const bool again = decision.action != limits::RetryDecision::Action::kGiveUp;
    report(model, endpoint.config.name, outcome, response.status, latency, again);

    if (!again) {
      if (outcome == ModelOutcome::kRejected)
        co_return fail(final_error.kind, final_error.message, ErrorCode::kModelRejected);
      if (outcome == ModelOutcome::kQuotaExhausted) {
        co_return fail(ErrorKind::kFatal,
                       what + ": out of quota on every endpoint (" + last_failure + ")",
                       ErrorCode::kModelOutOfQuota);
      }
      // Out of time, now or before the wait would end: the call cannot succeed in time.
      co_return fail(
          decision.deadline_reached || decision.no_time_to_wait || outcome == ModelOutcome::kTimeout
              ? ErrorKind::kTimeout
              : ErrorKind::kTransient,
          last_failure + "; " + decision.reason,
          decision.deadline_reached || decision.no_time_to_wait ? ErrorCode::kDeadline
                                                                : ErrorCode::kModelUnavailable);
    }
    if (outcome != ModelOutcome::kQuotaExhausted) {
      ++retries;
      ++counters_.retries;
      ++counters_.retries_by_reason[static_cast<std::size_t>(outcome)];
    }
    if (decision.action == limits::RetryDecision::Action::kFailover) {
      ++counters_.failovers;
      continue;
    }
    co_await sleep(decision.delay);
    prefer = static_cast<int>(index);
  }
}

}  // namespace agentfleet::http
