// The lines of a batch upload, checked as they stream in (dispatcher/batch_lines.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "dispatcher/batch_lines.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {
namespace {

config::Config test_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: m1, endpoints: [{url: "http://h/x"}]}]
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
)",
                                  "test.yaml");
}

BatchLineOptions options(std::string user_id = "", std::int64_t max_lines = 100) {
  BatchLineOptions o;
  o.defaults = submission_defaults(test_config());
  o.batch_id = "b-1";
  o.user_id = std::move(user_id);
  o.max_lines = max_lines;
  o.max_line_bytes = 300;
  o.max_reported = 3;
  return o;
}

std::string line(const std::string& user, const std::string& extra = "") {
  return R"({"user_id":")" + user + R"(","text":"完成报告提交")" + extra + "}";
}

TEST(BatchLines, GoodLinesBecomeTasksOfTheBatchAndBlankLinesAreNotCounted) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines lines(rules, options("u1"), [](const std::string&) { return true; });
  auto first = lines.take(line("u1"));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->spec.batch_id, "b-1");
  EXPECT_EQ(first->spec.user_id, "u1");
  EXPECT_TRUE(first->spec.task_id.empty()) << "the upload gives each task its id";
  EXPECT_FALSE(lines.take("").has_value());
  EXPECT_FALSE(lines.take(" \t\r").has_value());
  EXPECT_TRUE(lines.take(line("u1", R"(,"batch_id":"b-1")")).has_value())
      << "a line may name its own batch";
  EXPECT_EQ(lines.lines(), 2);
  EXPECT_FALSE(lines.failed());
}

TEST(BatchLines, TheFirstLineNamesTheUserWhenTheQueryDoesNotAndMustBeOneTheCallerMayActFor) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines allowed(rules, options(), [](const std::string& u) { return u == "u1"; });
  EXPECT_TRUE(allowed.take(line("u1")).has_value());
  EXPECT_EQ(allowed.user_id(), "u1");
  EXPECT_FALSE(allowed.take(line("u2")).has_value()) << "every task belongs to the batch's user";
  ASSERT_EQ(allowed.errors().size(), 1u);
  EXPECT_EQ(allowed.errors()[0].path, "/line/2/user_id");
  EXPECT_FALSE(allowed.not_permitted());

  BatchLines refused(rules, options(), [](const std::string& u) { return u == "u1"; });
  EXPECT_FALSE(refused.take(line("u2")).has_value());
  EXPECT_TRUE(refused.not_permitted());
  EXPECT_EQ(refused.errors()[0].path, "/line/1/user_id");
}

TEST(BatchLines, WhenTheUploadNamesItsUserALineWithoutOneIsThatUsers) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines named(rules, options("u1"), [](const std::string&) { return true; });
  auto task = named.take(R"({"text":"完成报告提交"})");
  ASSERT_TRUE(task.has_value());
  EXPECT_EQ(task->spec.user_id, "u1");
  // The same request as the line that names the user: the same idempotency comparisons.
  EXPECT_EQ(task->canonical, named.take(line("u1"))->canonical);
  EXPECT_FALSE(named.take(line("u2")).has_value()) << "a line naming another user is refused";
  EXPECT_EQ(named.errors().at(0).path, "/line/3/user_id");

  // Without a user in the query, every line must name one.
  BatchLines unnamed(rules, options(), [](const std::string&) { return true; });
  EXPECT_FALSE(unnamed.take(R"({"text":"完成报告提交"})").has_value());
  ASSERT_EQ(unnamed.errors().size(), 1u);
  EXPECT_NE(unnamed.errors()[0].message.find("user_id"), std::string::npos)
      << unnamed.errors()[0].message;
}

TEST(BatchLines, AfterAnErrorNothingIsHandedOutButTheFirstProblemsAreNamed) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines lines(rules, options("u1"), [](const std::string&) { return true; });
  EXPECT_TRUE(lines.take(line("u1")).has_value());
  EXPECT_FALSE(lines.take("not json").has_value());
  EXPECT_FALSE(lines.take(line("u1")).has_value()) << "a good line after a bad one is not stored";
  EXPECT_FALSE(lines.take(line("u1", R"(,"model":"nope")")).has_value());
  EXPECT_FALSE(lines.take(line("u1", R"(,"batch_id":"other")")).has_value());
  EXPECT_FALSE(lines.take(std::string(400, ' ') + line("u1")).has_value());
  EXPECT_TRUE(lines.failed());
  ASSERT_EQ(lines.errors().size(), 3u) << "at most max_reported are listed";
  EXPECT_EQ(lines.errors()[0].path, "/line/2");
  EXPECT_EQ(lines.errors()[1].path, "/line/4/model");
  EXPECT_EQ(lines.errors()[2].path, "/line/5/batch_id");
  EXPECT_EQ(lines.lines(), 6);
}

