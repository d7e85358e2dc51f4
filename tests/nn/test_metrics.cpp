// Metric objects: values against hand-computed numbers and naive references, update/compute/reset cycles,
// and state sync across simulated ranks (fake collectives in one process) equal to the whole-data value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>
#include "common/gradcheck.h"

using namespace volt;
using namespace volt::metrics;

namespace {

Tensor labels(const std::vector<int64_t>& v) { return from_vector(v); }
Tensor probs(const std::vector<float>& v) { return from_vector(v); }
double val(Metric& m) { return m.compute().item(); }

ClassificationOptions mc(int64_t C, Average avg = Average::Micro) {
  return {.task = Task::Multiclass, .num_classes = C, .average = avg};
}
const ClassificationOptions kBinary{.task = Task::Binary};

// Hand-computed example, C = 5 (class 3 occurs in target but is never predicted; class 4 never occurs).
//   class 0: tp 3 fp 1 fn 1 -> P 3/4 R 3/4 F1 3/4      class 1: tp 1 fp 1 fn 1 -> P 1/2 R 1/2 F1 1/2
//   class 2: tp 1 fp 1 fn 0 -> P 1/2 R 1   F1 2/3      class 3: tp 0 fp 0 fn 1 -> all 0
//   micro: 5 correct of 8.
const std::vector<int64_t> kTarget = {0, 0, 0, 0, 1, 1, 2, 3};
const std::vector<int64_t> kPred = {0, 0, 1, 0, 1, 0, 2, 2};

// Logits (N, C) whose argmax is `pred`.
Tensor logits_for(const std::vector<int64_t>& pred, int64_t C, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(pred.size() * C);
  for (size_t i = 0; i < pred.size(); ++i) {
    for (int64_t c = 0; c < C; ++c) v[i * C + c] = u(rng);
    v[i * C + pred[i]] = 5.f;
  }
  return from_vector(v, {static_cast<int64_t>(pred.size()), C});
}

}  // namespace

// ---- multiclass scores -------------------------------------------------------------------------------------

TEST(MetricsClassification, MulticlassMicroEqualsAccuracy) {
  Accuracy acc(mc(5));
  Precision prec(mc(5));
  Recall rec(mc(5));
  F1Score f1(mc(5));
  for (Metric* m : std::vector<Metric*>{&acc, &prec, &rec, &f1}) {
    m->update(labels(kPred), labels(kTarget));
    EXPECT_NEAR(val(*m), 5.0 / 8.0, 1e-6) << m->name();
  }
  EXPECT_EQ(f1.name(), "MulticlassF1Score");
}

TEST(MetricsClassification, MulticlassMacroHandComputed) {
  Accuracy acc(mc(5, Average::Macro));
  Precision prec(mc(5, Average::Macro));
  Recall rec(mc(5, Average::Macro));
  F1Score f1(mc(5, Average::Macro));
  Tensor logits = logits_for(kPred, 5);
  for (Metric* m : std::vector<Metric*>{&acc, &prec, &rec, &f1}) m->update(logits, labels(kTarget));
  // Class 4 (tp + fp + fn == 0) is left out of the mean: 4 classes count.
  EXPECT_NEAR(val(prec), (0.75 + 0.5 + 0.5 + 0.0) / 4, 1e-6);
  EXPECT_NEAR(val(rec), (0.75 + 0.5 + 1.0 + 0.0) / 4, 1e-6);
  EXPECT_NEAR(val(acc), (0.75 + 0.5 + 1.0 + 0.0) / 4, 1e-6);
  EXPECT_NEAR(val(f1), (0.75 + 0.5 + 2.0 / 3.0 + 0.0) / 4, 1e-6);
}

