// The dispatcher's route table (dispatcher/routes.hpp): what a request's method and path
// reach, what its metrics are labelled, how big a body it may send, and that the README's
// API table lists exactly these routes.
#include "tests/source_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

#include "dispatcher/api.hpp"
#include "dispatcher/routes.hpp"

namespace agentfleet::dispatcher {
namespace {

using boost::beast::http::verb;

// The match, or one with no route.
RouteMatch matched(const Matched& m) {
  const auto* found = std::get_if<RouteMatch>(&m);
  return found ? *found : RouteMatch{nullptr, {}};
}

TEST(Routes, EachMethodAndPathReachesItsRouteWithItsParameters) {
  struct Case {
    verb method;
    std::string path;
    RouteId id;
    std::vector<std::string> params;
  };
  const std::vector<Case> cases = {
      {verb::post, "/v1/tasks", RouteId::kSubmitTask, {}},
      {verb::get, "/v1/tasks", RouteId::kListTasks, {}},
      {verb::get, "/v1/tasks/3f1c", RouteId::kGetTask, {"3f1c"}},
      {verb::post, "/v1/tasks/3f1c/cancel", RouteId::kCancelTask, {"3f1c"}},
      {verb::get, "/v1/tasks/3f1c/events", RouteId::kTaskEvents, {"3f1c"}},
      {verb::post, "/v1/batches", RouteId::kSubmitBatch, {}},
      {verb::get, "/v1/batches/b-1", RouteId::kGetBatch, {"b-1"}},
      {verb::get, "/v1/batches/b-1/results", RouteId::kBatchResults, {"b-1"}},
      {verb::post, "/v1/batches/b-1/cancel", RouteId::kCancelBatch, {"b-1"}},
      {verb::post, "/v1/batches/b-1/retry", RouteId::kRetryBatch, {"b-1"}},
      {verb::get, "/v1/usage", RouteId::kFleetUsage, {}},
      {verb::get, "/v1/users/a%20b/usage", RouteId::kUserUsage, {"a b"}},
      {verb::get, "/v1/users/a%2Fb/limits", RouteId::kGetLimits, {"a/b"}},
      {verb::put, "/v1/users/u1/limits", RouteId::kPutLimits, {"u1"}},
      {verb::get, "/v1/tools", RouteId::kListTools, {}},
      {verb::post, "/v1/tools/create_item:call", RouteId::kCallTool, {"create_item"}},
      {verb::get, "/v1/stats", RouteId::kStats, {}},
      {verb::post, "/v1/plan", RouteId::kPlan, {}},
      {verb::get, "/healthz", RouteId::kHealthz, {}},
      {verb::get, "/readyz", RouteId::kReadyz, {}},
      {verb::get, "/metrics", RouteId::kMetrics, {}},
      // Empty segments are ignored, as the API always did.
      {verb::get, "//v1///tasks/", RouteId::kListTasks, {}},
  };
  for (const Case& c : cases) {
    const RouteMatch m = matched(match_route(c.method, c.path));
    ASSERT_NE(m.route, nullptr) << c.path;
    EXPECT_EQ(m.route->id, c.id) << c.path;
    EXPECT_EQ(m.params, c.params) << c.path;
  }
}

TEST(Routes, AKnownPathWithAnotherMethodNamesTheMethodsItTakes) {
  const Matched listed = match_route(verb::delete_, "/v1/tasks");
  const auto* wrong = std::get_if<WrongMethod>(&listed);
  ASSERT_NE(wrong, nullptr);
  EXPECT_EQ(wrong->allowed, "POST, GET");
  EXPECT_EQ(wrong->pattern, "/v1/tasks");

  const Matched events = match_route(verb::post, "/v1/tasks/3f1c/events");
  ASSERT_TRUE(std::holds_alternative<WrongMethod>(events));
  EXPECT_EQ(std::get<WrongMethod>(events).allowed, "GET");
  const Matched limits = match_route(verb::post, "/v1/users/u1/limits");
  ASSERT_TRUE(std::holds_alternative<WrongMethod>(limits));
  EXPECT_EQ(std::get<WrongMethod>(limits).allowed, "GET, PUT");
  // HEAD is not served by any route.
  EXPECT_TRUE(std::holds_alternative<WrongMethod>(match_route(verb::head, "/healthz")));
}

TEST(Routes, APathNoRouteServesIsNoRoute) {
  for (const char* path :
       {"/", "", "/v1", "/v2/tasks", "/v1/tasks/a/b/c", "/v1/tools/x:cal", "/v1/tools/:call",
        "/v1/users/u1", "/v1/users/u1/other", "/healthz/extra", "/v1/task"}) {
    EXPECT_TRUE(std::holds_alternative<NoRoute>(match_route(verb::get, path))) << path;
    EXPECT_TRUE(std::holds_alternative<NoRoute>(match_route(verb::post, path))) << path;
    EXPECT_EQ(route_template(path), "unmatched") << path;
  }
}

TEST(Routes, MetricsAreLabelledWithTheRoutePatternNeverTheRawPath) {
  EXPECT_EQ(route_template("/v1/tasks/0f7e/cancel"), "/v1/tasks/{id}/cancel");
  EXPECT_EQ(route_template("/v1/users/anyone/limits"), "/v1/users/{id}/limits");
  EXPECT_EQ(route_template("/v1/tools/search_items:call"), "/v1/tools/{name}:call");
  EXPECT_EQ(route_template("/v1/batches/b%0D%0A/results"), "/v1/batches/{id}/results");
  EXPECT_EQ(route_template("/metrics"), "/metrics");
}

TEST(Routes, EveryRouteButTheOperationsOnesAndTheContractNeedsACallerAndAdminRoutesSayWhy) {
  for (const Route& route : routes()) {
    const bool open = route.pattern == "/healthz" || route.pattern == "/readyz" ||
                      route.pattern == "/metrics" || route.pattern == "/v1/openapi.json" ||
                      route.pattern == "/ui" || route.pattern == "/ui/{file}";
    EXPECT_EQ(route.access == Access::kAnyone, open) << route.pattern;
    EXPECT_EQ(route.access == Access::kAdmin, !route.admin_reason.empty()) << route.pattern;
    EXPECT_EQ(route.streamed,
              route.body == BodySize::kStreamed || route.id == RouteId::kTaskEvents ||
                  route.id == RouteId::kBatchResults || route.id == RouteId::kResults)
        << route.pattern;
    EXPECT_FALSE(route.summary.empty()) << route.pattern;
  }
  EXPECT_EQ(matched(match_route(verb::get, "/v1/usage")).route->access, Access::kAdmin);
  EXPECT_EQ(matched(match_route(verb::put, "/v1/users/u/limits")).route->access, Access::kAdmin);
  EXPECT_EQ(matched(match_route(verb::get, "/v1/users/u/limits")).route->access, Access::kCaller);
}

TEST(Routes, ASubmissionFitsIn64KiBUnlessTheConfiguredTextNeedsMore) {
  EXPECT_EQ(body_limit_for(BodySize::kText, 5000), 64u * 1024);
  // 20,000 characters, each possibly \uXXXX in JSON, and the rest of the submission.
  EXPECT_EQ(body_limit_for(BodySize::kText, 20000), 20000u * 6 + 16 * 1024);
  EXPECT_EQ(body_limit_for(BodySize::kSmall, 5000), 16u * 1024);
  EXPECT_EQ(body_limit_for(BodySize::kNone, 5000), 4u * 1024);
  const RouteMatch submit = matched(match_route(verb::post, "/v1/tasks"));
  ASSERT_NE(submit.route, nullptr);
  EXPECT_EQ(submit.route->body, BodySize::kText);
  EXPECT_EQ(matched(match_route(verb::post, "/v1/batches")).route->body, BodySize::kStreamed);
}

// The README's API table ("| `METHOD /path...` | ...") lists every route, and nothing else.
TEST(Routes, TheReadmeApiTableListsExactlyTheseRoutes) {
  std::ifstream in(std::string(AGENTFLEET_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md";
  std::set<std::pair<std::string, std::string>> documented;
  const std::regex route_text("`(GET|POST|PUT|DELETE|PATCH) (/[^`?]*)");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("| `"))
      continue;
    const std::string first_cell = line.substr(0, line.find(" |", 2));
    for (std::sregex_iterator it(first_cell.begin(), first_cell.end(), route_text), end; it != end;
         ++it) {
      documented.emplace((*it)[1].str(), (*it)[2].str());
    }
  }
  std::set<std::pair<std::string, std::string>> declared;
  for (const Route& route : routes()) {
    declared.emplace(std::string(boost::beast::http::to_string(route.method)),
                     std::string(route.pattern));
  }
  EXPECT_EQ(documented, declared);
}

TEST(Routes, TheConsoleIsServedUnderUiAndItsPageIsTheEmptyFile) {
  // The router does not tell /ui/ from /ui: the handler serves the page for the first and
  // redirects the second to it.
  const Matched page = match_route(verb::get, "/ui/");
  const auto* found = std::get_if<RouteMatch>(&page);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->route->id, RouteId::kConsoleRoot);
  const Matched asset = match_route(verb::get, "/ui/app-S7FLRUNZ.js");
  ASSERT_TRUE(std::holds_alternative<RouteMatch>(asset));
  EXPECT_EQ(std::get<RouteMatch>(asset).params, std::vector<std::string>{"app-S7FLRUNZ.js"});
  const Matched root = match_route(verb::get, "/ui");
  ASSERT_TRUE(std::holds_alternative<RouteMatch>(root));
  EXPECT_EQ(std::get<RouteMatch>(root).route->id, RouteId::kConsoleRoot);
  // Nothing deeper: the console's files all sit at its top.
  EXPECT_TRUE(std::holds_alternative<NoRoute>(match_route(verb::get, "/ui/a/b")));
  EXPECT_EQ(route_template("/ui/app-S7FLRUNZ.js"), "/ui/{file}");
}

// The API answers each route through the handler its table binds to it (Api::bindings()):
// one per route, in the order of RouteId (routing indexes the table by it), of the route's
// kind (a streamed route's handler reads the body itself).
TEST(Routes, EveryRouteIsBoundToOneHandlerOfItsKind) {
  const auto& bound = Api::bindings();
  ASSERT_EQ(bound.size(), routes().size());
  for (std::size_t i = 0; i < bound.size(); ++i)
    EXPECT_EQ(static_cast<std::size_t>(bound[i].id), i) << "binding " << i << " is out of order";
  for (const Route& route : routes()) {
    const auto& handler = bound[static_cast<std::size_t>(route.id)].handler;
    EXPECT_EQ(std::holds_alternative<Api::Streamed>(handler), route.streamed) << route.pattern;
  }
}

}  // namespace
}  // namespace agentfleet::dispatcher
