#include "dispatcher/dead_letters.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>

#include "core/adapters/http/server.hpp"
#include "core/adapters/kafka/topic_reader.hpp"
#include "core/codec/json_text.hpp"
#include "dispatcher/api.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;

namespace {
constexpr std::size_t kMaxFilterBytes = 1024;

// Frees the desk when a request is done, however it ends.
struct Served {
  std::shared_ptr<std::atomic<bool>> busy;
  ~Served() { *busy = false; }
};

std::string quoted(std::string_view text) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  const std::string clean = codec::sanitize_text(text);
  w.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string where(std::int32_t partition, std::int64_t offset) {
  return std::to_string(partition) + ":" + std::to_string(offset);
}
}  // namespace

std::variant<DeadLetterQuery, codec::SchemaViolation> parse_dead_letter_query(
    std::string_view target) {
  DeadLetterQuery query;
  if (auto limit = http::query_param(target, "limit")) {
    std::size_t n = 0;
    const char* end = limit->data() + limit->size();
    auto [p, ec] = std::from_chars(limit->data(), end, n);
    if (ec != std::errc() || p != end || n < 1 || n > DeadLetterQuery::kMaxLimit) {
      return codec::SchemaViolation{"/query/limit", "limit must be a whole number from 1 to " +
                                                        std::to_string(DeadLetterQuery::kMaxLimit)};
    }
    query.limit = n;
  }
  for (auto [name, field] :
       {std::pair{"source_topic", &query.filter.source_topic},
        std::pair{"reason", &query.filter.reason_contains}, std::pair{"key", &query.filter.key}}) {
    auto value = http::query_param(target, name);
    if (!value)
      continue;
    if (value->size() > kMaxFilterBytes) {
      return codec::SchemaViolation{
          std::string("/query/") + name,
          std::string(name) + " is longer than " + std::to_string(kMaxFilterBytes) + " bytes"};
    }
    *field = std::move(*value);
  }
  return query;
}

void NewestLetters::offer(codec::DeadLetter letter) {
  // A replay that failed again names the letter it came from, which was read before it.
  if (auto from = codec::parse_partition_offset(letter.replayed_from)) {
    auto it = replays_.find(*from);
    if (it != replays_.end() && it->second.failed_again_at.size() < kMaxFailedAgain)
      it->second.failed_again_at.push_back(where(letter.partition, letter.offset));
  }
  if (!query_.filter.matches(letter))
    return;
  ++matched_;
  if (letter.value.size() > kMaxValueBytes) {
    letter.value_bytes = letter.value.size();
    letter.value = std::string(codec::utf8_prefix(letter.value, kMaxValueBytes));
  }
  replays_[{letter.partition, letter.offset}];
  kept_.push_back(std::move(letter));
  if (kept_.size() > query_.limit) {
    replays_.erase({kept_.front().partition, kept_.front().offset});
    kept_.pop_front();
  }
}

std::vector<NewestLetters::At> NewestLetters::kept_at() const {
  std::vector<At> out;
  out.reserve(kept_.size());
  for (const auto& d : kept_)
    out.emplace_back(d.partition, d.offset);
  return out;
}

void NewestLetters::add_stored(At at, Stored stored) {
  if (auto it = replays_.find(at); it != replays_.end())
    it->second.stored = std::move(stored);
}

std::string NewestLetters::json(const std::string& topic) const {
  std::string out = "{\"topic\":" + quoted(topic) + ",\"dead_letters\":[";
  bool first = true;
  for (const auto& d : kept_) {
    if (!first)
      out += ",";
    first = false;
    std::string letter = codec::dead_letter_json(d, kMaxValueBytes);
    letter.pop_back();  // its closing brace: the replays go in the same object
    const Replays& r = replays_.at({d.partition, d.offset});
    letter += ",\"replays\":{\"task_id\":" +
              (r.stored.task_id.empty() ? std::string("null") : quoted(r.stored.task_id)) +
              ",\"first_at\":" +
              (r.stored.first_at.empty() ? std::string("null") : quoted(r.stored.first_at)) +
              ",\"stored\":" + std::to_string(r.stored.count) + ",\"failed_again_at\":[";
    for (std::size_t i = 0; i < r.failed_again_at.size(); ++i)
      letter += (i ? "," : "") + quoted(r.failed_again_at[i]);
    out += letter + "]}}";
  }
  return out + "],\"count\":" + std::to_string(kept_.size()) +
         ",\"matched\":" + std::to_string(matched_) + "}";
}