TEST(MetricsClassification, PerClassScoresAndStatScores) {
  F1Score f1(mc(5, Average::None));
  f1.update(labels(kPred), labels(kTarget));
  std::vector<float> per = f1.compute().to_vector<float>();
  ASSERT_EQ(per.size(), 5u);
  EXPECT_NEAR(per[0], 0.75, 1e-6);
  EXPECT_NEAR(per[1], 0.5, 1e-6);
  EXPECT_NEAR(per[2], 2.0 / 3.0, 1e-6);
  EXPECT_EQ(per[3], 0.f);
  EXPECT_EQ(per[4], 0.f);

  StatScores ss(mc(5));
  ss.update(labels(kPred), labels(kTarget));
  Tensor s = ss.compute();
  ASSERT_EQ(s.shape(), (Shape{5, 5}));
  // rows [tp, fp, tn, fn, support]
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 3, 1, 4, 1, 1, 5, 1, 2, 1, 1, 6, 0, 1,
                                                           0, 0, 7, 1, 1, 0, 0, 8, 0, 0}));
}

TEST(MetricsClassification, MacroMatchesNaiveReferenceOnImbalancedData) {
  const int64_t C = 6;
  std::mt19937 rng(7);
  std::discrete_distribution<int64_t> skew({50, 20, 10, 5, 1, 0});  // class 5 never occurs
  std::vector<int64_t> t(300), p(300);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = skew(rng);
    p[i] = (rng() % 3 == 0) ? skew(rng) : t[i];
    if (p[i] == 3) p[i] = 0;  // class 3 is never predicted
  }
  double psum = 0, rsum = 0, fsum = 0;
  int present = 0;
  for (int64_t c = 0; c < C; ++c) {
    double tp = 0, fp = 0, fn = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      tp += p[i] == c && t[i] == c;
      fp += p[i] == c && t[i] != c;
      fn += p[i] != c && t[i] == c;
    }
    if (tp + fp + fn == 0) continue;
    ++present;
    double pr = tp + fp > 0 ? tp / (tp + fp) : 0, rc = tp + fn > 0 ? tp / (tp + fn) : 0;
    psum += pr;
    rsum += rc;
    fsum += pr + rc > 0 ? 2 * pr * rc / (pr + rc) : 0;
  }
  ASSERT_EQ(present, 5);
  Precision prec(mc(C, Average::Macro));
  Recall rec(mc(C, Average::Macro));
  F1Score f1(mc(C, Average::Macro));
  for (size_t i = 0; i < t.size(); i += 16) {  // batches of 16
    size_t n = std::min<size_t>(16, t.size() - i);
    std::vector<int64_t> bt(t.begin() + i, t.begin() + i + n), bp(p.begin() + i, p.begin() + i + n);
    for (Metric* m : std::vector<Metric*>{&prec, &rec, &f1}) m->update(logits_for(bp, C, i), labels(bt));
  }
  EXPECT_EQ(f1.update_count(), 19);
  EXPECT_NEAR(val(prec), psum / present, 1e-6);
  EXPECT_NEAR(val(rec), rsum / present, 1e-6);
  EXPECT_NEAR(val(f1), fsum / present, 1e-6);
  // Macro differs from micro on imbalanced data.
  F1Score micro(mc(C));
  micro.update(labels(p), labels(t));
  EXPECT_GT(std::abs(val(micro) - fsum / present), 0.01);
}

TEST(MetricsClassification, SegmentationShapedInputs) {
  // preds (N, C, L) scores with target (N, L): argmax over dim 1 at every position.
  Tensor preds = from_vector<float>({0.9f, 0.1f, 0.2f, 0.8f, /**/ 0.3f, 0.6f, 0.7f, 0.4f}, {2, 2, 2});
  Tensor target = labels({0, 1, 1, 1}).reshape({2, 2});  // argmax is {0, 1} and {1, 0}
  Accuracy acc(mc(2));
  acc.update(preds, target);
  EXPECT_NEAR(val(acc), 0.75, 1e-6);
}

// ---- binary ------------------------------------------------------------------------------------------------