TEST(BatchLines, ALineOverTheLimitIsAnErrorOfItsOwnLine) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines lines(rules, options("u1"), [](const std::string&) { return true; });
  EXPECT_FALSE(
      lines.take(line("u1", R"(,"metadata":{"x":")" + std::string(300, 'a') + "\"}")).has_value());
  ASSERT_EQ(lines.errors().size(), 1u);
  EXPECT_EQ(lines.errors()[0].path, "/line/1");
  EXPECT_NE(lines.errors()[0].message.find("longer than 300 bytes"), std::string::npos);
}

TEST(BatchLines, PastTheMostLinesTheUploadIsTooBig) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  BatchLines lines(rules, options("u1", 2), [](const std::string&) { return true; });
  EXPECT_TRUE(lines.take(line("u1")).has_value());
  EXPECT_TRUE(lines.take(line("u1")).has_value());
  EXPECT_FALSE(lines.too_many());
  EXPECT_FALSE(lines.take(line("u1")).has_value());
  EXPECT_TRUE(lines.too_many());
  EXPECT_TRUE(lines.failed());
  EXPECT_TRUE(lines.errors().empty()) << "too many is its own answer (413)";
}

using std::chrono::milliseconds;
using std::chrono::seconds;
const UploadPace::Clock::time_point kStart = UploadPace::Clock::time_point{} + seconds(100);

TEST(UploadPace, AClientAboveTheRateIsNeverCutAndOneBelowItOnlyAfterTheWindow) {
  UploadPace fast(kStart, seconds(3600), seconds(30), 8192);
  UploadPace slow(kStart, seconds(3600), seconds(30), 8192);
  for (int i = 1; i <= 120; ++i) {
    const auto now = kStart + seconds(i);
    EXPECT_EQ(fast.read(10000, seconds(1), now), std::nullopt) << i;
    auto cut = slow.read(100, seconds(1), now);
    if (i <= 30) {
      EXPECT_EQ(cut, std::nullopt) << "within the window, at " << i << " s";
    } else {
      ASSERT_NE(cut, std::nullopt) << "past the window, at " << i << " s";
      EXPECT_NE(cut->find("3100 bytes of task lines in 31 s"), std::string::npos) << *cut;
      break;
    }
  }
}

// Issue 39, item 1: two uploads of nothing but blank lines, 8 KiB a second, held both of a
// replica's upload slots for the hour of batch_upload_timeout_s. Blank lines are not tasks:
// their bytes earn no time, so such an upload is cut once the window has passed, while one
// of task lines with blank lines between them is not.
TEST(UploadPace, BlankLinesAreNotTasksAndEarnTheUploadNoTime) {
  UploadPace blank(kStart, seconds(3600), seconds(30), 8192);
  UploadPace spaced(kStart, seconds(3600), seconds(30), 8192);
  for (int i = 1; i <= 120; ++i) {
    const auto now = kStart + seconds(i);
    // The lines of a read are taken before the pace looks at it.
    blank.blank(8192);  // 8,192 newlines
    auto cut = blank.read(8192, seconds(1), now);
    // 10 KiB a second, of which 1 KiB blank lines.
    spaced.blank(1024);
    EXPECT_EQ(spaced.read(10240, seconds(1), now), std::nullopt) << i;
    if (i <= 30) {
      EXPECT_EQ(cut, std::nullopt) << "within the window, at " << i << " s";
    } else {
      ASSERT_NE(cut, std::nullopt) << "past the window, at " << i << " s";
      EXPECT_NE(cut->find("0 bytes of task lines (and 253952 of blank lines, which are not "
                          "tasks) in 31 s"),
                std::string::npos)
          << *cut;
      break;
    }
  }
}

TEST(UploadPace, TheServersOwnTimeIsNotCountedAgainstTheClient) {
  UploadPace pace(kStart, seconds(3600), seconds(30), 8192);
  // Each megabyte comes at once, then the server spends ten seconds writing it.
  for (int i = 1; i <= 20; ++i)
    EXPECT_EQ(pace.read(1 << 20, milliseconds(10), kStart + seconds(10 * i)), std::nullopt) << i;
}

TEST(UploadPace, NoUploadOutlivesItsDeadlineHoweverFast) {
  UploadPace pace(kStart, seconds(60), seconds(30), 1);
  EXPECT_EQ(pace.read(1 << 20, seconds(1), kStart + seconds(60)), std::nullopt);
  auto cut = pace.read(1 << 20, seconds(1), kStart + seconds(61));
  ASSERT_NE(cut, std::nullopt);
  EXPECT_NE(cut->find("longer than 60 s"), std::string::npos) << *cut;
}

}  // namespace
}  // namespace agentfleet::dispatcher
