#include "core/adapters/http/model_client.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/adapters/http/client.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"

namespace agentfleet::http {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

std::optional<std::chrono::milliseconds> retry_after(const std::string& retry_after_ms,
                                                     const std::string& retry_after_s) {
  auto parse = [](const std::string& text) -> std::optional<double> {
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0)
      return std::nullopt;
    return value;
  };
  // Capped at an hour: a longer wait is past any task's deadline anyway, and an absurd
  // value must not overflow the conversion.
  constexpr double kMaxMs = 3'600'000;
  if (auto ms = parse(retry_after_ms))
    return std::chrono::milliseconds(static_cast<long>(std::min(*ms, kMaxMs)));
  if (auto s = parse(retry_after_s))
    return std::chrono::milliseconds(static_cast<long>(std::min(*s * 1000, kMaxMs)));
  return std::nullopt;
}

OpenAiModelClient::OpenAiModelClient(asio::any_io_executor executor,
                                     std::vector<config::ModelConfig> models)
    : executor_(std::move(executor)), models_(std::move(models)) {}

namespace {
bool retryable_status(int status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

std::string error_excerpt(const std::string& body) {
  return codec::sanitize_text(body.size() > 300 ? body.substr(0, 300) + "..." : body);
}
}  // namespace

asio::awaitable<Result<ModelReply>> OpenAiModelClient::complete(ports::ModelRequest request) {
  auto model = std::find_if(models_.begin(), models_.end(),
                            [&](const config::ModelConfig& m) { return m.name == request.model; });
  if (model == models_.end()) {
    co_return Error{ErrorKind::kInvalid, "unknown model '" + request.model + "'"};
  }
  codec::ChatRequestOptions options;
  options.provider_model = model->provider_model.empty() ? model->name : model->provider_model;
  options.max_tokens = model->max_output_tokens;
  const std::string body = codec::build_chat_request(options, *request.messages, *request.tools);

  thread_local std::mt19937_64 rng{std::random_device{}()};
  Error last{ErrorKind::kTransient, "no attempt made"};
  const unsigned first = cursor_.fetch_add(1);
  for (int attempt = 0; attempt <= model->max_retries; ++attempt) {
    const auto& endpoint =
        model->endpoints[(first + static_cast<unsigned>(attempt)) % model->endpoints.size()];
    ClientRequest call;
    call.url = endpoint.url;
    call.body = body;
    call.deadline = request.deadline;
    if (!endpoint.api_key.empty())
      call.headers.emplace_back("Authorization", "Bearer " + endpoint.api_key);
    if (!request.traceparent.empty())
      call.headers.emplace_back("traceparent", request.traceparent);
    ClientResponse response = co_await fetch(executor_, std::move(call));

    std::optional<std::chrono::milliseconds> asked;
    if (!response.ok()) {
      last = Error{
          response.error == ClientErrorKind::kTimeout ? ErrorKind::kTimeout : ErrorKind::kTransient,
          std::string("model endpoint ") + std::string(to_string(response.error)) + ": " +
              response.error_message};
      if (response.error == ClientErrorKind::kBadUrl ||
          response.error == ClientErrorKind::kUnsupported ||
          response.error == ClientErrorKind::kTls) {
        last.kind = ErrorKind::kFatal;
        co_return last;
      }
    } else if (response.status >= 200 && response.status < 300) {
      auto reply = codec::parse_chat_response(response.body);
      if (reply.ok())
        co_return reply;
      last = Error{ErrorKind::kTransient, reply.error().message};  // a garbled body: try again
    } else if (retryable_status(response.status)) {
      last = Error{ErrorKind::kTransient, "model endpoint HTTP " + std::to_string(response.status) +
                                              ": " + error_excerpt(response.body)};
      asked = retry_after(response.header("retry-after-ms"), response.header("retry-after"));
    } else {
      co_return Error{ErrorKind::kInvalid, "model endpoint HTTP " +
                                               std::to_string(response.status) + ": " +
                                               error_excerpt(response.body)};
    }
    if (attempt == model->max_retries)
      break;
    // Full jitter on an exponential base (250 ms, 500 ms, ...), or what the server asked.
    const auto base = std::chrono::milliseconds(250LL << std::min(attempt, 6));
    std::uniform_int_distribution<long long> jitter(0, base.count());
    const auto wait = asked ? *asked : std::chrono::milliseconds(jitter(rng));
    if (Clock::now() + wait >= request.deadline) {
      last.message += " (no time left to retry before the deadline)";
      if (last.kind != ErrorKind::kTimeout && Clock::now() >= request.deadline) {
        last.kind = ErrorKind::kTimeout;
      }
      co_return last;
    }
    asio::steady_timer timer(executor_, wait);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return last;
}

}  // namespace agentfleet::http
