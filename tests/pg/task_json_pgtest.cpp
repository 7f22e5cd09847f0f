// The task as the API shows it, written by the codec from the row every read selects
// (codec/task_json, pg::read_task_row, the fragment task_row): for tasks in each state that
// shows a different field, each shape (a task, a list's summary, a batch's result line, an
// event stream's replay) holds what Postgres built before the codec wrote them. The JSON
// below is that former SQL, kept here as the oracle; both are parsed, so key order and
// spacing do not count.

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <pqxx/pqxx>

#include <string>
#include <vector>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::next_id;
using pgtest::pg_url;

constexpr const char* kResult = R"SQL(CASE WHEN t.result_type IS NULL THEN NULL ELSE
  jsonb_build_object('type', t.result_type, 'message', t.result_message,
                     'options', coalesce(t.result_options, '[]'::jsonb)) END)SQL";
constexpr const char* kUsage = R"SQL(jsonb_build_object('input_tokens', t.input_tokens,
  'cached_input_tokens', t.cached_input_tokens, 'output_tokens', t.output_tokens))SQL";
constexpr const char* kWaiting = R"SQL(CASE WHEN t.status = 'queued' THEN coalesce(
  CASE WHEN t.parent_task_id IS NOT NULL AND EXISTS (
      SELECT 1 FROM tasks p WHERE p.task_id = t.parent_task_id
        AND p.status IN ('staged', 'queued', 'dispatched', 'running')) THEN 'parent' END,
  (SELECT w.reason FROM waiting_reasons w
   WHERE w.user_id = t.user_id AND w.priority = t.priority), 'scheduling') END)SQL";

std::string oracle_task() {
  return std::string(R"SQL(SELECT jsonb_build_object(
  'task_id', t.task_id, 'user_id', t.user_id, 'text', t.text, 'model', t.model,
  'tools', to_jsonb(t.tools), 'priority', t.priority, 'status', t.status,
  'timeout_s', t.timeout_s, 'schedule_timeout_s', t.schedule_timeout_s,
  'max_steps', t.max_steps, 'strategy', t.strategy,
  'idempotency_key', t.idempotency_key, 'batch_id', t.batch_id,
  'parent_task_id', t.parent_task_id, 'session_id', t.session_id, 'retry_of', t.retry_of,
  'batch_line', t.batch_line, 'trace_id', NULLIF(substr(t.traceparent, 4, 32), ''),
  'max_tokens', t.max_tokens, 'max_cost', to_char(t.max_cost, 'FM999999999999990.000000'),
  'metadata', t.metadata, 'result', )SQL") +
         kResult + R"SQL(,
  'error', t.error, 'error_code', t.error_code, 'cancel_requested', t.cancel_requested,
  'waiting_reason', )SQL" +
         kWaiting + R"SQL(,
  'attempt', t.attempt, 'steps', t.steps, 'tool_calls', t.tool_calls, 'usage', )SQL" +
         kUsage + R"SQL(,
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'created_at', t.created_at, 'dispatched_at', t.dispatched_at,
  'started_at', t.started_at, 'finished_at', t.finished_at,
  'trace', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'step', s.step, 'attempt', s.attempt,
      'role', CASE WHEN s.model_reply->>'kind' = 'tool_step' THEN '"tool"'::jsonb
                   ELSE s.model_reply->'role' END,
      'content', s.model_reply->'content', 'reasoning', s.model_reply->'reasoning',
      'tool_calls', coalesce(s.trace, '[]'::jsonb), 'usage', s.model_reply->'usage',
      'usage_estimated', (SELECT l.usage_estimated FROM usage_ledger l
                          WHERE l.task_id = s.task_id AND l.step = s.step),
      'model_latency_ms', s.model_latency_ms, 'at', s.created_at) ORDER BY s.step),
      '[]'::jsonb)
    FROM task_steps s WHERE s.task_id = t.task_id))::text
FROM tasks t WHERE t.task_id = $1::uuid)SQL";
}

