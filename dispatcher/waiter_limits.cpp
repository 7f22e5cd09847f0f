#include "dispatcher/waiter_limits.hpp"

namespace agentfleet::dispatcher {

WaiterLimits::WaiterLimits(WaiterCaps streams, WaiterCaps long_polls, WaiterCaps uploads) {
  of(Waiter::kEventStream).caps = streams;
  of(Waiter::kLongPoll).caps = long_polls;
  of(Waiter::kUpload).caps = WaiterCaps{0, uploads.per_replica};
  of(Waiter::kCallerUpload).caps = WaiterCaps{uploads.per_caller, 0};
}

std::string upload_caller(const std::string& key_name, bool any_user, const std::string& user_id) {
  if (!any_user)
    return key_name;
  if (user_id.empty())
    return {};
  return key_name + "/" + user_id;
}

WaiterLimits::Ticket::Ticket(WaiterLimits* limits, Waiter kind, std::string caller)
    : limits_(limits), kind_(kind), caller_(std::move(caller)) {}

WaiterLimits::Ticket::Ticket(Ticket&& other) noexcept
    : limits_(std::exchange(other.limits_, nullptr)),
      kind_(other.kind_),
      caller_(std::move(other.caller_)) {}

WaiterLimits::Ticket& WaiterLimits::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    limits_ = std::exchange(other.limits_, nullptr);
    kind_ = other.kind_;
    caller_ = std::move(other.caller_);
  }
  return *this;
}

WaiterLimits::Ticket::~Ticket() {
  release();
}

void WaiterLimits::Ticket::release() {
  if (limits_)
    std::exchange(limits_, nullptr)->give_back(kind_, caller_);
}

std::variant<WaiterLimits::Ticket, WaiterLimits::Refusal> WaiterLimits::acquire(
    Waiter kind, const std::string& caller) {
  std::lock_guard lock(mutex_);
  Kind& k = of(kind);
  if (k.caps.per_replica > 0 && k.total >= k.caps.per_replica)
    return Refusal::kReplica;
  auto it = k.by_caller.find(caller);
  const std::size_t mine = it == k.by_caller.end() ? 0 : it->second;
  if (k.caps.per_caller > 0 && mine >= k.caps.per_caller)
    return Refusal::kCaller;
  ++k.total;
  ++k.by_caller[caller];
  return Ticket(this, kind, caller);
}

void WaiterLimits::give_back(Waiter kind, const std::string& caller) {
  std::lock_guard lock(mutex_);
  Kind& k = of(kind);
  --k.total;
  auto it = k.by_caller.find(caller);
  if (it != k.by_caller.end() && --it->second == 0)
    k.by_caller.erase(it);
}

std::size_t WaiterLimits::held(Waiter kind) const {
  std::lock_guard lock(mutex_);
  return of(kind).total;
}

std::size_t WaiterLimits::held(Waiter kind, const std::string& caller) const {
  std::lock_guard lock(mutex_);
  const Kind& k = of(kind);
  auto it = k.by_caller.find(caller);
  return it == k.by_caller.end() ? 0 : it->second;
}

}  // namespace agentfleet::dispatcher
