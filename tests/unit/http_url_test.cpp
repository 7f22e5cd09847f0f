// Url::parse: what the HTTP client accepts as a model or tool endpoint.
#include <gtest/gtest.h>

#include "core/adapters/http/client.hpp"

namespace agentfleet::http {
namespace {

TEST(HttpUrl, ReadsSchemeHostPortAndTarget) {
  const auto url = Url::parse("https://api.example.com:8443/v1/chat/completions?x=1");
  ASSERT_TRUE(url);
  EXPECT_EQ(url->scheme, "https");
  EXPECT_EQ(url->host, "api.example.com");
  EXPECT_EQ(url->port, "8443");
  EXPECT_EQ(url->target, "/v1/chat/completions?x=1");
}

TEST(HttpUrl, DefaultsThePortByScheme) {
  const auto http = Url::parse("http://127.0.0.1/tools/search_items");
  ASSERT_TRUE(http);
  EXPECT_EQ(http->port, "80");
  const auto https = Url::parse("https://[::1]/");
  ASSERT_TRUE(https);
  EXPECT_EQ(https->host, "::1");
  EXPECT_EQ(https->port, "443");
}

TEST(HttpUrl, RefusesCredentialsInTheUrl) {
  // They are never sent, and must not end up as part of a host name in an error.
  EXPECT_FALSE(Url::parse("http://user:secret@127.0.0.1:8080/tools/x"));
  EXPECT_FALSE(Url::parse("http://user:secret@127.0.0.1/tools/x"));
  EXPECT_FALSE(Url::parse("https://token@api.example.com/v1"));
}

TEST(HttpUrl, RefusesOtherSchemesAndEmptyHosts) {
  EXPECT_FALSE(Url::parse("ftp://example.com/"));
  EXPECT_FALSE(Url::parse("http:///path"));
  EXPECT_FALSE(Url::parse("example.com/path"));
}

}  // namespace
}  // namespace agentfleet::http
