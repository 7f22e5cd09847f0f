// "Retry the failed ones" of a batch (dispatcher/batch_retry.hpp): each answer of a task's
// retry counted, a refusal that every next retry would meet stopping the slice where it is,
// and the next slice named.
#include "dispatcher/batch_retry.hpp"

#include <gtest/gtest.h>

#include <string>

namespace agentfleet::dispatcher {
namespace {

const char* const kQueueFull =
    R"js({"error":{"code":"queue_full","message":"u1 has 10 tasks queued (max_queued 10)"}})js";
const char* const kCannot =
    R"js({"error":{"code":"cannot_retry","message":"the model is gone","path":"/model"}})js";

TEST(BatchRetry, EachAnswerIsCountedAndTheLastSliceNamesNoNext) {
  BatchRetryTally tally;
  EXPECT_TRUE(tally.add("t1", 201, "{}"));
  EXPECT_TRUE(tally.add("t2", 200, "{}"));
  EXPECT_TRUE(tally.add("t3", 422, kCannot));
  EXPECT_TRUE(tally.add("t4", 422, kCannot));
  tally.reached_end();
  EXPECT_EQ(tally.retried(), 1);
  EXPECT_EQ(tally.already(), 1);
  EXPECT_EQ(tally.json(),
            R"js({"retried":1,"already_retried":1,"not_retried":{"cannot_retry":2},)js"
            R"js("stopped":null,"next_after":null})js");
}

TEST(BatchRetry, AFullSliceNamesWhereTheNextStarts) {
  BatchRetryTally tally;
  EXPECT_TRUE(tally.add("t1", 201, "{}"));
  EXPECT_TRUE(tally.add("t2", 201, "{}"));
  EXPECT_EQ(tally.json(), R"js({"retried":2,"already_retried":0,"not_retried":{},)js"
                          R"js("stopped":null,"next_after":"t2"})js");
}

TEST(BatchRetry, AFullQueueStopsTheSliceBeforeTheTaskItRefused) {
  BatchRetryTally tally;
  EXPECT_TRUE(tally.add("t1", 201, "{}"));
  EXPECT_FALSE(tally.add("t2", 429, kQueueFull));
  tally.reached_end();  // the slice read all there was, but stopped short of it
  EXPECT_EQ(tally.json(),
            R"js({"retried":1,"already_retried":0,"not_retried":{},"stopped":)js"
            R"js({"code":"queue_full","message":"u1 has 10 tasks queued (max_queued 10)"},)js"
            R"js("next_after":"t1"})js");
  BatchRetryTally store_away;
  EXPECT_FALSE(store_away.add("t1", 503, "not json"));
  EXPECT_NE(store_away.json().find(R"js("stopped":{"code":"unknown")js"), std::string::npos);
  EXPECT_NE(store_away.json().find(R"js("next_after":"")js"), std::string::npos)
      << "from the first again";
}

}  // namespace
}  // namespace agentfleet::dispatcher
