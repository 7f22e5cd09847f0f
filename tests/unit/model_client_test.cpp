// OpenAiModelClient over a scripted transport, a ManualClock and a seeded random source:
// no socket is opened and no wall-clock time passes (sleeps advance the manual clock).

#include "core/adapters/http/model_client.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <deque>
#include <map>
#include <random>

#include "core/codec/openai_codec.hpp"
#include "core/codec/provider_error.hpp"
#include "core/limits/token_bucket.hpp"
#include "core/react/context_budget.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kA = "https://a.example.com/v1/chat/completions";
constexpr const char* kB = "https://b.example.com/v1/chat/completions";

const std::string kCompletion = R"({"choices":[{"message":{"role":"assistant","content":"hi"},
  "finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":20}})";

ClientResponse http(int status, std::string body = "",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
  ClientResponse r;
  r.status = status;
  r.body = std::move(body);
  for (auto& [name, value] : headers)
    r.headers.insert(name, value);
  return r;
}

ClientResponse ok() {
  return http(200, kCompletion);
}

ClientResponse transport_error(ClientErrorKind kind) {
  ClientResponse r;
  r.error = kind;
  r.error_message = "scripted";
  return r;
}

// A failure after the whole request was written (the provider may have acted on it).
ClientResponse failed_after_sending(ClientErrorKind kind) {
  ClientResponse r = transport_error(kind);
  r.sent = true;
  return r;
}

config::ModelConfig model_config(std::vector<std::string> urls) {
  config::ModelConfig m;
  m.name = "m";
  m.provider_model = "m";
  for (std::size_t i = 0; i < urls.size(); ++i) {
    config::ModelEndpoint e;
    e.name = std::string(1, static_cast<char>('A' + i));
    e.url = urls[i];
    m.endpoints.push_back(e);
  }
  m.max_retries = 3;
  m.max_output_tokens = 100;
  m.circuit_breaker.failure_threshold = 2;
  m.circuit_breaker.open_s = 30;
  m.quota_cooloff_s = 300;
  return m;
}

class ModelClientTest : public ::testing::Test {
 protected:
  // Responses per URL, in order; the clock moves by `latency` per attempt.
  std::map<std::string, std::deque<ClientResponse>> script;
  std::vector<std::string> called;
  std::vector<std::string> bodies;  // of each attempt
  std::vector<milliseconds> slept;
  std::vector<ModelAttempt> attempts;
  std::vector<std::string> attempt_endpoints;
  limits::ManualClock clock;
  std::mt19937_64 rng{11};
  milliseconds latency{100};
  std::vector<Message> messages{Message{Role::kUser, "hello", {}, {}, {}}};
  std::vector<ports::ToolSchema> tools;
  std::vector<LostCharge> lost;       // what the calls reported the provider may have charged
  std::int64_t output_allowance = 0;  // the calls' max_output_tokens (0: the model's)
  // A model that streams: each attempt's answer head and the pieces its body arrives in.
  struct Streamed {
    ClientResponse head;
    std::vector<std::string> pieces;
  };
  std::deque<Streamed> streams;
  std::vector<std::string> texts;  // what on_text was handed
  // The caller's record of each try (ModelRequest::before_send; unset: none) and the call's
  // name; the X-Client-Request-Id each attempt carried.
  std::function<asio::awaitable<Status>(std::int64_t)> before_send;
  std::string call_id;
  std::vector<std::string> request_ids;

