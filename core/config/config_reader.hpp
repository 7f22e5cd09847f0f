#pragma once
// The configuration reader's own parts (core/config/config.cpp and config_fields.cpp): the
// problems it reports, its view of one object of the validated document, and the
// declarative tables (config_fields.hpp), one per object the schema describes, each naming
// the properties read into a struct's members. Not for use outside core/config.
#include <rapidjson/document.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/codec/json_schema.hpp"
#include "core/config/config.hpp"

namespace agentfleet::config::detail {

using rapidjson::SizeType;
using rapidjson::Value;

// A problem found while converting or reading the document: a JSON pointer and what is
// wrong there. load_config_text adds the source name and the YAML line: `line` when the
// problem knows it more exactly than the node at `path` does, else the node's.
struct Problem : std::runtime_error {
  Problem(std::string where, const std::string& what, int at_line = 0)
      : std::runtime_error(what), path(std::move(where)), line(at_line) {}
  std::string path;
  int line;
};

// A view of one JSON object of the document with its path; absent members keep the
// defaults. The schema has already checked the types; a mismatch here means the schema and
// this code disagree, which is reported like any other problem.
class Section {
 public:
  Section(const Value* value, std::string where) : value_(value), path_(std::move(where)) {}

  const std::string& path() const { return path_; }
  std::string path(std::string_view key) const {
    return path_ + "/" + codec::json_pointer_token(key);
  }

  const Value* get(const char* key) const {
    if (value_ == nullptr || !value_->IsObject()) {
      return nullptr;
    }
    auto it = value_->FindMember(key);
    if (it == value_->MemberEnd() || it->value.IsNull()) {
      return nullptr;
    }
    return &it->value;
  }

  Section child(const char* key) const { return Section(get(key), path(key)); }

  void read(const char* key, std::string& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsString()) {
        throw Problem(path(key), "expected string");
      }
      out.assign(v->GetString(), v->GetStringLength());
    }
  }

  void read(const char* key, int& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsInt()) {
        throw Problem(path(key), "expected an integer that fits in 32 bits");
      }
      out = v->GetInt();
    }
  }

  void read(const char* key, std::int64_t& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsInt64()) {
        throw Problem(path(key), "expected integer");
      }
      out = v->GetInt64();
    }
  }

  void read(const char* key, double& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsNumber()) {
        throw Problem(path(key), "expected number");
      }
      out = v->GetDouble();
    }
  }

  void read(const char* key, bool& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsBool()) {
        throw Problem(path(key), "expected boolean");
      }
      out = v->GetBool();
    }
  }

  void read(const char* key, std::vector<std::string>& out) const {
    if (const Value* v = get(key)) {
      if (!v->IsArray()) {
        throw Problem(path(key), "expected array");
      }
      out.clear();
      for (SizeType i = 0; i < v->Size(); ++i) {
        if (!(*v)[i].IsString()) {
          throw Problem(path(key) + "/" + std::to_string(i), "expected string");
        }
        out.emplace_back((*v)[i].GetString(), (*v)[i].GetStringLength());
      }
    }
  }

  // Calls `fn(Section item)` for every element of the array `key`.
  template <typename Fn>
  void each(const char* key, Fn&& fn) const {
    const Value* v = get(key);
    if (v == nullptr) {
      return;
    }
    if (!v->IsArray()) {
      throw Problem(path(key), "expected array");
    }
    for (SizeType i = 0; i < v->Size(); ++i) {
      fn(Section(&(*v)[i], path(key) + "/" + std::to_string(i)));
    }
  }

 private:
  const Value* value_;
  std::string path_;
};

// One property of an object: its name ("child/name" for a property of a nested object that
// the struct keeps flat) and the member it fills; its JSON type is the member's.
template <typename S>
struct Field {
  const char* name;
  std::variant<std::string S::*, int S::*, std::int64_t S::*, double S::*, bool S::*,
               std::vector<std::string> S::*>
      member;
};
template <typename S>
using Fields = std::vector<Field<S>>;

// Reads each property of `fields` that `s` has into its member; one left out keeps the
// member's default.
template <typename S>
void read_fields(const Section& s, S& out, const Fields<S>& fields) {
  for (const Field<S>& field : fields) {
    const std::string_view name(field.name);
    const auto slash = name.find('/');
    const Section at =
        slash == std::string_view::npos ? s : s.child(std::string(name.substr(0, slash)).c_str());
    const std::string key(slash == std::string_view::npos ? name : name.substr(slash + 1));
    std::visit([&](auto member) { at.read(key.c_str(), out.*member); }, field.member);
  }
}

// The tables (config_fields.cpp).
extern const Fields<PostgresConfig> kPostgresFields;
extern const Fields<KafkaConfig> kKafkaFields;
extern const Fields<KafkaTopics> kTopicFields;
extern const Fields<HttpListen> kHttpFields;
extern const Fields<DispatcherConfig> kDispatcherFields;
extern const Fields<AuthConfig> kAuthFields;
extern const Fields<ApiKey> kApiKeyFields;
extern const Fields<ApiKey> kGatewayKeyFields;
extern const Fields<WorkerConfig> kWorkerFields;
extern const Fields<TaskDefaults> kTaskDefaultFields;
extern const Fields<ModelConfig> kModelFields;
extern const Fields<ModelEndpoint> kEndpointFields;
extern const Fields<ModelRetryConfig> kRetryFields;
extern const Fields<CircuitBreakerConfig> kBreakerFields;
extern const Fields<ToolConfig> kToolFields;
extern const Fields<BillingConfig> kBillingFields;
extern const Fields<PriceConfig> kPriceFields;
extern const Fields<PriceWindow> kWindowFields;
extern const Fields<ReactConfig> kReactFields;
extern const Fields<ResultMarkers> kMarkerFields;
extern const Fields<PlanExecuteConfig> kPlanExecuteFields;
extern const Fields<UserTierLimits> kTierFields;
extern const Fields<UserLimits> kTierLimitFields;
extern const Fields<MetricsConfig> kMetricsFields;
extern const Fields<TelemetryConfig> kTelemetryFields;
extern const Fields<OtlpConfig> kOtlpFields;

}  // namespace agentfleet::config::detail
