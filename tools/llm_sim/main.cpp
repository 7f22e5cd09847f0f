// agentfleet-llm-sim: an OpenAI-compatible chat-completions simulator answering from
// scripted scenarios (see README.md). One io_context on the main thread; the simulator
// itself is pure and lives in agentfleet_llm_sim_lib.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "core/adapters/http/server.hpp"
#include "tools/llm_sim/fault_schedule.hpp"
#include "tools/llm_sim/latency.hpp"
#include "tools/llm_sim/llm_faults.hpp"
#include "tools/llm_sim/simulator.hpp"
#include "tools/llm_sim/streaming.hpp"
#include "tools/llm_sim/timing_log.hpp"

namespace {

namespace asio = boost::asio;
namespace http = agentfleet::http;
namespace llm_sim = agentfleet::llm_sim;
namespace sim = agentfleet::sim;

constexpr const char* kUsage =
    "usage: agentfleet-llm-sim --scenarios FILE [options]\n"
    "\n"
    "An OpenAI-compatible chat-completions simulator answering from scripted scenarios.\n"
    "\n"
    "  --scenarios FILE   scenario file (YAML), required\n"
    "  --host HOST        address to listen on (default 127.0.0.1)\n"
    "  --port N           port to listen on; 0 picks a free one (default 0)\n"
    "  --port-file PATH   write the bound port there (atomically) once listening\n"
    "  --latency DIST     delay before every answer unless a scenario sets one:\n"
    "                     fixed:MS, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA (default fixed:0)\n"
    "  --latency-ms N     the same as --latency fixed:N\n"
    "  --seed N           seed of the random source (latency samples, fault probabilities; "
    "default 1)\n"
    "  --style NAME       response style unless a scenario sets one: openai (default),\n"
    "                     arguments_object, arguments_empty, missing_ids,\n"
    "                     content_with_tool_calls, reasoning_content, deepseek_usage,\n"
    "                     legacy_function_call, hermes_text, llama_text, mistral_text,\n"
    "                     json_text, deepseek_thinking, no_usage\n"
    "  --default-scenario NAME|TEXT\n"
    "                     answers text no scenario matches with this scenario (a name, or a\n"
    "                     text such as 'bench: steps=3 calls=2' chosen as if the user wrote it)\n"
    "  --timing-log PATH  append one line per answered completion: model, the traceparent's\n"
    "                     trace id, received and answered (µs since the epoch); tools/bench\n"
    "  --verbose          log one line per request to stderr\n"
    "  --help             show this text\n"
    "\n"
    "Endpoints: POST /v1/chat/completions, GET /stats, GET /healthz,\n"
    "GET|POST|DELETE /admin/faults, GET|POST /admin/style, GET|POST /admin/latency\n";

struct Options {
  std::string scenarios;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string port_file;
  sim::LatencyDistribution latency;
  std::uint64_t seed = 1;
  llm_sim::ResponseStyle style = llm_sim::ResponseStyle::kOpenAI;
  std::string default_scenario;
  std::string timing_log;
  bool verbose = false;
};

struct UsageError {
  std::string message;
};

std::int64_t parse_number(const std::string& flag, const std::string& text, std::int64_t max) {
  std::size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0 || value > max) {
    throw UsageError{flag + " expects an integer from 0 to " + std::to_string(max) + ", got '" +
                     text + "'"};
  }
  return value;
}

