// The worker's code stays in parts a reader can hold: no function in worker/ over 120
// lines (issue 38's runner as units; docs/architecture.md, "The worker"). A function is
// what clang-format leaves at column 0: a line that opens a definition, to the "}" that
// closes it at column 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/source_file.hpp"

namespace agentfleet::test {
namespace {

constexpr int kLongestFunction = 120;

struct Function {
  std::string head;  // its first line
  int lines = 0;
};

// The definitions of `text` longer than `limit` lines, with their length.
std::vector<Function> longer_than(const std::string& text, int limit) {
  std::vector<Function> found;
  std::istringstream in(text);
  std::string line;
  std::string head;
  int start = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    const bool at_margin = !line.empty() && line[0] != ' ' && line[0] != '#' && line[0] != '/';
    if (head.empty()) {
      const bool opens_definition = at_margin && line.find('(') != std::string::npos &&
                                    line.back() != ';' && line.rfind("namespace", 0) != 0;
      if (opens_definition) {
        head = line;
        start = number;
      }
      continue;
    }
    if (line == "}" || line == "};") {
      if (number - start + 1 > limit)
        found.push_back(Function{head, number - start + 1});
      head.clear();
    }
  }
  return found;
}

TEST(WorkerSources, TheCheckFindsAFunctionOverTheLimitAndOnlyThat) {
  std::string text =
      "namespace x {\nint short_one(int a) {\n  return a;\n}\n\nvoid long_one(\n    int a) {\n";
  for (int i = 0; i < 10; ++i)
    text += "  a += " + std::to_string(i) + ";\n";
  text += "}\n}  // namespace x\n";
  const auto found = longer_than(text, 10);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].head, "void long_one(");
  EXPECT_EQ(found[0].lines, 13);
  EXPECT_TRUE(longer_than(text, 13).empty());
}

TEST(WorkerSources, NoFunctionInTheWorkerIsOver120Lines) {
  const std::filesystem::path worker = std::filesystem::path(AGENTFLEET_SOURCE_DIR) / "worker";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(worker)) {
    if (entry.path().extension() != ".cpp")
      continue;
    ++files;
    const std::string relative = "worker/" + entry.path().filename().string();
    for (const Function& f : longer_than(read_source(relative), kLongestFunction)) {
      ADD_FAILURE() << relative << ": " << f.lines << " lines (at most " << kLongestFunction
                    << "): " << f.head;
    }
  }
  EXPECT_GE(files, 8) << "the worker's sources were not found under " << worker;
}

}  // namespace
}  // namespace agentfleet::test
