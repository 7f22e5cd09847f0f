#include "core/adapters/otlp/span_exporter.hpp"

#include <algorithm>

#include "core/adapters/log.hpp"

namespace agentfleet::otlp {

namespace {
// At most one warning per this long about failing exports (the counters say the rest).
constexpr std::chrono::seconds kWarnEvery{30};
}  // namespace

SpanExporter::SpanExporter(TraceSource& source, SpanSink& sink, SpanExporterOptions options,
                           Pause pause)
    : source_(source), sink_(sink), options_(std::move(options)), pause_(std::move(pause)) {
  if (!pause_)
    pause_ = [this](std::chrono::milliseconds d) { return wait(d); };
}

SpanExporter::~SpanExporter() {
  stop(std::chrono::milliseconds(0));
}

bool SpanExporter::offer(std::string task_id, std::string traceparent) {
  offered_.fetch_add(1, std::memory_order_relaxed);
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= options_.queue_tasks) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(Item{std::move(task_id), std::move(traceparent)});
    // A batch's worth waiting: no reason to sit out the flush interval.
    wake = queue_.size() == 1 || queue_.size() % 64 == 0;
  }
  if (wake)
    wake_.notify_one();
  return true;
}

void SpanExporter::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable() || stopping_)
    return;
  thread_ = std::thread([this] { run(); });
}

void SpanExporter::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      stop_by_ = std::chrono::steady_clock::now() + grace;
    }
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id())
    thread_.join();
  std::lock_guard lock(mutex_);
  dropped_.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
}

bool SpanExporter::wait(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  const auto until = std::chrono::steady_clock::now() + d;
  // Once stopping, a pause that would outlast the grace is not taken.
  const auto cut = [&] { return stopping_ && until > stop_by_; };
  wake_.wait_until(lock, until, cut);
  return !cut();
}

void SpanExporter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (!stopping_) {
      // Let a batch gather: until the interval passes or enough tasks wait.
      wake_.wait_for(lock, options_.flush_interval,
                     [&] { return stopping_ || queue_.size() >= 64; });
    }
    if (queue_.empty() || (stopping_ && std::chrono::steady_clock::now() >= stop_by_))
      break;
    lock.unlock();
    try {
      export_queued();
    } catch (const std::exception& e) {
      // The thread goes on: one task or request that failed this way costs only itself.
      log::warn("otlp", std::string("exporting traces failed: ") + e.what());
    }
    lock.lock();
    if (stopping_ && (queue_.empty() || std::chrono::steady_clock::now() >= stop_by_))
      break;
  }
}

void SpanExporter::export_queued() {
  std::vector<codec::Span> pending;
  for (;;) {
    Item item;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty())
        break;
      if (stopping_ && std::chrono::steady_clock::now() >= stop_by_)
        break;  // stop() counts what is left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    auto trace = source_.read(item.task_id);
    if (!trace.ok() || !trace.value()) {
      unreadable_.fetch_add(1, std::memory_order_relaxed);
      if (!trace.ok()) {
        log::warn("otlp", "could not read the trace of task " + item.task_id + ": " +
                              trace.error().message);
      }
      continue;
    }
    auto spans = codec::task_spans(trace.value()->task_json, item.traceparent, trace.value()->costs,
                                   options_.spans);
    if (!spans.ok()) {
      unreadable_.fetch_add(1, std::memory_order_relaxed);
      log::warn("otlp", "no spans for task " + item.task_id + ": " + spans.error().message);
      continue;
    }
    auto& more = spans.value();
    if (!pending.empty() && pending.size() + more.size() > options_.batch_spans) {
      send(pending);
      pending.clear();
    }
    pending.insert(pending.end(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));
  }
  if (!pending.empty())
    send(pending);
}

void SpanExporter::send(const std::vector<codec::Span>& spans) {
  const std::string body = codec::otlp_trace_request(spans, options_.resource, options_.version);
  std::chrono::milliseconds backoff = options_.backoff;
  const int attempts = std::max(1, options_.max_attempts);
  SendOutcome outcome;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    outcome = sink_.send(body, request_deadline());
    if (outcome.ok) {
      requests_ok_.fetch_add(1, std::memory_order_relaxed);
      exported_.fetch_add(spans.size(), std::memory_order_relaxed);
      return;
    }
    requests_failed_.fetch_add(1, std::memory_order_relaxed);
    if (!outcome.retryable || attempt == attempts)
      break;
    std::chrono::milliseconds pause = backoff;
    if (outcome.retry_after)
      pause = std::max(pause, *outcome.retry_after);
    pause = std::min(pause, options_.max_backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
    if (!pause_(pause))
      break;
  }
  spans_dropped_.fetch_add(spans.size(), std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (warned_at_ == std::chrono::steady_clock::time_point{} || now - warned_at_ >= kWarnEvery) {
    warned_at_ = now;
    log::warn("otlp", "dropped " + std::to_string(spans.size()) +
                          " spans the collector did not take: " + outcome.message);
  }
}

std::chrono::steady_clock::time_point SpanExporter::request_deadline() const {
  auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  std::lock_guard lock(mutex_);
  // Stopping: no request outlasts the grace stop() was given.
  if (stopping_)
    deadline = std::min(deadline, stop_by_);
  return deadline;
}

SpanExporterStats SpanExporter::stats() const {
  SpanExporterStats s;
  s.tasks_offered = offered_.load(std::memory_order_relaxed);
  s.tasks_dropped = dropped_.load(std::memory_order_relaxed);
  s.tasks_unreadable = unreadable_.load(std::memory_order_relaxed);
  s.spans_exported = exported_.load(std::memory_order_relaxed);
  s.spans_dropped = spans_dropped_.load(std::memory_order_relaxed);
  s.requests_ok = requests_ok_.load(std::memory_order_relaxed);
  s.requests_failed = requests_failed_.load(std::memory_order_relaxed);
  return s;
}

std::size_t SpanExporter::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

}  // namespace agentfleet::otlp
