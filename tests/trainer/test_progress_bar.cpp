#include <gtest/gtest.h>

#include <sstream>

#include <volt/trainer/progress_bar.h>

using namespace volt;

TEST(ProgressBar, FormatLineShowsPercentCountsRateEtaAndMetrics) {
  std::string line = ProgressBar::format_line("Epoch 0", 50, 200, 2.0, {{"loss", 0.5}, {"val_acc", 0.8125}}, 20);
  EXPECT_NE(line.find("Epoch 0:  25%|#####               | 50/200"), std::string::npos) << line;
  EXPECT_NE(line.find("[00:02<00:06, 25.00it/s"), std::string::npos) << line;
  EXPECT_NE(line.find("loss=0.500"), std::string::npos) << line;
  EXPECT_NE(line.find("val_acc=0.812"), std::string::npos) << line;
}

TEST(ProgressBar, UnknownTotalShowsCountOnly) {
  std::string line = ProgressBar::format_line("Predicting", 7, -1, 1.0, {});
  EXPECT_NE(line.find("Predicting: 7 [00:01, 7.00it/s]"), std::string::npos) << line;
}

TEST(ProgressBar, NonInteractivePrintsAboutTenLinesPerStage) {
  std::ostringstream os;
  ProgressBar bar(&os, /*interactive=*/0);
  bar.start("Epoch", 100, 1);
  for (int i = 0; i < 100; ++i) bar.update(i, {{"loss", 1.0 / (i + 1)}});
  bar.finish();
  std::string s = os.str();
  int lines = static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  EXPECT_EQ(lines, 10) << s;  // 10%..90% plus the final line
  EXPECT_EQ(s.find('\r'), std::string::npos);
  EXPECT_NE(s.find("Epoch 1: 100%"), std::string::npos) << s;
  EXPECT_NE(s.find("loss=0.010"), std::string::npos) << s;
}

TEST(ProgressBar, InteractiveRedrawsInPlaceAndDisabledPrintsNothing) {
  std::ostringstream os;
  ProgressBar bar(&os, /*interactive=*/1);
  bar.start("Validation", 3);
  for (int i = 0; i < 3; ++i) bar.update(i);
  bar.finish();
  EXPECT_EQ(os.str().front(), '\r');
  EXPECT_EQ(os.str().back(), '\n');
  std::ostringstream quiet;
  ProgressBar off(&quiet, 0);
  off.set_enabled(false);
  off.start("Epoch", 10, 0);
  for (int i = 0; i < 10; ++i) off.update(i);
  off.finish();
  EXPECT_TRUE(quiet.str().empty());
}