  std::unique_ptr<OpenAiModelClient> make(config::ModelConfig m) {
    ModelClientHooks hooks;
    hooks.clock = &clock;
    hooks.random = std::ref(rng);
    hooks.wall_clock = [] { return std::chrono::system_clock::time_point(seconds(1'792'567'668)); };
    hooks.transport = [this](ClientRequest request) -> asio::awaitable<ClientResponse> {
      called.push_back(request.url);
      bodies.push_back(request.body);
      for (const auto& [name, value] : request.headers) {
        if (name == "X-Client-Request-Id")
          request_ids.push_back(value);
      }
      clock.advance(latency);
      auto& queue = script[request.url];
      if (queue.empty())
        co_return transport_error(ClientErrorKind::kConnect);
      ClientResponse r = queue.front();
      queue.pop_front();
      co_return r;
    };
    hooks.stream_transport = [this](ClientRequest request,
                                    BodySink sink) -> asio::awaitable<ClientResponse> {
      called.push_back(request.url);
      bodies.push_back(request.body);
      clock.advance(latency);
      if (streams.empty())
        co_return transport_error(ClientErrorKind::kConnect);
      Streamed s = streams.front();
      streams.pop_front();
      if (s.head.ok() && s.head.status / 100 == 2) {
        for (const auto& piece : s.pieces) {
          if (!sink(piece))
            break;
        }
      }
      co_return s.head;
    };
    hooks.sleep = [this](milliseconds d) -> asio::awaitable<void> {
      slept.push_back(d);
      clock.advance(d);
      co_return;
    };
    std::vector<config::ModelConfig> models;
    models.push_back(std::move(m));
    auto client =
        std::make_unique<OpenAiModelClient>(io.get_executor(), std::move(models), std::move(hooks));
    client->set_observer([this](const ModelAttempt& a) {
      attempts.push_back(a);
      attempt_endpoints.emplace_back(a.endpoint);
    });
    return client;
  }

  // A call with `messages` and `tools`; with the caller's encodings of them when given (the
  // messages encoded for `echo`).
  Result<ModelReply> call(OpenAiModelClient& client, seconds left = seconds(30),
                          const std::string& messages_json = {}, const std::string& tools_json = {},
                          ReasoningEcho echo = ReasoningEcho::kNone) {
    ports::ModelRequest request;
    request.model = "m";
    request.messages = &messages;
    request.tools = &tools;
    request.messages_json = messages_json;
    request.tools_json = tools_json;
    request.messages_echo = echo;
    request.deadline = clock.now() + left;
    request.lost = &lost;
    request.max_output_tokens = output_allowance;
    request.on_text = [this](std::string_view t) { texts.emplace_back(t); };
    request.before_send = before_send;
    request.call_id = call_id;
    auto future = asio::co_spawn(io, client.complete(std::move(request)), asio::use_future);
    io.restart();
    io.run();
    return future.get();
  }

  asio::io_context io;
};

TEST_F(ModelClientTest, RetryAfterIsHonouredOnTheOnlyEndpoint) {
  auto client = make(model_config({kA}));
  script[kA] = {
      http(429, R"({"error":{"message":"slow down","type":"rate_limit"}})", {{"Retry-After", "2"}}),
      ok()};
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply.value().content, "hi");
  EXPECT_EQ(slept, std::vector<milliseconds>{milliseconds(2000)});
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].outcome, ModelOutcome::kRateLimited);
  EXPECT_EQ(attempts[0].http_status, 429);
  EXPECT_TRUE(attempts[0].retry_follows);
  EXPECT_EQ(attempts[0].latency, milliseconds(100));
  EXPECT_EQ(attempts[1].outcome, ModelOutcome::kOk);
  EXPECT_FALSE(attempts[1].retry_follows);
  const auto& c = client->counters();
  EXPECT_EQ(c.calls, 1u);
  EXPECT_EQ(c.attempts, 2u);
  EXPECT_EQ(c.retries, 1u);
  EXPECT_EQ(c.retries_by_reason[static_cast<std::size_t>(ModelOutcome::kRateLimited)], 1u);
}

TEST_F(ModelClientTest, RetryAfterAsHttpDateAndInMilliseconds) {
  auto client = make(model_config({kA}));
  // The wall clock reads 12 s before this date.
  script[kA] = {http(503, "", {{"Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT"}}),
                http(429, "", {{"retry-after-ms", "1500"}, {"Retry-After", "9"}}), ok()};
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(slept, (std::vector<milliseconds>{milliseconds(12000), milliseconds(1500)}));
}

TEST_F(ModelClientTest, RetryAfterPastTheDeadlineGivesUpAtOnceWithOneEndpoint) {
  auto client = make(model_config({kA}));
  script[kA] = {http(429, "", {{"Retry-After", "60"}}), ok()};
  auto reply = call(*client, seconds(20));
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(slept.empty());  // never sleeps past the deadline
  EXPECT_EQ(called.size(), 1u);
  EXPECT_EQ(reply.error().kind, ErrorKind::kTimeout) << "it cannot succeed before the deadline";
  EXPECT_NE(reply.error().message.find("asked to wait 60000 ms"), std::string::npos)
      << reply.error().message;
  EXPECT_EQ(reply.error().code, ErrorCode::kDeadline);
  EXPECT_FALSE(attempts.at(0).retry_follows);
}

TEST_F(ModelClientTest, RetryAfterPastTheDeadlineFailsOverToAnotherEndpoint) {
  auto client = make(model_config({kA, kB}));
  script[kA] = {http(429, "", {{"Retry-After", "60"}})};
  script[kB] = {ok()};
  ASSERT_TRUE(call(*client, seconds(20)).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB}));
  EXPECT_TRUE(slept.empty());
  EXPECT_EQ(client->counters().failovers, 1u);
  // A stays cooled down for its Retry-After: the next calls go to B.
  script[kB] = {ok(), ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB, kB, kB}));
}

