// The fleet view's completions per second: a sliding window of one-second buckets.

#include "dispatcher/completion_rate.hpp"

#include <gtest/gtest.h>

namespace agentfleet::dispatcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(CompletionRate, CountsTheEndsOfTheLastWindowPerSecond) {
  CompletionRate rate(seconds(10));
  const CompletionRate::Clock::time_point t0{seconds(1000)};
  EXPECT_EQ(rate.per_second(t0), 0.0);
  for (int i = 0; i < 30; ++i)
    rate.record(t0 + milliseconds(i * 100));                // 30 ends over 3 s
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(3)), 3.0);  // 30 in a 10 s window
  EXPECT_EQ(rate.window_s(), 10);
  // Nine seconds on, the first second's ten have left the window.
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(10)), 2.0);
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(13)), 0.0);
  // A bucket reused for a later second starts from nothing.
  rate.record(t0 + seconds(20));
  EXPECT_DOUBLE_EQ(rate.per_second(t0 + seconds(20)), 0.1);
}

}  // namespace
}  // namespace agentfleet::dispatcher
