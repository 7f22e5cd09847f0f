// The task error codes are a closed set that clients switch on: the enum, the table of
// docs/errors.md and the result event schema's enum name the same codes.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include <rapidjson/document.h>

#include "core/domain/error.hpp"
#include "core/react/react_loop.hpp"
#include "tests/unit/source_file.hpp"

namespace agentfleet {
namespace {

using test::read_source;

std::set<std::string> enum_codes() {
  std::set<std::string> codes;
  for (const ErrorCode code : all_error_codes())
    codes.insert(std::string(to_string(code)));
  return codes;
}

TEST(ErrorCodes, EachNameIsItsOwnAndParsesBack) {
  EXPECT_EQ(enum_codes().size(), all_error_codes().size());
  for (const ErrorCode code : all_error_codes())
    EXPECT_EQ(parse_error_code(to_string(code)), code) << to_string(code);
  EXPECT_FALSE(parse_error_code("timeout").has_value());
  EXPECT_FALSE(parse_error_code("").has_value());
}

TEST(ErrorCodes, DocsErrorsTableListsExactlyTheCodes) {
  const std::string doc = read_source("docs/errors.md");
  ASSERT_FALSE(doc.empty());
  std::set<std::string> documented;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    // A row of the table: | `code` | status | ...
    if (line.rfind("| `", 0) != 0)
      continue;
    const auto end = line.find('`', 3);
    ASSERT_NE(end, std::string::npos) << line;
    documented.insert(line.substr(3, end - 3));
  }
  EXPECT_EQ(documented, enum_codes());
}

TEST(ErrorCodes, ResultEventSchemaEnumIsTheSet) {
  rapidjson::Document schema;
  schema.Parse(read_source("schemas/result_event.schema.json").c_str());
  ASSERT_FALSE(schema.HasParseError());
  const auto& values = schema["properties"]["error_code"]["enum"];
  ASSERT_TRUE(values.IsArray());
  std::set<std::string> listed;
  for (const auto& value : values.GetArray())
    listed.insert(value.GetString());
  EXPECT_EQ(listed, enum_codes());
}

TEST(ErrorCodes, EveryModelFailureReasonHasTheCodeOfItsName) {
  using react::FailReason;
  for (const FailReason reason :
       {FailReason::kMaxSteps, FailReason::kTruncated, FailReason::kContentFilter,
        FailReason::kEmptyReply, FailReason::kNoPlan, FailReason::kUnperformedAction}) {
    EXPECT_EQ(to_string(react::error_code_of(reason)), react::to_string(reason));
  }
}

}  // namespace
}  // namespace agentfleet