// Returns nullopt when --help was given.
std::optional<Options> parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      return std::nullopt;
    }
    if (flag == "--verbose") {
      options.verbose = true;
      continue;
    }
    if (i + 1 >= argc) {
      throw UsageError{flag + " needs a value"};
    }
    const std::string value = argv[++i];
    if (flag == "--scenarios") {
      options.scenarios = value;
    } else if (flag == "--host") {
      options.host = value;
    } else if (flag == "--port") {
      options.port = static_cast<std::uint16_t>(parse_number(flag, value, 65535));
    } else if (flag == "--port-file") {
      options.port_file = value;
    } else if (flag == "--latency-ms") {
      options.latency =
          sim::LatencyDistribution::fixed(static_cast<double>(parse_number(flag, value, 600000)));
    } else if (flag == "--latency") {
      std::string problem;
      const auto latency = sim::parse_latency(value, &problem);
      if (!latency) {
        throw UsageError{"--latency: " + problem};
      }
      options.latency = *latency;
    } else if (flag == "--timing-log") {
      options.timing_log = value;
    } else if (flag == "--seed") {
      options.seed = static_cast<std::uint64_t>(
          parse_number(flag, value, std::numeric_limits<std::int64_t>::max()));
    } else if (flag == "--style") {
      const auto style = llm_sim::parse_response_style(value);
      if (!style) {
        throw UsageError{"--style: unknown style '" + value +
                         "' (known: " + llm_sim::response_style_names() + ")"};
      }
      options.style = *style;
    } else if (flag == "--default-scenario") {
      options.default_scenario = value;
    } else {
      throw UsageError{"unknown option " + flag};
    }
  }
  if (options.scenarios.empty()) {
    throw UsageError{"--scenarios FILE is required"};
  }
  return options;
}

void write_port_file(const std::string& path, std::uint16_t port) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << port << '\n';
    out.flush();
    if (!out) {
      throw std::runtime_error("cannot write " + temporary);
    }
  }
  std::filesystem::rename(temporary, path);
}

// Counters for GET /stats. Guarded by a mutex so the handler stays correct should the
// io_context ever run on several threads.
class Stats {
 public:
  void record_received() {
    std::lock_guard lock(mutex_);
    ++received_;
  }
  std::uint64_t record(const llm_sim::Completion& completion) {
    std::lock_guard lock(mutex_);
    ++requests_;
    ++by_scenario_[completion.scenario];
    ++by_protocol_[std::string(llm_sim::protocol_name(completion.protocol))];
    ++by_style_[std::string(llm_sim::response_style_name(completion.style))];
    prompt_tokens_ += completion.usage.prompt_tokens;
    completion_tokens_ += completion.usage.completion_tokens;
    cached_tokens_ += completion.usage.cached_tokens;
    reasoning_tokens_ += completion.usage.reasoning_tokens;
    return requests_;
  }
  void record_fault(sim::FaultMode mode) {
    std::lock_guard lock(mutex_);
    ++faults_[std::string(sim::fault_mode_name(mode))];
  }
  void record_rejected() {
    std::lock_guard lock(mutex_);
    ++rejected_;
  }
  // A request a provider would charge for (it was taken to generation: answered, cut, hung,
  // or answered with a page that is not a completion), by the call its X-Client-Request-Id
  // names: the header's value up to its last ':' (what follows is the try). At most
  // kMaxCalls calls are told apart; past that they are counted as `untracked`.
  void record_charged(std::string_view request_id) {
    std::lock_guard lock(mutex_);
    ++charged_;
    if (request_id.empty()) {
      ++unnamed_;
      return;
    }
    const auto colon = request_id.rfind(':');
    const std::string call(
        request_id.substr(0, colon == std::string_view::npos ? request_id.size() : colon));
    auto found = charged_by_call_.find(call);
    if (found != charged_by_call_.end()) {
      ++found->second;
    } else if (charged_by_call_.size() < kMaxCalls) {
      charged_by_call_.emplace(call, 1);
    } else {
      ++untracked_;
    }
  }
  std::string calls_json() {
    std::lock_guard lock(mutex_);
    rapidjson::StringBuffer out;
    rapidjson::Writer<rapidjson::StringBuffer> writer(out);
    writer.StartObject();
    writer.Key("charged");
    writer.Uint64(charged_);
    writer.Key("unnamed");
    writer.Uint64(unnamed_);
    writer.Key("untracked");
    writer.Uint64(untracked_);
    writer.Key("calls");
    writer.StartObject();
    for (const auto& [call, count] : charged_by_call_) {
      writer.Key(call.c_str(), static_cast<rapidjson::SizeType>(call.size()));
      writer.Uint64(count);
    }
    writer.EndObject();
    writer.EndObject();
    return std::string(out.GetString(), out.GetSize());
  }
  std::uint64_t next_sequence() {
    std::lock_guard lock(mutex_);
    return ++sequence_;
  }
  std::string to_json() {
    std::lock_guard lock(mutex_);
    rapidjson::StringBuffer out;
    rapidjson::Writer<rapidjson::StringBuffer> writer(out);
    const auto counts = [&](const char* name, const std::map<std::string, std::uint64_t>& map) {
      writer.Key(name);
      writer.StartObject();
      for (const auto& [key, count] : map) {
        writer.Key(key.c_str(), static_cast<rapidjson::SizeType>(key.size()));
        writer.Uint64(count);
      }
      writer.EndObject();
    };
    writer.StartObject();
    writer.Key("received");
    writer.Uint64(received_);
    writer.Key("requests");
    writer.Uint64(requests_);
    writer.Key("rejected");
    writer.Uint64(rejected_);
    std::uint64_t faults_total = 0;
    for (const auto& [mode, count] : faults_) {
      faults_total += count;
    }
    writer.Key("faults_total");
    writer.Uint64(faults_total);
    counts("faults", faults_);
    counts("by_scenario", by_scenario_);
    counts("by_protocol", by_protocol_);
    counts("by_style", by_style_);
    writer.Key("prompt_tokens");
    writer.Int64(prompt_tokens_);
    writer.Key("completion_tokens");
    writer.Int64(completion_tokens_);
    writer.Key("cached_tokens");
    writer.Int64(cached_tokens_);
    writer.Key("reasoning_tokens");
    writer.Int64(reasoning_tokens_);
    writer.EndObject();
    return std::string(out.GetString(), out.GetSize());
  }