TEST(MetricsClassification, BinaryThresholdProbabilitiesAndLogits) {
  std::vector<float> p = {0.9f, 0.2f, 0.6f, 0.4f, 0.8f, 0.1f, 0.55f, 0.5f};
  std::vector<int64_t> t = {1, 0, 0, 1, 1, 0, 1, 1};
  // threshold 0.5 (strict): pred 1 0 1 0 1 0 1 0 -> tp 3, fp 1, fn 2, tn 2
  std::vector<float> logit(p.size());
  for (size_t i = 0; i < p.size(); ++i) logit[i] = std::log(p[i] / (1 - p[i])) * 3.f;  // some outside [0, 1]
  for (const std::vector<float>& input : {p, logit}) {
    Accuracy acc(kBinary);
    Precision prec(kBinary);
    Recall rec(kBinary);
    F1Score f1(kBinary);
    for (Metric* m : std::vector<Metric*>{&acc, &prec, &rec, &f1}) m->update(probs(input), labels(t));
    EXPECT_NEAR(val(acc), 5.0 / 8.0, 1e-6);
    EXPECT_NEAR(val(prec), 3.0 / 4.0, 1e-6);
    EXPECT_NEAR(val(rec), 3.0 / 5.0, 1e-6);
    EXPECT_NEAR(val(f1), 2.0 / 3.0, 1e-6);
  }
  FBetaScore f2(kBinary, 2.0);  // (5 * 3) / (5 * 3 + 4 * 2 + 1)
  f2.update(probs(p), labels(t));
  EXPECT_NEAR(val(f2), 15.0 / 24.0, 1e-6);
  Accuracy hi({.task = Task::Binary, .threshold = 0.85});
  hi.update(probs(p), labels(t));
  EXPECT_NEAR(val(hi), 4.0 / 8.0, 1e-6);  // only 0.9 is positive
}

TEST(MetricsClassification, BinaryBoolAndIntegerLabelsAndIgnoreIndex) {
  Tensor pred = from_vector<uint8_t>({1, 0, 1, 1}).to(DType::boolean);
  Tensor target = from_vector<int32_t>({1, 0, 0, 1});
  Precision prec(kBinary);
  prec.update(pred, target);
  EXPECT_NEAR(val(prec), 2.0 / 3.0, 1e-6);

  Recall rec({.task = Task::Binary, .ignore_index = -1});
  rec.update(labels({1, 0, 0, 1}), labels({1, -1, 1, -1}));  // only indices 0 and 2 count
  EXPECT_NEAR(val(rec), 0.5, 1e-6);
}

TEST(MetricsClassification, ZeroDivisionGivesZero) {
  Precision prec(kBinary);
  prec.update(labels({0, 0}), labels({1, 0}));  // nothing predicted positive
  EXPECT_EQ(val(prec), 0.0);
  F1Score f1(mc(3, Average::Macro));
  EXPECT_EQ(val(f1), 0.0);  // no updates at all
}

// ---- confusion matrix --------------------------------------------------------------------------------------

TEST(MetricsClassification, ConfusionMatrixRowsAreTargets) {
  ConfusionMatrix cm(5);
  cm.update(logits_for(kPred, 5), labels(kTarget));
  Tensor m = cm.compute();
  ASSERT_EQ(m.shape(), (Shape{5, 5}));
  ASSERT_EQ(m.dtype(), DType::i64);
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 0, 0, 0,  //
                                                           1, 1, 0, 0, 0,  //
                                                           0, 0, 1, 0, 0,  //
                                                           0, 0, 1, 0, 0,  //
                                                           0, 0, 0, 0, 0}));
  ConfusionMatrix bin(kBinary);
  bin.update(probs({0.9f, 0.2f, 0.7f}), labels({1, 1, 0}));
  EXPECT_EQ(bin.compute().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1}));
}

// ---- AUROC -------------------------------------------------------------------------------------------------

