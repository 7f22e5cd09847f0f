#include "dispatcher/task_feed.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <limits>
#include <random>

#include "core/adapters/log.hpp"
#include "core/codec/json_text.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;

namespace {
// A subscriber that stops reading keeps at most this many items.
constexpr std::size_t kMaxBacklog = 1000;
// After an assignment the consumer settles where it reads from (the end, for a group of
// its own) on its next fetches: until this has passed, the feed may miss what is published.
constexpr auto kSettle = std::chrono::seconds(2);

std::string process_group(const std::string& base) {
  std::random_device random;
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", random(), random());
  return base + "-feed-" + suffix;
}

int int_member(const rapidjson::Value& doc, const char* name) {
  auto it = doc.FindMember(name);
  return it != doc.MemberEnd() && it->value.IsInt() ? it->value.GetInt() : 0;
}

std::int64_t int64_member(const rapidjson::Value& doc, const char* name) {
  auto it = doc.FindMember(name);
  return it != doc.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64() : 0;
}
}  // namespace

TaskFeed::Subscription::Subscription(TaskFeed& feed, std::string key, bool by_user)
    : feed_(feed),
      task_id_(std::move(key)),
      by_user_(by_user),
      signal_(feed.io_),
      epoch_(feed.epoch_) {
  // Before the consumer holds its partitions (and has settled on where it reads from),
  // what is published may not be heard.
  missed_ = !feed.settled();
}

TaskFeed::Subscription::~Subscription() {
  auto& map = by_user_ ? feed_.user_subscribers_ : feed_.subscribers_;
  auto [begin, end] = map.equal_range(task_id_);
  for (auto it = begin; it != end; ++it) {
    if (it->second == this) {
      map.erase(it);
      if (!by_user_)
        --feed_.subscriptions_;
      break;
    }
  }
}

bool TaskFeed::Subscription::take_gap() {
  bool gap = missed_ || epoch_ != feed_.epoch_ || !feed_.settled();
  missed_ = false;
  epoch_ = feed_.epoch_;
  return gap;
}

void TaskFeed::Subscription::push(Item item) {
  if (!item.result && seqs_.observe(item.attempt, item.seq))
    missed_ = true;
  if (items_.size() >= kMaxBacklog) {
    items_.pop_front();
    missed_ = true;
  }
  items_.push_back(std::move(item));
  signal_.cancel();
}

