#include "tools/dev_broker/fault_effects.hpp"

#include <algorithm>
#include <charconv>

namespace agentfleet::dev_broker {

namespace {
// "Broker N: " at the start of a line: N, and the rest.
std::optional<std::pair<int, std::string_view>> broker_prefix(std::string_view line) {
  constexpr std::string_view kBroker = "Broker ";
  const auto at = line.find(kBroker);
  if (at == std::string_view::npos)
    return std::nullopt;
  line.remove_prefix(at + kBroker.size());
  int broker = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), broker);
  if (ec != std::errc() || end == line.data())
    return std::nullopt;
  line.remove_prefix(static_cast<std::size_t>(end - line.data()));
  if (line.substr(0, 2) != ": ")
    return std::nullopt;
  return std::pair{broker, line.substr(2)};
}

void json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string_view kind_name(int kind) {
  static constexpr std::string_view kNames[] = {"request-errors", "broker-down", "rtt", "leader"};
  return kNames[kind];
}
}  // namespace

std::optional<MockRequest> parse_mock_request(std::string_view line) {
  auto prefix = broker_prefix(line);
  constexpr std::string_view kReceived = "Received ";
  if (!prefix || prefix->second.substr(0, kReceived.size()) != kReceived)
    return std::nullopt;
  std::string_view name = prefix->second.substr(kReceived.size());
  const auto request = name.find("Request");
  if (request == std::string_view::npos || request == 0)
    return std::nullopt;
  return MockRequest{prefix->first, std::string(name.substr(0, request))};
}

std::optional<MockClosed> parse_mock_closed(std::string_view line) {
  auto prefix = broker_prefix(line);
  constexpr std::string_view kConnection = "Connection from ";
  constexpr std::string_view kClosed = " closed: ";
  if (!prefix || prefix->second.substr(0, kConnection.size()) != kConnection)
    return std::nullopt;
  const auto closed = prefix->second.find(kClosed);
  if (closed == std::string_view::npos)
    return std::nullopt;
  return MockClosed{prefix->first, std::string(prefix->second.substr(closed + kClosed.size()))};
}

FaultEffects::Fault& FaultEffects::add(Fault fault) {
  fault.id = next_id_++;
  if (faults_.size() >= kMaxKept)
    faults_.erase(faults_.begin());
  faults_.push_back(std::move(fault));
  return faults_.back();
}

FaultEffects::Fault* FaultEffects::find(int id) {
  auto it = std::lower_bound(faults_.begin(), faults_.end(), id,
                             [](const Fault& f, int wanted) { return f.id < wanted; });
  return it != faults_.end() && it->id == id ? &*it : nullptr;
}

int FaultEffects::add_request_errors(std::string api, std::string error, int count) {
  std::lock_guard lock(mutex_);
  Fault fault;
  fault.kind = Kind::kRequestErrors;
  fault.what = api + " " + error + " " + std::to_string(count);
  fault.api = std::move(api);
  fault.left = count;
  fault.active = count > 0;
  return add(std::move(fault)).id;
}

int FaultEffects::add_broker_down(int broker) {
  std::lock_guard lock(mutex_);
  Fault fault;
  fault.kind = Kind::kBrokerDown;
  fault.what = "broker " + std::to_string(broker);
  fault.broker = broker;
  return add(std::move(fault)).id;
}

int FaultEffects::add_rtt(int broker, int ms) {
  std::lock_guard lock(mutex_);
  Fault fault;
  fault.kind = Kind::kRtt;
  fault.what = "broker " + std::to_string(broker) + " " + std::to_string(ms) + " ms";
  fault.broker = broker;
  return add(std::move(fault)).id;
}

int FaultEffects::add_leader_move(std::string topic, int partition, int broker) {
  std::lock_guard lock(mutex_);
  Fault fault;
  fault.kind = Kind::kLeaderMove;
  fault.what = topic + " [" + std::to_string(partition) + "] to broker " + std::to_string(broker);
  fault.broker = broker;
  return add(std::move(fault)).id;
}

void FaultEffects::end(int id) {
  std::lock_guard lock(mutex_);
  if (Fault* fault = find(id))
    fault->active = false;
}

void FaultEffects::clear(std::string_view api) {
  std::lock_guard lock(mutex_);
  for (Fault& fault : faults_) {
    if (fault.kind == Kind::kRequestErrors && fault.api == api && fault.active) {
      fault.left = 0;
      fault.active = false;
    }
  }
}

void FaultEffects::on_request(const MockRequest& request) {
  std::lock_guard lock(mutex_);
  bool popped = false;
  for (Fault& fault : faults_) {
    if (!fault.active)
      continue;
    switch (fault.kind) {
      case Kind::kRequestErrors:
        // The oldest fault of the API with errors left answers it; the others saw it go by.
        if (fault.api != request.api)
          break;
        ++fault.seen;
        if (!popped) {
          popped = true;
          ++fault.served;
          if (--fault.left <= 0)
            fault.active = false;
        }
        break;
      case Kind::kRtt:
        // A slow broker answers every request late.
        if (fault.broker == request.broker) {
          ++fault.seen;
          ++fault.served;
        }
        break;
      case Kind::kLeaderMove:
        // The new leader is written to and read from (its partitions' traffic).
        if (fault.broker == request.broker) {
          ++fault.seen;
          if (request.api == "Produce" || request.api == "Fetch")
            ++fault.served;
        }
        break;
      case Kind::kBrokerDown:
        break;
    }
  }
}

void FaultEffects::on_closed(const MockClosed& closed) {
  if (closed.reason != "Broker down")
    return;
  std::lock_guard lock(mutex_);
  for (Fault& fault : faults_) {
    if (fault.active && fault.kind == Kind::kBrokerDown && fault.broker == closed.broker) {
      ++fault.seen;
      ++fault.served;
    }
  }
}

void FaultEffects::on_log_line(std::string_view line) {
  if (auto request = parse_mock_request(line))
    on_request(*request);
  else if (auto closed = parse_mock_closed(line))
    on_closed(*closed);
}

std::string FaultEffects::listing_json() const {
  std::lock_guard lock(mutex_);
  std::string out = "{\"faults\":[";
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    out += i ? ",{" : "{";
    out += "\"id\":" + std::to_string(f.id) + ",\"kind\":";
    json_string(out, kind_name(static_cast<int>(f.kind)));
    out += ",\"what\":";
    json_string(out, f.what);
    out += ",\"active\":";
    out += f.active ? "true" : "false";
    out += ",\"seen\":" + std::to_string(f.seen) + ",\"served\":" + std::to_string(f.served) + "}";
  }
  out += "]}";
  return out;
}

}  // namespace agentfleet::dev_broker
