// When long polls and event streams read Postgres (dispatcher/feed_watch.hpp): on a gap in
// the task feed, promptly but spaced, and otherwise on a safety timer that backs off.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <vector>

#include "dispatcher/feed_watch.hpp"

namespace agentfleet::dispatcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using TimePoint = RereadSchedule::TimePoint;

const TimePoint kStart = TimePoint{} + seconds(1000);

TEST(SeqGaps, AContiguousRunJoinedMidwayHasNoGap) {
  SeqGaps gaps;
  EXPECT_FALSE(gaps.observe(1, 7));  // the waiter joined at the eighth event
  EXPECT_FALSE(gaps.observe(1, 8));
  EXPECT_FALSE(gaps.observe(1, 9));
}

TEST(SeqGaps, ASkippedNumberWithinAnAttemptIsAGap) {
  SeqGaps gaps;
  gaps.observe(1, 0);
  gaps.observe(1, 1);
  EXPECT_TRUE(gaps.observe(1, 3));
  EXPECT_FALSE(gaps.observe(1, 4)) << "the gap is reported once";
}

TEST(SeqGaps, ARepeatedOrStaleEventIsNoGap) {
  SeqGaps gaps;
  gaps.observe(2, 0);
  gaps.observe(2, 1);
  EXPECT_FALSE(gaps.observe(2, 1)) << "a producer's retry";
  EXPECT_FALSE(gaps.observe(1, 5)) << "a late event of the attempt before";
  EXPECT_FALSE(gaps.observe(2, 2));
}

TEST(SeqGaps, NumbersFromAnyoneOnTheTopicAreSafe) {
  SeqGaps gaps;
  gaps.observe(1, 0);
  EXPECT_TRUE(gaps.observe(1, std::numeric_limits<int>::max()));
  EXPECT_FALSE(gaps.observe(1, std::numeric_limits<int>::max()));
  EXPECT_FALSE(gaps.observe(1, std::numeric_limits<int>::min()));
  EXPECT_FALSE(gaps.observe(1, 1)) << "behind a forged number, a real one is no gap";
}

TEST(SeqGaps, ANewAttemptMustStartAtZero) {
  SeqGaps started;
  started.observe(1, 4);
  EXPECT_FALSE(started.observe(2, 0));
  EXPECT_FALSE(started.observe(2, 1));
  SeqGaps missed;
  missed.observe(1, 4);
  EXPECT_TRUE(missed.observe(2, 2)) << "the new attempt's first events never came";
}

TEST(RereadSchedule, WithoutGapsTheSafetyReadsBackOffToTheCeiling) {
  RereadOptions options;
  options.first_quiet = seconds(5);
  options.max_quiet = seconds(60);
  RereadSchedule schedule(kStart, options);
  EXPECT_FALSE(schedule.is_due(kStart + seconds(4)));
  EXPECT_EQ(schedule.due(), kStart + seconds(5));
  // An hour of a quiet stream: reads at 5, 15, 35, 75, 135, then every 60 s.
  TimePoint now = kStart;
  int reads = 0;
  while (now < kStart + seconds(3600)) {
    now = schedule.due();
    schedule.read(now, false);
    ++reads;
  }
  EXPECT_EQ(reads, 5 + (3600 - 135) / 60 + 1);
  EXPECT_EQ(schedule.due() - now, seconds(60));
}

TEST(RereadSchedule, ARowWithNewsBringsTheNextReadCloser) {
  RereadSchedule schedule(kStart);
  schedule.read(kStart + seconds(5), false);
  schedule.read(kStart + seconds(15), false);
  EXPECT_EQ(schedule.due(), kStart + seconds(35));
  schedule.read(kStart + seconds(35), true);
  EXPECT_EQ(schedule.due(), kStart + seconds(40));
}

TEST(RereadSchedule, AGapIsReadAtOnceWhenTheLastReadIsOldEnough) {
  RereadSchedule schedule(kStart);
  schedule.gap(kStart + seconds(2));
  EXPECT_TRUE(schedule.is_due(kStart + seconds(2)));
}

TEST(RereadSchedule, GapsThatKeepComingAreReadAtGrowingSpacing) {
  RereadOptions options;
  options.first_gap_spacing = milliseconds(250);
  options.max_gap_spacing = seconds(8);
  options.first_quiet = seconds(5);
  RereadSchedule schedule(kStart, options);
  // A feed without its partitions reports a gap at every look.
  TimePoint now = kStart;
  std::vector<milliseconds> spacing;
  for (int i = 0; i < 8; ++i) {
    schedule.gap(now);
    const TimePoint due = schedule.due();
    spacing.push_back(std::chrono::duration_cast<milliseconds>(due - now));
    now = due;
    schedule.read(now, false);
  }
  EXPECT_EQ(spacing[0], milliseconds(250));
  EXPECT_EQ(spacing[1], milliseconds(500));
  EXPECT_EQ(spacing[2], milliseconds(1000));
  EXPECT_EQ(spacing[5], seconds(8));
  EXPECT_EQ(spacing[7], seconds(8)) << "the ceiling";
}

TEST(RereadSchedule, AQuietReadResetsTheGapSpacing) {
  RereadSchedule schedule(kStart);
  schedule.gap(kStart);
  schedule.read(kStart + milliseconds(250), false);
  schedule.gap(kStart + milliseconds(250));
  schedule.read(kStart + milliseconds(750), false);
  // No gap for a while: the safety read comes, and the next gap is answered promptly.
  schedule.read(kStart + seconds(10), false);
  schedule.gap(kStart + seconds(10) + milliseconds(300));
  EXPECT_TRUE(schedule.is_due(kStart + seconds(10) + milliseconds(300)));
}

}  // namespace
}  // namespace agentfleet::dispatcher
