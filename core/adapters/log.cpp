#include "core/adapters/log.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdio>

#include "core/codec/task_codec.hpp"

namespace agentfleet::log {

void write(std::string_view level, std::string_view component, std::string_view message,
           std::initializer_list<Field> fields) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  auto put = [&](std::string_view key, std::string_view value) {
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
  };
  w.StartObject();
  put("ts", codec::format_rfc3339(std::chrono::system_clock::now()));
  put("level", level);
  put("component", component);
  for (const auto& [key, value] : fields)
    put(key, value);
  put("msg", message);
  w.EndObject();
  std::string line(buffer.GetString(), buffer.GetSize());
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace agentfleet::log
