// Pure policies of core/limits, driven by a ManualClock and a seeded random source.

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/limits/circuit_breaker.hpp"
#include "core/limits/clock.hpp"
#include "core/limits/retry_after.hpp"
#include "core/limits/retry_policy.hpp"
#include "core/limits/token_bucket.hpp"

namespace agentfleet::limits {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Action = RetryDecision::Action;

TEST(Backoff, CeilingDoublesUpToTheCap) {
  RetryPolicy policy{milliseconds(250), milliseconds(20000), 3};
  EXPECT_EQ(backoff_ceiling(policy, 0), milliseconds(250));
  EXPECT_EQ(backoff_ceiling(policy, 1), milliseconds(500));
  EXPECT_EQ(backoff_ceiling(policy, 4), milliseconds(4000));
  EXPECT_EQ(backoff_ceiling(policy, 7), milliseconds(20000));
  EXPECT_EQ(backoff_ceiling(policy, 1000), milliseconds(20000));  // no overflow
}

TEST(Backoff, FullJitterStaysWithinBoundsAndSpreads) {
  RetryPolicy policy{milliseconds(250), milliseconds(20000), 10};
  std::mt19937_64 rng(42);
  RandomSource random = std::ref(rng);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const auto ceiling = backoff_ceiling(policy, attempt);
    milliseconds low = ceiling, high(0);
    for (int i = 0; i < 2000; ++i) {
      const auto d = full_jitter_delay(policy, attempt, random);
      ASSERT_GE(d, milliseconds(0));
      ASSERT_LE(d, ceiling);
      low = std::min(low, d);
      high = std::max(high, d);
    }
    // Uniform over [0, ceiling]: both ends of the range are reached closely.
    EXPECT_LE(low, ceiling / 10) << attempt;
    EXPECT_GE(high, ceiling * 9 / 10) << attempt;
  }
}

TEST(Backoff, SameSeedSameSchedule) {
  RetryPolicy policy;
  std::mt19937_64 a(7), b(7);
  RandomSource ra = std::ref(a), rb = std::ref(b);
  for (int attempt = 0; attempt < 5; ++attempt)
    EXPECT_EQ(full_jitter_delay(policy, attempt, ra), full_jitter_delay(policy, attempt, rb));
}

class RetryDecisionTest : public ::testing::Test {
 protected:
  RetryInput input(AttemptFailure failure, seconds left = seconds(30)) {
    RetryInput in;
    in.failure = failure;
    in.now = clock.now();
    in.deadline = clock.now() + left;
    return in;
  }

  ManualClock clock;
  RetryPolicy policy{milliseconds(250), milliseconds(20000), 3};
  std::mt19937_64 rng{1};
  RandomSource random = std::ref(rng);
};

TEST_F(RetryDecisionTest, RetryableFailuresBackOffWithinTheCeiling) {
  for (auto failure :
       {AttemptFailure::kRateLimited, AttemptFailure::kServerError, AttemptFailure::kTimeout,
        AttemptFailure::kConnectError, AttemptFailure::kBadResponse}) {
    for (int retries = 0; retries < 3; ++retries) {
      auto in = input(failure);
      in.retries_done = retries;
      const auto d = decide_retry(policy, in, random);
      ASSERT_EQ(d.action, Action::kRetryAfter) << to_string(failure);
      EXPECT_LE(d.delay, backoff_ceiling(policy, retries));
    }
  }
}

TEST_F(RetryDecisionTest, RetryAfterIsHonouredExactlyNeverShorter) {
  auto in = input(AttemptFailure::kRateLimited);
  in.server_delay = milliseconds(10000);
  const auto d = decide_retry(policy, in, random);
  ASSERT_EQ(d.action, Action::kRetryAfter);
  EXPECT_EQ(d.delay, milliseconds(10000));  // longer than any backoff of attempt 0
}

TEST_F(RetryDecisionTest, RetryAfterBeyondTheDeadlineFailsOverOrGivesUpNow) {
  auto in = input(AttemptFailure::kRateLimited, seconds(5));
  in.server_delay = milliseconds(10000);
  auto d = decide_retry(policy, in, random);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_FALSE(d.deadline_reached);
  EXPECT_TRUE(d.no_time_to_wait) << "the call cannot succeed in time: a timeout, not a failure";
  EXPECT_NE(d.reason.find("10000 ms"), std::string::npos) << d.reason;

  in.other_endpoint_available = true;
  d = decide_retry(policy, in, random);
  EXPECT_EQ(d.action, Action::kFailover);
}