TEST_F(ModelClientTest, ServerErrorsBackOffWithinBoundsAndStopAtMaxRetries) {
  auto m = model_config({kA});
  m.circuit_breaker.failure_threshold = 0;  // disabled: this test is about backoff
  m.retry.base_ms = 250;
  m.retry.max_ms = 20000;
  auto client = make(m);
  script[kA] = {http(503), http(500), http(502), http(504), ok()};
  auto reply = call(*client);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(called.size(), 4u);  // 1 + max_retries
  ASSERT_EQ(slept.size(), 3u);
  for (std::size_t i = 0; i < slept.size(); ++i)
    EXPECT_LE(slept[i], milliseconds(250 << i)) << i;
  EXPECT_EQ(reply.error().kind, ErrorKind::kTransient);
  EXPECT_NE(reply.error().message.find("HTTP 504"), std::string::npos) << reply.error().message;
  EXPECT_NE(reply.error().message.find("3 retries"), std::string::npos) << reply.error().message;
  EXPECT_EQ(client->counters().calls_failed, 1u);
  EXPECT_EQ(
      client->counters().retries_by_reason[static_cast<std::size_t>(ModelOutcome::kServerError)],
      3u);
}

TEST_F(ModelClientTest, ABodyThatIsNotAChatCompletionIsRetried) {
  auto client = make(model_config({kA}));
  script[kA] = {http(200, "<html>gateway</html>"), ok()};
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(attempts.at(0).outcome, ModelOutcome::kBadResponse);
  EXPECT_EQ(slept.size(), 1u);
}

TEST_F(ModelClientTest, AnAnswerWithoutUsageIsBilledFromAnEstimateAndSaysSo) {
  auto client = make(model_config({kA}));
  script[kA] = {http(200, R"({"choices":[{"message":{"role":"assistant","content":)"
                          R"("把周会改到晚上8点"},"finish_reason":"stop"}]})"),
                ok()};
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_TRUE(reply.value().usage_estimated);
  EXPECT_EQ(reply.value().usage.input, react::estimate_tokens(bodies.at(0)))
      << "the whole request, as the provider counts it";
  EXPECT_EQ(reply.value().usage.output, react::estimate_tokens("把周会改到晚上8点"));
  EXPECT_GT(reply.value().usage.output, 0);
  // A reported usage is the provider's, not flagged.
  reply = call(*client);
  ASSERT_TRUE(reply.ok());
  EXPECT_FALSE(reply.value().usage_estimated);
  EXPECT_EQ(reply.value().usage.input, 100);
  EXPECT_TRUE(lost.empty()) << "nothing was lost";
}

TEST_F(ModelClientTest, AttemptsThatMayHaveBeenChargedWithoutAnAnswerAreReported) {
  config::ModelConfig m = model_config({kA});
  m.max_retries = 7;
  m.circuit_breaker.failure_threshold = 10;
  auto client = make(m);
  // A timeout after the request was sent (the provider may have answered after we stopped
  // waiting), a 2xx that is not a completion but says what it cost, one that says nothing,
  // a connection lost while the answer came; and failures of requests never sent whole (a
  // refused connection, a connect that timed out), which reached no provider. Then the answer.
  script[kA] = {
      failed_after_sending(ClientErrorKind::kTimeout),
      http(200, R"({"object":"error","usage":{"prompt_tokens":40,"completion_tokens":7}})"),
      http(200, "<html>gateway</html>"),
      failed_after_sending(ClientErrorKind::kProtocol),
      transport_error(ClientErrorKind::kConnect),
      transport_error(ClientErrorKind::kTimeout),
      ok()};
  auto reply = call(*client, seconds(60));
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply.value().usage.input, 100);
  ASSERT_EQ(lost.size(), 4u);
  EXPECT_EQ(lost[0].reason, ChargeLoss::kTimeout);
  EXPECT_TRUE(lost[0].estimated);
  EXPECT_EQ(lost[0].usage.input, react::estimate_tokens(bodies.at(0)));
  EXPECT_EQ(lost[0].usage.output, 0);
  EXPECT_EQ(lost[1].reason, ChargeLoss::kUnreadable);
  EXPECT_FALSE(lost[1].estimated) << "its own usage";
  EXPECT_EQ(lost[1].usage.input, 40);
  EXPECT_EQ(lost[1].usage.output, 7);
  EXPECT_EQ(lost[2].reason, ChargeLoss::kUnreadable);
  EXPECT_TRUE(lost[2].estimated);
  EXPECT_EQ(lost[3].reason, ChargeLoss::kConnectionLost);
  EXPECT_TRUE(lost[3].estimated);
}

