// A batch upload as a unit (dispatcher/batch_upload.hpp) against a store in memory: what is
// stored, when, and what the client is told; every refusal stores nothing (what was staged
// is deleted). The Postgres side is proved in tests/pg/batch_pgtest.cpp, the route in
// tests/integration (api_test.cpp, the bad input catalogue).

#include "dispatcher/batch_upload.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config/config.hpp"
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

// The store in memory: a batch row, its staged tasks, the queue; each call can be made to fail.
class FakeUploadStore final : public BatchUploadStore {
 public:
  ports::QueueRoom queue_room(const std::string& user_id) override {
    calls.push_back("room " + user_id);
    maybe_fail("room");
    return room;
  }
  bool create(const std::string& user_id) override {
    calls.push_back("create " + user_id);
    maybe_fail("create");
    created = !batch_taken;
    return created;
  }
  bool renew() override {
    calls.push_back("renew");
    maybe_fail("renew");
    return !expired;
  }
  pg::Added add(std::vector<ports::NewTask>& tasks) override {
    calls.push_back("add " + std::to_string(tasks.size()));
    maybe_fail("add");
    if (next_added) {
      pg::Added a = *next_added;
      next_added.reset();
      return a;
    }
    pg::Added a;
    for (const ports::NewTask& t : tasks) {
      const std::string& key = t.spec.idempotency_key;
      if (!key.empty() && keys.count(key))
        continue;
      if (!key.empty())
        keys.insert({key, t.spec.task_id});
      staged.push_back(t.spec.text);
      ++a.inserted;
    }
    return a;
  }
  pg::Seal seal(std::int64_t total) override {
    calls.push_back("seal " + std::to_string(total));
    maybe_fail("seal");
    pg::Seal s;
    s.outcome = seal_outcome;
    s.room = room;
    sealed = s.outcome == pg::SealOutcome::kSealed;
    return s;
  }
  int promote(int slice) override {
    calls.push_back("promote");
    if (promote_failures > 0) {
      --promote_failures;
      throw std::runtime_error("canceling statement due to statement timeout");
    }
    const int n = std::min<int>(slice, static_cast<int>(staged.size()) - moved);
    moved += n;
    return n;
  }
  void discard(int) override {
    calls.push_back("discard");
    staged.clear();
  }

  void maybe_fail(const std::string& call) {
    if (fail == call)
      throw std::runtime_error("could not connect to server: Connection refused");
  }

  std::vector<std::string> calls;
  ports::QueueRoom room{0, 10000};
  bool batch_taken = false, created = false, expired = false, sealed = false;
  std::string fail;  // the call that throws
  std::optional<pg::Added> next_added;
  pg::SealOutcome seal_outcome = pg::SealOutcome::kSealed;
  int promote_failures = 0;
  int moved = 0;
  std::map<std::string, std::string> keys;  // idempotency key -> task id
  std::vector<std::string> staged;          // the texts of the staged tasks
};

std::string line(const std::string& user, const std::string& text, const std::string& extra = "") {
  return R"({"user_id":")" + user + R"(","text":")" + text + R"(")" + extra + "}";
}

struct Harness {
  config::Config config = test_config();
  SubmissionRules rules{config};
  FakeUploadStore store;
  std::vector<std::string> claimed;        // users claim_user was asked about
  std::optional<std::string> caller_busy;  // what claim_user answers
  std::optional<BatchUpload> upload;

  BatchUpload& start(std::string user_id = "u1", std::size_t slice = 2,
                     std::optional<ports::QueueRoom> room = std::nullopt) {
    BatchUploadOptions o;
    o.batch_id = "b-1";
    o.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    o.lines.batch_id = "b-1";
    o.lines.user_id = std::move(user_id);
    o.lines.defaults = submission_defaults(config);
    o.lines.max_lines = 5;
    o.lines.max_line_bytes = 300;
    o.room = room;
    o.slice = slice;
    o.move_slice = 2;
    o.move_tries = 3;
    upload.emplace(
        rules, std::move(o), store, [](const std::string& u) { return u != "stranger"; },
        [this](const std::string& u) {
          claimed.push_back(u);
          return caller_busy;
        });
    return *upload;
  }
  // Takes the lines, storing a slice whenever it is full, as the API does.
  void send(const std::vector<std::string>& lines, std::size_t slice = 2) {
    for (const std::string& l : lines) {
      upload->take(l);
      if (upload->pending() >= slice)
        upload->flush();
      if (upload->stopped())
        return;
    }
  }
  const UploadRefusal& refusal() const { return *upload->refusal(); }
};

