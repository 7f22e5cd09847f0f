#pragma once
// A file of the source tree as text (AGENTFLEET_SOURCE_DIR is set by tests/CMakeLists.txt),
// for unit tests that hold code to the documents and schemas beside it; "" when missing.

#include <fstream>
#include <sstream>
#include <string>

namespace agentfleet::test {

inline std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(AGENTFLEET_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace agentfleet::test