TEST_F(ModelClientTest, EachTryIsRecordedBeforeItIsSentAndNamedToTheProvider) {
  auto client = make(model_config({kA}));
  script[kA] = {http(500, R"({"error":{"message":"overloaded"}})"), ok()};
  std::vector<std::pair<std::int64_t, std::size_t>> records;  // (input estimate, sent so far)
  before_send = [this, &records](std::int64_t input) -> asio::awaitable<Status> {
    records.emplace_back(input, called.size());
    co_return ok_status();
  };
  call_id = "task-9:2:4";
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  ASSERT_EQ(records.size(), 2u) << "one record per try";
  EXPECT_EQ(records[0], std::make_pair(react::estimate_tokens(bodies.at(0)), std::size_t{0}))
      << "recorded before anything was sent, at what a lost answer is billed";
  EXPECT_EQ(records[1].second, 1u);
  EXPECT_EQ(request_ids, (std::vector<std::string>{"task-9:2:4:1", "task-9:2:4:2"}));
}

TEST_F(ModelClientTest, ATryThatCannotBeRecordedIsNotSentAndTheCallFailsWithTheReason) {
  auto client = make(model_config({kA}));
  script[kA] = {ok()};
  before_send = [](std::int64_t) -> asio::awaitable<Status> {
    co_return Error{ErrorKind::kLeaseLost, "task owned by a newer attempt"};
  };
  auto reply = call(*client);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kLeaseLost);
  EXPECT_NE(reply.error().message.find("not sent: task owned by a newer attempt"),
            std::string::npos)
      << reply.error().message;
  EXPECT_TRUE(called.empty()) << "nothing reached the provider";
  EXPECT_TRUE(lost.empty());
}

TEST_F(ModelClientTest, ConnectionFailuresFailOverToTheOtherEndpoint) {
  auto client = make(model_config({kA, kB}));
  script[kA] = {transport_error(ClientErrorKind::kConnect)};
  script[kB] = {ok()};
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(attempts.at(0).outcome, ModelOutcome::kConnectError);
  EXPECT_EQ(attempt_endpoints, (std::vector<std::string>{"A", "B"}));
}

TEST_F(ModelClientTest, ClientErrorsAreNotRetriedAndNameTheProviderMessage) {
  auto client = make(model_config({kA, kB}));
  script[kA] = {http(401, R"({"error":{"message":"Invalid API key","type":"invalid_request_error",
    "code":"invalid_api_key"}})")};
  auto reply = call(*client);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kFatal);
  EXPECT_NE(reply.error().message.find("HTTP 401: Invalid API key"), std::string::npos)
      << reply.error().message;
  EXPECT_NE(reply.error().message.find("invalid_api_key"), std::string::npos);
  EXPECT_EQ(reply.error().code, ErrorCode::kModelRejected);
  EXPECT_EQ(called.size(), 1u);
  EXPECT_EQ(attempts.at(0).outcome, ModelOutcome::kRejected);

  script[kB] = {http(400, R"({"error":{"message":"context too long"}})")};
  reply = call(*client);  // round robin: B this time
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kInvalid);
  EXPECT_EQ(reply.error().code, ErrorCode::kModelRejected);
  EXPECT_NE(reply.error().message.find("endpoint 'B': HTTP 400: context too long"),
            std::string::npos)
      << reply.error().message;
  EXPECT_TRUE(slept.empty());
}

TEST_F(ModelClientTest, OutOfQuotaTakesTheEndpointOutOfRotationAndFailsOver) {
  auto client = make(model_config({kA, kB}));
  script[kA] = {http(429, R"({"error":{"message":"You exceeded your current quota",
    "type":"insufficient_quota","code":"insufficient_quota"}})",
                     {{"Retry-After", "1"}})};
  script[kB] = {ok(), ok()};
  ASSERT_TRUE(call(*client).ok());
  EXPECT_TRUE(slept.empty());  // not retried on a timer
  EXPECT_EQ(attempts.at(0).outcome, ModelOutcome::kQuotaExhausted);
  EXPECT_EQ(client->counters().retries, 0u);
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB, kB}));
  auto health = client->endpoint_health();
  EXPECT_TRUE(health.at(0).out_of_quota);
  EXPECT_FALSE(health.at(1).out_of_quota);

  clock.advance(seconds(300));  // quota_cooloff_s later A is tried again
  script[kA] = {ok()};
  script[kB] = {ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called.size(), 5u);
  EXPECT_TRUE(called[3] == kA || called[4] == kA);
}