TEST(MetricsAUROC, KnownValuesWithTies) {
  BinaryAUROC a;
  a.update(probs({0.1f, 0.4f, 0.35f, 0.8f}), labels({0, 0, 1, 1}));
  EXPECT_NEAR(val(a), 0.75, 1e-7);  // sklearn's documented example
  a.reset();
  // Ties between positives and negatives count one half: pairs won 1 + 3 + 2 (two ties) of 9.
  a.update(probs({0.1f, 0.4f, 0.35f}), labels({0, 0, 1}));
  a.update(probs({0.8f, 0.4f, 0.4f}), labels({1, 1, 0}));
  EXPECT_NEAR(val(a), 6.0 / 9.0, 1e-7);
  EXPECT_EQ(a.state("preds").tensor().numel(), 6);
  // All scores equal: the ROC is the diagonal.
  EXPECT_NEAR(roc_auc({0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}), 0.5, 1e-12);
  EXPECT_EQ(roc_auc({0.2, 0.3}, {1, 1}), 0.0);  // no negatives: 0 by convention
}

TEST(MetricsAUROC, MatchesPairwiseReferenceOnRandomTiedData) {
  std::mt19937 rng(3);
  std::vector<double> s(400);
  std::vector<int64_t> l(400);
  for (size_t i = 0; i < s.size(); ++i) {
    l[i] = rng() % 3 == 0;
    s[i] = std::round((l[i] ? 0.2 : 0.0) + (rng() % 1000) / 1000.0 * 10) / 10;  // heavy ties
  }
  double wins = 0, P = 0, N = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    (l[i] ? P : N) += 1;
    for (size_t j = 0; j < s.size(); ++j)
      if (l[i] == 1 && l[j] == 0) wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
  }
  BinaryAUROC a;
  a.update(from_vector(s), labels(l));
  EXPECT_NEAR(val(a), wins / (P * N), 1e-6);
  EXPECT_NEAR(roc_auc(s, l), wins / (P * N), 1e-12);
}

// ---- aggregation -------------------------------------------------------------------------------------------

TEST(MetricsAggregation, MeanSumMaxMin) {
  MeanMetric mean;
  mean.update(from_vector<float>({1, 2, 3}));
  mean.update(10.0, 2.0);
  EXPECT_NEAR(val(mean), (1 + 2 + 3 + 20) / 5.0, 1e-6);
  mean.update(from_vector<double>({4, NAN}), from_vector<double>({1, 7}));  // NaN (and its weight) dropped
  EXPECT_NEAR(val(mean), (26 + 4) / 6.0, 1e-6);
  MeanMetric strict(NanStrategy::Error);
  VOLT_EXPECT_ERROR(strict.update(NAN), "MeanMetric.update", "NaN");
  VOLT_EXPECT_ERROR(mean.update(from_vector<float>({1, 2}), from_vector<float>({1, 2, 3})), "MeanMetric.update",
                    "weight has shape (3,)");

  SumMetric sum;
  MaxMetric mx;
  MinMetric mn;
  EXPECT_EQ(val(mx), -INFINITY);
  for (Metric* m : std::vector<Metric*>{&sum, &mx, &mn}) {
    m->update(from_vector<float>({3, -1, 7}));
    m->update(from_vector<float>({2}));
  }
  EXPECT_EQ(val(sum), 11.0);
  EXPECT_EQ(val(mx), 7.0);
  EXPECT_EQ(val(mn), -1.0);
  mx.reset();
  EXPECT_EQ(mx.update_count(), 0);
  mx.update(-5.0);
  EXPECT_EQ(val(mx), -5.0);
}

// ---- update / compute / reset / forward --------------------------------------------------------------------

