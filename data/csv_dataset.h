#pragma once
/// @file
/// A dataset read from a CSV table: one sample per row, numeric feature columns as the input (N, F) and one
/// target column as the target (N).
///
/// @code
///   // sepal_length,sepal_width,petal_length,petal_width,species
///   // 5.1,3.5,1.4,0.2,0
///   auto iris = CsvDataset::load("iris.csv", {.target_name = "species"});   // inputs f32 (150, 4), targets i64
///   auto houses = CsvDataset::load("houses.tsv", {.delimiter = '\t', .target_index = -1,
///                                                 .target = CsvTarget::value});  // regression: targets f32 (N)
/// @endcode
///
/// Format (RFC 4180 plus common variants): fields separated by `delimiter`; a field that starts with '"' is
/// quoted and may hold the delimiter, newlines and doubled quotes (""), and only spaces or tabs may follow its
/// closing quote; lines end in `\n`, `\r\n` or `\r`; a UTF-8 byte-order mark and blank lines are skipped. Every row
/// must have as many fields as the first. Numeric fields may have surrounding spaces and a leading '+'; "nan"
/// and "inf" parse as floats. Everything is read into memory once (it is a TensorDataset).
///
/// Errors name the file, the line (of the row's first character, counting from 1), the column (number from 1
/// and header name) and the offending text, e.g. "CsvDataset: 'iris.csv' line 7, column 2 ('sepal_width'):
/// 'abc' is not a number".
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <volt/data/dataset.h>

namespace volt::data {

enum class CsvTarget {
  class_index,  ///< targets i64 (N): non-negative integers ("3", or an integral float such as "3.0")
  value,        ///< targets f32 (N), for regression
  none,         ///< no target column: every selected column is a feature and targets are undefined
};

struct CsvOptions {
  char delimiter = ',';
  bool header = true;  ///< the first row names the columns; without one the columns are named "column 1", ...
  /// The target column by header name or by index (from 0; negative counts from the end), at most one of the
  /// two; neither picks the last column. Both must be unset with CsvTarget::none.
  std::optional<std::string> target_name;
  std::optional<int64_t> target_index;
  /// The feature columns in input order, by name or by index (at most one list); both empty: every column
  /// except the target, in file order. The target column cannot be a feature.
  std::vector<std::string> feature_names;
  std::vector<int64_t> feature_indices;
  CsvTarget target = CsvTarget::class_index;
  DType feature_dtype = DType::f32;  ///< f32 or f64
};

class CsvDataset : public TensorDataset {
 public:
  /// Reads and parses the file at `path`.
  static std::shared_ptr<CsvDataset> load(const std::string& path, const CsvOptions& options = {});
  /// Parses CSV text held in memory; `name` stands for the source in errors.
  static std::shared_ptr<CsvDataset> parse(std::string_view text, const CsvOptions& options = {},
                                           const std::string& name = "<text>");

  CsvDataset(Tensor inputs, Tensor targets, std::vector<std::string> feature_names, std::string target_name);
  /// The feature columns' names in input order (inputs column j is feature_names()[j]).
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  /// The target column's name ("" with CsvTarget::none).
  const std::string& target_name() const { return target_name_; }

 private:
  std::vector<std::string> feature_names_;
  std::string target_name_;
};

}  // namespace volt::data