TEST_F(ModelClientTest, OutOfQuotaOnEveryEndpointEndsWithAClearError) {
  auto client = make(model_config({kA}));
  script[kA] = {http(402, R"({"error":{"message":"Insufficient Balance",
    "type":"unknown_error","code":"invalid_request_error"}})")};
  auto reply = call(*client);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kFatal);
  EXPECT_NE(reply.error().message.find("out of quota"), std::string::npos) << reply.error().message;
  EXPECT_NE(reply.error().message.find("Insufficient Balance"), std::string::npos);
  EXPECT_EQ(reply.error().code, ErrorCode::kModelOutOfQuota);
  EXPECT_TRUE(slept.empty());
  // The next call does not even try.
  reply = call(*client);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(called.size(), 1u);
}

TEST_F(ModelClientTest, OpenBreakerSkipsTheEndpointUntilItsProbe) {
  auto client = make(model_config({kA, kB}));
  // A fails twice (threshold 2) across two calls; each call fails over to B.
  script[kA] = {http(500), http(500)};
  script[kB] = {ok(), ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB, kA, kB}));
  EXPECT_EQ(client->endpoint_health().at(0).breaker, limits::CircuitBreaker::State::kOpen);
  called.clear();
  script[kB] = {ok(), ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kB, kB}));
  // After open_s, A gets one probe; its success closes the breaker.
  clock.advance(seconds(30));
  script[kA] = {ok()};
  script[kB] = {ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(client->endpoint_health().at(0).breaker, limits::CircuitBreaker::State::kClosed);
}

TEST_F(ModelClientTest, EveryBreakerOpenWaitsForAProbeWithinTheDeadline) {
  auto m = model_config({kA});
  m.circuit_breaker.failure_threshold = 1;
  m.circuit_breaker.open_s = 5;
  m.max_retries = 0;
  auto client = make(m);
  script[kA] = {http(500), ok()};
  ASSERT_FALSE(call(*client).ok());
  ASSERT_TRUE(call(*client, seconds(30)).ok());  // waits ~5 s for the probe
  milliseconds total(0);
  for (auto d : slept)
    total += d;
  EXPECT_GE(total, seconds(5) - latency);
  EXPECT_LE(total, seconds(6));
  EXPECT_EQ(attempts.at(1).outcome, ModelOutcome::kCircuitOpen);
  EXPECT_TRUE(attempts.at(1).retry_follows);

  script[kA] = {http(500)};
  ASSERT_FALSE(call(*client).ok());
  auto reply = call(*client, seconds(2));  // the breaker stays open past this deadline
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.error().message.find("circuit breakers open"), std::string::npos)
      << reply.error().message;
}

TEST_F(ModelClientTest, RequestLimitsRoundRobinThenWaitForRoomWithinTheDeadline) {
  auto m = model_config({kA, kB});
  m.endpoints[0].requests_per_minute = 1;
  m.endpoints[1].requests_per_minute = 1;
  auto client = make(m);
  script[kA] = {ok(), ok()};
  script[kB] = {ok()};
  ASSERT_TRUE(call(*client).ok());
  ASSERT_TRUE(call(*client).ok());
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB}));
  // Both buckets empty: a call with 10 s left cannot get room (a minute per request).
  auto reply = call(*client, seconds(10));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(attempts.back().outcome, ModelOutcome::kThrottled);
  EXPECT_TRUE(slept.empty());
  // With enough time it waits for A's bucket (60 s after its request) and goes.
  reply = call(*client, seconds(120));
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(called.back(), kA);
  EXPECT_EQ(client->counters().waits_for_room, 1u);
}

TEST_F(ModelClientTest, TokenBucketLearnsTheReportedUsage) {
  // A call takes its estimate (~ chars/3 + max_tokens) and then the 120 tokens the reply
  // reports. Room for 7 calls at 120 plus one estimate: the 8th fits only because the
  // earlier estimates were corrected down.
  codec::ChatRequestOptions options;
  options.provider_model = "m";
  options.max_tokens = 100;
  const std::int64_t estimate = limits::estimate_request_tokens(
      codec::build_chat_request(options, messages, tools).size(), 100);
  ASSERT_GT(estimate, 120);  // else the test would prove nothing
  auto m = model_config({kA});
  m.endpoints[0].tokens_per_minute = 7 * 120 + estimate;
  auto client = make(m);
  latency = milliseconds(0);
  for (int i = 0; i < 9; ++i)
    script[kA].push_back(ok());
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(call(*client).ok()) << i;
  EXPECT_TRUE(slept.empty());
  auto reply = call(*client, seconds(1));  // the 9th must wait seconds: past this deadline
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(called.size(), 8u);
  EXPECT_EQ(attempts.back().outcome, ModelOutcome::kThrottled);
}

