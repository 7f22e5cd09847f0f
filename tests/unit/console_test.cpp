// The web console's files as the dispatcher serves them: types, caching, and the strict
// Content-Security-Policy on every answer.

#include "dispatcher/console.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace agentfleet::dispatcher {
namespace {

namespace bhttp = boost::beast::http;

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kFiles{{
    {"index.html", "<!doctype html><script type=module src=./app-X1.js></script>"},
    {"app-X1.js", "console.log(1)"},
    {"app-X1.css", "body{}"},
}};

http::Request get(const std::string& target) {
  http::Request request{bhttp::verb::get, target, 11};
  return request;
}

TEST(Console, ThePageIsIndexHtmlNeverCachedUnderAStrictPolicy) {
  const auto response = console_response(get("/ui/"), "", kFiles);
  EXPECT_EQ(response.result(), bhttp::status::ok);
  EXPECT_EQ(response.body(), kFiles[0].second);
  EXPECT_EQ(response[bhttp::field::content_type], "text/html; charset=utf-8");
  EXPECT_EQ(response[bhttp::field::cache_control], "no-cache");
  const std::string csp(response["Content-Security-Policy"]);
  EXPECT_NE(csp.find("default-src 'self'"), std::string::npos);
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
  EXPECT_EQ(response["X-Content-Type-Options"], "nosniff");
  EXPECT_EQ(response["X-Frame-Options"], "DENY");
}

TEST(Console, HashedAssetsAreCachedForGoodWithTheirTypes) {
  const auto js = console_response(get("/ui/app-X1.js"), "app-X1.js", kFiles);
  EXPECT_EQ(js.result(), bhttp::status::ok);
  EXPECT_EQ(js[bhttp::field::content_type], "text/javascript; charset=utf-8");
  EXPECT_EQ(js[bhttp::field::cache_control], "public, max-age=31536000, immutable");
  EXPECT_FALSE(js["Content-Security-Policy"].empty());
  EXPECT_EQ(
      console_response(get("/ui/app-X1.css"), "app-X1.css", kFiles)[bhttp::field::content_type],
      "text/css; charset=utf-8");
  EXPECT_EQ(console_content_type("LICENSE.txt"), "text/plain; charset=utf-8");
}

TEST(Console, AnUnknownFileOrABuildWithoutTheConsoleIsNotFound) {
  const auto missing = console_response(get("/ui/nope.js"), "nope.js", kFiles);
  EXPECT_EQ(missing.result(), bhttp::status::not_found);
  EXPECT_NE(missing.body().find("no file 'nope.js'"), std::string::npos);
  const auto none = console_response(get("/ui/"), "", {});
  EXPECT_EQ(none.result(), bhttp::status::not_found);
  EXPECT_NE(none.body().find("built without the console"), std::string::npos);
}

}  // namespace
}  // namespace agentfleet::dispatcher
