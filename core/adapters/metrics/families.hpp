#pragma once
// Internal to core/adapters/metrics (included by its .cpp files only): builders for the
// families and the guard that keeps label values to a known set.

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::metrics::detail {

inline prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& registry,
                                                        const std::string& name,
                                                        const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

inline prometheus::Family<prometheus::Gauge>& gauge(prometheus::Registry& registry,
                                                    const std::string& name,
                                                    const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

inline prometheus::Family<prometheus::Histogram>& histogram(prometheus::Registry& registry,
                                                            const std::string& name,
                                                            const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

// The label value `other` stands for every value outside the known set.
inline constexpr std::string_view kOther = "other";

// A label whose values come from configuration (models, tools, topics): anything else
// (a tool name the model invented, say) is counted as `other`, so no input can create
// new series.
class KnownValues {
 public:
  KnownValues() = default;
  explicit KnownValues(const std::vector<std::string>& values)
      : values_(values.begin(), values.end()) {}
  void add(std::string value) { values_.insert(std::move(value)); }
  std::string operator()(std::string_view value) const {
    auto it = values_.find(std::string(value));
    return it == values_.end() ? std::string(kOther) : *it;
  }
  const std::set<std::string>& values() const { return values_; }

 private:
  std::set<std::string> values_;
};

}  // namespace agentfleet::metrics::detail
