// CsvDataset: column selection, target kinds, quoting and line endings, and every parse error with its line,
// column and text.
#include <gtest/gtest.h>

#include <fstream>

#include "common/gradcheck.h"
#include <volt/data/csv_dataset.h>
#include <volt/data/data_loader.h>
#include "data/temp_dir.h"

namespace volt::data {
namespace {

using testing::TempDir;

const char* kIris =
    "sepal_length,sepal_width,petal_length,petal_width,species\n"
    "5.1,3.5,1.4,0.2,0\n"
    "7.0,3.2,4.7,1.4,1\n"
    "6.3,3.3,6.0,2.5,2\n";

TEST(CsvDataset, LastColumnIsTheClassTargetByDefault) {
  TempDir dir;
  std::ofstream(dir.file("iris.csv")) << kIris;
  auto ds = CsvDataset::load(dir.file("iris.csv"));
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->inputs().dtype(), DType::f32);
  EXPECT_EQ(ds->inputs().shape(), (Shape{3, 4}));
  EXPECT_EQ(ds->inputs().to_vector<float>(),
            (std::vector<float>{5.1f, 3.5f, 1.4f, 0.2f, 7.0f, 3.2f, 4.7f, 1.4f, 6.3f, 3.3f, 6.0f, 2.5f}));
  EXPECT_EQ(ds->targets().dtype(), DType::i64);
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(ds->feature_names(),
            (std::vector<std::string>{"sepal_length", "sepal_width", "petal_length", "petal_width"}));
  EXPECT_EQ(ds->target_name(), "species");
  VOLT_EXPECT_ERROR(CsvDataset::load(dir.file("missing.csv")), "cannot open", "missing.csv");
}

TEST(CsvDataset, TargetByNameOrIndexAndExplicitFeatures) {
  auto by_name = CsvDataset::parse(kIris, {.target_name = "petal_length", .target = CsvTarget::value});
  EXPECT_EQ(by_name->targets().dtype(), DType::f32);
  EXPECT_EQ(by_name->targets().to_vector<float>(), (std::vector<float>{1.4f, 4.7f, 6.0f}));
  EXPECT_EQ(by_name->feature_names(),
            (std::vector<std::string>{"sepal_length", "sepal_width", "petal_width", "species"}));
  EXPECT_EQ(by_name->get(1).input.to_vector<float>(), (std::vector<float>{7.0f, 3.2f, 1.4f, 1.0f}));

  auto by_index = CsvDataset::parse(kIris, {.target_index = 0, .target = CsvTarget::value});
  EXPECT_EQ(by_index->target_name(), "sepal_length");
  EXPECT_EQ(by_index->targets().to_vector<float>(), (std::vector<float>{5.1f, 7.0f, 6.3f}));
  auto from_end = CsvDataset::parse(kIris, {.target_index = -2, .target = CsvTarget::value});
  EXPECT_EQ(from_end->target_name(), "petal_width");

  auto features = CsvDataset::parse(kIris, {.feature_names = {"petal_width", "sepal_length"}});
  EXPECT_EQ(features->inputs().shape(), (Shape{3, 2}));
  EXPECT_EQ(features->inputs().to_vector<float>(), (std::vector<float>{0.2f, 5.1f, 1.4f, 7.0f, 2.5f, 6.3f}));
  auto indices = CsvDataset::parse(kIris, {.target_name = "species", .feature_indices = {-2, 1}});
  EXPECT_EQ(indices->feature_names(), (std::vector<std::string>{"petal_width", "sepal_width"}));

  auto f64 = CsvDataset::parse(kIris, {.feature_dtype = DType::f64});
  EXPECT_EQ(f64->inputs().dtype(), DType::f64);
  EXPECT_EQ(f64->inputs().to_vector<double>()[0], 5.1);

  auto none = CsvDataset::parse(kIris, {.target = CsvTarget::none});
  EXPECT_EQ(none->inputs().shape(), (Shape{3, 5}));
  EXPECT_FALSE(none->targets().defined());
  EXPECT_EQ(none->target_name(), "");
}

TEST(CsvDataset, NoHeaderDelimiterAndLineEndings) {
  auto ds = CsvDataset::parse("1;2;0\r\n3;4;1\r\n\r\n5;6;1", {.delimiter = ';', .header = false});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->inputs().to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"column 1", "column 2"}));
  EXPECT_EQ(ds->target_name(), "column 3");
  auto tabs = CsvDataset::parse("a\tb\n1.5\t2\r3\t4\n\n", {.delimiter = '\t', .target = CsvTarget::value});
  EXPECT_EQ(tabs->inputs().to_vector<float>(), (std::vector<float>{1.5f, 3}));
  EXPECT_EQ(tabs->targets().to_vector<float>(), (std::vector<float>{2, 4}));
  // A UTF-8 byte-order mark before the header, a header with no data rows.
  auto bom = CsvDataset::parse("\xEF\xBB\xBFx,y\n", {.target_name = "y"});
  EXPECT_EQ(bom->size(), 0);
  EXPECT_EQ(bom->inputs().shape(), (Shape{0, 1}));
  EXPECT_EQ(bom->feature_names(), (std::vector<std::string>{"x"}));
}