TEST(MetricsLifecycle, UpdateComputeResetCycles) {
  Accuracy acc(mc(3));
  for (int epoch = 0; epoch < 3; ++epoch) {
    acc.update(labels({0, 1, 2, epoch % 3}), labels({0, 1, 2, 0}));
    acc.update(labels({1}), labels({1}));
    double expect = epoch % 3 == 0 ? 1.0 : 4.0 / 5.0;
    EXPECT_NEAR(val(acc), expect, 1e-6);
    EXPECT_NEAR(val(acc), expect, 1e-6);  // compute does not consume the state
    EXPECT_EQ(acc.update_count(), 2);
    acc.reset();
    EXPECT_EQ(acc.state("tp").value.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  }
}

TEST(MetricsLifecycle, ForwardReturnsBatchValueAndAccumulates) {
  F1Score f1(kBinary);
  double b1 = f1.forward(labels({1, 0, 1, 0}), labels({1, 0, 0, 0})).item();  // tp 1 fp 1 -> 2/3
  EXPECT_NEAR(b1, 2.0 / 3.0, 1e-6);
  double b2 = f1(labels({1, 0}), labels({1, 1})).item();  // tp 1 fn 1 -> 2/3
  EXPECT_NEAR(b2, 2.0 / 3.0, 1e-6);
  EXPECT_EQ(f1.update_count(), 2);
  EXPECT_NEAR(val(f1), 4.0 / 6.0, 1e-6);  // tp 2 fp 1 fn 1 -> 4 / 6
  BinaryAUROC auc;
  auc.forward(probs({0.1f, 0.9f}), labels({0, 1}));
  EXPECT_NEAR(auc.forward(probs({0.8f, 0.3f}), labels({0, 1})).item(), 0.0, 1e-7);
  EXPECT_NEAR(val(auc), 0.75, 1e-7);  // 0.9>0.1, 0.9>0.8, 0.3>0.1, 0.3<0.8: 3 of 4 pairs
}

TEST(MetricsLifecycle, InputValidation) {
  Accuracy acc(mc(4));
  VOLT_EXPECT_ERROR(acc.update(labels({0, 1}), labels({0, 1, 2})), "MulticlassAccuracy.update", "(2,)", "(3,)");
  VOLT_EXPECT_ERROR(acc.update(labels({0, 1}), labels({0, 4})), "target label 4", "[0, 4)");
  VOLT_EXPECT_ERROR(acc.update(labels({0, -2}), labels({0, 1})), "predicted label -2");
  VOLT_EXPECT_ERROR(acc.update(labels({0, 1}), probs({0, 1})), "target has dtype f", "integer or bool");
  VOLT_EXPECT_ERROR(acc.update(zeros({2, 3}), labels({0, 1})), "float preds has shape (2, 3)", "expected preds (2, 4)");
  F1Score f1(kBinary);
  VOLT_EXPECT_ERROR(f1.update(labels({0, 2}), labels({0, 1})), "BinaryF1Score.update", "integer preds[1] is 2");
  VOLT_EXPECT_ERROR(f1.update(probs({0.2f, 0.3f}), labels({0, 3})), "target value 3");
  BinaryAUROC auc;
  VOLT_EXPECT_ERROR(auc.update(labels({0, 1}), labels({0, 1})), "BinaryAUROC.update", "float scores");
  VOLT_EXPECT_ERROR(Accuracy(mc(1)), "num_classes is 1");
  EXPECT_EQ(acc.update_count(), 0);  // failed updates do not count
}

TEST(MetricsLifecycle, UpdateOnBatchOf16IsFast) {
  Accuracy acc(mc(10, Average::Macro));
  Tensor logits = randn({16, 10});
  Tensor target = labels({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5});
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) acc.update(logits, target);
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000;
  std::printf("[metrics] Accuracy.update on (16, 10) logits: %.1f us per call\n", us);
  EXPECT_LT(us, 2000.0);
  EXPECT_EQ(acc.state("tp").value.to_vector<int64_t>().size(), 10u);
}

// ---- state sync across simulated ranks ---------------------------------------------------------------------