std::variant<ReplayRequest, codec::SchemaViolation> parse_replay_request(std::string_view body) {
  rapidjson::Document doc;
  if (auto violation = codec::validate_json_text(body, "dead_letter_replay.schema.json", &doc))
    return *violation;
  ReplayRequest request;
  const auto& offsets = doc["offsets"];
  for (rapidjson::SizeType i = 0; i < offsets.Size(); ++i) {
    const std::string_view text(offsets[i].GetString(), offsets[i].GetStringLength());
    auto at = codec::parse_partition_offset(text);
    if (!at) {
      return codec::SchemaViolation{"/offsets/" + std::to_string(i),
                                    "'" + std::string(text) + "' is not PARTITION:OFFSET"};
    }
    for (const auto& earlier : request.offsets) {
      if (earlier == *at) {
        return codec::SchemaViolation{"/offsets/" + std::to_string(i),
                                      "'" + std::string(text) + "' names a letter named before"};
      }
    }
    request.offsets.push_back(*at);
  }
  if (doc.HasMember("dry_run"))
    request.dry_run = doc["dry_run"].GetBool();
  return request;
}

std::variant<std::vector<DeadLetterReplay>, ReplayRefusal> plan_replay(
    const ReplayRequest& request, const std::vector<codec::DeadLetter>& letters) {
  std::vector<DeadLetterReplay> out;
  for (std::size_t i = 0; i < request.offsets.size(); ++i) {
    const auto [partition, offset] = request.offsets[i];
    const codec::DeadLetter* found = nullptr;
    for (const auto& d : letters) {
      if (d.partition == partition && d.offset == offset)
        found = &d;
    }
    const std::string path = "/offsets/" + std::to_string(i);
    if (!found) {
      return ReplayRefusal{404, "not_found",
                           "no dead letter at " + where(partition, offset) + "; nothing was sent",
                           path};
    }
    auto message = codec::replay_of(*found);
    if (!message) {
      return ReplayRefusal{422, "not_replayable",
                           "the dead letter at " + where(partition, offset) +
                               " has no dlq-source-topic header, so it cannot be sent back; "
                               "nothing was sent",
                           path};
    }
    out.push_back(DeadLetterReplay{*found, std::move(*message)});
  }
  return out;
}

