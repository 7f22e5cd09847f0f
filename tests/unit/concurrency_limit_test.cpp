// The adaptive in-flight limit (core/limits/concurrency_limit) on a manual clock: round
// trips and in-flight counts are fed by hand, windows close as time moves.
#include "core/limits/concurrency_limit.hpp"

#include <gtest/gtest.h>

#include "core/limits/clock.hpp"

namespace agentfleet::limits {
namespace {

using namespace std::chrono_literals;

ConcurrencyLimitOptions options() {
  ConcurrencyLimitOptions o;
  o.initial = 16;
  o.min = 4;
  o.max = 10000;
  o.target = 25ms;
  o.tolerance = 3.0;
  o.backoff = 0.8;
  o.increase = 0.1;
  o.window = 250ms;
  o.min_samples = 8;
  return o;
}

// One window: `running` in flight, `samples` writes of `round_trip` each, then time moves
// to the window's end.
void window(ConcurrencyLimit& limit, ManualClock& clock, int running,
            std::chrono::microseconds round_trip, int samples = 20, bool ok = true) {
  limit.in_flight(running, clock.now());
  for (int i = 0; i < samples; ++i)
    limit.sample(round_trip, ok, clock.now());
  clock.advance(250ms);
  limit.in_flight(running, clock.now());
}

TEST(ConcurrencyLimit, AQuietDatabaseLetsABusyWorkerDoubleUntilTheFirstCongestion) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  EXPECT_EQ(limit.limit(), 16);
  for (int expected : {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 10000}) {
    window(limit, clock, limit.limit(), 2ms);
    EXPECT_EQ(limit.limit(), expected);
  }
  EXPECT_TRUE(limit.slow_start());
  EXPECT_EQ(limit.quiet_round_trip(), 2ms);
}

TEST(ConcurrencyLimit, ALimitThatDoesNotBindIsLeftAlone) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  for (int i = 0; i < 10; ++i)
    window(limit, clock, 3, 2ms);  // 3 of 16 in flight: there is no demand for more
  EXPECT_EQ(limit.limit(), 16);
  EXPECT_EQ(limit.counters().increases, 0u);
}

TEST(ConcurrencyLimit, RoundTripsPastTheTargetBackOffAndEndSlowStart) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  window(limit, clock, 16, 2ms);  // quiet: 2 ms; limit 32
  ASSERT_EQ(limit.limit(), 32);
  window(limit, clock, 32, 40ms);  // p90 40 ms > max(25 ms, 3 x 2 ms)
  EXPECT_EQ(limit.limit(), 25);
  EXPECT_FALSE(limit.slow_start());
  // From now on it grows by a tenth a window, not by doubling.
  window(limit, clock, 25, 2ms);
  EXPECT_EQ(limit.limit(), 27);
  window(limit, clock, 27, 2ms);
  EXPECT_EQ(limit.limit(), 29);
}

TEST(ConcurrencyLimit, ARoundTripBelowTheTargetIsNeverCongestionHoweverQuietTheDatabaseWas) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  window(limit, clock, 16, 100us);  // a very quiet database: 3x is 0.3 ms
  window(limit, clock, 32, 20ms);   // 20 ms is under the 25 ms target: not congestion
  EXPECT_EQ(limit.limit(), 64);
  EXPECT_EQ(limit.counters().backoffs, 0u);
}

TEST(ConcurrencyLimit, UnderSustainedCongestionTheLimitFallsToItsFloorAndNoFurther) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  for (int i = 0; i < 40; ++i)
    window(limit, clock, limit.limit(), 500ms);
  EXPECT_EQ(limit.limit(), 4);
}

TEST(ConcurrencyLimit, FailedWritesBackOffWhateverTheirLatency) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  window(limit, clock, 16, 1ms, 20, false);
  EXPECT_EQ(limit.limit(), 12);
}

TEST(ConcurrencyLimit, ASlowTailBacksOffWhileTheMedianLooksFine) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  window(limit, clock, 16, 2ms);  // 32
  limit.in_flight(32, clock.now());
  // 80% of the writes are quick, a fifth take 200 ms: the p90 is what counts.
  for (int i = 0; i < 16; ++i)
    limit.sample(2ms, true, clock.now());
  for (int i = 0; i < 4; ++i)
    limit.sample(200ms, true, clock.now());
  clock.advance(250ms);
  limit.in_flight(32, clock.now());
  EXPECT_EQ(limit.limit(), 25);
}

TEST(ConcurrencyLimit, AWindowWithTooFewSamplesWaitsForMoreUnlessItGrowsOld) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  limit.in_flight(16, clock.now());
  limit.sample(2ms, true, clock.now());
  clock.advance(300ms);
  limit.in_flight(16, clock.now());
  EXPECT_EQ(limit.counters().windows, 0u) << "one sample is not enough to judge";
  clock.advance(800ms);  // four windows old: judged with what it has
  limit.in_flight(16, clock.now());
  EXPECT_EQ(limit.counters().windows, 1u);
  EXPECT_EQ(limit.limit(), 32);
}

TEST(ConcurrencyLimit, TheQuietRoundTripFollowsADatabaseThatGotSlowerForGood) {
  ConcurrencyLimitOptions o = options();
  o.quiet_memory = 4;
  o.target = 10ms;
  ManualClock clock;
  ConcurrencyLimit limit(o, clock.now());
  window(limit, clock, 4, 2ms);
  EXPECT_EQ(limit.quiet_round_trip(), 2ms);
  // The database is now at 5 ms when quiet (within the target, so not congestion): after
  // four windows the 2 ms ones are forgotten.
  for (int i = 0; i < 4; ++i)
    window(limit, clock, 4, 5ms);
  EXPECT_EQ(limit.quiet_round_trip(), 5ms);
}

TEST(ConcurrencyLimit, AWorkerThatStartsOnACongestedDatabaseDoesNotLearnItAsQuiet) {
  ManualClock clock;
  ConcurrencyLimit limit(options(), clock.now());
  window(limit, clock, 16, 300ms);
  EXPECT_EQ(limit.limit(), 12) << "300 ms is past the 25 ms target whatever came before";
  EXPECT_EQ(limit.quiet_round_trip(), 0us) << "nothing quiet seen yet";
  window(limit, clock, 12, 300ms);
  EXPECT_EQ(limit.limit(), 9);
}

TEST(ConcurrencyLimit, ADatabaseSlowButSteadyWithinToleranceIsNotCongestion) {
  ConcurrencyLimitOptions o = options();
  ManualClock clock;
  ConcurrencyLimit limit(o, clock.now());
  window(limit, clock, 16, 20ms);  // quiet: 20 ms (within the 25 ms target)
  // 45 ms is past the target but within 3 x the quiet 20 ms: the threshold is 60 ms.
  window(limit, clock, limit.limit(), 45ms);
  EXPECT_EQ(limit.limit(), 64);
  window(limit, clock, limit.limit(), 70ms);
  EXPECT_EQ(limit.limit(), 51);
}

TEST(ConcurrencyLimit, OptionsOutOfOrderAreClamped) {
  ConcurrencyLimitOptions o = options();
  o.initial = 100000;
  o.max = 50;
  o.min = 0;
  ManualClock clock;
  ConcurrencyLimit limit(o, clock.now());
  EXPECT_EQ(limit.limit(), 50);
  for (int i = 0; i < 40; ++i)
    window(limit, clock, limit.limit(), 500ms);
  EXPECT_EQ(limit.limit(), 1);
}

}  // namespace
}  // namespace agentfleet::limits