TEST(BatchUpload, LinesAreStagedASliceAtATimeSealedAndMovedIntoTheQueue) {
  Harness h;
  BatchUpload& up = h.start("u1", 2, ports::QueueRoom{0, 10000});
  h.send({line("u1", "一"), "", line("u1", "二"), line("u1", "三")});
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"create u1", "add 2"}))
      << "the room was read before the body (the query named the user)";
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kSealed) << up.refusal()->message;
  EXPECT_EQ(h.store.calls.back(), "seal 3") << "the last slice, then the seal with every task";
  EXPECT_EQ(up.lines(), 3) << "blank lines are not lines";
  EXPECT_EQ(up.accepted(), 3);
  EXPECT_EQ(h.store.staged, (std::vector<std::string>{"一", "二", "三"})) << "in line order";
  EXPECT_EQ(h.claimed, (std::vector<std::string>{"u1"})) << "the caller's place, asked once";

  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kMore);
  EXPECT_EQ(up.state(), BatchUpload::State::kMoving);
  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kDone) << "the last slice moved fewer";
  EXPECT_EQ(up.state(), BatchUpload::State::kDone);
  EXPECT_EQ(h.store.moved, 3);
}

TEST(BatchUpload, AUserNamedByTheFirstLineHasTheirRoomReadAndTheirPlaceClaimed) {
  Harness h;
  h.store.room = ports::QueueRoom{9999, 10000};
  BatchUpload& up = h.start(/*user_id=*/"");
  h.send({line("u7", "一"), line("u7", "二")});
  EXPECT_EQ(h.claimed, (std::vector<std::string>{"u7"}));
  ASSERT_FALSE(h.store.calls.empty());
  EXPECT_EQ(h.store.calls.front(), "room u7");
  EXPECT_TRUE(up.stopped()) << "two tasks do not fit a queue with room for one";
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kRefused);
  EXPECT_EQ(h.refusal().code, "queue_full");
  EXPECT_EQ(h.refusal().status, http::Status::too_many_requests);
  EXPECT_EQ(h.refusal().queue_full, 2);
  EXPECT_EQ(h.refusal().retry_after, "60");
  EXPECT_NE(h.refusal().message.find("first 2 tasks would already exceed"), std::string::npos)
      << h.refusal().message;
  EXPECT_TRUE(h.store.staged.empty()) << "nothing was stored";
}

TEST(BatchUpload, ACallerAtItsShareOfUploadsForTheUserIsStoppedWithNothingStored) {
  Harness h;
  h.caller_busy = "key 'k' has 2 batch uploads for user 'u7' under way on this replica";
  BatchUpload& up = h.start(/*user_id=*/"");
  h.send({line("u7", "一"), line("u7", "二"), line("u7", "三")});
  EXPECT_TRUE(up.stopped());
  EXPECT_EQ(up.pending(), 0u) << "no line is kept once the place is refused";
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kRefused);
  EXPECT_EQ(h.refusal().code, "too_many_uploads");
  EXPECT_EQ(h.refusal().retry_after, "5");
  EXPECT_NE(h.refusal().message.find("the upload was stopped and nothing was stored"),
            std::string::npos);
  EXPECT_TRUE(h.store.calls.empty()) << "the store was never touched";
}

