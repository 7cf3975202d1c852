#pragma once

// A plain text table for terminals: a header row and left-aligned columns
// padded to their widest cell, two spaces apart.

#include <ostream>
#include <string>
#include <vector>

namespace onceq::cli {

class text_table {
 public:
  explicit text_table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const noexcept { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// s on one line (control characters escaped) and at most max_chars long
// ("..." marks a cut).
std::string one_line(const std::string& s, std::size_t max_chars);

}  // namespace onceq::cli
