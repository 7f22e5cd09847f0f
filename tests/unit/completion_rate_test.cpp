// The fleet view's completions per second: a sliding window of one-second buckets.

#include "dispatcher/completion_rate.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

// The fleet page's chart: ends per 10 s bucket, oldest first, the last still filling; a
// bucket that fell out of the history counts nothing, and one reused starts from nothing.
TEST(CompletionRate, KeepsAFixedHistoryOfEndsPerBucket) {
  CompletionRate rate(seconds(10), seconds(10), 4);
  const CompletionRate::Clock::time_point t0{seconds(1000)};  // a bucket's first second
  EXPECT_EQ(rate.history(t0), (std::vector<std::uint64_t>{0, 0, 0, 0}));
  EXPECT_EQ(rate.history_bucket_s(), 10);
  rate.record(t0);
  rate.record(t0 + seconds(9));
  rate.record(t0 + seconds(10));
  rate.record(t0 + seconds(35));
  EXPECT_EQ(rate.history(t0 + seconds(35)), (std::vector<std::uint64_t>{2, 1, 0, 1}));
  // Two buckets on: the first two have left it.
  EXPECT_EQ(rate.history(t0 + seconds(55)), (std::vector<std::uint64_t>{0, 1, 0, 0}));
  rate.record(t0 + seconds(41));  // reuses the slot of the bucket at t0
  EXPECT_EQ(rate.history(t0 + seconds(41)), (std::vector<std::uint64_t>{1, 0, 1, 1}));
  // A replica up for two buckets shows those two, not a past of zeros it never saw.
  CompletionRate fresh(seconds(10), seconds(10), 4, t0 + seconds(5));
  EXPECT_EQ(fresh.history(t0 + seconds(5)), (std::vector<std::uint64_t>{0}));
  fresh.record(t0 + seconds(12));
  EXPECT_EQ(fresh.history(t0 + seconds(12)), (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(fresh.history(t0 + seconds(90)).size(), 4u);
}

}  // namespace
}  // namespace agentfleet::dispatcher
