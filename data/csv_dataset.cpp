#include <volt/data/csv_dataset.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <volt/runtime/error.h>
#include <volt/runtime/text.h>

namespace volt::data {

namespace {

struct Row {
  int64_t line = 0;  // of the row's first character, from 1
  std::vector<std::string> fields;
};

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 80)) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out.push_back(static_cast<char>(c));
  }
  return s.size() > 80 ? out + "..." : out;
}

std::vector<Row> split_rows(std::string_view text, char delim, const std::string& name) {
  VOLT_CHECK(delim != '"' && delim != '\n' && delim != '\r' && delim != '\0', "CsvDataset: the delimiter cannot be ",
             "a quote, a line break or NUL");
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<Row> rows;
  int64_t line = 1;
  size_t i = 0;
  const size_t n = text.size();
  auto newline_at = [&](size_t k) { return text[k] == '\n' || text[k] == '\r'; };
  auto skip_newline = [&](size_t& k) {  // \n, \r\n or \r
    if (text[k] == '\r' && k + 1 < n && text[k + 1] == '\n') ++k;
    ++k;
    ++line;
  };
  while (i < n) {
    if (newline_at(i)) {  // blank line
      skip_newline(i);
      continue;
    }
    Row row;
    row.line = line;
    for (;;) {  // one field per iteration
      std::string field;
      size_t k = i;
      while (k < n && (text[k] == ' ' || text[k] == '\t') && text[k] != delim) ++k;
      if (k < n && text[k] == '"') {
        const int64_t opened = line;
        for (i = k + 1;; ++i) {
          VOLT_CHECK(i < n, "CsvDataset: '", name, "' line ", opened, ", field ", row.fields.size() + 1,
                     ": the quoted field opened there is never closed");
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field.push_back('"');
              ++i;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n' || (text[i] == '\r' && !(i + 1 < n && text[i + 1] == '\n'))) ++line;
          field.push_back(text[i]);
        }
        while (i < n && (text[i] == ' ' || text[i] == '\t') && text[i] != delim) ++i;
        size_t stray = i;
        while (stray < n && stray - i < 20 && text[stray] != delim && !newline_at(stray)) ++stray;
        VOLT_CHECK(stray == i, "CsvDataset: '", name, "' line ", line, ", field ", row.fields.size() + 1,
                   ": unexpected text '", printable(text.substr(i, stray - i)),
                   "' after a closing quote (a quote inside a quoted field is written \"\")");
      } else {
        while (i < n && text[i] != delim && !newline_at(i)) field.push_back(text[i++]);
      }
      row.fields.push_back(std::move(field));
      if (i < n && text[i] == delim) {
        ++i;
        continue;
      }
      break;
    }
    if (i < n) skip_newline(i);
    rows.push_back(std::move(row));
  }
  return rows;
}

class Table {
 public:
  Table(std::vector<Row> rows, const CsvOptions& o, const std::string& name) : rows_(std::move(rows)), name_(name) {
    VOLT_CHECK(!rows_.empty(), "CsvDataset: '", name_, "' has no rows", o.header ? " (not even a header)" : "");
    width_ = rows_[0].fields.size();
    for (const Row& r : rows_)
      VOLT_CHECK(r.fields.size() == width_, "CsvDataset: '", name_, "' line ", r.line, " has ", r.fields.size(),
                 " fields but the ", o.header ? "header" : "first row", " (line ", rows_[0].line, ") has ", width_,
                 "; every row needs the same number (delimiter '", printable(std::string(1, o.delimiter)), "')");
    for (size_t c = 0; c < width_; ++c)
      columns_.push_back(o.header ? std::string(volt::detail::trim(rows_[0].fields[c]))
                                  : "column " + std::to_string(c + 1));
    first_data_ = o.header ? 1 : 0;
  }

  size_t width() const { return width_; }
  size_t samples() const { return rows_.size() - first_data_; }
  const std::string& column(size_t c) const { return columns_[c]; }

  size_t by_name(const std::string& col, const char* role) const {
    for (size_t c = 0; c < width_; ++c)
      if (columns_[c] == col) return c;
    std::string all;
    for (size_t c = 0; c < width_; ++c) all += (c ? ", '" : "'") + columns_[c] + "'";
    VOLT_FAIL("CsvDataset: '", name_, "' has no ", role, " column named '", col, "'; its columns are ", all);
  }
  size_t by_index(int64_t index, const char* role) const {
    const auto w = static_cast<int64_t>(width_);
    VOLT_CHECK(index >= -w && index < w, "CsvDataset: '", name_, "' ", role, " column index ", index,
               " is out of range for ", w, " columns (valid: ", -w, " to ", w - 1, ")");
    return static_cast<size_t>(index < 0 ? index + w : index);
  }

  // The field of sample `s`, column `c`, with spaces and a leading '+' removed.
  std::string_view cell(size_t s, size_t c) const {
    std::string_view v = volt::detail::trim(rows_[first_data_ + s].fields[c]);
    if (v.size() > 1 && v[0] == '+' && v[1] != '-') v.remove_prefix(1);
    return v;
  }
  [[noreturn]] void bad(size_t s, size_t c, const std::string& why) const {
    const Row& r = rows_[first_data_ + s];
    VOLT_FAIL("CsvDataset: '", name_, "' line ", r.line, ", column ", c + 1, " ('", columns_[c], "'): '",
              printable(r.fields[c]), "' ", why);
  }

