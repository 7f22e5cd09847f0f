#pragma once
// A streamed chat completion (`"stream": true`: server-sent events, each `data:` a
// chat.completion.chunk, then `data: [DONE]`) put back together as the body a non-streamed
// answer would have had, so one parser (parse_chat_response) reads both. Text and reasoning
// deltas are joined in order; tool calls are assembled by their `index` (the id, type and
// name arrive once, the arguments in fragments, the fragments of several calls possibly
// interleaved); the finish reason is kept; the usage comes from the final chunk
// (`stream_options.include_usage`). Bytes may arrive cut anywhere, even inside a line or a
// UTF-8 character. Pure; not thread-safe, one per streamed answer.

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace agentfleet::codec {

class ChatStreamAssembler {
 public:
  // Each piece of the answer's text, as its chunk arrives (the model's words as it writes
  // them); optional.
  std::function<void(std::string_view text)> on_text;

  // Reads the next bytes of the stream. False once it holds what no chat completion stream
  // does (an event that is not a chunk, an error event); error() says what.
  bool feed(std::string_view bytes);
  // Whole: `[DONE]` came, or a finish reason did and the body ended (the caller knows).
  bool done() const { return done_; }
  bool finished() const { return !finish_reason_.empty(); }
  const std::string& error() const { return error_; }
  // The answer as one chat completion: {"choices":[{"message":…,"finish_reason":…}],
  // "usage":…}; tool calls in the order of their index.
  std::string completion_json() const;

 private:
  bool event(std::string_view data);

  struct Call {
    std::string id, type, name, arguments;
  };
  std::string pending_;  // bytes of a line not yet ended
  std::string data_;     // the `data` of the event being read
  bool has_data_ = false;
  std::string content_, reasoning_, finish_reason_, usage_json_, model_;
  bool has_content_ = false;
  std::map<int, Call> calls_;
  bool done_ = false;
  std::string error_;
};

}  // namespace agentfleet::codec
