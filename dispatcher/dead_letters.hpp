#pragma once
// GET /v1/dead-letters and POST /v1/dead-letters/replay (admin): what the fleet's
// dead-letter topic holds, and sending chosen letters back to the topics they came from
// (codec/dead_letter.hpp says what a replay sends).
//
// The requests, what a listing keeps and what a replay sends are pure and unit-tested.
// DeadLetterDesk runs the blocking Kafka work (kafka::read_dead_letters, a consumer group
// of its own per request, never committing) on one thread of its own, one request at a
// time per replica: a request that finds it busy is refused, not queued.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/codec/dead_letter.hpp"
#include "core/codec/json_schema.hpp"
#include "core/config/config.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::dispatcher {

// GET /v1/dead-letters?limit=&source_topic=&reason=&key=
struct DeadLetterQuery {
  static constexpr std::size_t kDefaultLimit = 100;
  static constexpr std::size_t kMaxLimit = 1000;
  std::size_t limit = kDefaultLimit;
  codec::DeadLetterFilter filter;  // offsets unused
};
// The query of a request target; the violation (at /query/<name>) when it is not one.
std::variant<DeadLetterQuery, codec::SchemaViolation> parse_dead_letter_query(
    std::string_view target);

// The last `limit` letters read that match a query, in the order read (the topic from its
// oldest message on, partition by partition as the broker hands them over), and how many
// matched in all. A value is kept to its first kMaxValueBytes (its size noted), so a
// listing holds at most limit x 16 KiB of values.
// What became of a kept letter's replays: the letters they became when they failed again
// (read later from the same topic, whatever the query), and what the store knows of those
// that reached it (add_stored, from pg::letter_replays).
class NewestLetters {
 public:
  using At = std::pair<std::int32_t, std::int64_t>;  // partition, offset
  explicit NewestLetters(DeadLetterQuery query) : query_(std::move(query)) {}
  void offer(codec::DeadLetter letter);
  const std::deque<codec::DeadLetter>& letters() const { return kept_; }
  std::size_t matched() const { return matched_; }
  // Where the kept letters are, to ask the store about.
  std::vector<At> kept_at() const;
  // A kept letter's replays that reached the store: the task they made or found, when the
  // first arrived, how many arrived.
  struct Stored {
    std::string task_id;
    std::string first_at;
    int count = 0;
  };
  void add_stored(At at, Stored stored);
  // {"topic", "dead_letters": [codec::dead_letter_json with values cut at kMaxValueBytes,
  //  and "replays": {"task_id" (null: no replay reached the store), "first_at", "stored",
  //  "failed_again_at": ["P:O", ...]}], "count", "matched"}.
  static constexpr std::size_t kMaxValueBytes = 16 * 1024;
  // The most failed_again_at lists of one letter.
  static constexpr std::size_t kMaxFailedAgain = 100;
  std::string json(const std::string& topic) const;

 private:
  struct Replays {
    Stored stored;
    std::vector<std::string> failed_again_at;
  };
  DeadLetterQuery query_;
  std::deque<codec::DeadLetter> kept_;
  std::map<At, Replays> replays_;  // of the kept letters only
  std::size_t matched_ = 0;
};

// POST /v1/dead-letters/replay {"offsets": ["P:O", ...], "dry_run": false}: 1 to kMaxOffsets
// offsets, none twice (also not as "0:01" beside "0:1").
struct ReplayRequest {
  static constexpr std::size_t kMaxOffsets = 1000;
  std::vector<std::pair<std::int32_t, std::int64_t>> offsets;
  bool dry_run = false;
};
std::variant<ReplayRequest, codec::SchemaViolation> parse_replay_request(std::string_view body);

// Why a replay sends nothing: an offset with no dead letter (404) or a letter that does
// not say where it came from (422), at /offsets/<i>.
struct ReplayRefusal {
  int status = 404;
  std::string code;  // "not_found", "not_replayable"
  std::string message;
  std::string path;
};
struct DeadLetterReplay {
  codec::DeadLetter letter;
  codec::ReplayMessage message;
};
// What replaying `request.offsets` sends, in the request's order, from the letters read.
std::variant<std::vector<DeadLetterReplay>, ReplayRefusal> plan_replay(
    const ReplayRequest& request, const std::vector<codec::DeadLetter>& letters);
// {"replayed": n, "dry_run", "sent": [{"partition","offset","topic","key"}]} over the
// replays that were sent (all of them on a dry run).
std::string replay_json(const std::vector<DeadLetterReplay>& sent, bool dry_run);

class DeadLetterDesk {
 public:
  // `timeout`: the most one request reads the topic (joining the group included), and then
  // the most a replay waits for its deliveries.
  DeadLetterDesk(config::KafkaConfig kafka, std::chrono::milliseconds timeout);
  ~DeadLetterDesk();  // stops and waits for a request being served
  // Ends a read under way within about 200 ms (its request fails) and refuses new ones: the
  // dispatcher's shutdown calls it before it stops its I/O.
  void stop();
  DeadLetterDesk(const DeadLetterDesk&) = delete;
  DeadLetterDesk& operator=(const DeadLetterDesk&) = delete;

  const std::string& topic() const { return kafka_.topics.dlq; }

  // nullopt: another request is being served on this replica.
  boost::asio::awaitable<std::optional<Result<NewestLetters>>> list(DeadLetterQuery query);

  // The replays sent (or that would be, on a dry run); a refusal when the plan refuses;
  // an Error when the topic was not read, or not every replay was delivered (the message
  // says which were).
  using ReplayOutcome = std::variant<std::vector<DeadLetterReplay>, ReplayRefusal>;
  boost::asio::awaitable<std::optional<Result<ReplayOutcome>>> replay(ReplayRequest request);

 private:
  // Reads the whole topic on the desk's thread, handing each letter to `take`.
  Status read(const std::function<void(codec::DeadLetter)>& take);
  std::string group_id() const;
  // On the desk's thread.
  Result<NewestLetters> list_now(DeadLetterQuery query);
  Result<ReplayOutcome> replay_now(const ReplayRequest& request);

  config::KafkaConfig kafka_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> stopping_{false};
  // Shared with the requests: a request's frame may outlive the desk at shutdown.
  std::shared_ptr<std::atomic<bool>> busy_ = std::make_shared<std::atomic<bool>>(false);
  boost::asio::thread_pool thread_{1};
};

}  // namespace agentfleet::dispatcher
