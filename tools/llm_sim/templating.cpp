#include "tools/llm_sim/templating.hpp"

#include <charconv>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::llm_sim {

namespace {

bool is_path_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return text;
}

std::optional<std::size_t> parse_index(std::string_view segment) {
  if (segment.empty()) {
    return std::nullopt;
  }
  std::size_t index = 0;
  const auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
  if (ec != std::errc() || end != segment.data() + segment.size()) {
    return std::nullopt;
  }
  return index;
}

std::string compact_json(const rapidjson::Value& value) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  value.Accept(writer);
  return std::string(out.GetString(), out.GetSize());
}

std::string text_of(const rapidjson::Value* value) {
  if (value == nullptr || value->IsNull()) {
    return {};
  }
  if (value->IsString()) {
    return std::string(value->GetString(), value->GetStringLength());
  }
  return compact_json(*value);
}

// "2025-02-08" -> "2月8日"; anything else unchanged.
std::string month_day(const std::string& text) {
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') {
    return text;
  }
  const auto month = parse_index(std::string_view(text).substr(5, 2));
  const auto day = parse_index(std::string_view(text).substr(8, 2));
  if (!month || !day || *month < 1 || *month > 12 || *day < 1 || *day > 31) {
    return text;
  }
  return std::to_string(*month) + "月" + std::to_string(*day) + "日";
}

}  // namespace

bool is_valid_path(std::string_view path) {
  if (path.empty() || path.front() == '.' || path.back() == '.') {
    return false;
  }
  char previous = '\0';
  for (char c : path) {
    if (c == '.') {
      if (previous == '.') {
        return false;
      }
    } else if (!is_path_char(c)) {
      return false;
    }
    previous = c;
  }
  return true;
}

const rapidjson::Value* resolve_path(const rapidjson::Value& root, std::string_view path) {
  const rapidjson::Value* current = &root;
  while (!path.empty()) {
    const auto dot = path.find('.');
    const std::string_view segment = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (current->IsObject()) {
      const auto member = current->FindMember(
          rapidjson::Value(rapidjson::StringRef(segment.data(), segment.size())));
      if (member == current->MemberEnd()) {
        return nullptr;
      }
      current = &member->value;
    } else if (current->IsArray()) {
      const auto index = parse_index(segment);
      if (!index || *index >= current->Size()) {
        return nullptr;
      }
      current = &(*current)[static_cast<rapidjson::SizeType>(*index)];
    } else {
      return nullptr;
    }
  }
  return current;
}

const rapidjson::Value* Scope::lookup(std::string_view path) const {
  if (primary != nullptr) {
    if (const auto* found = resolve_path(*primary, path)) {
      return found;
    }
  }
  if (fallback != nullptr) {
    return resolve_path(*fallback, path);
  }
  return nullptr;
}

std::int64_t count_of(const rapidjson::Value* value) {
  if (value == nullptr) {
    return 0;
  }
  if (value->IsArray()) {
    return value->Size();
  }
  if (value->IsObject()) {
    return value->MemberCount();
  }
  return 0;
}

Template Template::parse(std::string_view text) {
  Template result;
  result.source_ = std::string(text);
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto open = rest.find("{{");
    if (open == std::string_view::npos) {
      result.parts_.push_back(Part{true, std::string(rest), Helper::kNone});
      break;
    }
    if (open > 0) {
      result.parts_.push_back(Part{true, std::string(rest.substr(0, open)), Helper::kNone});
    }
    const auto close = rest.find("}}", open + 2);
    if (close == std::string_view::npos) {
      throw TemplateError("unclosed '{{' in template \"" + std::string(text) + "\"");
    }
    std::string_view expression = trim(rest.substr(open + 2, close - open - 2));
    Part part{false, {}, Helper::kNone};
    const auto space = expression.find_first_of(" \t");
    if (space != std::string_view::npos) {
      const std::string_view helper = expression.substr(0, space);
      if (helper == "count") {
        part.helper = Helper::kCount;
      } else if (helper == "month_day") {
        part.helper = Helper::kMonthDay;
      } else {
        throw TemplateError("unknown helper '" + std::string(helper) +
                            "' (known: count, month_day) in template \"" + std::string(text) +
                            "\"");
      }
      expression = trim(expression.substr(space));
    }
    if (!is_valid_path(expression)) {
      throw TemplateError("malformed placeholder '{{" +
                          std::string(rest.substr(open + 2, close - open - 2)) +
                          "}}': expected a dotted path such as r.items.0.id");
    }
    part.text = std::string(expression);
    result.parts_.push_back(std::move(part));
    rest = rest.substr(close + 2);
  }
  return result;
}

std::string Template::render(const Scope& scope) const {
  std::string out;
  for (const auto& part : parts_) {
    if (part.literal) {
      out += part.text;
      continue;
    }
    const rapidjson::Value* value = scope.lookup(part.text);
    switch (part.helper) {
      case Helper::kNone:
        out += text_of(value);
        break;
      case Helper::kCount:
        out += std::to_string(count_of(value));
        break;
      case Helper::kMonthDay:
        out += month_day(text_of(value));
        break;
    }
  }
  return out;
}

rapidjson::Value Template::render_value(const Scope& scope,
                                        rapidjson::Document::AllocatorType& allocator) const {
  if (parts_.size() == 1 && !parts_.front().literal) {
    const Part& part = parts_.front();
    const rapidjson::Value* value = scope.lookup(part.text);
    if (part.helper == Helper::kCount) {
      return rapidjson::Value(count_of(value));
    }
    if (part.helper == Helper::kNone) {
      if (value == nullptr) {
        return rapidjson::Value(rapidjson::kNullType);
      }
      return rapidjson::Value(*value, allocator);
    }
  }
  const std::string text = render(scope);
  return rapidjson::Value(text.c_str(), static_cast<rapidjson::SizeType>(text.size()), allocator);
}

std::vector<std::string> Template::paths() const {
  std::vector<std::string> out;
  for (const auto& part : parts_) {
    if (!part.literal) {
      out.push_back(part.text);
    }
  }
  return out;
}

bool Condition::holds(const rapidjson::Value& context) const {
  const rapidjson::Value* value = resolve_path(context, path);
  const bool present = value != nullptr && !value->IsNull();
  switch (kind) {
    case Kind::kExists:
      return present;
    case Kind::kMissing:
      return !present;
    case Kind::kCount: {
      const std::int64_t n = count_of(value);
      if (eq && n != *eq) {
        return false;
      }
      if (min && n < *min) {
        return false;
      }
      if (max && n > *max) {
        return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace agentfleet::llm_sim
