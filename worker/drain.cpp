#include "worker/drain.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/adapters/log.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

Drain::Drain(Runs& runs, ports::RunStore& store, LeaseKeeper& keeper, const limits::Clock& clock,
             DrainOptions options, std::function<void()> stop_intake)
    : runs_(runs),
      store_(store),
      keeper_(keeper),
      clock_(clock),
      options_(options),
      stop_intake_(std::move(stop_intake)) {}

asio::awaitable<DrainReport> Drain::run() {
  DrainReport report;
  report.running_at_start = runs_.running();
  log::write("info", "worker",
             "draining: " + std::to_string(report.running_at_start) + " tasks in flight");
  if (stop_intake_)
    stop_intake_();
  runs_.drain();
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto until = clock_.now() + options_.grace;
  // Until every run has reached a checkpoint (handed back) or ended, and the store has
  // forgotten the result events the runs published (else the relay sends them again).
  while ((runs_.running() > 0 || store_.settling()) && clock_.now() < until) {
    timer.expires_after(options_.poll);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  auto left = runs_.held();
  report.running_at_grace = left.size();
  if (!left.empty())
    runs_.fence();  // their late writes would be fenced anyway; they stop calling now
  report.handed_back = co_await keeper_.finish(std::move(left));
  if (report.running_at_grace > 0) {
    log::write("warn", "worker",
               "grace period over: handed back " + std::to_string(report.handed_back) + " of " +
                   std::to_string(report.running_at_grace) + " running tasks");
  }
  co_return report;
}

}  // namespace agentfleet::worker
