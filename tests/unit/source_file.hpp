#pragma once
// A file of the source tree as text (tests/source_dir.hpp),
// for unit tests that hold code to the documents and schemas beside it; "" when missing.

#include "tests/source_dir.hpp"

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