namespace {

// Simulates ranks in one process. Rank r's sync fn runs sync_states_with with fake collectives that read
// every rank's local states: the k-th collective of a sync concerns state k, as real collectives are matched
// by call order across ranks.
class FakeWorld {
 public:
  explicit FakeWorld(std::vector<Metric*> ranks) : ranks_(std::move(ranks)) {
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->set_sync_fn(sync_fn(r));
  }

 private:
  StateSyncFn sync_fn(size_t rank) {
    return [this, rank](std::vector<MetricState>& states) {
      size_t k = 0;
      AllReduceFn all_reduce = [&](const Tensor& local, StateReduce op) {
        std::vector<std::vector<double>> v;
        for (Metric* m : ranks_) v.push_back(m->states()[k].value.to_vector<double>());
        EXPECT_EQ(local.to_vector<double>(), v[rank]) << "collective " << k << " out of order";
        ++k;
        std::vector<double> out = v[0];
        for (size_t r = 1; r < v.size(); ++r)
          for (size_t i = 0; i < out.size(); ++i) {
            if (op == StateReduce::Min) out[i] = std::min(out[i], v[r][i]);
            else if (op == StateReduce::Max) out[i] = std::max(out[i], v[r][i]);
            else out[i] += v[r][i];
          }
        if (op == StateReduce::Mean)
          for (double& x : out) x /= static_cast<double>(v.size());
        return from_vector(out, local.shape()).to(local.dtype());
      };
      AllGatherUnevenFn all_gather = [&](const Tensor& local) {
        std::vector<Tensor> out;
        for (Metric* m : ranks_) out.push_back(m->states()[k].tensor());
        EXPECT_EQ(local.to_vector<double>(), out[rank].to_vector<double>());
        ++k;
        return out;
      };
      sync_states_with(states, all_reduce, all_gather);
    };
  }
  std::vector<Metric*> ranks_;
};

using Factory = std::function<std::unique_ptr<Metric>()>;

void update_in_batches(Metric& m, const Tensor& preds, const Tensor& target, int64_t start, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) {
    int64_t b = std::min<int64_t>(4, n - i);
    m.update(preds.narrow(0, start + i, b), target.narrow(0, start + i, b));
  }
}

std::vector<std::vector<double>> state_values(Metric& m) {
  std::vector<std::vector<double>> out;
  for (const MetricState& s : m.states()) out.push_back(s.tensor().to_vector<double>());
  return out;
}

// Shards (preds, target) over ranks with `shard_sizes` samples each and checks that every rank's synced
// compute() equals the metric over the whole data, that local states survive, and that accumulation goes on.
void expect_sync_equals_whole(const Factory& make, const Tensor& preds, const Tensor& target,
                              const std::vector<int64_t>& shard_sizes) {
  std::unique_ptr<Metric> whole = make();
  update_in_batches(*whole, preds, target, 0, preds.size(0));
  std::vector<std::unique_ptr<Metric>> ranks;
  std::vector<Metric*> raw;
  int64_t off = 0;
  for (int64_t n : shard_sizes) {
    ranks.push_back(make());
    update_in_batches(*ranks.back(), preds, target, off, n);
    raw.push_back(ranks.back().get());
    off += n;
  }
  ASSERT_EQ(off, preds.size(0));
  FakeWorld world(raw);
  std::vector<double> expected = whole->compute().to_vector<double>();
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto before = state_values(*ranks[r]);
    int64_t count = ranks[r]->update_count();
    std::vector<double> got = ranks[r]->compute().to_vector<double>();
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], 1e-6) << whole->name() << " rank " << r << " of " << ranks.size();
    EXPECT_EQ(state_values(*ranks[r]), before) << "local states must be restored after a synced compute";
    EXPECT_EQ(ranks[r]->update_count(), count);
  }
  // Accumulation continues after a synced compute: one more batch on the last rank.
  whole->update(preds.narrow(0, 0, 3), target.narrow(0, 0, 3));
  ranks.back()->update(preds.narrow(0, 0, 3), target.narrow(0, 0, 3));
  expected = whole->compute().to_vector<double>();
  std::vector<double> got = ranks[0]->compute().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << whole->name();
}