TEST_F(ModelClientTest, ATimeoutAtTheDeadlineEndsTheCallAsATimeout) {
  auto client = make(model_config({kA}));
  latency = seconds(30);
  script[kA] = {transport_error(ClientErrorKind::kTimeout)};
  auto reply = call(*client, seconds(30));
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kTimeout);
  EXPECT_EQ(reply.error().code, ErrorCode::kDeadline);
  EXPECT_EQ(attempts.at(0).outcome, ModelOutcome::kTimeout);
}

TEST_F(ModelClientTest, AConversationTheCallerKeepsEncodedIsSentAsIfBuiltHere) {
  auto client = make(model_config({kA}));
  messages.push_back(Message{Role::kAssistant, "", {ToolCall{"c1", "search_items", "{}"}}, {}, {}});
  messages.push_back(Message{Role::kTool, R"({"items":[]})", {}, "c1", "search_items"});
  tools.push_back(ports::ToolSchema{"search_items", "Search.", R"({"type":"object"})"});
  tools.push_back(codec::finish_tool_schema());
  script[kA] = {ok(), ok()};
  ASSERT_TRUE(call(*client).ok());  // built here

  codec::ConversationEncoder encoder;
  encoder.sync(1, messages);
  ASSERT_TRUE(call(*client, seconds(30), encoder.json(), codec::encode_tools(tools)).ok());
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[1], bodies[0]);
}

TEST_F(ModelClientTest, ACallsOwnOutputAllowanceIsSentWhenLessThanTheModels) {
  auto client = make(model_config({kA}));  // max_output_tokens 100
  script[kA] = {ok(), ok(), ok()};
  output_allowance = 40;  // what a task's max_tokens left
  ASSERT_TRUE(call(*client).ok());
  output_allowance = 500;  // never more than the model's
  ASSERT_TRUE(call(*client).ok());
  output_allowance = 0;
  ASSERT_TRUE(call(*client).ok());
  ASSERT_EQ(bodies.size(), 3u);
  EXPECT_NE(bodies[0].find(R"("max_tokens":40)"), std::string::npos) << bodies[0];
  EXPECT_NE(bodies[1].find(R"("max_tokens":100)"), std::string::npos) << bodies[1];
  EXPECT_NE(bodies[2].find(R"("max_tokens":100)"), std::string::npos) << bodies[2];
}

// A chunk of a streamed answer.
std::string chunk(const std::string& delta_json, const std::string& finish = "null") {
  return "data: {\"choices\":[{\"index\":0,\"delta\":" + delta_json +
         ",\"finish_reason\":" + finish + "}]}\n\n";
}

TEST_F(ModelClientTest, AStreamedAnswerIsReadAsItComesAndOneCutShortIsTriedAgain) {
  config::ModelConfig m = model_config({kA});
  m.stream = true;
  auto client = make(m);
  const std::string usage =
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20}}\n\n"
      "data: [DONE]\n\n";
  const std::string whole =
      chunk(R"({"content":"Hel"})") + chunk(R"({"content":"lo"})", "\"stop\"") + usage;
  // The first attempt's stream ends after its first text (a gateway cut it); the second is
  // whole, in pieces cut inside its events.
  streams.push_back({http(200), {chunk(R"({"content":"Hel"})")}});
  streams.push_back({http(200), {whole.substr(0, 30), whole.substr(30, 41), whole.substr(71)}});
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply.value().content, "Hello");
  EXPECT_EQ(reply.value().finish_reason, "stop");
  EXPECT_EQ(reply.value().usage.input, 100);
  EXPECT_EQ(reply.value().usage.output, 20);
  EXPECT_EQ(texts, (std::vector<std::string>{"Hel", "Hel", "lo"}))
      << "the text as it came, the cut attempt's too";
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_NE(bodies[0].find(R"("stream":true,"stream_options":{"include_usage":true})"),
            std::string::npos);
  ASSERT_EQ(lost.size(), 1u) << "the cut attempt was sent: it may be charged";
  EXPECT_EQ(lost[0].reason, ChargeLoss::kConnectionLost);
  EXPECT_TRUE(lost[0].estimated);
}

