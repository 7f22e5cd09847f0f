// codec/task_json: the shapes a stored task is shown in, from one row. What a client relies
// on: why a task waits, nulls where nothing is stored, Postgres's own values (times, money,
// metadata) passed on as they are, and text escaped.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "core/codec/task_json.hpp"

namespace agentfleet {
namespace {

rapidjson::Document parsed(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

codec::TaskRow queued_row() {
  codec::TaskRow row;
  row.task_id = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
  row.user_id = "u1";
  row.text = "line\n\"quoted\" \x01";
  row.model = "sim-model";
  row.priority = "interactive";
  row.status = "queued";
  row.timeout_s = 30;
  row.schedule_timeout_s = 3600;
  row.max_steps = 10;
  row.metadata_json = R"({"locale": "zh-CN"})";
  row.created_at = R"("2026-11-29T04:26:27.123456+00:00")";
  return row;
}

TEST(TaskJsonCodec, AQueuedTaskWaitsForItsParentThenTheStoredLimitThenScheduling) {
  EXPECT_EQ(codec::waiting_reason("queued", true, "tokens_per_minute"), "parent");
  EXPECT_EQ(codec::waiting_reason("queued", false, "tokens_per_minute"), "tokens_per_minute");
  EXPECT_EQ(codec::waiting_reason("queued", false, std::nullopt), "scheduling");
  for (const char* status : {"dispatched", "running", "succeeded", "cancelled"})
    EXPECT_EQ(codec::waiting_reason(status, true, "concurrency"), std::nullopt) << status;
}

TEST(TaskJsonCodec, ATaskShowsNullWhereNothingIsStoredAndPostgressValuesAsTheyAre) {
  codec::TaskRow row = queued_row();
  row.stored_waiting_reason = "budget";
  const auto doc = parsed(codec::task_json(row, R"([{"step": 0}])"));
  EXPECT_EQ(doc["text"], "line\n\"quoted\" \x01");
  EXPECT_TRUE(doc["tools"].IsNull());
  EXPECT_TRUE(doc["result"].IsNull());
  EXPECT_TRUE(doc["max_tokens"].IsNull());
  EXPECT_TRUE(doc["finished_at"].IsNull());
  EXPECT_EQ(doc["created_at"], "2026-11-29T04:26:27.123456+00:00");
  EXPECT_EQ(doc["metadata"]["locale"], "zh-CN");
  EXPECT_EQ(doc["waiting_reason"], "budget");
  EXPECT_EQ(doc["trace"][0]["step"].GetInt(), 0);
  EXPECT_EQ(doc["cost"], "0.000000");
  EXPECT_EQ(doc["usage"]["cached_input_tokens"].GetInt64(), 0);
}

TEST(TaskJsonCodec, AnEndedTaskShowsItsResultAndBillInEveryShape) {
  codec::TaskRow row = queued_row();
  row.status = "succeeded";
  row.stored_waiting_reason = "budget";  // of the user's other tasks: not this one's
  row.tools_json = R"(["create_item"])";
  row.max_tokens = 20000;
  row.result = codec::StoredResult{"need_clarification", "哪一天？", {"周一", "周二"}};
  row.usage.input = 1200;
  row.usage.cached_input = 200;
  row.usage.output = 80;
  row.cost = "0.001234";
  row.currency = "CNY";
  row.batch_id = "b1";
  row.idempotency_key = "line-1";
  const auto task = parsed(codec::task_json(row, "[]"));
  EXPECT_TRUE(task["waiting_reason"].IsNull());
  EXPECT_EQ(task["tools"][0], "create_item");
  EXPECT_EQ(task["max_tokens"].GetInt64(), 20000);
  const auto summaries = parsed(codec::task_summaries_json({row, queued_row()}));
  ASSERT_EQ(summaries.Size(), 2u);
  const auto line = parsed(codec::batch_result_json(row));
  const auto history = parsed(codec::task_history_json(row, "[]"));
  for (const rapidjson::Value* shown : {&static_cast<const rapidjson::Value&>(task), &summaries[0],
                                        &static_cast<const rapidjson::Value&>(line),
                                        &static_cast<const rapidjson::Value&>(history)}) {
    EXPECT_EQ((*shown)["result"]["type"], "need_clarification");
    EXPECT_EQ((*shown)["result"]["options"][1], "周二");
    EXPECT_EQ((*shown)["cost"], "0.001234");
    EXPECT_EQ((*shown)["currency"], "CNY");
  }
  EXPECT_EQ(line["usage"]["input_tokens"].GetInt64(), 1200);
  EXPECT_EQ(line["idempotency_key"], "line-1");
  EXPECT_EQ(summaries[0]["batch_id"], "b1");
  EXPECT_EQ(summaries[1]["waiting_reason"], "scheduling");
  EXPECT_FALSE(summaries[0].HasMember("trace"));
  EXPECT_EQ(history["usage"]["output_tokens"].GetInt64(), 80);
  EXPECT_TRUE(history["steps"].IsArray());
}

TEST(TaskJsonCodec, StoredOptionsAreTheStringsOfTheirArray) {
  EXPECT_EQ(codec::parse_result_options(R"(["周一", "周二"])"),
            (std::vector<std::string>{"周一", "周二"}));
  EXPECT_EQ(codec::parse_result_options(R"(["a", 1, null, "b"])"),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(codec::parse_result_options("{}").empty());
  EXPECT_TRUE(codec::parse_result_options("not json").empty());
}

}  // namespace
}  // namespace agentfleet