TEST(CsvDataset, QuotedFieldsAndNumberSpellings) {
  const char* text =
      "\"size, m2\",\"say \"\"hi\"\"\",\"multi\nline\",label\n"
      "\" 12.5 \",+3,-1e-2,\"7\"\n"
      "  4 , 5.0 ,\"6\"  ,  3.0 \n";
  auto ds = CsvDataset::parse(text);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"size, m2", "say \"hi\"", "multi\nline"}));
  EXPECT_EQ(ds->target_name(), "label");
  EXPECT_EQ(ds->inputs().to_vector<float>(), (std::vector<float>{12.5f, 3, -0.01f, 4, 5, 6}));
  EXPECT_EQ(ds->targets().to_vector<int64_t>(), (std::vector<int64_t>{7, 3}));
  auto special = CsvDataset::parse("x,y\ninf,1\n-inf,2\nnan,3\n", {.target = CsvTarget::value});
  const auto x = special->inputs().to_vector<float>();
  EXPECT_TRUE(std::isinf(x[0]) && x[0] > 0);
  EXPECT_TRUE(std::isinf(x[1]) && x[1] < 0);
  EXPECT_TRUE(std::isnan(x[2]));
}

TEST(CsvDataset, ParseErrorsNameLineColumnAndText) {
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b,c\n1,2,0\n3,abc,1\n", {}, "t.csv"), "'t.csv' line 3, column 2 ('b')",
                    "'abc' is not a number");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,\n", {}, "t.csv"), "line 2, column 2 ('b')", "'' is empty",
                    "missing values");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,2.5\n", {}, "t.csv"), "line 2, column 2 ('b'): '2.5'",
                    "not an integer class index", "CsvTarget::value");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,-1\n", {}, "t.csv"), "'-1' is a negative class index");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,1e999\n", {.target = CsvTarget::value}, "t.csv"), "'1e999'",
                    "out of the range");
  // Line numbers count the lines inside quoted fields.
  VOLT_EXPECT_ERROR(CsvDataset::parse("\"a\nb\",c\n1,2\n3,x\n", {}, "t.csv"), "line 4, column 2 ('c'): 'x'");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b,c\n1,2,3\n4,5\n", {}, "t.csv"), "line 3 has 2 fields",
                    "header (line 1) has 3");
  VOLT_EXPECT_ERROR(CsvDataset::parse("1,2\n3,4,5\n", {.header = false}, "t.csv"), "line 2 has 3 fields",
                    "first row (line 1) has 2");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,\"2\n", {}, "t.csv"), "line 2, field 2",
                    "quoted field opened there is never closed");
  VOLT_EXPECT_ERROR(CsvDataset::parse("a,b\n1,\"2\"x\n", {}, "t.csv"), "line 2, field 2", "unexpected text 'x'",
                    "after a closing quote");
  VOLT_EXPECT_ERROR(CsvDataset::parse("", {}, "t.csv"), "'t.csv' has no rows (not even a header)");
  VOLT_EXPECT_ERROR(CsvDataset::parse("\n\n", {.header = false}, "t.csv"), "has no rows");
}

TEST(CsvDataset, ColumnSelectionErrors) {
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.target_name = "label"}), "no target column named 'label'",
                    "'sepal_length', 'sepal_width', 'petal_length', 'petal_width', 'species'");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_names = {"petal"}}), "no feature column named 'petal'");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.target_index = 5}), "target column index 5 is out of range for 5",
                    "-5 to 4");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_indices = {-6}}), "feature column index -6");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_names = {"species"}}), "column 5 ('species') is the target");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_indices = {0, 0}}), "column 1 ('sepal_length') is listed twice");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.target_name = "species", .target_index = 4}), "not both");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_names = {"a"}, .feature_indices = {1}}), "not both");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.target_index = 1, .target = CsvTarget::none}),
                    "must be unset with CsvTarget::none");
  VOLT_EXPECT_ERROR(CsvDataset::parse("1,2\n", {.header = false, .target_name = "y"}), "only when the file has a header");
  VOLT_EXPECT_ERROR(CsvDataset::parse("y\n1\n"), "no feature columns");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.feature_dtype = DType::i64}), "feature_dtype must be f32 or f64");
  VOLT_EXPECT_ERROR(CsvDataset::parse(kIris, {.delimiter = '"'}), "delimiter cannot be");
}

TEST(CsvDataset, WorksWithTheDataLoader) {
  std::string text = "x1,x2,y\n";
  for (int i = 0; i < 7; ++i) text += std::to_string(i) + "," + std::to_string(-i) + "," + std::to_string(i % 2) + "\n";
  auto ds = CsvDataset::parse(text);
  DataLoader loader(ds, {.batch_size = 3, .drop_last = true});
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> ys;
  for (const Batch& b : loader) {
    xs.push_back(b.input.to_vector<float>());
    ys.push_back(b.target.to_vector<int64_t>());
  }
  EXPECT_EQ(xs, (std::vector<std::vector<float>>{{0, 0, 1, -1, 2, -2}, {3, -3, 4, -4, 5, -5}}));
  EXPECT_EQ(ys, (std::vector<std::vector<int64_t>>{{0, 1, 0}, {1, 0, 1}}));
}

}  // namespace
}  // namespace volt::data
