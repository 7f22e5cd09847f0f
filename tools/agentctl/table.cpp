#include "tools/agentctl/table.hpp"

#include <algorithm>
#include <cstdint>

#include "core/codec/json_text.hpp"

namespace agentfleet::agentctl {

namespace {
// One UTF-8 sequence at `i`: its code point and length; an invalid byte is (-1, 1).
std::pair<std::int32_t, std::size_t> decode(std::string_view s, std::size_t i) {
  const codec::Utf8Sequence sequence = codec::utf8_sequence_at(s, i);
  if (sequence.length == 0)
    return {-1, 1};
  return {static_cast<std::int32_t>(sequence.code_point), sequence.length};
}

// Columns of one code point, after Markus Kuhn's wcwidth: wide and fullwidth East Asian
// ranges 2, combining marks and zero-width characters 0.
std::size_t columns_of(std::int32_t cp) {
  if (cp < 0)
    return 1;
  if ((cp >= 0x0300 && cp <= 0x036f) || (cp >= 0x200b && cp <= 0x200f) ||
      (cp >= 0xfe00 && cp <= 0xfe0f) || (cp >= 0x20d0 && cp <= 0x20ff))
    return 0;
  const bool wide = (cp >= 0x1100 && cp <= 0x115f) || (cp >= 0x2e80 && cp <= 0x303e) ||
                    (cp >= 0x3041 && cp <= 0x33ff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
                    (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0xa000 && cp <= 0xa4cf) ||
                    (cp >= 0xac00 && cp <= 0xd7a3) || (cp >= 0xf900 && cp <= 0xfaff) ||
                    (cp >= 0xfe30 && cp <= 0xfe4f) || (cp >= 0xff00 && cp <= 0xff60) ||
                    (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
                    (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd);
  return wide ? 2 : 1;
}
}  // namespace

std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode(text, i);
    width += columns_of(cp);
    i += length;
  }
  return width;
}

std::string truncate_to_width(std::string_view text, std::size_t width) {
  if (display_width(text) <= width)
    return std::string(text);
  if (width == 0)
    return {};
  std::string out;
  std::size_t used = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode(text, i);
    const std::size_t w = columns_of(cp);
    if (used + w > width - 1)  // room for the ellipsis
      break;
    out.append(text.substr(i, length));
    used += w;
    i += length;
  }
  return out + "…";
}

std::string pad_to_width(std::string_view text, std::size_t width, bool right_align) {
  std::string cell = truncate_to_width(text, width);
  const std::size_t w = display_width(cell);
  const std::string padding(width > w ? width - w : 0, ' ');
  return right_align ? padding + cell : cell + padding;
}

std::string pad_at_least(std::string_view text, std::size_t width) {
  const std::size_t w = display_width(text);
  return std::string(text) + std::string(width > w ? width - w : 0, ' ');
}

std::string single_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = ' ';
  }
  return out;
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    cells[i] = single_line(cells[i]);
    if (columns_[i].max_width > 0)
      cells[i] = truncate_to_width(cells[i], columns_[i].max_width);
  }
  rows_.push_back(std::move(cells));
}

namespace {
std::string join_row(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths,
                     const std::vector<bool>& right_align) {
  std::string line;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const bool last = i + 1 == cells.size();
    const bool right = i < right_align.size() && right_align[i];
    if (i > 0)
      line += "  ";
    if (last && !right) {
      line += cells[i];
    } else {
      line += pad_to_width(cells[i], widths[i], right);
    }
  }
  while (!line.empty() && line.back() == ' ')
    line.pop_back();
  return line + "\n";
}
}  // namespace

std::string Table::render() const {
  std::vector<std::size_t> widths(columns_.size(), 0);
  std::vector<bool> right(columns_.size(), false);
  std::vector<std::string> titles;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    widths[i] = display_width(columns_[i].title);
    right[i] = columns_[i].right_align;
    titles.push_back(columns_[i].title);
  }
  for (const auto& row : rows_) {
    for (std::size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], display_width(row[i]));
  }
  std::string out = join_row(titles, widths, right);
  for (const auto& row : rows_)
    out += join_row(row, widths, right);
  return out;
}

std::string fixed_row(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths,
                      const std::vector<bool>& right_align) {
  std::vector<std::string> shown;
  std::vector<std::size_t> w = widths;
  w.resize(cells.size(), 0);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    std::string cell = single_line(cells[i]);
    if (w[i] > 0)
      cell = truncate_to_width(cell, w[i]);
    shown.push_back(std::move(cell));
  }
  return join_row(shown, w, right_align);
}

}  // namespace agentfleet::agentctl
