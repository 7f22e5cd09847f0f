// The search of GET /v1/tasks (dispatcher/task_search.hpp): whose tasks it reads for each
// kind of key, the filters read from the query string, each bad one refused by name, and
// the page's answer with its cursor and count.
#include "dispatcher/task_search.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace agentfleet::dispatcher {
namespace {

Caller acting_for(std::vector<std::string> users, bool admin = false) {
  Caller caller;
  caller.name = "test";
  caller.users = std::move(users);
  caller.admin = admin;
  return caller;
}

TEST(TaskSearch, AnOperatorSearchesEveryUserAndOthersTheirOwn) {
  ports::TaskListQuery query;
  ASSERT_TRUE(scope_task_search(acting_for({}, /*admin=*/true), "", query));
  EXPECT_EQ(query.user_id, "");
  EXPECT_TRUE(query.users.empty()) << "every user's";

  ASSERT_TRUE(scope_task_search(acting_for({"u1"}), "", query));
  EXPECT_EQ(query.user_id, "u1") << "a key of one user reads that user's";
  EXPECT_TRUE(query.users.empty());

  ASSERT_TRUE(scope_task_search(acting_for({"u1", "u2"}), "", query));
  EXPECT_EQ(query.user_id, "");
  EXPECT_EQ(query.users, (std::vector<std::string>{"u1", "u2"}));

  ASSERT_TRUE(scope_task_search(acting_for({"u1", "u2"}), "u2", query));
  EXPECT_EQ(query.user_id, "u2") << "the user named";
  EXPECT_TRUE(query.users.empty());

  EXPECT_FALSE(scope_task_search(acting_for({}), "", query)) << "a key of no user finds none";
}

TEST(TaskSearch, EveryFilterIsReadFromTheQuery) {
  ports::TaskListQuery query;
  const auto problem = read_task_search(
      "/v1/tasks?status=succeeded&result_type=error&error_code=model_unavailable"
      "&model=sim-model&session_id=s1&q=%E5%91%A8%E4%BC%9A&since=2026-11-01"
      "&until=2026-12-01T00:00:00Z&limit=20&before=0b7f9a0e-3f6c-4d1a-9a51-2c8d6f1e0a11"
      "&count=true",
      query);
  ASSERT_FALSE(problem) << problem->path << ": " << problem->message;
  EXPECT_EQ(query.status, "succeeded");
  EXPECT_EQ(query.result_type, "error");
  EXPECT_EQ(query.error_code, "model_unavailable");
  EXPECT_EQ(query.model, "sim-model");
  EXPECT_EQ(query.session_id, "s1");
  EXPECT_EQ(query.text, "周会") << "percent-decoded";
  EXPECT_EQ(query.since, "2026-11-01");
  EXPECT_EQ(query.until, "2026-12-01T00:00:00Z");
  EXPECT_EQ(query.limit, 20);
  EXPECT_EQ(query.before, "0b7f9a0e-3f6c-4d1a-9a51-2c8d6f1e0a11");
  EXPECT_GT(query.count_up_to, kCountUpTo) << "one more than shown, to tell a capped count";

  ports::TaskListQuery plain;
  ASSERT_FALSE(read_task_search("/v1/tasks", plain));
  EXPECT_EQ(plain.limit, 50);
  EXPECT_EQ(plain.count_up_to, 0) << "not counted unless asked";
  EXPECT_EQ(plain.text, "");
}

TEST(TaskSearch, EachBadFilterIsRefusedByItsName) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"status=done", "/query/status"},
      {"result_type=ok", "/query/result_type"},
      {"q=" + std::string(201, 'x'), "/query/q"},
      {"q=a%0Ab", "/query/q"},
      {"error_code=" + std::string(65, 'e'), "/query/error_code"},
      {"since=yesterday", "/query/since"},
      {"until=2026-13", "/query/until"},
      {"before=fb2b", "/query/before"},
      {"limit=0", "/query/limit"},
      {"limit=501", "/query/limit"},
      {"limit=5x", "/query/limit"},
      {"count=yes", "/query/count"},
  };
  for (const auto& [params, path] : bad) {
    ports::TaskListQuery query;
    const auto problem = read_task_search("/v1/tasks?" + params, query);
    ASSERT_TRUE(problem) << params;
    EXPECT_EQ(problem->path, path) << params;
    EXPECT_FALSE(problem->message.empty());
  }
}

TEST(TaskSearch, APageNamesItsNextCursorAndItsCount) {
  ports::TaskListPage page;
  page.tasks = "[]";
  EXPECT_EQ(task_page_json(page), R"({"tasks":[],"next_before":null})");
  page.last = "0b7f9a0e-3f6c-4d1a-9a51-2c8d6f1e0a11";
  page.count = 12;
  EXPECT_EQ(task_page_json(page),
            R"({"tasks":[],"next_before":"0b7f9a0e-3f6c-4d1a-9a51-2c8d6f1e0a11",)"
            R"("total":12,"total_capped":false})");
  page.count = kCountUpTo + 1;
  EXPECT_NE(task_page_json(page).find(R"("total":10000,"total_capped":true)"), std::string::npos);
}

}  // namespace
}  // namespace agentfleet::dispatcher
