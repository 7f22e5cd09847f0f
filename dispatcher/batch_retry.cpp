#include "dispatcher/batch_retry.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <utility>

namespace agentfleet::dispatcher {
namespace {

// The error code and message of an API error body ({"error": {"code", "message"}}).
std::pair<std::string, std::string> error_of(std::string_view body) {
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  std::pair<std::string, std::string> out{"unknown", ""};
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("error") || !doc["error"].IsObject())
    return out;
  const auto& error = doc["error"];
  if (error.HasMember("code") && error["code"].IsString())
    out.first = error["code"].GetString();
  if (error.HasMember("message") && error["message"].IsString())
    out.second = error["message"].GetString();
  return out;
}

}  // namespace

bool BatchRetryTally::add(const std::string& task_id, int status, std::string_view body) {
  if (status == 201) {
    ++retried_;
  } else if (status == 200) {
    ++already_;  // retried under its key before: that retry is the answer
  } else if (status == 429 || status >= 500) {
    // The user's queue is full, or the store is away: every next retry would be refused too.
    stopped_ = error_of(body);
    return false;
  } else {
    ++not_retried_[error_of(body).first];
  }
  last_ = task_id;
  return true;
}

std::string BatchRetryTally::json() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("retried");
  w.Int64(retried_);
  w.Key("already_retried");
  w.Int64(already_);
  w.Key("not_retried");
  w.StartObject();
  for (const auto& [code, n] : not_retried_) {
    w.Key(code.c_str(), static_cast<rapidjson::SizeType>(code.size()));
    w.Int64(n);
  }
  w.EndObject();
  w.Key("stopped");
  if (stopped_) {
    w.StartObject();
    w.Key("code");
    w.String(stopped_->first.c_str(), static_cast<rapidjson::SizeType>(stopped_->first.size()));
    w.Key("message");
    w.String(stopped_->second.c_str(), static_cast<rapidjson::SizeType>(stopped_->second.size()));
    w.EndObject();
  } else {
    w.Null();
  }
  // Stopped, the next request starts after the last task handled (from the first when none
  // was); else at the end there is none.
  w.Key("next_after");
  if (end_ && !stopped_)
    w.Null();
  else
    w.String(last_.c_str(), static_cast<rapidjson::SizeType>(last_.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::dispatcher