 private:
  static constexpr std::size_t kMaxCalls = 2'000'000;
  std::mutex mutex_;
  std::uint64_t sequence_ = 0;
  std::uint64_t charged_ = 0;
  std::uint64_t unnamed_ = 0;
  std::uint64_t untracked_ = 0;
  std::map<std::string, std::uint64_t, std::less<>> charged_by_call_;
  std::uint64_t received_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t rejected_ = 0;
  std::map<std::string, std::uint64_t> faults_;
  std::map<std::string, std::uint64_t> by_scenario_;
  std::map<std::string, std::uint64_t> by_protocol_;
  std::map<std::string, std::uint64_t> by_style_;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t completion_tokens_ = 0;
  std::int64_t cached_tokens_ = 0;
  std::int64_t reasoning_tokens_ = 0;
};

// What POST /admin/style and /admin/latency change at run time; the flags are the
// starting values.
class RuntimeSettings {
 public:
  RuntimeSettings(llm_sim::ResponseStyle style, sim::LatencyDistribution latency)
      : style_(style), latency_(latency) {}
  llm_sim::ResponseStyle style() {
    std::lock_guard lock(mutex_);
    return style_;
  }
  void set_style(llm_sim::ResponseStyle style) {
    std::lock_guard lock(mutex_);
    style_ = style;
  }
  sim::LatencyDistribution latency() {
    std::lock_guard lock(mutex_);
    return latency_;
  }
  void set_latency(sim::LatencyDistribution latency) {
    std::lock_guard lock(mutex_);
    latency_ = latency;
  }

 private:
  std::mutex mutex_;
  llm_sim::ResponseStyle style_;
  sim::LatencyDistribution latency_;
};

struct App {
  const llm_sim::Simulator& simulator;
  const Options& options;
  Stats& stats;
  sim::RandomSource& random;
  sim::FaultSchedule& faults;
  RuntimeSettings& settings;
  sim::TimingLog* timing = nullptr;  // --timing-log, when given
};

// OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
http::Response openai_error(const http::Request& request, http::Status status,
                            const std::string& message, const std::string& type,
                            const std::string& param = {}) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  writer.StartObject();
  writer.Key("error");
  writer.StartObject();
  writer.Key("message");
  writer.String(message.c_str(), static_cast<rapidjson::SizeType>(message.size()));
  writer.Key("type");
  writer.String(type.c_str(), static_cast<rapidjson::SizeType>(type.size()));
  writer.Key("param");
  if (param.empty()) {
    writer.Null();
  } else {
    writer.String(param.c_str(), static_cast<rapidjson::SizeType>(param.size()));
  }
  writer.Key("code");
  writer.Null();
  writer.EndObject();
  writer.EndObject();
  return http::make_response(request, status, std::string(out.GetString(), out.GetSize()));
}

http::Reply reply_of(http::Response response) {
  http::Reply reply;
  reply.response = std::move(response);
  return reply;
}

// A fault that answers in place of the simulator (http_*, insufficient_quota, not_json).
http::Reply fault_reply(const http::Request& request, const sim::FaultSpec& spec) {
  const llm_sim::FaultAnswer answer = llm_sim::fault_answer(spec);
  http::Response response = http::make_response(request, static_cast<http::Status>(answer.status),
                                                answer.body, answer.content_type);
  for (const auto& [name, value] : answer.headers) {
    response.set(name, value);
  }
  response.set("x-llm-sim-fault", std::string(sim::fault_mode_name(spec.mode)));
  return reply_of(std::move(response));
}

bool answers_in_place(sim::FaultMode mode) {
  return mode != sim::FaultMode::kCloseMidResponse && mode != sim::FaultMode::kHang &&
         mode != sim::FaultMode::kSlow;
}

http::Reply hang_reply(const http::Request& request, const sim::FaultSpec& spec) {
  http::Reply reply = reply_of(http::make_response(request, http::Status::ok, ""));
  reply.delivery = http::Delivery::kHang;
  reply.hang_for = std::chrono::seconds(spec.hang_s);
  return reply;
}

// GET, POST and DELETE /admin/faults.
http::Response admin_faults(App& app, const http::Request& request) {
  using verb = boost::beast::http::verb;
  if (request.method() == verb::get) {
    return http::make_response(request, http::Status::ok, app.faults.list_json());
  }
  if (request.method() == verb::delete_) {
    const auto all = http::query_param(
        std::string_view(request.target().data(), request.target().size()), "all");
    const std::size_t cleared = app.faults.clear(all && (*all == "1" || *all == "true"));
    return http::make_response(request, http::Status::ok,
                               "{\"cleared\":" + std::to_string(cleared) + "}");
  }
  if (request.method() != verb::post) {
    return openai_error(request, http::Status::method_not_allowed,
                        "use GET, POST or DELETE /admin/faults", "invalid_request_error");
  }
  auto parsed = sim::parse_fault_spec(request.body(), llm_sim::llm_fault_rules(true));
  if (auto* problem = std::get_if<sim::FaultSpecError>(&parsed)) {
    return openai_error(request, http::Status::bad_request, problem->message,
                        "invalid_request_error", problem->path);
  }
  const std::uint64_t id = app.faults.add(std::get<sim::FaultSpec>(std::move(parsed)));
  if (app.options.verbose) {
    std::cerr << "llm-sim: fault " << id << " added: " << request.body() << std::endl;
  }
  return http::make_response(request, http::Status::created, "{\"id\":" + std::to_string(id) + "}");
}