TEST_F(ModelClientTest, AStreamThatIsNotAChatCompletionIsRetriedAndAnErrorAnswerReadAsOne) {
  config::ModelConfig m = model_config({kA});
  m.stream = true;
  auto client = make(m);
  streams.push_back({http(200), {"data: {\"error\":{\"message\":\"overloaded\"}}\n\n"}});
  streams.push_back({http(429, R"({"error":{"message":"slow down","type":"rate_limit"}})",
                          {{"Retry-After", "1"}}),
                     {}});
  streams.push_back({http(200), {chunk(R"({"content":"ok"})", "\"stop\"")}});
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply.value().content, "ok");
  EXPECT_TRUE(reply.value().usage_estimated) << "no usage chunk: billed from an estimate";
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].reason, ChargeLoss::kUnreadable);
  EXPECT_EQ(called.size(), 3u);
  ASSERT_FALSE(slept.empty());
  EXPECT_GE(slept.back(), milliseconds(1000)) << "the 429's Retry-After was honoured";
}

TEST_F(ModelClientTest, AThinkingModelGetsEachToolTurnsReasoningBackHoweverTheCallerEncoded) {
  config::ModelConfig thinking = model_config({kA});
  thinking.reasoning_echo = ReasoningEcho::kToolTurns;
  auto client = make(thinking);
  messages.push_back(
      Message{Role::kAssistant, "", {ToolCall{"c1", "search_items", "{}"}}, {}, {}, "先查一下"});
  messages.push_back(Message{Role::kTool, R"({"items":[]})", {}, "c1", "search_items"});
  tools.push_back(ports::ToolSchema{"search_items", "Search.", R"({"type":"object"})"});
  script[kA] = {ok(), ok(), ok()};
  ASSERT_TRUE(call(*client).ok());  // built here, as the model says
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_NE(bodies[0].find(R"("reasoning_content":"先查一下")"), std::string::npos) << bodies[0];

  // Encoded by the caller as this model wants it: spliced in, the same bytes. Encoded
  // otherwise: encoded again here, so the reasoning is not lost.
  const std::string tools_json = codec::encode_tools(tools);
  for (ReasoningEcho echo : {ReasoningEcho::kToolTurns, ReasoningEcho::kNone}) {
    codec::ConversationEncoder encoder;
    encoder.sync(1, messages, echo);
    ASSERT_TRUE(call(*client, seconds(30), encoder.json(), tools_json, echo).ok());
    EXPECT_EQ(bodies.back(), bodies[0]) << to_string(echo);
  }
}

TEST_F(ModelClientTest, CallsWrittenAsTextAreReadAsCallsInTheFormatsTheModelNames) {
  const std::string hermes =
      R"({"choices":[{"message":{"role":"assistant","content":"<tool_call>\n{\"name\": )"
      R"(\"search_items\", \"arguments\": {\"keyword\": \"x\"}}\n</tool_call>"},)"
      R"("finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5}})";
  tools.push_back(ports::ToolSchema{"search_items", "Search.", R"({"type":"object"})"});
  {
    auto client = make(model_config({kA}));  // every format by default
    script[kA] = {http(200, hermes)};
    auto reply = call(*client);
    ASSERT_TRUE(reply.ok()) << reply.error().message;
    ASSERT_EQ(reply.value().tool_calls.size(), 1u);
    EXPECT_EQ(reply.value().tool_calls[0].name, "search_items");
    EXPECT_EQ(reply.value().tool_calls[0].arguments, R"({"keyword":"x"})");
    EXPECT_EQ(reply.value().content, "");
  }
  {
    config::ModelConfig none = model_config({kA});
    none.text_tool_calls.clear();
    auto client = make(none);
    script[kA] = {http(200, hermes)};
    auto reply = call(*client);
    ASSERT_TRUE(reply.ok());
    EXPECT_TRUE(reply.value().tool_calls.empty()) << "the text stays text";
  }
  {
    // A request that offers no tool (a planner's) gets its JSON as an answer.
    tools.clear();
    auto client = make(model_config({kA}));
    script[kA] = {http(200, hermes)};
    auto reply = call(*client);
    ASSERT_TRUE(reply.ok());
    EXPECT_TRUE(reply.value().tool_calls.empty());
  }
}

TEST_F(ModelClientTest, UnknownModelIsInvalid) {
  auto client = make(model_config({kA}));
  ports::ModelRequest request;
  request.model = "other";
  request.messages = &messages;
  request.tools = &tools;
  request.deadline = clock.now() + seconds(5);
  auto future = asio::co_spawn(io, client->complete(std::move(request)), asio::use_future);
  io.run();
  EXPECT_EQ(future.get().error().kind, ErrorKind::kInvalid);
}