TEST_F(RetryDecisionTest, BackoffPastTheDeadlineGivesUp) {
  auto in = input(AttemptFailure::kServerError, seconds(0));
  in.deadline = in.now + milliseconds(1);
  in.retries_done = 2;
  // Whatever the jitter draws (0..1000 ms), waiting it leaves no time for an attempt.
  for (int i = 0; i < 50; ++i) {
    const auto d = decide_retry(policy, in, random);
    if (d.action == Action::kRetryAfter) {
      EXPECT_LT(in.now + d.delay, in.deadline);
    } else {
      EXPECT_EQ(d.action, Action::kGiveUp);
    }
  }
  in.now = in.deadline;
  const auto d = decide_retry(policy, in, random);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_TRUE(d.deadline_reached);
}

TEST_F(RetryDecisionTest, AnotherEndpointMeansFailoverNow) {
  auto in = input(AttemptFailure::kConnectError);
  in.other_endpoint_available = true;
  EXPECT_EQ(decide_retry(policy, in, random).action, Action::kFailover);
}

TEST_F(RetryDecisionTest, AttemptsAreBoundedByMaxRetries) {
  auto in = input(AttemptFailure::kServerError);
  in.retries_done = 3;
  in.other_endpoint_available = true;
  const auto d = decide_retry(policy, in, random);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_NE(d.reason.find("3 retries"), std::string::npos) << d.reason;
}

TEST_F(RetryDecisionTest, RejectedIsNeverRetriedAndQuotaOnlyFailsOver) {
  auto in = input(AttemptFailure::kRejected);
  in.other_endpoint_available = true;
  EXPECT_EQ(decide_retry(policy, in, random).action, Action::kGiveUp);

  in = input(AttemptFailure::kQuotaExhausted);
  in.server_delay = milliseconds(100);
  EXPECT_EQ(decide_retry(policy, in, random).action, Action::kGiveUp);
  in.other_endpoint_available = true;
  in.retries_done = 3;  // a quota failover is not a retry
  EXPECT_EQ(decide_retry(policy, in, random).action, Action::kFailover);
}