// Reads {"KEY": "text"} (or {"KEY": null}); nullopt + error for anything else.
std::optional<std::optional<std::string>> string_setting(const std::string& body, const char* key,
                                                         std::string& error) {
  rapidjson::Document document;
  document.Parse(body.data(), body.size());
  if (document.HasParseError() || !document.IsObject() || !document.HasMember(key) ||
      !(document[key].IsString() || document[key].IsNull())) {
    error = std::string("expected a JSON object {\"") + key + "\": \"...\"}";
    return std::nullopt;
  }
  if (document[key].IsNull()) {
    return std::optional<std::string>();
  }
  return std::optional<std::string>(document[key].GetString());
}

// GET and POST /admin/style: {"style":"missing_ids"}; null goes back to --style.
http::Response admin_style(App& app, const http::Request& request) {
  using verb = boost::beast::http::verb;
  if (request.method() == verb::post) {
    std::string error;
    const auto value = string_setting(request.body(), "style", error);
    if (!value) {
      return openai_error(request, http::Status::bad_request, error, "invalid_request_error",
                          "style");
    }
    const auto style = *value ? llm_sim::parse_response_style(**value) : app.options.style;
    if (!style) {
      return openai_error(
          request, http::Status::bad_request,
          "unknown style '" + **value + "' (known: " + llm_sim::response_style_names() + ")",
          "invalid_request_error", "style");
    }
    app.settings.set_style(*style);
  } else if (request.method() != verb::get) {
    return openai_error(request, http::Status::method_not_allowed, "use GET or POST /admin/style",
                        "invalid_request_error");
  }
  return http::make_response(
      request, http::Status::ok,
      "{\"style\":\"" + std::string(llm_sim::response_style_name(app.settings.style())) + "\"}");
}

// GET and POST /admin/latency: {"latency":"uniform:50:300"}; null goes back to --latency.
http::Response admin_latency(App& app, const http::Request& request) {
  using verb = boost::beast::http::verb;
  if (request.method() == verb::post) {
    std::string error;
    const auto value = string_setting(request.body(), "latency", error);
    const auto latency =
        !value ? std::nullopt
               : (*value ? sim::parse_latency(**value, &error)
                         : std::optional<sim::LatencyDistribution>(app.options.latency));
    if (!latency) {
      return openai_error(request, http::Status::bad_request, error, "invalid_request_error",
                          "latency");
    }
    app.settings.set_latency(*latency);
  } else if (request.method() != verb::get) {
    return openai_error(request, http::Status::method_not_allowed, "use GET or POST /admin/latency",
                        "invalid_request_error");
  }
  return http::make_response(request, http::Status::ok,
                             "{\"latency\":\"" + app.settings.latency().describe() + "\"}");
}

