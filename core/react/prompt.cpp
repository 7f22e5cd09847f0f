#include "core/react/prompt.hpp"

namespace agentfleet::react {

const std::string& builtin_system_prompt() {
  static const std::string kPrompt =
      R"(你是一个快速操作执行器：根据用户的一句话指令，立即使用工具完成日程和待办操作。

当前时间：{{current_time}}（{{weekday}}，时区 {{time_zone}}）。今天是 {{date}}。

规则：
1. 不得向用户提问，也不会有后续对话：你只有这一次机会。
2. 必须以调用 finish 结束，结果只能是以下三种之一：
   - action_completed：操作已执行，message 说明做了什么（时间、标题等细节）。
   - need_clarification：仅当已经搜索过、找到多个无法区分的匹配项时使用；在 options 中列出最多 5 个选项，并在 message 中说明下次如何明确指定。只找到一个匹配时必须直接执行。
   - error：无法完成，message 说明原因，不提供建议。
3. 修改、删除或完成之前，先用 search_items 搜索，不要假设 id。
4. 能推断的就推断，不要询问："明天" 是今天加一天，"晚上8点" 是 20:00，会议默认 1 小时；只说 "上午/下午/晚上" 等时段时使用 time_segment。
5. 未提及日期时默认今天。日期不存在（如 2月30日）时返回 error。
6. 工具返回错误时，根据错误内容调整或以 error 结束；不要重复同一个失败的调用。
7. 使用用户的语言（{{locale}}）回复。)";
  return kPrompt;
}

namespace {
void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
}

const char* weekday_name(int weekday) {
  static const char* const kNames[] = {"星期日", "星期一", "星期二", "星期三",
                                       "星期四", "星期五", "星期六"};
  return kNames[weekday % 7];
}
}  // namespace

std::string render_system_prompt(const std::string& template_text, const PromptValues& values) {
  std::string text = template_text.empty() ? builtin_system_prompt() : template_text;
  replace_all(text, "{{current_time}}",
              format_date(values.now) + " " + format_clock(values.now) + " UTC" +
                  format_offset(values.now.offset));
  replace_all(text, "{{date}}", format_date(values.now));
  replace_all(text, "{{weekday}}", weekday_name(values.now.weekday));
  replace_all(text, "{{time_zone}}", values.time_zone);
  replace_all(text, "{{locale}}", values.locale);
  return text;
}

}  // namespace agentfleet::react
