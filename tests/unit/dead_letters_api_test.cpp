// GET /v1/dead-letters and POST /v1/dead-letters/replay without Kafka: the query and the
// body a request may carry, what a listing keeps, what a replay sends and the answers.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <variant>
#include <vector>

#include "core/codec/dead_letter.hpp"
#include "dispatcher/dead_letters.hpp"

namespace agentfleet::dispatcher {
namespace {

codec::DeadLetter letter(std::int32_t partition, std::int64_t offset, std::string key,
                         std::string reason, std::string source = "agent.tasks.submit") {
  codec::MessageHeaders headers{{"traceparent", "00-abc"}, {"dlq-reason", std::move(reason)}};
  if (!source.empty())
    headers.emplace_back("dlq-source-topic", source);
  headers.emplace_back("dlq-source-partition", "1");
  headers.emplace_back("dlq-source-offset", std::to_string(offset * 10));
  return codec::read_dead_letter(partition, offset, std::move(key), "{\"text\":\"hi\"}",
                                 std::move(headers));
}

TEST(DeadLetterQuery, ReadsTheLimitAndFiltersAndRefusesWhatIsNotOne) {
  auto plain = parse_dead_letter_query("/v1/dead-letters");
  ASSERT_TRUE(std::holds_alternative<DeadLetterQuery>(plain));
  EXPECT_EQ(std::get<DeadLetterQuery>(plain).limit, 100u);

  auto full = parse_dead_letter_query(
      "/v1/dead-letters?limit=7&source_topic=agent.tasks.submit&reason=invalid%20JSON&key=u1");
  ASSERT_TRUE(std::holds_alternative<DeadLetterQuery>(full));
  const auto& q = std::get<DeadLetterQuery>(full);
  EXPECT_EQ(q.limit, 7u);
  EXPECT_EQ(q.filter.source_topic, "agent.tasks.submit");
  EXPECT_EQ(q.filter.reason_contains, "invalid JSON");
  EXPECT_EQ(q.filter.key, "u1");

  for (const char* bad : {"0", "1001", "-1", "ten", "5x", ""}) {
    auto refused = parse_dead_letter_query(std::string("/v1/dead-letters?limit=") + bad);
    ASSERT_TRUE(std::holds_alternative<codec::SchemaViolation>(refused)) << bad;
    EXPECT_EQ(std::get<codec::SchemaViolation>(refused).path, "/query/limit");
  }
  auto long_key = parse_dead_letter_query("/v1/dead-letters?key=" + std::string(1025, 'k'));
  ASSERT_TRUE(std::holds_alternative<codec::SchemaViolation>(long_key));
  EXPECT_EQ(std::get<codec::SchemaViolation>(long_key).path, "/query/key");
}

TEST(NewestLetters, KeepsTheNewestThatMatchOldestFirstAndCountsEveryMatch) {
  DeadLetterQuery query;
  query.limit = 2;
  query.filter.reason_contains = "schema";
  NewestLetters newest(query);
  newest.offer(letter(0, 1, "a", "schema: /text"));
  newest.offer(letter(0, 2, "b", "queue_full"));
  newest.offer(letter(1, 3, "c", "schema: /user_id"));
  newest.offer(letter(0, 4, "d", "schema: /model"));
  ASSERT_EQ(newest.letters().size(), 2u);
  EXPECT_EQ(newest.letters()[0].key, "c");
  EXPECT_EQ(newest.letters()[1].key, "d");
  EXPECT_EQ(newest.matched(), 3u);

  rapidjson::Document doc;
  doc.Parse(newest.json("agent.tasks.dlq").c_str());
  ASSERT_FALSE(doc.HasParseError());
  EXPECT_STREQ(doc["topic"].GetString(), "agent.tasks.dlq");
  EXPECT_EQ(doc["count"].GetInt(), 2);
  EXPECT_EQ(doc["matched"].GetInt(), 3);
  const auto& first = doc["dead_letters"][0];
  EXPECT_EQ(first["partition"].GetInt(), 1);
  EXPECT_EQ(first["offset"].GetInt64(), 3);
  EXPECT_STREQ(first["reason"].GetString(), "schema: /user_id");
  EXPECT_STREQ(first["source_offset"].GetString(), "30");
  EXPECT_STREQ(first["headers"]["traceparent"].GetString(), "00-abc");
}

TEST(NewestLetters, CutsLongValuesOnACharacterAndSaysTheirSize) {
  NewestLetters newest(DeadLetterQuery{});
  // 3-byte characters: the cut at 16 KiB falls inside one.
  std::string value;
  while (value.size() < NewestLetters::kMaxValueBytes + 10)
    value += "日";
  newest.offer(codec::read_dead_letter(0, 0, "k", value, {}));
  rapidjson::Document doc;
  doc.Parse(newest.json("t").c_str());
  ASSERT_FALSE(doc.HasParseError());
  const auto& d = doc["dead_letters"][0];
  EXPECT_EQ(d["value_bytes"].GetUint64(), value.size());
  const std::string shown = d["value"].GetString();
  EXPECT_LE(shown.size(), NewestLetters::kMaxValueBytes);
  EXPECT_EQ(shown.size() % 3, 0u) << "cut on a character boundary";
  EXPECT_EQ(value.rfind(shown, 0), 0u);
}

TEST(ReplayRequest, NeedsOneToAThousandDistinctOffsets) {
  auto ok = parse_replay_request(R"({"offsets":["0:17","2:5"],"dry_run":true})");
  ASSERT_TRUE(std::holds_alternative<ReplayRequest>(ok));
  const auto& r = std::get<ReplayRequest>(ok);
  EXPECT_EQ(r.offsets, (std::vector<std::pair<std::int32_t, std::int64_t>>{{0, 17}, {2, 5}}));
  EXPECT_TRUE(r.dry_run);
  EXPECT_FALSE(std::get<ReplayRequest>(parse_replay_request(R"({"offsets":["1:1"]})")).dry_run);

  struct Case {
    const char* body;
    const char* path;
  };
  for (const Case& c : {Case{"{}", ""}, Case{R"({"offsets":[]})", "/offsets"},
                        Case{R"({"offsets":["0:1","0:1"]})", "/offsets/1"},
                        Case{R"({"offsets":["0-1"]})", "/offsets/0"},
                        Case{R"({"offsets":["0:1","0:01"]})", "/offsets/1"},
                        Case{R"({"offsets":["00:1"]})", "/offsets/0"},
                        Case{R"({"offsets":["1:2","99999999999:1"]})", "/offsets/1"},
                        Case{R"({"offsets":["0:1"],"all":true})", "/all"}, Case{"not json", ""}}) {
    auto refused = parse_replay_request(c.body);
    ASSERT_TRUE(std::holds_alternative<codec::SchemaViolation>(refused)) << c.body;
    EXPECT_EQ(std::get<codec::SchemaViolation>(refused).path, c.path) << c.body;
  }
}

TEST(PlanReplay, SendsEachChosenLetterBackWithoutItsDeadLetterHeadersOrNothing) {
  const std::vector<codec::DeadLetter> letters{letter(0, 1, "a", "r1"), letter(1, 2, "b", "r2"),
                                               letter(0, 3, "c", "r3", "")};
  ReplayRequest request;
  request.offsets = {{1, 2}, {0, 1}};
  auto plan = plan_replay(request, letters);
  ASSERT_TRUE(std::holds_alternative<std::vector<DeadLetterReplay>>(plan));
  const auto& replays = std::get<std::vector<DeadLetterReplay>>(plan);
  ASSERT_EQ(replays.size(), 2u);
  EXPECT_EQ(replays[0].message.key, "b");
  EXPECT_EQ(replays[0].message.topic, "agent.tasks.submit");
  EXPECT_EQ(replays[0].message.headers,
            (codec::MessageHeaders{{"traceparent", "00-abc"},
                                   {"dlq-replayed-from", "1:2"},
                                   {"dlq-origin", "agent.tasks.submit:1:20"}}));

  rapidjson::Document doc;
  doc.Parse(replay_json(replays, false).c_str());
  EXPECT_EQ(doc["replayed"].GetInt(), 2);
  EXPECT_FALSE(doc["dry_run"].GetBool());
  EXPECT_EQ(doc["sent"][1]["offset"].GetInt64(), 1);
  EXPECT_STREQ(doc["sent"][1]["topic"].GetString(), "agent.tasks.submit");

  request.offsets = {{0, 1}, {0, 9}};
  auto missing = plan_replay(request, letters);
  ASSERT_TRUE(std::holds_alternative<ReplayRefusal>(missing));
  EXPECT_EQ(std::get<ReplayRefusal>(missing).status, 404);
  EXPECT_EQ(std::get<ReplayRefusal>(missing).path, "/offsets/1");

  request.offsets = {{0, 3}};
  auto nowhere = plan_replay(request, letters);
  ASSERT_TRUE(std::holds_alternative<ReplayRefusal>(nowhere));
  EXPECT_EQ(std::get<ReplayRefusal>(nowhere).status, 422);
  EXPECT_EQ(std::get<ReplayRefusal>(nowhere).code, "not_replayable");
}

// A replay that fails again is a letter whose headers are the replay's plus its own dlq-*
// ones (kafka::dead_letter); replaying that one still names where the message was first
// read, which the submit ingest keys a submission without an idempotency key by.
TEST(PlanReplay, AReplayNamesWhereItsMessageWasFirstReadThroughEveryReplayThatFailedAgain) {
  const codec::DeadLetter first = letter(0, 1, "a", "queue_full");
  EXPECT_EQ(codec::origin_of(first), "agent.tasks.submit:1:10");
  auto replay = codec::replay_of(first);
  ASSERT_TRUE(replay);

  // The replay is read at submit 1:57 and fails again: the second letter.
  codec::MessageHeaders headers = replay->headers;
  headers.emplace_back("dlq-reason", "queue_full");
  headers.emplace_back("dlq-source-topic", "agent.tasks.submit");
  headers.emplace_back("dlq-source-partition", "1");
  headers.emplace_back("dlq-source-offset", "57");
  const auto second = codec::read_dead_letter(0, 8, "a", first.value, headers);
  EXPECT_EQ(second.replayed_from, "0:1");
  EXPECT_EQ(codec::origin_of(second), "agent.tasks.submit:1:10") << "not the replay's own 1:57";
  auto again = codec::replay_of(second);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->headers, (codec::MessageHeaders{{"traceparent", "00-abc"},
                                                   {"dlq-replayed-from", "0:8"},
                                                   {"dlq-origin", "agent.tasks.submit:1:10"}}));