std::string oracle_summary() {
  return std::string(R"SQL(SELECT jsonb_build_object(
  'task_id', t.task_id, 'user_id', t.user_id, 'text', t.text, 'model', t.model,
  'priority', t.priority, 'status', t.status, 'batch_id', t.batch_id,
  'session_id', t.session_id, 'trace_id', NULLIF(substr(t.traceparent, 4, 32), ''),
  'result', )SQL") +
         kResult + R"SQL(,
  'error', t.error, 'error_code', t.error_code, 'steps', t.steps, 'tool_calls', t.tool_calls,
  'waiting_reason', )SQL" +
         kWaiting + R"SQL(,
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'created_at', t.created_at, 'finished_at', t.finished_at)::text
FROM tasks t WHERE t.task_id = $1::uuid)SQL";
}

std::string oracle_batch_line() {
  return std::string(R"SQL(SELECT jsonb_build_object(
  'line', t.batch_line, 'text', t.text, 'task_id', t.task_id,
  'idempotency_key', t.idempotency_key, 'trace_id', NULLIF(substr(t.traceparent, 4, 32), ''),
  'status', t.status, 'result', )SQL") +
         kResult + R"SQL(,
  'error', t.error, 'error_code', t.error_code, 'steps', t.steps, 'tool_calls', t.tool_calls,
  'usage', )SQL" +
         kUsage + R"SQL(,
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'created_at', t.created_at, 'finished_at', t.finished_at, 'retried_as', NULL::jsonb)::text
FROM tasks t WHERE t.task_id = $1::uuid)SQL";
}

std::string oracle_history() {
  return std::string(R"SQL(SELECT jsonb_build_object(
  'task_id', t.task_id, 'user_id', t.user_id, 'status', t.status, 'error', t.error,
  'error_code', t.error_code, 'result', )SQL") +
         kResult + R"SQL(, 'usage', )SQL" + kUsage + R"SQL(,
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'steps', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'step', s.step, 'content', coalesce(s.model_reply->>'content', ''),
      'tool_calls', coalesce(s.model_reply->'tool_calls', '[]'::jsonb),
      'trace', s.trace) ORDER BY s.step), '[]'::jsonb)
    FROM task_steps s WHERE s.task_id = t.task_id))::text
FROM tasks t WHERE t.task_id = $1::uuid)SQL";
}

