#include "tools/agentctl/batch_progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/codec/json_text.hpp"
#include "tools/agentctl/json_fields.hpp"

namespace agentfleet::agentctl {

std::optional<BatchCounts> parse_batch_counts(std::string_view text) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, text) || !doc.IsObject() || !doc.HasMember("counts"))
    return std::nullopt;
  BatchCounts c;
  c.batch_id = json::str(doc, "batch_id");
  c.total = json::num(doc, "total", 0);
  c.ended = json::num(doc, "ended", 0);
  c.batch_cancelled = json::flag(doc, "cancelled");
  const auto& counts = json::at(doc, "counts");
  c.queued = json::num(counts, "queued", 0);
  c.dispatched = json::num(counts, "dispatched", 0);
  c.running = json::num(counts, "running", 0);
  c.succeeded = json::num(counts, "succeeded", 0);
  c.failed = json::num(counts, "failed", 0);
  c.timed_out = json::num(counts, "timed_out", 0);
  c.cancelled = json::num(counts, "cancelled", 0);
  const auto& types = json::at(doc, "result_types");
  c.action_completed = json::num(types, "action_completed", 0);
  c.need_clarification = json::num(types, "need_clarification", 0);
  c.error_results = json::num(types, "error", 0);
  c.waiting_reason = json::str(doc, "waiting_reason");
  return c;
}

void ProgressMeter::add(Clock::time_point at, std::int64_t ended) {
  samples_.emplace_back(at, ended);
  // Keep one sample at or before the window's start, so the rate spans the whole window.
  while (samples_.size() > 2 && samples_[1].first <= at - window_)
    samples_.pop_front();
}

std::optional<double> ProgressMeter::rate() const {
  if (samples_.size() < 2)
    return std::nullopt;
  const double span =
      std::chrono::duration<double>(samples_.back().first - samples_.front().first).count();
  if (span <= 0)
    return std::nullopt;
  return std::max<double>(0,
                          static_cast<double>(samples_.back().second - samples_.front().second)) /
         span;
}

std::optional<double> ProgressMeter::eta_s(std::int64_t remaining) const {
  if (remaining <= 0)
    return 0.0;
  const auto r = rate();
  if (!r || *r <= 0)
    return std::nullopt;
  return static_cast<double>(remaining) / *r;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  char buffer[32];
  if (s < 60) {
    std::snprintf(buffer, sizeof buffer, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buffer;
}

std::string progress_bar(std::int64_t done, std::int64_t total, int width) {
  const std::int64_t filled =
      total <= 0 ? width : std::clamp<std::int64_t>(done * width / total, 0, width);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

namespace {
// A limit that throttles the user's rate: the rate measured over the last minute does not
// foretell what is left, so no ETA is shown then.
bool throttling(const std::string& reason) {
  return reason == "requests_per_minute" || reason == "tokens_per_minute" || reason == "budget";
}
}  // namespace

std::string format_progress_line(const BatchCounts& c, std::optional<double> rate,
                                 std::optional<double> eta_s) {
  const bool held = c.queued > 0 && throttling(c.waiting_reason);
  const std::int64_t percent = c.total > 0 ? c.ended * 100 / c.total : 100;
  char rate_text[32] = "-";
  if (rate)
    std::snprintf(rate_text, sizeof rate_text, "%.1f/s", *rate);
  return progress_bar(c.ended, c.total, 20) + " " + std::to_string(percent) + "%  accepted " +
         std::to_string(c.total) + "  queued " + std::to_string(c.queued) +
         (c.queued > 0 && !c.waiting_reason.empty() ? " (" + c.waiting_reason + ")" : "") +
         "  running " + std::to_string(c.dispatched + c.running) + "  done " +
         std::to_string(c.succeeded) + "  failed " + std::to_string(c.unsuccessful()) + "  " +
         rate_text + "  ETA " +
         (held    ? "- (held by " + c.waiting_reason + ")"
          : eta_s ? format_duration(*eta_s)
                  : std::string("-"));
}

std::string format_batch_summary(const BatchCounts& c, double elapsed_s) {
  return "batch " + c.batch_id + (c.batch_cancelled ? " cancelled: " : " ended: ") +
         std::to_string(c.ended) + " of " + std::to_string(c.total) + " tasks in " +
         format_duration(elapsed_s) + ": succeeded " + std::to_string(c.succeeded) + ", failed " +
         std::to_string(c.failed) + ", timed_out " + std::to_string(c.timed_out) + ", cancelled " +
         std::to_string(c.cancelled) + "; results: action_completed " +
         std::to_string(c.action_completed) + ", need_clarification " +
         std::to_string(c.need_clarification) + ", error " + std::to_string(c.error_results);
}

}  // namespace agentfleet::agentctl
