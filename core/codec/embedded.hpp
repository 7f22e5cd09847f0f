#pragma once
// Files compiled into the binary by cmake/embed.cmake, so no install path is needed at run
// time. The generated definitions live in the build tree; the vectors are built on first
// use and never change afterwards (safe to read from any thread).

#include <string_view>
#include <utility>
#include <vector>

namespace agentfleet::embedded {

// (file name, contents) of every `schemas/*.json`, e.g. {"config.schema.json", "{...}"}.
const std::vector<std::pair<std::string_view, std::string_view>>& schemas();

}  // namespace agentfleet::embedded
