#include <gtest/gtest.h>

#include <volt/nn/nn.h>
#include <volt/trainer/model_summary.h>

using namespace volt;

namespace {
struct Mlp : nn::Module {
  nn::Linear l1{784, 128}, l2{128, 10};
  Mlp() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  std::string type_name() const override { return "Mlp"; }
};
}  // namespace

TEST(ModelSummary, HumanCounts) {
  EXPECT_EQ(human_count(0), "0");
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(1290), "1.3 K");
  EXPECT_EQ(human_count(100480), "100 K");
  EXPECT_EQ(human_count(2500000), "2.5 M");
}

TEST(ModelSummary, MlpTableRowsAndTotals) {
  Mlp m;
  m.l2.eval();
  std::string s = model_summary(m);
  EXPECT_NE(s.find("0 | l1   | Linear | 100 K  | train"), std::string::npos) << s;
  EXPECT_NE(s.find("1 | l2   | Linear | 1.3 K  | eval"), std::string::npos) << s;
  EXPECT_NE(s.find("101 K     Trainable params"), std::string::npos) << s;
  EXPECT_NE(s.find("0         Non-trainable params"), std::string::npos) << s;
  EXPECT_NE(s.find("0.407     Total estimated model params size (MB)"), std::string::npos) << s;  // 101770 * 4 B
}
