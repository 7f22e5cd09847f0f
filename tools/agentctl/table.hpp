#pragma once
// Text tables for a terminal: columns sized to their widest cell (as a terminal shows it:
// CJK characters take two columns), numbers aligned right, long cells cut with "…". Also
// the single-row form for streams, whose column widths are fixed in advance. Pure,
// thread-safe.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::agentctl {

// Columns a terminal uses to show UTF-8 `text` (East Asian wide and fullwidth characters
// count 2, combining marks 0); invalid bytes count 1 each.
std::size_t display_width(std::string_view text);

// `text` cut to at most `width` columns, ending with "…" when cut; never splits a
// character.
std::string truncate_to_width(std::string_view text, std::size_t width);

// `text` padded with spaces to `width` columns (left or right aligned); cut first if wider.
std::string pad_to_width(std::string_view text, std::size_t width, bool right_align = false);

// `text` followed by spaces up to `width` columns; never cut (identifiers).
std::string pad_at_least(std::string_view text, std::size_t width);

// Control characters (newlines, tabs, escapes) as spaces: a cell is one line.
std::string single_line(std::string_view text);

struct Column {
  std::string title;
  bool right_align = false;
  std::size_t max_width = 0;  // 0: no limit; a wider cell is cut
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // Missing cells are empty; extra cells are dropped.
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }
  // The header and every row, two spaces between columns, no trailing spaces, each line
  // ending with "\n". The last column is not padded.
  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// One row with fixed widths (a stream of rows whose widths are known in advance); the
// last column is neither padded nor cut unless its width is set.
std::string fixed_row(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths,
                      const std::vector<bool>& right_align = {});

}  // namespace agentfleet::agentctl
