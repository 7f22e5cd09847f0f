// GET /v1/dead-letters and POST /v1/dead-letters/replay (issue 20, item 1: the console's
// dead-letters page) on the embedded fleet: a submission the dispatcher cannot read becomes
// a dead letter the API lists with its reason and source; replaying it sends it back to the
// submit topic, where it fails again as a new letter that names the first. Admin only.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::api;
using test::kAdminKey;
using test::kU1Key;
using test::parse;

constexpr auto kRead = 40s;  // the route reads the topic for up to 15 s

// The letters of `key` once at least `count` are listed (the dispatcher dead-letters on
// its own time), or the last answer after 60 s.
rapidjson::Document letters_of(const std::string& key, int count) {
  rapidjson::Document listed;
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    auto response = api(bhttp::verb::get, "/v1/dead-letters?limit=10&key=" + key, kAdminKey, {}, {},
                        kRead);  // checked by the contract
    if (response.status == 429 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(2s);  // another read on this dispatcher (Retry-After: 2)
      continue;
    }
    EXPECT_EQ(response.status, 200) << response.body;
    listed = parse(response.body);
    if (response.status != 200 || static_cast<int>(listed["count"].GetInt()) >= count ||
        std::chrono::steady_clock::now() > until) {
      return listed;
    }
    std::this_thread::sleep_for(500ms);
  }
}

TEST(ApiDeadLetters, ListsALetterWithItsReasonAndReplaysItToWhereItCameFrom) {
  const std::string key = "dl-api-" + test::run_tag();
  const std::string value = "{ not json " + key;
  test::produce("agent.tasks.submit", key, value, {{"origin", "dead-letters-test"}});

  auto listed = letters_of(key, 1);
  ASSERT_EQ(listed["count"].GetInt(), 1) << "the bad submission was not listed";
  EXPECT_EQ(listed["matched"].GetInt(), 1);
  EXPECT_STREQ(listed["topic"].GetString(), "agent.tasks.dlq");
  const auto& letter = listed["dead_letters"][0];
  EXPECT_STREQ(letter["key"].GetString(), key.c_str());
  EXPECT_EQ(std::string(letter["value"].GetString()), value) << "the message as it was sent";
  EXPECT_EQ(letter["value_bytes"].GetUint64(), value.size());
  EXPECT_NE(std::string(letter["reason"].GetString()).find("invalid JSON"), std::string::npos)
      << letter["reason"].GetString();
  EXPECT_STREQ(letter["source_topic"].GetString(), "agent.tasks.submit");
  EXPECT_STREQ(letter["replayed_from"].GetString(), "");
  EXPECT_STREQ(letter["headers"]["origin"].GetString(), "dead-letters-test");
  const std::string at = std::to_string(letter["partition"].GetInt()) + ":" +
                         std::to_string(letter["offset"].GetInt64());

  // A dry run says what it would send and sends nothing.
  auto dry = api(bhttp::verb::post, "/v1/dead-letters/replay", kAdminKey,
                 R"({"offsets":[")" + at + R"("],"dry_run":true})", {}, kRead);
  ASSERT_EQ(dry.status, 200) << dry.body;
  auto dry_doc = parse(dry.body);
  EXPECT_EQ(dry_doc["replayed"].GetInt(), 1);
  EXPECT_TRUE(dry_doc["dry_run"].GetBool());
  EXPECT_STREQ(dry_doc["sent"][0]["topic"].GetString(), "agent.tasks.submit");

  // The replay goes back to the submit topic, fails again, and the new letter names it.
  auto replayed = api(bhttp::verb::post, "/v1/dead-letters/replay", kAdminKey,
                      R"({"offsets":[")" + at + R"("]})", {}, kRead);
  ASSERT_EQ(replayed.status, 200) << replayed.body;
  EXPECT_EQ(parse(replayed.body)["replayed"].GetInt(), 1);
  auto again = letters_of(key, 2);
  ASSERT_EQ(again["count"].GetInt(), 2) << "the replay did not come back as a dead letter";
  const auto& second = again["dead_letters"][1];
  EXPECT_STREQ(second["replayed_from"].GetString(), at.c_str());
  EXPECT_EQ(std::string(second["value"].GetString()), value);
  EXPECT_STREQ(second["headers"]["origin"].GetString(), "dead-letters-test")
      << "the original headers go with a replay";
  EXPECT_EQ(again["matched"].GetInt(), 2) << "the dry run sent nothing";
}

// The status of every task of `user`, to wait on.
std::int64_t tasks_of(const std::string& user, const std::string& status) {
  return test::pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = $2", user,
                        status);
}

// POST /v1/dead-letters/replay of one letter, again while the replica's reader is busy.
void replay(const std::string& at) {
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    auto response = api(bhttp::verb::post, "/v1/dead-letters/replay", kAdminKey,
                        R"({"offsets":[")" + at + R"("]})", {}, kRead);
    if (response.status == 429 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(2s);  // Retry-After: 2
      continue;
    }
    ASSERT_EQ(response.status, 200) << response.body;
    return;
  }
}