rapidjson::Document parsed(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

std::string compact(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  value.Accept(w);
  return buffer.GetString();
}

class TaskJson : public ::testing::Test {
 protected:
  std::string oracle(const std::string& sql, const std::string& task_id) {
    pqxx::read_transaction tx(db_);
    return tx.exec_params1(sql, task_id)[0].as<std::string>();
  }

  template <typename... Args>
  void exec(const std::string& sql, const Args&... args) {
    pqxx::work tx(db_);
    tx.exec_params0(sql, args...);
    tx.commit();
  }

  // A task of `user` as the API stores a submission, then changed by `update` ($1: its id).
  std::string task(const std::string& user, const std::string& update = {}, pg::NewTask base = {}) {
    base.spec.task_id = next_id();
    base.spec.user_id = user;
    if (base.spec.text.empty())
      base.spec.text = "把周会改到晚上8点\x1f \"引号\" \\";
    base.spec.model = "sim-model";
    if (base.canonical.empty())
      base.canonical = "{}";
    EXPECT_EQ(pg::insert_task(db_, base).outcome, pg::InsertOutcome::kCreated);
    if (!update.empty())
      exec(update, base.spec.task_id);
    return base.spec.task_id;
  }

  // Every shape of `task_id` against its oracle.
  void expect_all_shapes_alike(const std::string& task_id, const std::string& user,
                               const std::string& batch = {}) {
    SCOPED_TRACE(task_id);
    const auto shown = pg::task_json(db_, task_id);
    ASSERT_TRUE(shown);
    const auto expected = parsed(oracle(oracle_task(), task_id));
    EXPECT_TRUE(parsed(*shown) == expected) << *shown << "\n" << compact(expected);

    const auto list = parsed([&] {
      pg::TaskListQuery query;
      query.user_id = user;
      query.limit = 100;
      return pg::list_tasks(db_, query).tasks;
    }());
    ASSERT_TRUE(list.IsArray());
    const auto summary = parsed(oracle(oracle_summary(), task_id));
    bool listed = false;
    for (const auto& item : list.GetArray()) {
      if (item["task_id"] == summary["task_id"]) {
        listed = true;
        EXPECT_TRUE(item == summary) << compact(item) << "\n" << compact(summary);
      }
    }
    EXPECT_TRUE(listed);

    const auto history = pg::task_history_json(db_, task_id);
    ASSERT_TRUE(history);
    const auto replayed = parsed(oracle(oracle_history(), task_id));
    EXPECT_TRUE(parsed(*history) == replayed) << *history << "\n" << compact(replayed);

    if (!batch.empty()) {
      pg::ResultsCursor last;
      const std::string lines = pg::batch_results_page(
          db_, pg::BatchHeader{batch, user, Priority::kBatch}, {}, 100, last);
      const auto line = parsed(oracle(oracle_batch_line(), task_id));
      EXPECT_NE(lines.find(compact(line["task_id"])), std::string::npos) << lines;
      std::size_t at = 0;
      bool found = false;
      while (at < lines.size()) {
        const std::size_t end = lines.find('\n', at);
        const auto got = parsed(lines.substr(at, end - at));
        if (got["task_id"] == line["task_id"]) {
          found = true;
          EXPECT_TRUE(got == line) << compact(got) << "\n" << compact(line);
        }
        at = end + 1;
      }
      EXPECT_TRUE(found) << lines;
    }
  }

  pqxx::connection db_{pg_url()};
};

TEST_F(TaskJson, AQueuedTaskWithEverySubmittedFieldIsShownAsTheStatementsShowedIt) {
  pg::NewTask full;
  full.spec.tools = std::vector<std::string>{"create_item", "update_item"};
  full.spec.idempotency_key = "tj-" + next_id();
  full.spec.metadata.time_zone = "Asia/Shanghai";
  full.spec.metadata.locale = "zh-CN";
  full.spec.max_tokens = 20000;
  full.spec.max_cost_micros = 50'001;
  full.spec.strategy = AgentStrategy::kPlanExecute;
  full.spec.session_id = "tj-session";
  const std::string user = "tj-u1-" + next_id();
  const std::string id = task(user, {}, full);
  expect_all_shapes_alike(id, user);
  // The submission's own answer is the same document.
  full.spec.idempotency_key.clear();
  full.spec.task_id = next_id();
  full.spec.user_id = user;
  full.spec.text = "x";
  full.spec.model = "sim-model";
  full.canonical = "{}";
  const auto created = pg::insert_task(db_, full, {}, /*with_json=*/true);
  ASSERT_EQ(created.outcome, pg::InsertOutcome::kCreated);
  EXPECT_TRUE(parsed(created.task_json) == parsed(oracle(oracle_task(), created.task_id)))
      << created.task_json;
}

TEST_F(TaskJson, WhyATaskWaitsIsItsParentThenTheStoredLimitThenScheduling) {
  const std::string user = "tj-u2-" + next_id();
  const std::string parent =
      task(user, "UPDATE tasks SET status = 'running' WHERE task_id = $1::uuid");
  pg::NewTask follow_up;
  follow_up.spec.parent_task_id = parent;
  const std::string child = task(user, {}, follow_up);
  const std::string plain = task(user);
  expect_all_shapes_alike(child, user);
  expect_all_shapes_alike(plain, user);
  EXPECT_EQ(parsed(*pg::task_json(db_, child))["waiting_reason"], "parent");
  EXPECT_EQ(parsed(*pg::task_json(db_, plain))["waiting_reason"], "scheduling");
  exec("INSERT INTO waiting_reasons (user_id, priority, reason) VALUES ($1, 'interactive', $2)",
       user, "tokens_per_minute");
  expect_all_shapes_alike(child, user);
  expect_all_shapes_alike(plain, user);
  EXPECT_EQ(parsed(*pg::task_json(db_, plain))["waiting_reason"], "tokens_per_minute");
  EXPECT_TRUE(parsed(*pg::task_json(db_, parent))["waiting_reason"].IsNull());
}

TEST_F(TaskJson, AnEndedTaskWithStepsAResultAndABillIsShownAsTheStatementsShowedIt) {
  const std::string user = "tj-u3-" + next_id();
  const std::string batch = "tj-batch-" + next_id();
  exec("INSERT INTO batches (batch_id, user_id, priority, total) VALUES ($1, $2, 'batch', 2)",
       batch, user);
  pg::NewTask in_batch;
  in_batch.spec.batch_id = batch;
  in_batch.spec.priority = Priority::kBatch;
  in_batch.spec.idempotency_key = "tj-line-1";
  const std::string asked = task(user,
                                 R"SQL(UPDATE tasks SET status = 'succeeded', attempt = 2,
      result_type = 'need_clarification', result_message = '哪一天？',
      result_options = '["周一", "周二"]', steps = 2, tool_calls = 1, input_tokens = 1200,
      cached_input_tokens = 200, output_tokens = 80, cost = 0.001234, currency = 'CNY',
      dispatched_at = now(), started_at = now(), finished_at = now()
      WHERE task_id = $1::uuid)SQL",
                                 in_batch);
  exec(R"SQL(INSERT INTO task_steps (task_id, step, attempt, model_reply, trace, model_latency_ms)
      VALUES ($1::uuid, 0, 2, '{"role":"assistant","content":"查一下","tool_calls":[{"id":"c1"}],
                               "usage":{"input_tokens":600}}',
              '[{"tool":"list_items","status":"ok"}]', 321),
             ($1::uuid, 1, 2, '{"kind":"tool_step","content":null}', NULL, 0))SQL",
       asked);
  // Step 0's provider sent no usage: billed by the worker's estimate (issue 39, item 9).
  exec(R"SQL(INSERT INTO usage_ledger (task_id, step, user_id, batch_id, model, input_tokens,
                                       cached_input_tokens, output_tokens, cost, currency,
                                       usage_estimated)
      VALUES ($1::uuid, 0, $2, $3, 'sim-model', 1200, 200, 80, 0.001234, 'CNY', true))SQL",
       asked, user, batch);
  pg::NewTask failed_line;
  failed_line.spec.batch_id = batch;
  failed_line.spec.priority = Priority::kBatch;
  const std::string failed = task(user,
                                  R"SQL(UPDATE tasks SET status = 'failed', result_type = 'error',
      result_message = 'the model did not answer', error = 'model timed out',
      error_code = 'model_timeout', finished_at = now(), cancel_requested = true
      WHERE task_id = $1::uuid)SQL",
                                  failed_line);
  expect_all_shapes_alike(asked, user, batch);
  expect_all_shapes_alike(failed, user, batch);
  const auto shown = parsed(*pg::task_json(db_, asked));
  EXPECT_EQ(shown["result"]["options"].Size(), 2u);
  EXPECT_EQ(shown["trace"].Size(), 2u);
  EXPECT_EQ(shown["trace"][1]["role"], "tool");
  EXPECT_TRUE(shown["trace"][0]["usage_estimated"].IsTrue()) << "its step's bill is an estimate";
  EXPECT_TRUE(shown["trace"][1]["usage_estimated"].IsNull()) << "a tool step made no call";
  EXPECT_EQ(shown["cost"], "0.001234");
  EXPECT_EQ(shown["text"], "把周会改到晚上8点\x1f \"引号\" \\") << "escaped and read back";
}

}  // namespace
}  // namespace agentfleet
