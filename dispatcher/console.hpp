#pragma once
// The web console (ui/): a single-page app built into the dispatcher binary and served at
// /ui/ with no key (its pages hold no data; every call they make to the API carries the
// key its user signs in with). /ui/ is index.html; the assets' names carry their content's
// hash, so they are cached for good and index.html never is. Every answer carries a strict
// Content-Security-Policy: the console loads nothing but its own files and talks only to
// this origin.
//
// Pure: answers from the files given (the build's embedded ones, or a test's).

#include <span>
#include <string_view>
#include <utility>

#include "core/adapters/http/server.hpp"

namespace agentfleet::dispatcher {

using ConsoleFiles = std::span<const std::pair<std::string_view, std::string_view>>;

inline constexpr std::string_view kConsoleCsp =
    "default-src 'self'; img-src 'self' data:; style-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// The answer to GET /ui/<file> ("" is index.html): the file with its type and caching, 404
// when there is no such file (or no console in this build).
http::Response console_response(const http::Request& request, std::string_view file,
                                ConsoleFiles files);

// The content type of a console file, by its extension.
std::string_view console_content_type(std::string_view file);

}  // namespace agentfleet::dispatcher