std::string replay_json(const std::vector<DeadLetterReplay>& sent, bool dry_run) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  auto text = [&w](std::string_view t) {
    const std::string clean = codec::sanitize_text(t);
    w.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
  };
  w.StartObject();
  w.Key("replayed");
  w.Uint64(sent.size());
  w.Key("dry_run");
  w.Bool(dry_run);
  w.Key("sent");
  w.StartArray();
  for (const auto& r : sent) {
    w.StartObject();
    w.Key("partition");
    w.Int(r.letter.partition);
    w.Key("offset");
    w.Int64(r.letter.offset);
    w.Key("topic");
    text(r.message.topic);
    w.Key("key");
    text(r.message.key);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

DeadLetterDesk::DeadLetterDesk(config::KafkaConfig kafka, std::chrono::milliseconds timeout)
    : kafka_(kafka::reader_config(std::move(kafka))), timeout_(timeout) {}

DeadLetterDesk::~DeadLetterDesk() {
  stop();
  thread_.join();
}

void DeadLetterDesk::stop() {
  stopping_ = true;
}

std::string DeadLetterDesk::group_id() const {
  return kafka_.dispatcher_group + "-dlq-reader-" + new_task_id();
}

Status DeadLetterDesk::read(const std::function<void(codec::DeadLetter)>& take) {
  try {
    return kafka::read_dead_letters(
        kafka_, group_id(), topic(),
        [&](codec::DeadLetter d) {
          take(std::move(d));
          return true;
        },
        timeout_, &stopping_);
  } catch (const std::exception& e) {  // librdkafka refused a property
    return Error{ErrorKind::kFatal, std::string("reading the dead letters: ") + e.what()};
  }
}

Result<NewestLetters> DeadLetterDesk::list_now(DeadLetterQuery query) {
  NewestLetters newest(std::move(query));
  auto read = this->read([&](codec::DeadLetter d) { newest.offer(std::move(d)); });
  if (!read.ok())
    return read.error();
  return newest;
}

Result<DeadLetterDesk::ReplayOutcome> DeadLetterDesk::replay_now(const ReplayRequest& request) {
  codec::DeadLetterFilter filter;
  filter.offsets = request.offsets;
  std::vector<codec::DeadLetter> letters;
  auto read = this->read([&](codec::DeadLetter d) {
    if (filter.matches(d))
      letters.push_back(std::move(d));
  });
  if (!read.ok())
    return read.error();
  auto plan = plan_replay(request, letters);
  auto* replays = std::get_if<std::vector<DeadLetterReplay>>(&plan);
  if (!replays || request.dry_run)
    return ReplayOutcome(std::move(plan));
  std::vector<codec::ReplayMessage> messages;
  for (const auto& r : *replays)
    messages.push_back(r.message);
  std::vector<Status> sent;
  try {
    sent = kafka::send_replays(kafka_, messages, timeout_);
  } catch (const std::exception& e) {  // librdkafka refused a property
    return Error{ErrorKind::kFatal, std::string("sending the replays: ") + e.what()};
  }
  std::string failed;
  std::size_t delivered = 0;
  for (std::size_t i = 0; i < replays->size(); ++i) {
    if (sent[i].ok()) {
      ++delivered;
      continue;
    }
    failed += (failed.empty() ? "" : ", ") +
              where((*replays)[i].letter.partition, (*replays)[i].letter.offset) + " (" +
              sent[i].error().message + ")";
  }
  if (!failed.empty()) {
    return Error{ErrorKind::kTransient, std::to_string(delivered) + " of " +
                                            std::to_string(replays->size()) +
                                            " dead letters were sent; not sent: " + failed};
  }
  return ReplayOutcome(std::move(plan));
}

// The work runs in plain functions; the coroutines only carry their Result across (a
// co_return that converts is where GCC 12's coroutines have destroyed twice).
asio::awaitable<std::optional<Result<NewestLetters>>> DeadLetterDesk::list(DeadLetterQuery query) {
  if (stopping_ || busy_->exchange(true))
    co_return std::nullopt;
  Served served{busy_};
  auto listed = co_await asio::co_spawn(
      thread_.get_executor(),
      [this, &query]() -> asio::awaitable<Result<NewestLetters>> {
        Result<NewestLetters> result = list_now(std::move(query));
        co_return result;
      },
      asio::use_awaitable);
  std::optional<Result<NewestLetters>> out(std::move(listed));
  co_return out;
}

asio::awaitable<std::optional<Result<DeadLetterDesk::ReplayOutcome>>> DeadLetterDesk::replay(
    ReplayRequest request) {
  if (stopping_ || busy_->exchange(true))
    co_return std::nullopt;
  Served served{busy_};
  auto outcome = co_await asio::co_spawn(
      thread_.get_executor(),
      [this, &request]() -> asio::awaitable<Result<ReplayOutcome>> {
        Result<ReplayOutcome> result = replay_now(request);
        co_return result;
      },
      asio::use_awaitable);
  std::optional<Result<ReplayOutcome>> out(std::move(outcome));
  co_return out;
}

}  // namespace agentfleet::dispatcher