TEST(ProviderError, RecognisesOutOfMoneyAcrossProviders) {
  using codec::parse_provider_error;
  EXPECT_TRUE(parse_provider_error(429, R"({"error":{"message":"You exceeded your current quota,
    please check your plan and billing details.","type":"insufficient_quota","param":null,
    "code":"insufficient_quota"}})")
                  .quota_exhausted);
  EXPECT_TRUE(parse_provider_error(402, R"({"error":{"message":"Insufficient Balance",
    "type":"unknown_error","param":null,"code":"invalid_request_error"}})")
                  .quota_exhausted);
  EXPECT_TRUE(parse_provider_error(429, R"({"error":{"code":"1113","message":"余额不足"}})")
                  .quota_exhausted);
  EXPECT_TRUE(parse_provider_error(400, R"({"code":"Arrearage","message":"Access denied"})")
                  .quota_exhausted);
  EXPECT_TRUE(parse_provider_error(
                  429, R"({"error":{"type":"exceeded_current_quota_error","message":"x"}})")
                  .quota_exhausted);
  // A plain rate limit is not.
  auto e = parse_provider_error(
      429, R"({"error":{"message":"Rate limit reached for requests","type":"requests",
    "code":"rate_limit_exceeded"}})");
  EXPECT_FALSE(e.quota_exhausted);
  EXPECT_EQ(e.code, "rate_limit_exceeded");
  EXPECT_EQ(e.type, "requests");
  EXPECT_FALSE(parse_provider_error(503, "insufficient balance").quota_exhausted);  // 5xx never
  // Other shapes and plain text.
  EXPECT_EQ(parse_provider_error(400, R"({"error":"bad model"})").message, "bad model");
  EXPECT_EQ(parse_provider_error(422, R"({"detail":"missing messages"})").message,
            "missing messages");
  EXPECT_EQ(parse_provider_error(502, "Bad Gateway").message, "Bad Gateway");
  EXPECT_EQ(parse_provider_error(502, std::string(400, 'x')).message.size(), 303u);
}

TEST_F(ModelClientTest, ATlsFailureFailsOverToAnotherEndpointAndIsFatalOnTheLast) {
  auto client = make(model_config({kA, kB}));
  script[kA] = {transport_error(ClientErrorKind::kTls)};
  script[kB] = {ok()};
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(called, (std::vector<std::string>{kA, kB}));
  EXPECT_TRUE(slept.empty()) << "a failover does not wait";

  auto single = make(model_config({kA}));
  called.clear();
  script[kA] = {transport_error(ClientErrorKind::kTls), ok()};
  auto refused = call(*single);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::kFatal) << "a TLS trust problem is not retried";
  EXPECT_EQ(refused.error().code, ErrorCode::kModelUnavailable);
  EXPECT_EQ(called.size(), 1u);
}

TEST_F(ModelClientTest, RateLimitsWithoutRetryAfterBackOffTheEndpointMoreEachTime) {
  auto client = make(model_config({kA}));
  script[kA] = {http(429), http(429), ok(), http(429), ok()};
  ASSERT_TRUE(call(*client).ok());
  milliseconds total{0};
  for (milliseconds d : slept)
    total += d;
  // base 250 ms, then 500 ms: the endpoint stays cool at least that long, whatever the jitter.
  EXPECT_GE(total, milliseconds(750));
  // A success resets the streak: the next 429 backs off 250 ms again, not 1 s.
  slept.clear();
  ASSERT_TRUE(call(*client).ok());
  total = milliseconds(0);
  for (milliseconds d : slept)
    total += d;
  EXPECT_GE(total, milliseconds(250));
  EXPECT_LT(total, milliseconds(1000));
}

TEST_F(ModelClientTest, ATlsFailureDoesNotEndACallAnotherEndpointCanStillAnswerAfterARetry) {
  auto client = make(model_config({kA, kB}));
  // B is briefly unavailable, A has a bad certificate: the call goes back to B, not fatal.
  script[kB] = {http(503), ok()};
  script[kA] = {transport_error(ClientErrorKind::kTls), transport_error(ClientErrorKind::kTls)};
  auto reply = call(*client);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(std::count(called.begin(), called.end(), std::string(kA)), 1)
      << "a broken endpoint is not tried twice in one call";
}

}  // namespace
}  // namespace agentfleet::http
