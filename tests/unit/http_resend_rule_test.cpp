// Which failed request the HTTP client sends once more on a fresh connection after a reused
// one failed: never a model call (POST) that reached the server whole, which may have
// charged for it; always one that did not reach it.
#include <gtest/gtest.h>

#include "core/adapters/http/client.hpp"

namespace agentfleet::http {
namespace {

namespace bhttp = boost::beast::http;

ClientResponse failed(ClientErrorKind kind) {
  ClientResponse response;
  response.error = kind;
  return response;
}

TEST(HttpResendRule, ARequestWhoseWriteFailedIsSentAgainWhateverItsMethod) {
  for (auto method : {bhttp::verb::post, bhttp::verb::get, bhttp::verb::put}) {
    EXPECT_TRUE(send_again_on_fresh_connection(method, failed(ClientErrorKind::kConnect),
                                               /*write_failed=*/true, /*answered_none=*/true));
  }
}

TEST(HttpResendRule, APostWrittenWholeIsNeverSentAgainEvenWithoutAByteOfAnswer) {
  EXPECT_FALSE(send_again_on_fresh_connection(bhttp::verb::post, failed(ClientErrorKind::kProtocol),
                                              false, true));
  EXPECT_FALSE(send_again_on_fresh_connection(bhttp::verb::put, failed(ClientErrorKind::kProtocol),
                                              false, true));
}

TEST(HttpResendRule, AGetIsSentAgainOnlyWhenNoByteOfAnAnswerCame) {
  EXPECT_TRUE(send_again_on_fresh_connection(bhttp::verb::get, failed(ClientErrorKind::kProtocol),
                                             false, true));
  EXPECT_TRUE(send_again_on_fresh_connection(bhttp::verb::head, failed(ClientErrorKind::kProtocol),
                                             false, true));
  EXPECT_FALSE(send_again_on_fresh_connection(bhttp::verb::get, failed(ClientErrorKind::kProtocol),
                                              false, false));
}

TEST(HttpResendRule, NothingIsSentAgainAfterATimeoutOrASuccess) {
  EXPECT_FALSE(send_again_on_fresh_connection(bhttp::verb::get, failed(ClientErrorKind::kTimeout),
                                              true, true));
  EXPECT_FALSE(send_again_on_fresh_connection(bhttp::verb::get, ClientResponse{}, true, true));
}

}  // namespace
}  // namespace agentfleet::http
