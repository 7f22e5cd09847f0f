#include "dispatcher/console.hpp"

#include <string>

namespace agentfleet::dispatcher {

namespace bhttp = boost::beast::http;

std::string_view console_content_type(std::string_view file) {
  auto ends = [&](std::string_view suffix) {
    return file.size() >= suffix.size() && file.substr(file.size() - suffix.size()) == suffix;
  };
  if (ends(".html"))
    return "text/html; charset=utf-8";
  if (ends(".js"))
    return "text/javascript; charset=utf-8";
  if (ends(".css"))
    return "text/css; charset=utf-8";
  if (ends(".svg"))
    return "image/svg+xml";
  if (ends(".png"))
    return "image/png";
  if (ends(".woff2"))
    return "font/woff2";
  return "text/plain; charset=utf-8";
}

http::Response console_response(const http::Request& request, std::string_view file,
                                ConsoleFiles files) {
  const std::string_view name = file.empty() ? std::string_view("index.html") : file;
  for (const auto& [path, contents] : files) {
    if (path != name)
      continue;
    http::Response response = http::make_response(request, http::Status::ok, std::string(contents),
                                                  std::string(console_content_type(name)));
    response.set(bhttp::field::cache_control,
                 name == "index.html" ? "no-cache" : "public, max-age=31536000, immutable");
    response.set("Content-Security-Policy", std::string(kConsoleCsp));
    response.set("X-Content-Type-Options", "nosniff");
    response.set("X-Frame-Options", "DENY");
    response.set("Referrer-Policy", "no-referrer");
    return response;
  }
  return http::make_error(request, http::Status::not_found, "not_found",
                          files.empty() ? "this dispatcher was built without the console"
                                        : "the console has no file '" + std::string(name) + "'",
                          "/path");
}

}  // namespace agentfleet::dispatcher