struct SyncData {
  Tensor mc_logits, mc_target, bin_scores, bin_target;
};

SyncData make_sync_data(int64_t N, int64_t C) {
  std::mt19937 rng(11);
  std::discrete_distribution<int64_t> skew({40, 25, 10, 5});
  std::vector<int64_t> t(N), p(N), bt(N);
  std::vector<float> bs(N);
  for (int64_t i = 0; i < N; ++i) {
    t[i] = skew(rng);
    p[i] = rng() % 2 ? t[i] : skew(rng);
    bt[i] = rng() % 3 == 0;
    bs[i] = std::round((bt[i] ? 0.3f : 0.f) + (rng() % 100) / 100.f * 0.7f * 10) / 10.f;  // ties
  }
  return {logits_for(p, C, 5), labels(t), from_vector(bs), labels(bt)};
}

}  // namespace

TEST(MetricsSync, ShardedStatesEqualWholeDataOn2And3Ranks) {
  const int64_t N = 37, C = 4;
  SyncData d = make_sync_data(N, C);
  std::vector<std::pair<std::string, Factory>> multiclass = {
      {"acc micro", [] { return std::make_unique<Accuracy>(mc(4)); }},
      {"acc macro", [] { return std::make_unique<Accuracy>(mc(4, Average::Macro)); }},
      {"precision macro", [] { return std::make_unique<Precision>(mc(4, Average::Macro)); }},
      {"recall macro", [] { return std::make_unique<Recall>(mc(4, Average::Macro)); }},
      {"f1 macro", [] { return std::make_unique<F1Score>(mc(4, Average::Macro)); }},
      {"f1 per class", [] { return std::make_unique<F1Score>(mc(4, Average::None)); }},
      {"confmat", [] { return std::make_unique<ConfusionMatrix>(4); }},
  };
  std::vector<std::pair<std::string, Factory>> binary = {
      {"binary f1", [] { return std::make_unique<F1Score>(kBinary); }},
      {"binary precision", [] { return std::make_unique<Precision>(kBinary); }},
      {"auroc", [] { return std::make_unique<BinaryAUROC>(); }},
  };
  for (const std::vector<int64_t>& shards :
       std::vector<std::vector<int64_t>>{{30, 7}, {5, 20, 12}, {0, 25, 12}}) {
    for (auto& [label, make] : multiclass) {
      SCOPED_TRACE(label);
      expect_sync_equals_whole(make, d.mc_logits, d.mc_target, shards);
    }
    for (auto& [label, make] : binary) {
      SCOPED_TRACE(label);
      expect_sync_equals_whole(make, d.bin_scores, d.bin_target, shards);
    }
    SCOPED_TRACE("mean");
    expect_sync_equals_whole([] { return std::make_unique<MeanMetric>(); }, d.bin_scores, d.bin_target, shards);
  }
}

TEST(MetricsSync, SyncedValueIsNotTheMeanOfRankValues) {
  // The point of state sync: macro F1 and AUROC of the union differ from the average of per-rank values.
  SyncData d = make_sync_data(37, 4);
  F1Score a(mc(4, Average::Macro)), b(mc(4, Average::Macro)), whole(mc(4, Average::Macro));
  update_in_batches(a, d.mc_logits, d.mc_target, 0, 5);
  update_in_batches(b, d.mc_logits, d.mc_target, 5, 32);
  update_in_batches(whole, d.mc_logits, d.mc_target, 0, 37);
  double va = val(a), vb = val(b);
  FakeWorld world({&a, &b});
  EXPECT_NEAR(val(a), val(whole), 1e-6);
  EXPECT_NEAR(val(b), val(whole), 1e-6);
  EXPECT_GT(std::abs((va + vb) / 2 - val(whole)), 1e-3);
  a.set_sync_fn(nullptr);
  EXPECT_NEAR(val(a), va, 1e-6);  // unsynced again: the local value
}