asio::awaitable<http::Reply> handle(App& app, http::Request& request) {
  const std::string_view path =
      http::target_path(std::string_view(request.target().data(), request.target().size()));
  const auto method = request.method();
  if (path == "/healthz") {
    co_return reply_of(http::make_response(request, http::Status::ok, R"({"status":"ok"})"));
  }
  if (path == "/stats") {
    if (method != boost::beast::http::verb::get) {
      co_return reply_of(openai_error(request, http::Status::method_not_allowed, "use GET /stats",
                                      "invalid_request_error"));
    }
    co_return reply_of(http::make_response(request, http::Status::ok, app.stats.to_json()));
  }
  if (path == "/calls") {
    if (method != boost::beast::http::verb::get) {
      co_return reply_of(openai_error(request, http::Status::method_not_allowed, "use GET /calls",
                                      "invalid_request_error"));
    }
    co_return reply_of(http::make_response(request, http::Status::ok, app.stats.calls_json()));
  }
  if (path == "/admin/faults") {
    co_return reply_of(admin_faults(app, request));
  }
  if (path == "/admin/style") {
    co_return reply_of(admin_style(app, request));
  }
  if (path == "/admin/latency") {
    co_return reply_of(admin_latency(app, request));
  }
  if (path != "/v1/chat/completions" && path != "/chat/completions") {
    co_return reply_of(openai_error(
        request, http::Status::not_found,
        "unknown path " + std::string(path) + "; llm-sim serves POST /v1/chat/completions",
        "invalid_request_error"));
  }
  if (method != boost::beast::http::verb::post) {
    co_return reply_of(openai_error(request, http::Status::method_not_allowed,
                                    "use POST /v1/chat/completions", "invalid_request_error"));
  }
  app.stats.record_received();
  const auto received = std::chrono::system_clock::now();
  const auto request_id_field = request["X-Client-Request-Id"];
  const std::string request_id(request_id_field.data(), request_id_field.size());
  // What a provider would bill: a request taken to generation (not one refused with an
  // error status).
  const auto charged_unless_refused = [&](sim::FaultMode mode) {
    if (mode == sim::FaultMode::kHang || mode == sim::FaultMode::kNotJson)
      app.stats.record_charged(request_id);
  };

  // Unscoped faults answer before the request is even read.
  std::optional<sim::FaultSpec> fault = app.faults.next(std::nullopt);
  if (fault && (answers_in_place(fault->mode) || fault->mode == sim::FaultMode::kHang)) {
    app.stats.record_fault(fault->mode);
    charged_unless_refused(fault->mode);
    if (app.options.verbose) {
      std::cerr << "llm-sim: fault " << sim::fault_mode_name(fault->mode) << std::endl;
    }
    co_return fault->mode == sim::FaultMode::kHang ? hang_reply(request, *fault)
                                                   : fault_reply(request, *fault);
  }

  llm_sim::CompletionOptions completion_options;
  completion_options.style = app.settings.style();
  auto result = app.simulator.complete(request.body(), std::chrono::system_clock::now(),
                                       app.stats.next_sequence(), completion_options);
  if (auto* error = std::get_if<llm_sim::RequestError>(&result)) {
    app.stats.record_rejected();
    if (app.options.verbose) {
      std::cerr << "llm-sim: 400 " << error->message << std::endl;
    }
    co_return reply_of(openai_error(request, http::Status::bad_request, error->message,
                                    "invalid_request_error", error->param));
  }
  auto& completion = std::get<llm_sim::Completion>(result);

  // Faults scoped to a scenario (its own, or a runtime one naming it) and/or a step.
  if (!fault) {
    sim::FaultTarget target;
    target.scope = completion.scenario;
    target.step = static_cast<std::int64_t>(completion.step);
    fault = app.faults.next(target);
    if (fault && (answers_in_place(fault->mode) || fault->mode == sim::FaultMode::kHang)) {
      app.stats.record_fault(fault->mode);
      charged_unless_refused(fault->mode);
      if (app.options.verbose) {
        std::cerr << "llm-sim: " << completion.scenario << " step " << completion.step << ": fault "
                  << sim::fault_mode_name(fault->mode) << std::endl;
      }
      co_return fault->mode == sim::FaultMode::kHang ? hang_reply(request, *fault)
                                                     : fault_reply(request, *fault);
    }
  }

  std::chrono::milliseconds delay =
      app.random.sample(completion.latency.value_or(app.settings.latency()));
  if (fault && fault->mode == sim::FaultMode::kSlow && fault->latency) {
    delay += app.random.sample(*fault->latency);
  }
  if (delay.count() > 0) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(delay);
    co_await timer.async_wait(asio::use_awaitable);
  }

  // A request that asks for a stream gets the same answer as server-sent events, written in
  // pieces cut anywhere.
  const llm_sim::StreamRequest streamed = llm_sim::stream_request(request.body());
  std::optional<std::string> events;
  if (streamed.stream)
    events = llm_sim::stream_events(completion.body, streamed.include_usage);
  http::Response response = http::make_response(
      request, http::Status::ok, events ? std::move(*events) : std::move(completion.body));
  if (events)
    response.set(boost::beast::http::field::content_type, "text/event-stream");
  response.set("x-llm-sim-scenario", completion.scenario);
  response.set("x-llm-sim-step", std::to_string(completion.step));
  if (fault) {
    app.stats.record_fault(fault->mode);
    response.set("x-llm-sim-fault", std::string(sim::fault_mode_name(fault->mode)));
  }
  app.stats.record_charged(request_id);  // answered, or cut mid-answer
  if (fault && fault->mode == sim::FaultMode::kCloseMidResponse) {
    if (app.options.verbose) {
      std::cerr << "llm-sim: " << completion.scenario << " step " << completion.step
                << ": fault close_mid_response" << std::endl;
    }
    http::Reply reply = reply_of(std::move(response));
    reply.delivery = http::Delivery::kTruncate;
    reply.truncate_at = reply.response.body().size() / 2;
    co_return reply;
  }
  app.stats.record(completion);
  if (app.options.verbose) {
    std::cerr << "llm-sim: " << completion.scenario << " step " << completion.step << ": "
              << completion.summary << " [" << llm_sim::response_style_name(completion.style)
              << "] (prompt " << completion.usage.prompt_tokens << ", cached "
              << completion.usage.cached_tokens << ", completion "
              << completion.usage.completion_tokens << ", " << delay.count() << " ms)" << std::endl;
  }
  if (app.timing) {
    const auto traceparent = request["traceparent"];
    app.timing->record("model", std::string_view(traceparent.data(), traceparent.size()), received,
                       std::chrono::system_clock::now());
  }
  http::Reply reply = reply_of(std::move(response));
  if (events) {
    reply.delivery = http::Delivery::kPieces;
    reply.piece_bytes = 37;
    reply.piece_gap = std::chrono::milliseconds(1);
  }
  co_return reply;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Options> parsed;
  try {
    parsed = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "agentfleet-llm-sim: " << e.message << "\n\n" << kUsage;
    return 2;
  }
  if (!parsed) {
    std::cout << kUsage;
    return 0;
  }
  const Options& options = *parsed;

  try {
    const llm_sim::Simulator simulator(llm_sim::load_scenario_file(options.scenarios),
                                       options.default_scenario);
    Stats stats;
    sim::RandomSource random(options.seed);
    sim::FaultSchedule faults(random, {}, "scenario");
    for (const auto& scenario : simulator.scenarios().scenarios) {
      for (const auto& fault : scenario.faults) {
        faults.add(fault, sim::FaultSchedule::Origin::kStartup);
      }
    }
    for (const auto& fault : simulator.scenarios().fallback.faults) {
      faults.add(fault, sim::FaultSchedule::Origin::kStartup);
    }
    RuntimeSettings settings(options.style, options.latency);
    std::optional<sim::TimingLog> timing;
    if (!options.timing_log.empty())
      timing.emplace(options.timing_log);
    App app{simulator, options, stats, random, faults, settings, timing ? &*timing : nullptr};

    asio::io_context io;
    http::ServerOptions server_options;
    server_options.host = options.host;
    server_options.port = options.port;
    server_options.server_name = "agentfleet-llm-sim";
    http::Server server(
        io.get_executor(), server_options,
        http::ReplyHandler([&app](http::Request& request) { return handle(app, request); }));
    server.start();

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
      server.stop();
      io.stop();
    });

    if (!options.port_file.empty()) {
      write_port_file(options.port_file, server.port());
    }
    std::cout << "listening on http://" << options.host << ":" << server.port() << std::endl;
    std::cerr << "llm-sim: " << simulator.scenarios().scenarios.size() << " scenarios from "
              << options.scenarios << std::endl;

    io.run();
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "agentfleet-llm-sim: --default-scenario: " << e.what() << std::endl;
    return 2;
  } catch (const llm_sim::ScenarioError& e) {
    std::cerr << "agentfleet-llm-sim: bad scenario file: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "agentfleet-llm-sim: " << e.what() << std::endl;
    return 1;
  }
}
