#include "tests/source_dir.hpp"

namespace agentfleet::test {
const char* source_dir() {
  return AGENTFLEET_SOURCE_DIR_VALUE;
}
}  // namespace agentfleet::test