TEST(BatchUpload, EachRefusalSaysWhyAndDeletesWhatWasStaged) {
  struct Case {
    std::string name;
    std::function<void(Harness&)> arrange;
    std::vector<std::string> lines;
    BatchUpload::BodyEnd how = BatchUpload::BodyEnd::kComplete;
    http::Status status;
    std::string code;
    std::string path;
  };
  pg::Added held;
  held.held_key = "k1";
  held.held_by_batch = "b-0";
  pg::Added conflict;
  conflict.conflict_at = 1;
  conflict.conflict_key = "k2";
  conflict.conflict_task_id = "t-9";
  const std::vector<Case> cases = {
      {"too slow",
       {},
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kTooSlow,
       http::Status::request_timeout,
       "upload_too_slow",
       "/"},
      {"unreadable",
       {},
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kUnreadable,
       http::Status::bad_request,
       "invalid_request",
       "/"},
      {"too many lines",
       {},
       std::vector<std::string>(6, line("u1", "一")),
       BatchUpload::BodyEnd::kComplete,
       http::Status::payload_too_large,
       "payload_too_large",
       "/line/6"},
      {"no lines",
       {},
       {"", " "},
       BatchUpload::BodyEnd::kComplete,
       http::Status::bad_request,
       "invalid_request",
       "/line/1"},
      {"a key held by another upload",
       [&](Harness& h) { h.store.next_added = held; },
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::service_unavailable,
       "idempotency_key_pending",
       "/"},
      {"a key used with another request",
       [&](Harness& h) { h.store.next_added = conflict; },
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::conflict,
       "idempotency_conflict",
       "/line/2/idempotency_key"},
      {"a batch id taken",
       [](Harness& h) { h.store.batch_taken = true; },
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::conflict,
       "batch_exists",
       "/query/batch_id"},
      {"a bad line",
       {},
       {line("u1", "一"), R"({"user_id":"u1"})", line("u1", "三")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::bad_request,
       "invalid_request",
       "/line/2"},
      {"a user the caller may not act for",
       {},
       {line("stranger", "一")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::forbidden,
       "forbidden",
       "/line/1"},
      {"the queue full at the seal",
       [](Harness& h) { h.store.seal_outcome = pg::SealOutcome::kQueueFull; },
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::too_many_requests,
       "queue_full",
       ""},
      {"the upload past its deadline at the seal",
       [](Harness& h) { h.store.seal_outcome = pg::SealOutcome::kExpired; },
       {line("u1", "一"), line("u1", "二")},
       BatchUpload::BodyEnd::kComplete,
       http::Status::request_timeout,
       "upload_too_slow",
       "/"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Harness h;
    if (c.arrange)
      c.arrange(h);
    BatchUpload& up = h.start(c.name == "a user the caller may not act for" ? "" : "u1");
    h.send(c.lines);
    up.end(c.how, "the upload sent 10 bytes a second");
    ASSERT_EQ(up.state(), BatchUpload::State::kRefused);
    EXPECT_EQ(h.refusal().status, c.status);
    EXPECT_EQ(h.refusal().code, c.code);
    EXPECT_EQ(h.refusal().path.substr(0, c.path.size()), c.path) << h.refusal().path;
    if (c.name != "no lines") {  // which had nothing to store
      EXPECT_NE(h.refusal().message.find("nothing was stored"), std::string::npos)
          << h.refusal().message;
    }
    EXPECT_FALSE(h.store.sealed);
    EXPECT_TRUE(h.store.staged.empty()) << "what was staged is deleted";
    const bool discarded = std::count(h.store.calls.begin(), h.store.calls.end(), "discard") == 1;
    EXPECT_EQ(discarded, h.store.created && c.code != "batch_exists")
        << "deleted when this upload created the batch, and only then";
  }
}

TEST(BatchUpload, AStoreThatFailsIsTheStoresAnswerAndNothingIsStored) {
  for (const std::string call : {"create", "add", "seal"}) {
    SCOPED_TRACE(call);
    Harness h;
    h.store.fail = call;
    BatchUpload& up = h.start();
    h.send({line("u1", "一"), line("u1", "二"), line("u1", "三")});
    up.end(BatchUpload::BodyEnd::kComplete);
    ASSERT_EQ(up.state(), BatchUpload::State::kRefused);
    ASSERT_TRUE(h.refusal().store.has_value());
    EXPECT_NE(h.refusal().store->message.find("Connection refused"), std::string::npos);
    EXPECT_FALSE(h.store.sealed);
  }
  // A keep-alive that finds the upload past its deadline.
  Harness h;
  BatchUpload& up = h.start();
  h.send({line("u1", "一"), line("u1", "二")});
  h.store.expired = true;
  up.keep_alive();
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kRefused);
  ASSERT_TRUE(h.refusal().store.has_value());
  EXPECT_NE(h.refusal().store->message.find("went past its deadline"), std::string::npos);
}

TEST(BatchUpload, AMoveThatFailsIsTriedAgainThenLeftToTheScheduler) {
  Harness h;
  BatchUpload& up = h.start();
  h.send({line("u1", "一"), line("u1", "二"), line("u1", "三")});
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kSealed);
  h.store.promote_failures = 2;
  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kPause);
  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kPause);
  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kMore) << "the third try moved a slice";
  EXPECT_EQ(up.move_slice(), BatchUpload::Move::kDone);
  EXPECT_EQ(h.store.moved, 3);

  Harness gives_up;
  BatchUpload& other = gives_up.start();
  gives_up.send({line("u1", "一"), line("u1", "二")});
  other.end(BatchUpload::BodyEnd::kComplete);
  gives_up.store.promote_failures = 10;
  EXPECT_EQ(other.move_slice(), BatchUpload::Move::kPause);
  EXPECT_EQ(other.move_slice(), BatchUpload::Move::kPause);
  EXPECT_EQ(other.move_slice(), BatchUpload::Move::kDone) << "move_tries (3): the scheduler's";
  EXPECT_EQ(other.state(), BatchUpload::State::kDone);
}

TEST(BatchUpload, DuplicateKeysAreCountedNotStoredTwice) {
  Harness h;
  BatchUpload& up = h.start();
  h.send({line("u1", "一", R"(,"idempotency_key":"a")"),
          line("u1", "二", R"(,"idempotency_key":"b")"),
          line("u1", "一", R"(,"idempotency_key":"a")")});
  up.end(BatchUpload::BodyEnd::kComplete);
  ASSERT_EQ(up.state(), BatchUpload::State::kSealed);
  EXPECT_EQ(up.accepted(), 2);
  EXPECT_EQ(up.duplicates(), 1);
  EXPECT_EQ(h.store.calls.back(), "seal 2");
}

}  // namespace
}  // namespace agentfleet::dispatcher