asio::awaitable<std::optional<TaskFeed::Item>> TaskFeed::Subscription::next(
    std::chrono::steady_clock::time_point until) {
  while (items_.empty()) {
    // A new gap wakes the waiter too (not a lasting one: the feed without its partitions
    // would wake it at once, again and again).
    if (feed_.stopped_ || std::chrono::steady_clock::now() >= until || missed_ ||
        epoch_ != feed_.epoch_)
      co_return std::nullopt;
    signal_.expires_at(until);
    boost::system::error_code ec;
    co_await signal_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  Item item = std::move(items_.front());
  items_.pop_front();
  co_return item;
}

TaskFeed::TaskFeed(asio::io_context& io, const config::Config& config, ResultObserver on_result)
    : io_(io), config_(config), on_result_(std::move(on_result)) {}

TaskFeed::~TaskFeed() {
  stop();
}

void TaskFeed::start() {
  // A waiter is answered as soon as a fetch brings its result: an idle fetch may wait
  // 100 ms at most (librdkafka's default is 500), unless the configuration says otherwise.
  config::KafkaConfig kafka = config_.kafka;
  kafka.consumer_properties.try_emplace("fetch.wait.max.ms", "100");
  consumer_ = std::make_unique<kafka::Consumer>(
      kafka, process_group(config_.kafka.dispatcher_group),
      std::vector<std::string>{config_.kafka.topics.results, config_.kafka.topics.events},
      [this](kafka::InMessage message) {
        if (subscriptions_ == 0 && message.topic != config_.kafka.topics.results)
          return;  // a progress event nobody here is watching
        asio::post(io_, [this, m = std::move(message)]() mutable { deliver(std::move(m)); });
      },
      [this](bool assigned, const std::vector<std::pair<std::string, int>>&) {
        asio::post(io_, [this, assigned] { rebalanced(assigned); });
      },
      "latest");
  consumer_->start();
}

void TaskFeed::stop() {
  if (stopped_)
    return;
  stopped_ = true;
  if (consumer_)
    consumer_->stop();
  for (auto& [task_id, subscriber] : subscribers_)
    subscriber->signal_.cancel();
  for (auto& [user_id, subscriber] : user_subscribers_)
    subscriber->signal_.cancel();
}

bool TaskFeed::settled() const {
  return assigned_ && std::chrono::steady_clock::now() - assigned_at_ >= kSettle;
}

void TaskFeed::rebalanced(bool assigned) {
  assigned_ = assigned;
  assigned_at_ = std::chrono::steady_clock::now();
  ++epoch_;
  // Waiters look at the row: what was published while the partitions moved may be missed.
  for (auto& [task_id, subscriber] : subscribers_)
    subscriber->signal_.cancel();
  for (auto& [user_id, subscriber] : user_subscribers_)
    subscriber->signal_.cancel();
}

std::unique_ptr<TaskFeed::Subscription> TaskFeed::subscribe_user(const std::string& user_id) {
  std::unique_ptr<Subscription> subscription(new Subscription(*this, user_id, true));
  user_subscribers_.emplace(user_id, subscription.get());
  return subscription;
}

std::unique_ptr<TaskFeed::Subscription> TaskFeed::subscribe(const std::string& task_id) {
  std::unique_ptr<Subscription> subscription(new Subscription(*this, task_id, false));
  subscribers_.emplace(task_id, subscription.get());
  ++subscriptions_;
  return subscription;
}

void TaskFeed::deliver(kafka::InMessage message) {
  if (stopped_)
    return;
  rapidjson::Document doc;
  if (!codec::parse_json(doc, message.value) || !doc.IsObject())
    return;
  auto task = doc.FindMember("task_id");
  if (task == doc.MemberEnd() || !task->value.IsString())
    return;
  const std::string task_id(task->value.GetString(), task->value.GetStringLength());
  Item item;
  item.result = message.topic == config_.kafka.topics.results;
  item.attempt = int_member(doc, "attempt");
  if (item.result) {
    item.event = "result";
    auto user = doc.FindMember("user_id");
    auto usage = doc.FindMember("usage");
    if (user != doc.MemberEnd() && user->value.IsString()) {
      auto [from, to] = user_subscribers_.equal_range(user->value.GetString());
      for (auto it = from; it != to; ++it) {
        Item copy = item;
        copy.task_id = task_id;
        copy.json = message.value;
        it->second->push(std::move(copy));
      }
    }
    if (on_result_ && user != doc.MemberEnd() && user->value.IsString()) {
      std::int64_t tokens = 0;
      if (usage != doc.MemberEnd() && usage->value.IsObject()) {
        // Counts from the topic are not trusted to be sane: negative ones count 0 and the
        // sum saturates instead of overflowing.
        const std::int64_t input =
            std::max<std::int64_t>(0, int64_member(usage->value, "input_tokens"));
        const std::int64_t output =
            std::max<std::int64_t>(0, int64_member(usage->value, "output_tokens"));
        tokens = input > std::numeric_limits<std::int64_t>::max() - output
                     ? std::numeric_limits<std::int64_t>::max()
                     : input + output;
      }
      on_result_(user->value.GetString(), task_id, tokens);
    }
  } else {
    auto event = doc.FindMember("event");
    if (event == doc.MemberEnd() || !event->value.IsString())
      return;
    item.event = event->value.GetString();
    item.seq = int_member(doc, "seq");
    item.step = int_member(doc, "step");
  }
  auto [begin, end] = subscribers_.equal_range(task_id);
  if (begin == end)
    return;
  item.json = std::move(message.value);
  item.task_id = task_id;
  for (auto it = begin; it != end; ++it)
    it->second->push(item);
}

}  // namespace agentfleet::dispatcher
