// Credentials never reach a log line: URL passwords, key=value pairs, quoted JSON
// members, bearer tokens and secrets known by value become [redacted]; the rest stays.
#include "core/domain/redaction.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace agentfleet {
namespace {

TEST(RedactCredentials, HidesThePasswordOfAConnectionUrlButKeepsUserAndHost) {
  EXPECT_EQ(redact_credentials(
                "connect to postgresql://agent:S3cr%40t@db.internal:5432/agentfleet failed"),
            "connect to postgresql://agent:[redacted]@db.internal:5432/agentfleet failed");
  EXPECT_EQ(redact_credentials("https://user:pw@api.example.com/v1?x=1"),
            "https://user:[redacted]@api.example.com/v1?x=1");
  // A user name alone is not a secret; nor is a URL without userinfo.
  EXPECT_EQ(redact_credentials("postgresql://postgres@127.0.0.1:5432/agentfleet"),
            "postgresql://postgres@127.0.0.1:5432/agentfleet");
  EXPECT_EQ(redact_credentials("http://127.0.0.1:8090/v1/chat/completions"),
            "http://127.0.0.1:8090/v1/chat/completions");
}

TEST(RedactCredentials, HidesPasswordPairsOfConnectionStringsAndQueries) {
  EXPECT_EQ(redact_credentials("host=db user=agent password=hunter22 dbname=agentfleet"),
            "host=db user=agent password=[redacted] dbname=agentfleet");
  EXPECT_EQ(redact_credentials("host=db password = 'two words\\' here' port=5432"),
            "host=db password = '[redacted]' port=5432");
  EXPECT_EQ(redact_credentials("postgresql://db/agentfleet?user=a&password=xyz&sslmode=require"),
            "postgresql://db/agentfleet?user=a&password=[redacted]&sslmode=require");
  EXPECT_EQ(redact_credentials("kafka property sasl.password=pa55word is set"),
            "kafka property sasl.password=[redacted] is set");
  EXPECT_EQ(redact_credentials("PGPASSWORD=abc123 psql"), "PGPASSWORD=[redacted] psql");
  EXPECT_EQ(redact_credentials("GET /x?api_key=k-123&token=t-456"),
            "GET /x?api_key=[redacted]&token=[redacted]");
}

TEST(RedactCredentials, HidesQuotedJsonMembersAndBearerTokens) {
  EXPECT_EQ(redact_credentials(R"({"api_key": "sk-abc", "model": "m"})"),
            R"({"api_key": "[redacted]", "model": "m"})");
  EXPECT_EQ(redact_credentials(R"({"client_secret":"s\"q"})"), R"({"client_secret":"[redacted]"})");
  EXPECT_EQ(redact_credentials("Authorization: Bearer eyJhbGciOi.J9-x_y/z+="),
            "Authorization: Bearer [redacted]");
  EXPECT_EQ(redact_credentials("authorization: bearer abc"), "authorization: bearer [redacted]");
}

TEST(RedactCredentials, LeavesOrdinaryTextAlone) {
  for (const char* text :
       {"password authentication failed for user \"agent\"",
        "/models/0/endpoints/0/api_key: expected string", "input_tokens=12 max_tokens=1024",
        "password_file=/run/secrets/pg", "finished succeeded action_completed", "", "token",
        "the API key is not valid", "Bearer", "secretary=5"}) {
    EXPECT_EQ(redact_credentials(text), text) << text;
  }
}

TEST(RedactCredentials, IsIdempotent) {
  const std::string once = redact_credentials("postgresql://a:b@h/d password=x Bearer y");
  EXPECT_EQ(redact_credentials(once), once);
}

TEST(CredentialsIn, ListsWhatWouldBeRedactedAlsoPercentDecoded) {
  EXPECT_EQ(credentials_in("postgresql://agent:S3cr%40t@db/agentfleet"),
            (std::vector<std::string>{"S3cr%40t", "S3cr@t"}));
  EXPECT_EQ(credentials_in("host=db password=hunter22"), (std::vector<std::string>{"hunter22"}));
  EXPECT_TRUE(credentials_in("postgresql://postgres@127.0.0.1/agentfleet").empty());
}

TEST(RedactKnown, ReplacesEveryOccurrenceOfEachSecret) {
  const std::vector<std::string> secrets = {"sk-live-123", "live", "ab"};
  // "ab" is too short to be taken; overlapping secrets become one [redacted].
  EXPECT_EQ(redact_known("key sk-live-123 then sk-live-123, ab", secrets),
            "key [redacted] then [redacted], ab");
  EXPECT_EQ(redact_known("alive", secrets), "a[redacted]");
  EXPECT_EQ(redact_known("nothing here", secrets), "nothing here");
}

TEST(Redact, CombinesPatternsAndKnownSecrets) {
  EXPECT_EQ(redact("kafka: Invalid value \"topsecret\" for property; password=p1 at u:v@h",
                   {"topsecret"}),
            "kafka: Invalid value \"[redacted]\" for property; password=[redacted] at u:v@h");
}

}  // namespace
}  // namespace agentfleet