  double number(size_t s, size_t c) const {
    const std::string_view v = cell(s, c);
    if (v.empty()) bad(s, c, "is empty; every feature and target needs a number (missing values are not supported)");
    double d = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
    if (ec == std::errc::result_out_of_range) bad(s, c, "is out of the range of a double");
    if (ec != std::errc() || end != v.data() + v.size()) bad(s, c, "is not a number");
    return d;
  }

  int64_t class_index(size_t s, size_t c) const {
    const std::string_view v = cell(s, c);
    int64_t k = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), k);
    if (ec != std::errc() || end != v.data() + v.size()) {
      const double d = number(s, c);
      if (!(std::floor(d) == d && std::abs(d) < 9.0e15))
        bad(s, c, "is not an integer class index (use CsvTarget::value for a regression target)");
      k = static_cast<int64_t>(d);
    }
    if (k < 0) bad(s, c, "is a negative class index; class indices count from 0");
    return k;
  }

 private:
  std::vector<Row> rows_;
  const std::string& name_;
  size_t width_ = 0;
  size_t first_data_ = 0;
  std::vector<std::string> columns_;
};

}  // namespace

CsvDataset::CsvDataset(Tensor inputs, Tensor targets, std::vector<std::string> feature_names, std::string target_name)
    : TensorDataset(std::move(inputs), std::move(targets)),
      feature_names_(std::move(feature_names)),
      target_name_(std::move(target_name)) {}

std::shared_ptr<CsvDataset> CsvDataset::load(const std::string& path, const CsvOptions& options) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in.good(), "CsvDataset: cannot open '", path, "': ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  VOLT_CHECK(!in.bad(), "CsvDataset: error reading '", path, "'");
  return parse(text, options, path);
}

std::shared_ptr<CsvDataset> CsvDataset::parse(std::string_view text, const CsvOptions& o, const std::string& name) {
  VOLT_CHECK(o.feature_dtype == DType::f32 || o.feature_dtype == DType::f64, "CsvDataset: feature_dtype must be f32 ",
             "or f64, got ", dtype_name(o.feature_dtype));
  VOLT_CHECK(!(o.target_name && o.target_index), "CsvDataset: set target_name or target_index, not both");
  VOLT_CHECK(o.feature_names.empty() || o.feature_indices.empty(), "CsvDataset: set feature_names or ",
             "feature_indices, not both");
  VOLT_CHECK(o.target != CsvTarget::none || (!o.target_name && !o.target_index), "CsvDataset: target_name and ",
             "target_index must be unset with CsvTarget::none");
  VOLT_CHECK(o.header || (!o.target_name && o.feature_names.empty()), "CsvDataset: columns can be chosen by name ",
             "only when the file has a header (header = true); use target_index / feature_indices");
  const Table table(split_rows(text, o.delimiter, name), o, name);

  const bool has_target = o.target != CsvTarget::none;
  const size_t target = !has_target      ? table.width()
                        : o.target_name  ? table.by_name(*o.target_name, "target")
                        : o.target_index ? table.by_index(*o.target_index, "target")
                                         : table.width() - 1;
  std::vector<size_t> features;
  for (const auto& f : o.feature_names) features.push_back(table.by_name(f, "feature"));
  for (int64_t f : o.feature_indices) features.push_back(table.by_index(f, "feature"));
  if (o.feature_names.empty() && o.feature_indices.empty())
    for (size_t c = 0; c < table.width(); ++c)
      if (c != target) features.push_back(c);
  std::set<size_t> seen;
  for (size_t c : features) {
    VOLT_CHECK(c != target, "CsvDataset: '", name, "' column ", c + 1, " ('", table.column(c),
               "') is the target and cannot also be a feature");
    VOLT_CHECK(seen.insert(c).second, "CsvDataset: '", name, "' column ", c + 1, " ('", table.column(c),
               "') is listed twice as a feature");
  }
  VOLT_CHECK(!features.empty(), "CsvDataset: '", name, "' has no feature columns (", table.width(),
             " columns, one of them the target)");

  const auto n = static_cast<int64_t>(table.samples()), f = static_cast<int64_t>(features.size());
  Tensor inputs = empty({n, f}, o.feature_dtype);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t j = 0; j < f; ++j) {
      const double v = table.number(static_cast<size_t>(s), features[static_cast<size_t>(j)]);
      if (o.feature_dtype == DType::f32) inputs.data<float>()[s * f + j] = static_cast<float>(v);
      else inputs.data<double>()[s * f + j] = v;
    }
  Tensor targets;
  if (o.target == CsvTarget::class_index) {
    targets = empty({n}, DType::i64);
    for (int64_t s = 0; s < n; ++s) targets.data<int64_t>()[s] = table.class_index(static_cast<size_t>(s), target);
  } else if (o.target == CsvTarget::value) {
    targets = empty({n}, DType::f32);
    for (int64_t s = 0; s < n; ++s)
      targets.data<float>()[s] = static_cast<float>(table.number(static_cast<size_t>(s), target));
  }
  std::vector<std::string> names;
  for (size_t c : features) names.push_back(table.column(c));
  return std::make_shared<CsvDataset>(std::move(inputs), std::move(targets), std::move(names),
                                      has_target ? table.column(target) : std::string());
}

}  // namespace volt::data