TEST(RetryAfter, ReadsMillisecondsOrSecondsAndCapsAbsurdValues) {
  const auto now = std::chrono::system_clock::time_point(seconds(1'790'000'000));
  EXPECT_EQ(parse_retry_after("250", "", now), milliseconds(250));
  EXPECT_EQ(parse_retry_after("250", "9", now), milliseconds(250));  // the ms header wins
  EXPECT_EQ(parse_retry_after("", "2", now), milliseconds(2000));
  EXPECT_EQ(parse_retry_after("", " 1.5 ", now), milliseconds(1500));
  EXPECT_EQ(parse_retry_after("", "1e300", now), milliseconds(3'600'000));
  EXPECT_EQ(parse_retry_after("", "inf", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("", "-1", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("", "", now), std::nullopt);
  EXPECT_EQ(parse_retry_after("soon", "later", now), std::nullopt);
}

TEST(RetryAfter, ReadsHttpDatesRelativeToNow) {
  // 2026-10-21 07:28:00 UTC
  const auto date = parse_http_date("Wed, 21 Oct 2026 07:28:00 GMT");
  ASSERT_TRUE(date);
  EXPECT_EQ(date->time_since_epoch(), seconds(1792567680));
  EXPECT_EQ(parse_http_date("Wednesday, 21-Oct-26 07:28:00 GMT"), date);
  EXPECT_EQ(parse_http_date("Wed Oct 21 07:28:00 2026"), date);
  EXPECT_EQ(parse_http_date("Wed, 21 Oct 2026 25:28:00 GMT"), std::nullopt);
  EXPECT_EQ(parse_http_date("yesterday"), std::nullopt);

  EXPECT_EQ(parse_retry_after("", "Wed, 21 Oct 2026 07:28:00 GMT", *date - seconds(12)),
            milliseconds(12000));
  EXPECT_EQ(parse_retry_after("", "Wed, 21 Oct 2026 07:28:00 GMT", *date + seconds(5)),
            milliseconds(0));
  EXPECT_EQ(parse_retry_after("", "Wed, 21 Oct 2026 07:28:00 GMT", *date - std::chrono::hours(5)),
            kMaxRetryAfter);
}

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresThenProbesOnce) {
  ManualClock clock;
  CircuitBreaker breaker({3, milliseconds(30000)});
  EXPECT_TRUE(breaker.try_pass(clock.now()));
  breaker.record_failure(clock.now());
  breaker.record_failure(clock.now());
  breaker.record_success();  // not consecutive any more
  breaker.record_failure(clock.now());
  breaker.record_failure(clock.now());
  EXPECT_EQ(breaker.state(clock.now()), CircuitBreaker::State::kClosed);
  breaker.record_failure(clock.now());
  EXPECT_EQ(breaker.state(clock.now()), CircuitBreaker::State::kOpen);
  EXPECT_FALSE(breaker.can_pass(clock.now()));
  EXPECT_FALSE(breaker.try_pass(clock.now()));
  EXPECT_EQ(breaker.next_probe_at(), clock.now() + seconds(30));

  clock.advance(seconds(30));
  EXPECT_EQ(breaker.state(clock.now()), CircuitBreaker::State::kHalfOpen);
  EXPECT_TRUE(breaker.try_pass(clock.now()));   // the probe
  EXPECT_FALSE(breaker.try_pass(clock.now()));  // only one
  breaker.record_success();
  EXPECT_EQ(breaker.state(clock.now()), CircuitBreaker::State::kClosed);
  EXPECT_TRUE(breaker.try_pass(clock.now()));
}

TEST(CircuitBreaker, FailedProbeReopensAndALostProbeIsReplaced) {
  ManualClock clock;
  CircuitBreaker breaker({1, milliseconds(10000)});
  breaker.record_failure(clock.now());
  clock.advance(seconds(10));
  ASSERT_TRUE(breaker.try_pass(clock.now()));
  breaker.record_failure(clock.now());
  EXPECT_EQ(breaker.state(clock.now()), CircuitBreaker::State::kOpen);
  clock.advance(seconds(9));
  EXPECT_FALSE(breaker.can_pass(clock.now()));
  clock.advance(seconds(1));
  ASSERT_TRUE(breaker.try_pass(clock.now()));  // a probe that never reports back
  clock.advance(seconds(9));
  EXPECT_FALSE(breaker.try_pass(clock.now()));
  clock.advance(seconds(1));
  EXPECT_TRUE(breaker.try_pass(clock.now()));
}

TEST(TokenBucket, RefillsContinuouslyAndSaysHowLongToWait) {
  ManualClock clock;
  TokenBucket bucket(60, seconds(60), clock.now());  // 1 per second
  for (int i = 0; i < 60; ++i)
    ASSERT_TRUE(bucket.try_acquire(1, clock.now()));
  EXPECT_FALSE(bucket.try_acquire(1, clock.now()));
  EXPECT_EQ(bucket.wait_for(1, clock.now()), milliseconds(1000));
  EXPECT_EQ(bucket.wait_for(5, clock.now()), milliseconds(5000));
  clock.advance(milliseconds(2500));
  EXPECT_TRUE(bucket.try_acquire(2, clock.now()));
  EXPECT_FALSE(bucket.try_acquire(1, clock.now()));
  clock.advance(std::chrono::hours(1));
  EXPECT_DOUBLE_EQ(bucket.level(clock.now()), 60);  // never above the capacity
  // A cost above the capacity fits once the bucket is full, instead of never.
  EXPECT_TRUE(bucket.try_acquire(1000, clock.now()));
}

TEST(TokenBucket, ZeroCapacityIsUnlimited) {
  ManualClock clock;
  TokenBucket bucket(0, seconds(60), clock.now());
  for (int i = 0; i < 1000; ++i)
    ASSERT_TRUE(bucket.try_acquire(1e9, clock.now()));
}

TEST(ProviderLimits, TakesRequestsAndTokensTogetherAndLearnsRealUsage) {
  ManualClock clock;
  ProviderLimits limits(10, 6000, clock.now());  // 6000 tokens per minute: 100 per second
  EXPECT_TRUE(limits.try_acquire(5000, clock.now()));
  EXPECT_FALSE(limits.try_acquire(2000, clock.now()));  // tokens short; nothing taken
  EXPECT_EQ(limits.wait_for(2000, clock.now()), milliseconds(10000));
  EXPECT_DOUBLE_EQ(limits.requests().level(clock.now()), 9);

  // The call used 1000 tokens, not 5000: the difference is given back.
  limits.correct(5000, 1000, clock.now());
  EXPECT_TRUE(limits.try_acquire(2000, clock.now()));
  EXPECT_DOUBLE_EQ(limits.tokens().level(clock.now()), 3000);

  // Used more than estimated: the bucket goes into debt and later calls wait for it.
  limits.correct(2000, 8000, clock.now());
  EXPECT_DOUBLE_EQ(limits.tokens().level(clock.now()), -3000);
  EXPECT_EQ(limits.wait_for(1000, clock.now()), milliseconds(40000));
}

TEST(ProviderLimits, RequestsPerMinuteAloneThrottle) {
  ManualClock clock;
  ProviderLimits limits(2, 0, clock.now());
  EXPECT_TRUE(limits.try_acquire(1'000'000, clock.now()));
  EXPECT_TRUE(limits.try_acquire(1'000'000, clock.now()));
  EXPECT_FALSE(limits.try_acquire(1, clock.now()));
  EXPECT_EQ(limits.wait_for(1, clock.now()), milliseconds(30000));
}

TEST(ProviderLimits, EstimateIsCharsOverThreePlusOutput) {
  EXPECT_EQ(estimate_request_tokens(3000, 1024), 2024);
  EXPECT_EQ(estimate_request_tokens(1, 0), 1);
  EXPECT_EQ(estimate_request_tokens(0, 0), 0);
}

}  // namespace
}  // namespace agentfleet::limits
