#pragma once
// A RunStore that times every round trip of the store it wraps (from the call to the answer
// on the caller's thread, queueing included) and hands each to `observe`: what the adaptive
// in-flight limit (limits/concurrency_limit) judges the database by. Everything else passes
// through unchanged.
//
// Thread-safety: as the wrapped store's (the io thread).

#include <functional>
#include <utility>

#include "core/limits/clock.hpp"
#include "core/ports/run_store.hpp"

namespace agentfleet::worker {

class MeasuredRunStore final : public ports::RunStore {
 public:
  // `ok` is false for a store error (not for a lost fence: that is an answer).
  using Observer = std::function<void(std::chrono::microseconds round_trip, bool ok)>;

  MeasuredRunStore(ports::RunStore& inner, const limits::Clock& clock, Observer observe)
      : inner_(inner), clock_(clock), observe_(std::move(observe)) {}

  boost::asio::awaitable<Result<ports::Claim>> claim(
      std::string task_id, std::shared_ptr<const ports::FirstCallEstimates> first_calls) override {
    const auto started = clock_.now();
    auto result = co_await inner_.claim(std::move(task_id), std::move(first_calls));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> save_model_step(ports::ModelStep step) override {
    const auto started = clock_.now();
    auto result = co_await inner_.save_model_step(std::move(step));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> save_tool_results(ports::ToolResults results) override {
    const auto started = clock_.now();
    auto result = co_await inner_.save_tool_results(std::move(results));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> save_tool_step(ports::ToolStep step) override {
    const auto started = clock_.now();
    auto result = co_await inner_.save_tool_step(std::move(step));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> record_charges(ports::Charges charges) override {
    const auto started = clock_.now();
    auto result = co_await inner_.record_charges(std::move(charges));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> record_call(ports::CallSent call) override {
    const auto started = clock_.now();
    auto result = co_await inner_.record_call(std::move(call));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Result<std::int64_t>>> finish(ports::TaskEnd end) override {
    const auto started = clock_.now();
    auto result = co_await inner_.finish(std::move(end));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<Status>> release(std::string task_id, int attempt,
                                                 std::int64_t incarnation) override {
    const auto started = clock_.now();
    auto result = co_await inner_.release(std::move(task_id), attempt, incarnation);
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<std::optional<ports::ParentTask>>> load_parent(
      std::string parent_id, std::string user_id) override {
    const auto started = clock_.now();
    auto result = co_await inner_.load_parent(std::move(parent_id), std::move(user_id));
    observe(started, result.ok());
    co_return result;
  }
  boost::asio::awaitable<Result<billing::SpendByCurrency>> month_spend(
      std::string user_id, std::string time_zone) override {
    const auto started = clock_.now();
    auto result = co_await inner_.month_spend(std::move(user_id), std::move(time_zone));
    observe(started, result.ok());
    co_return result;
  }
  void announced(std::int64_t id) override { inner_.announced(id); }
  bool settling() const override { return inner_.settling(); }

 private:
  void observe(limits::Clock::time_point started, bool ok) {
    if (observe_)
      observe_(std::chrono::duration_cast<std::chrono::microseconds>(clock_.now() - started), ok);
  }

  ports::RunStore& inner_;
  const limits::Clock& clock_;
  Observer observe_;
};

}  // namespace agentfleet::worker