// Issue 39, item 4: a submission without an idempotency key is keyed by where it was read,
// and a replay is a new message at a new offset; replaying a letter twice ran its task
// twice and billed it twice. Now a replay carries where its message was first read, so the
// second replay finds the task the first made, and the listing says so.
TEST(ApiDeadLetters, ALetterReplayedTwiceMakesOneTaskAndItsListingNamesIt) {
  const std::string user = "dl-replay-" + test::run_tag();
  const std::string limits = "/v1/users/" + user + "/limits";
  // One request a minute and one queued task: the first task runs, the second fills the
  // queue, and a third from the topic is dead-lettered as queue_full.
  ASSERT_EQ(api(bhttp::verb::put, limits, kAdminKey, R"({"max_queued":1,"requests_per_minute":1})")
                .status,
            200);
  auto body = [&user](const std::string& key) {
    std::string idempotency = key.empty() ? "" : R"(,"idempotency_key":")" + key + R"(")";
    return R"({"user_id":")" + user + R"(","text":"bench: steps=1 calls=1")" + idempotency + "}";
  };
  test::submit(body("first"));
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (tasks_of(user, "queued") > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);  // polling a bounded wait: the first dispatched
  test::submit(body("second"));
  ASSERT_EQ(tasks_of(user, "queued"), 1) << "the second waits for the rate";
  test::produce("agent.tasks.submit", user, body(""), {});
  auto listed = letters_of(user, 1);
  ASSERT_EQ(listed["count"].GetInt(), 1) << "the third was not dead-lettered";
  const auto& letter = listed["dead_letters"][0];
  EXPECT_EQ(std::string(letter["reason"].GetString()).rfind("queue_full", 0), 0u)
      << letter["reason"].GetString();
  EXPECT_TRUE(letter["replays"]["task_id"].IsNull());
  const std::string origin = letter["origin"].GetString();
  EXPECT_EQ(origin, std::string("agent.tasks.submit:") + letter["source_partition"].GetString() +
                        ":" + letter["source_offset"].GetString());
  const std::string at = std::to_string(letter["partition"].GetInt()) + ":" +
                         std::to_string(letter["offset"].GetInt64());

  // Room again; the operator replays the letter twice.
  ASSERT_EQ(api(bhttp::verb::put, limits, kAdminKey, "{}").status, 200);
  replay(at);
  replay(at);
  const auto stored_by = std::chrono::steady_clock::now() + 60s;
  while (test::pg_count("SELECT count(*) FROM dead_letter_replays "
                        "WHERE letter_partition = $1 AND letter_offset = $2",
                        letter["partition"].GetInt(), letter["offset"].GetInt64()) < 2 &&
         std::chrono::steady_clock::now() < stored_by)
    std::this_thread::sleep_for(50ms);  // polling a bounded wait: the ingest stores them
  auto after = letters_of(user, 1);
  ASSERT_EQ(after["count"].GetInt(), 1) << "a replay failed again";
  const auto& replays = after["dead_letters"][0]["replays"];
  ASSERT_EQ(replays["stored"].GetInt(), 2) << "both replays reached the store";
  ASSERT_TRUE(replays["task_id"].IsString());
  EXPECT_EQ(replays["failed_again_at"].Size(), 0u);
  EXPECT_EQ(test::pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", user), 3)
      << "the replays made one task";
  EXPECT_EQ(test::pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND task_id = $2::uuid "
                           "AND idempotency_key = $3",
                           user, std::string(replays["task_id"].GetString()), "kafka:" + origin),
            1)
      << "the listing names the task, keyed by where the message was first read";
  EXPECT_EQ(test::pg_count(
                "SELECT count(*) FROM dead_letter_replays WHERE task_id = $1::uuid AND created",
                std::string(replays["task_id"].GetString())),
            1);
}

TEST(ApiDeadLetters, RefusesWhatItCannotDoAndSendsNothing) {
  auto missing = api(bhttp::verb::post, "/v1/dead-letters/replay", kAdminKey,
                     R"({"offsets":["0:999999999"]})", {}, kRead);
  EXPECT_EQ(missing.status, 404) << missing.body;
  EXPECT_NE(missing.body.find("\"/offsets/0\""), std::string::npos) << missing.body;

  auto malformed = api(bhttp::verb::post, "/v1/dead-letters/replay", kAdminKey,
                       R"({"offsets":["zero"]})", {}, kRead);
  EXPECT_EQ(malformed.status, 400) << malformed.body;
  auto bad_limit = api(bhttp::verb::get, "/v1/dead-letters?limit=0", kAdminKey);
  EXPECT_EQ(bad_limit.status, 400) << bad_limit.body;

  EXPECT_EQ(api(bhttp::verb::get, "/v1/dead-letters", kU1Key).status, 403);
  EXPECT_EQ(
      api(bhttp::verb::post, "/v1/dead-letters/replay", kU1Key, R"({"offsets":["0:1"]})").status,
      403);
}

}  // namespace
}  // namespace agentfleet