  // What the ingest keys by: the origin a replay carries, else where the message was read.
  EXPECT_EQ(codec::message_origin(again->headers, "agent.tasks.submit", 2, 99),
            "agent.tasks.submit:1:10");
  EXPECT_EQ(codec::message_origin({{"traceparent", "00-abc"}}, "agent.tasks.submit", 2, 99),
            "agent.tasks.submit:2:99");
  for (const char* malformed : {"", "agent.tasks.submit", ":1:10", "t:1", "t:x:10", "t:1:-3"}) {
    EXPECT_EQ(codec::message_origin({{"dlq-origin", malformed}}, "s", 0, 5), "s:0:5") << malformed;
  }
  // A letter that does not say its source offset has no origin, and its replay none.
  auto unsaid =
      codec::read_dead_letter(0, 9, "b", "{}", {{"dlq-source-topic", "agent.tasks.submit"}});
  EXPECT_EQ(codec::origin_of(unsaid), "");
  auto sent = codec::replay_of(unsaid);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->headers, (codec::MessageHeaders{{"dlq-replayed-from", "0:9"}}));
}

TEST(NewestLetters, SaysWhatBecameOfEachKeptLettersReplays) {
  DeadLetterQuery query;
  query.limit = 2;
  query.filter.key = "a";
  NewestLetters newest(query);
  newest.offer(letter(0, 1, "a", "queue_full"));  // dropped from the listing by the limit
  newest.offer(letter(0, 2, "a", "queue_full"));
  newest.offer(letter(0, 3, "b", "schema"));  // not matched
  // Replays of 0:2, 0:3 and 0:1 that failed again (0:1 leaves the listing after them).
  for (auto [offset, from] : {std::pair{4, "0:2"}, std::pair{5, "0:3"}, std::pair{6, "0:1"}}) {
    auto again = letter(0, offset, "c", "queue_full");
    again.replayed_from = from;
    newest.offer(std::move(again));
  }
  newest.offer(letter(1, 7, "a", "queue_full"));
  ASSERT_EQ(newest.kept_at(), (std::vector<NewestLetters::At>{{0, 2}, {1, 7}}));
  newest.add_stored({1, 7},
                    {"0b7c1c7e-0000-4000-8000-000000000001", "2026-12-03T12:00:00.000Z", 2});
  newest.add_stored({0, 1}, {"ignored", "", 1});  // not kept: no effect

  rapidjson::Document doc;
  doc.Parse(newest.json("agent.tasks.dlq").c_str());
  ASSERT_FALSE(doc.HasParseError());
  ASSERT_EQ(doc["count"].GetInt(), 2);
  const auto& kept = doc["dead_letters"][0]["replays"];
  EXPECT_TRUE(kept["task_id"].IsNull());
  EXPECT_TRUE(kept["first_at"].IsNull());
  EXPECT_EQ(kept["stored"].GetInt(), 0);
  ASSERT_EQ(kept["failed_again_at"].Size(), 1u);
  EXPECT_STREQ(kept["failed_again_at"][0].GetString(), "0:4");
  EXPECT_STREQ(doc["dead_letters"][0]["origin"].GetString(), "agent.tasks.submit:1:20");
  const auto& stored = doc["dead_letters"][1]["replays"];
  EXPECT_STREQ(stored["task_id"].GetString(), "0b7c1c7e-0000-4000-8000-000000000001");
  EXPECT_STREQ(stored["first_at"].GetString(), "2026-12-03T12:00:00.000Z");
  EXPECT_EQ(stored["stored"].GetInt(), 2);
  EXPECT_EQ(stored["failed_again_at"].Size(), 0u);
}

}  // namespace
}  // namespace agentfleet::dispatcher
