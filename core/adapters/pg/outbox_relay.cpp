#include "core/adapters/pg/outbox_relay.hpp"

#include <rapidjson/document.h>

#include <cstdint>
#include <utility>

#include "core/adapters/pg/sql.hpp"
#include "core/codec/json_text.hpp"

namespace agentfleet::pg {

void delete_outbox_rows(pqxx::transaction_base& tx, const std::vector<std::int64_t>& ids) {
  if (ids.empty())
    return;
  std::string array = "{";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0)
      array += ',';
    array += std::to_string(ids[i]);
  }
  array += '}';
  exec_named0(tx, "outbox_delete", array);
}

namespace {
// The row's `headers` object (name to text value) as message headers; written by the
// dispatcher's own SQL, so anything else in it is skipped rather than guessed at.
void add_headers(ports::OutMessage& message, const std::string& object) {
  if (object.empty())
    return;
  rapidjson::Document doc;
  if (!codec::parse_json(doc, object) || !doc.IsObject())
    return;
  for (const auto& member : doc.GetObject()) {
    if (member.value.IsString())
      message.headers.emplace_back(member.name.GetString(), member.value.GetString());
  }
}
}  // namespace

Result<RelayedBatch> OutboxRelay::once(int batch, const std::string& dispatch_topic,
                                       const Send& send) {
  return db_.run_blocking([&](pqxx::connection& c) {
    RelayedBatch relayed;
    {
      pqxx::nontransaction read(c);
      const auto next = exec_named1(read, "relay_next_due");
      if (next[0].is_null())
        return relayed;  // empty
      if (const auto in = next[0].as<std::int64_t>(); in > 0) {
        relayed.next_due_in = std::chrono::milliseconds(in);
        return relayed;
      }
    }
    relayed.next_due_in = std::chrono::milliseconds(0);
    pqxx::work tx(c);
    auto rows = exec_named(tx, "relay_due", batch, dispatch_topic);
    if (rows.empty())
      return relayed;
    std::vector<ports::OutMessage> messages;
    std::vector<std::int64_t> ids;
    std::vector<std::string> topics;
    for (const auto& row : rows) {
      ports::OutMessage m{
          row[1].as<std::string>(), row[2].as<std::string>(), row[3].as<std::string>(), {}};
      if (const auto tp = row[4].as<std::string>(); !tp.empty())
        m.headers.emplace_back("traceparent", tp);
      add_headers(m, row[5].as<std::string>());
      topics.push_back(m.topic);
      messages.push_back(std::move(m));
      ids.push_back(row[0].as<std::int64_t>());
    }
    const std::vector<Status> results = send(std::move(messages));
    std::vector<std::int64_t> delivered;
    for (std::size_t i = 0; i < results.size() && i < ids.size(); ++i) {
      if (!results[i].ok())
        continue;
      delivered.push_back(ids[i]);
      ++relayed.by_topic[topics[i]];
    }
    relayed.undelivered = static_cast<int>(ids.size() - delivered.size());
    delete_outbox_rows(tx, delivered);
    tx.commit();
    relayed.published = static_cast<int>(delivered.size());
    return relayed;
  });
}

Result<RelayedBatch> OutboxRelay::publish_handed(std::vector<ports::OutboxMessage> handed,
                                                 const Send& send, Clock::time_point now) {
  RelayedBatch relayed;
  if (handed.empty())
    return relayed;
  std::vector<ports::OutMessage> messages;
  messages.reserve(handed.size());
  for (ports::OutboxMessage& m : handed)
    messages.push_back(std::move(m.message));
  std::vector<std::string> topics;
  topics.reserve(messages.size());
  for (const ports::OutMessage& m : messages)
    topics.push_back(m.topic);
  const std::vector<Status> results = send(std::move(messages));
  for (std::size_t i = 0; i < results.size() && i < handed.size(); ++i) {
    if (!results[i].ok())
      continue;
    if (published_.empty())
      gathered_since_ = now;
    published_.push_back(handed[i].outbox_id);
    ++relayed.published;
    ++relayed.by_topic[topics[i]];
  }
  return relayed;
}

OutboxRelay::Clock::time_point OutboxRelay::removal_due() const {
  if (published_.empty())
    return Clock::time_point::max();
  if (published_.size() >= kGatherBound)
    return gathered_since_;
  return gathered_since_ + gather_;
}

Result<int> OutboxRelay::remove_published(Clock::time_point now, bool all) {
  if (published_.empty() || (!all && now < removal_due()))
    return 0;
  std::vector<std::int64_t> ids;
  ids.swap(published_);
  auto deleted = db_.run_blocking([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    delete_outbox_rows(tx, ids);
    return static_cast<int>(ids.size());
  });
  if (!deleted.ok())
    return deleted.error();
  return deleted.value();
}

}  // namespace agentfleet::pg
