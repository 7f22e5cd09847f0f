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