namespace {
// A custom metric exercising every reduction: Min, Max, Mean (last batch size, averaged over ranks) and a
// 2-D Cat state of uneven length per rank.
class RangeMetric : public Metric {
 public:
  RangeMetric() {
    add_state("lo", scalar_tensor(INFINITY, DType::f64), StateReduce::Min);
    add_state("hi", scalar_tensor(-INFINITY, DType::f64), StateReduce::Max);
    add_state("last_batch", scalar_tensor(0, DType::f64), StateReduce::Mean);
    add_state("rows", empty({0, 2}, DType::f32), StateReduce::Cat);
  }
  std::string name() const override { return "RangeMetric"; }

 protected:
  void update_impl(const Tensor& preds, const Tensor&) override {
    std::vector<double> v = preds.to_vector<double>();
    accumulate("lo", scalar_tensor(*std::min_element(v.begin(), v.end()), DType::f64));
    accumulate("hi", scalar_tensor(*std::max_element(v.begin(), v.end()), DType::f64));
    state("last_batch").value = scalar_tensor(static_cast<double>(preds.size(0)), DType::f64);
    append("rows", preds);
  }
  Tensor compute_impl() override {
    Tensor rows = state("rows").tensor();
    std::vector<double> out = {state("lo").value.item(), state("hi").value.item(),
                               state("last_batch").value.item(), static_cast<double>(rows.size(0))};
    for (double x : rows.to_vector<double>()) out.push_back(x);
    return from_vector(out);
  }
};
}  // namespace

TEST(MetricsSync, EveryReductionKindWithUnevenCatStates) {
  RangeMetric r0, r1, r2;
  r0.update(from_vector<float>({1, 2, 3, 4}, {2, 2}));
  r1.update(from_vector<float>({-5, 0}, {1, 2}));
  r1.update(from_vector<float>({9, 8, 7, 6, 5, 4}, {3, 2}));
  // r2 never updated: its Cat state is empty and its min/max are the identities.
  FakeWorld world({&r0, &r1, &r2});
  std::vector<double> expect = {-5, 9, (2 + 3 + 0) / 3.0, 6, 1, 2, 3, 4, -5, 0, 9, 8, 7, 6, 5, 4};
  for (RangeMetric* m : {&r0, &r1, &r2}) EXPECT_EQ(m->compute().to_vector<double>(), expect);
  EXPECT_EQ(r1.state("rows").tensor().shape(), (Shape{4, 2}));  // local rows restored
  EXPECT_EQ(r2.state("rows").tensor().shape(), (Shape{0, 2}));
  r1.set_sync_fn(nullptr);
  EXPECT_EQ(r1.compute().to_vector<double>()[0], -5.0);
  EXPECT_EQ(r1.compute().to_vector<double>()[3], 4.0);
}

TEST(MetricsSync, SyncHelperChecksCollectiveResults) {
  Accuracy acc(mc(3));
  acc.update(labels({0, 1}), labels({0, 2}));
  auto bad_reduce = [](const Tensor&, StateReduce) { return zeros({2}, DType::i64); };
  auto gather = [](const Tensor& t) { return std::vector<Tensor>{t}; };
  acc.set_sync_fn([&](std::vector<MetricState>& s) { sync_states_with(s, bad_reduce, gather); });
  auto before = state_values(acc);
  VOLT_EXPECT_ERROR(acc.compute(), "sync_states_with", "state 'tp'", "shape (2,)", "expected (3,)");
  EXPECT_EQ(state_values(acc), before);  // restored even when the sync fails
}
