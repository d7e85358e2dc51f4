// Classification metrics: input checking, stat-score counters, the scores derived from them, confusion matrix
// and binary AUROC. Updates copy the batch to the host once (to_vector) and count in plain loops: a batch is
// small, and per-element tensor ops would be far slower.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <volt/kernels/ops.h>
#include <volt/nn/metrics.h>

namespace volt::metrics {

namespace {

// Predicted and true labels of the kept (not ignored) elements, on the host.
struct Labels {
  std::vector<int64_t> pred;
  std::vector<int64_t> target;
};

void check_target(const std::string& who, const Tensor& target) {
  VOLT_CHECK(target.defined(), who, ".update: target is undefined");
  VOLT_CHECK(is_integral(target.dtype()), who, ".update: target has dtype ", dtype_name(target.dtype()),
             "; expected an integer or bool tensor of class labels");
}

bool ignored(int64_t t, const std::optional<int64_t>& ignore_index) { return ignore_index && t == *ignore_index; }

// Binary preds/target to {0, 1} labels (see ClassificationOptions for the rules).
Labels binary_labels(const std::string& who, const Tensor& preds, const Tensor& target, double threshold,
                     const std::optional<int64_t>& ignore_index) {
  VOLT_CHECK(preds.defined(), who, ".update: preds is undefined");
  check_target(who, target);
  VOLT_CHECK(preds.shape() == target.shape(), who, ".update: preds has shape ", preds.shape_str(),
             " but target has shape ", target.shape_str(), "; binary inputs must have the same shape");
  std::vector<int64_t> t = target.to_vector<int64_t>();
  Labels out;
  out.pred.reserve(t.size());
  out.target.reserve(t.size());
  if (is_floating(preds.dtype())) {
    std::vector<double> p = preds.to_vector<double>();
    bool logits = std::any_of(p.begin(), p.end(), [](double x) { return x < 0.0 || x > 1.0; });
    for (size_t i = 0; i < t.size(); ++i) {
      if (ignored(t[i], ignore_index)) continue;
      VOLT_CHECK(!std::isnan(p[i]), who, ".update: preds[", i, "] is NaN");
      double prob = logits ? 1.0 / (1.0 + std::exp(-p[i])) : p[i];
      out.pred.push_back(prob > threshold ? 1 : 0);
      out.target.push_back(t[i]);
    }
  } else {
    std::vector<int64_t> p = preds.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); ++i) {
      if (ignored(t[i], ignore_index)) continue;
      VOLT_CHECK(p[i] == 0 || p[i] == 1, who, ".update: integer preds[", i, "] is ", p[i],
                 "; binary label predictions must be 0 or 1 (or pass float probabilities/logits)");
      out.pred.push_back(p[i]);
      out.target.push_back(t[i]);
    }
  }
  for (size_t i = 0; i < out.target.size(); ++i)
    VOLT_CHECK(out.target[i] == 0 || out.target[i] == 1, who, ".update: target value ", out.target[i],
               " is not a binary label; expected 0 or 1");
  return out;
}

// Multiclass preds/target to labels in [0, C): float preds (N, C, ...) are reduced by argmax over dim 1
// (first maximum on ties), integer preds (N, ...) are labels.
Labels multiclass_labels(const std::string& who, const Tensor& preds, const Tensor& target, int64_t C,
                         const std::optional<int64_t>& ignore_index) {
  VOLT_CHECK(preds.defined(), who, ".update: preds is undefined");
  check_target(who, target);
  std::vector<int64_t> t = target.to_vector<int64_t>();
  std::vector<int64_t> p;
  if (is_floating(preds.dtype())) {
    Shape expect = target.shape();
    expect.insert(expect.begin() + (expect.empty() ? 0 : 1), C);
    VOLT_CHECK(preds.shape() == expect, who, ".update: float preds has shape ", preds.shape_str(), " and target ",
               target.shape_str(), "; expected preds ", shape_to_string(expect),
               " (scores over num_classes = ", C, " in dim 1) or integer class labels shaped like target");
    std::vector<double> s = preds.to_vector<double>();
    int64_t N = target.dim() == 0 ? 1 : target.size(0);
    int64_t R = N == 0 ? 0 : static_cast<int64_t>(t.size()) / N;  // positions per sample (the "..." dims)
    p.resize(t.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t r = 0; r < R; ++r) {
        const double* base = s.data() + n * C * R + r;
        int64_t best = 0;
        for (int64_t c = 1; c < C; ++c)
          if (base[c * R] > base[best * R] || (std::isnan(base[c * R]) && !std::isnan(base[best * R]))) best = c;
        p[n * R + r] = best;
      }
  } else {
    VOLT_CHECK(preds.shape() == target.shape(), who, ".update: integer preds has shape ", preds.shape_str(),
               " but target has shape ", target.shape_str(), "; label predictions must match target's shape");
    p = preds.to_vector<int64_t>();
  }
  Labels out;
  out.pred.reserve(t.size());
  out.target.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (ignored(t[i], ignore_index)) continue;
    VOLT_CHECK(t[i] >= 0 && t[i] < C, who, ".update: target label ", t[i], " at index ", i,
               " is out of range [0, ", C, ")");
    VOLT_CHECK(p[i] >= 0 && p[i] < C, who, ".update: predicted label ", p[i], " at index ", i,
               " is out of range [0, ", C, ")");
    out.pred.push_back(p[i]);
    out.target.push_back(t[i]);
  }
  return out;
}

void check_options(const std::string& who, const ClassificationOptions& o) {
  if (o.task == Task::Multiclass)
    VOLT_CHECK(o.num_classes >= 2, who, ": num_classes is ", o.num_classes, "; multiclass needs at least 2");
  VOLT_CHECK(o.threshold >= 0.0 && o.threshold <= 1.0, who, ": threshold is ", o.threshold,
             "; expected a probability in [0, 1]");
}

double safe_div(double a, double b) { return b == 0.0 ? 0.0 : a / b; }

}  // namespace

// ---- StatScores --------------------------------------------------------------------------------------------

StatScores::StatScores(ClassificationOptions options) : opt_(options) {
  check_options("StatScores", opt_);
  counters_ = opt_.task == Task::Binary ? 1 : opt_.num_classes;
  for (const char* n : {"tp", "fp", "tn", "fn"}) add_state(n, zeros({counters_}, DType::i64), StateReduce::Sum);
}

std::string StatScores::name() const {
  return std::string(opt_.task == Task::Binary ? "Binary" : "Multiclass") + kind_name();
}

void StatScores::update_impl(const Tensor& preds, const Tensor& target) {
  const int64_t C = counters_;
  std::vector<int64_t> tp(C, 0), fp(C, 0), tn(C, 0), fn(C, 0);
  if (opt_.task == Task::Binary) {
    Labels l = binary_labels(name(), preds, target, opt_.threshold, opt_.ignore_index);
    for (size_t i = 0; i < l.pred.size(); ++i) {
      int64_t p = l.pred[i], t = l.target[i];
      (p ? (t ? tp : fp) : (t ? fn : tn))[0]++;
    }
  } else {
    Labels l = multiclass_labels(name(), preds, target, C, opt_.ignore_index);
    for (size_t i = 0; i < l.pred.size(); ++i) {
      if (l.pred[i] == l.target[i]) {
        tp[l.target[i]]++;
      } else {
        fp[l.pred[i]]++;
        fn[l.target[i]]++;
      }
    }
    const int64_t n = static_cast<int64_t>(l.pred.size());
    for (int64_t c = 0; c < C; ++c) tn[c] = n - tp[c] - fp[c] - fn[c];
  }
  accumulate("tp", from_vector(tp, {C}));
  accumulate("fp", from_vector(fp, {C}));
  accumulate("tn", from_vector(tn, {C}));
  accumulate("fn", from_vector(fn, {C}));
}

Tensor StatScores::compute_impl() {
  const int64_t C = counters_;
  std::vector<int64_t> tp = state("tp").value.to_vector<int64_t>(), fp = state("fp").value.to_vector<int64_t>(),
                       tn = state("tn").value.to_vector<int64_t>(), fn = state("fn").value.to_vector<int64_t>();
  std::vector<int64_t> out(C * 5);
  for (int64_t c = 0; c < C; ++c) {
    int64_t row[5] = {tp[c], fp[c], tn[c], fn[c], tp[c] + fn[c]};
    std::copy(row, row + 5, out.begin() + c * 5);
  }
  return from_vector(out, {C, 5}, device());
}

Tensor StatScores::reduce_scores(Kind kind, double beta) const {
  const int64_t C = counters_;
  auto get = [&](const char* n) {
    std::vector<int64_t> v = state(n).value.to_vector<int64_t>();
    return std::vector<double>(v.begin(), v.end());
  };
  std::vector<double> tp = get("tp"), fp = get("fp"), tn = get("tn"), fn = get("fn");
  const double b2 = beta * beta;
  auto score = [&](double TP, double FP, double TN, double FN, bool binary_accuracy) {
    switch (kind) {
      case Kind::Accuracy:  // multiclass accuracy of one class is its recall
        return binary_accuracy ? safe_div(TP + TN, TP + FP + TN + FN) : safe_div(TP, TP + FN);
      case Kind::Precision: return safe_div(TP, TP + FP);
      case Kind::Recall: return safe_div(TP, TP + FN);
      case Kind::FBeta: return safe_div((1 + b2) * TP, (1 + b2) * TP + b2 * FN + FP);
    }
    return 0.0;
  };
  if (opt_.task == Task::Binary)
    return scalar_tensor(score(tp[0], fp[0], tn[0], fn[0], true), DType::f32, device());
  if (opt_.average == Average::Micro) {
    double TP = 0, FP = 0, TN = 0, FN = 0;
    for (int64_t c = 0; c < C; ++c) TP += tp[c], FP += fp[c], TN += tn[c], FN += fn[c];
    return scalar_tensor(score(TP, FP, TN, FN, false), DType::f32, device());
  }
  std::vector<float> per_class(C);
  double weighted = 0, weights = 0;
  for (int64_t c = 0; c < C; ++c) {
    double s = score(tp[c], fp[c], tn[c], fn[c], false);
    per_class[c] = static_cast<float>(s);
    // A class that never occurs in target nor preds has no score; TorchMetrics leaves it out of the macro mean.
    double w = tp[c] + fp[c] + fn[c] > 0 ? 1.0 : 0.0;
    weighted += w * s;
    weights += w;
  }
  if (opt_.average == Average::None) return from_vector(per_class, {C}, device());
  return scalar_tensor(safe_div(weighted, weights), DType::f32, device());
}

FBetaScore::FBetaScore(ClassificationOptions o, double beta) : StatScores(o), beta_(beta) {
  VOLT_CHECK(beta > 0.0, "FBetaScore: beta is ", beta, "; expected a positive number");
}

// ---- ConfusionMatrix ---------------------------------------------------------------------------------------

ConfusionMatrix::ConfusionMatrix(ClassificationOptions options) : opt_(options) {
  check_options("ConfusionMatrix", opt_);
  classes_ = opt_.task == Task::Binary ? 2 : opt_.num_classes;
  add_state("confmat", zeros({classes_, classes_}, DType::i64), StateReduce::Sum);
}

std::string ConfusionMatrix::name() const {
  return opt_.task == Task::Binary ? "BinaryConfusionMatrix" : "MulticlassConfusionMatrix";
}

void ConfusionMatrix::update_impl(const Tensor& preds, const Tensor& target) {
  Labels l = opt_.task == Task::Binary ? binary_labels(name(), preds, target, opt_.threshold, opt_.ignore_index)
                                       : multiclass_labels(name(), preds, target, classes_, opt_.ignore_index);
  std::vector<int64_t> counts(classes_ * classes_, 0);
  for (size_t i = 0; i < l.pred.size(); ++i) counts[l.target[i] * classes_ + l.pred[i]]++;
  accumulate("confmat", from_vector(counts, {classes_, classes_}));
}

Tensor ConfusionMatrix::compute_impl() { return state("confmat").value.clone(); }

// ---- AUROC -------------------------------------------------------------------------------------------------

double roc_auc(const std::vector<double>& scores, const std::vector<int64_t>& labels) {
  VOLT_CHECK(scores.size() == labels.size(), "roc_auc: ", scores.size(), " scores but ", labels.size(), " labels");
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  double P = 0, N = 0;
  for (int64_t l : labels) (l ? P : N) += 1;
  if (P == 0 || N == 0) return 0.0;
  // Walk thresholds from the highest score down; samples with equal scores form one threshold, i.e. one
  // straight ROC segment, whose trapezoid area is neg_in_group * (tp_before + pos_in_group / 2).
  double area = 0, tp_before = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    double pos = 0, neg = 0;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) {
      (labels[order[j]] ? pos : neg) += 1;
      ++j;
    }
    area += neg * (tp_before + 0.5 * pos);
    tp_before += pos;
    i = j;
  }
  return area / (P * N);
}

BinaryAUROC::BinaryAUROC(std::optional<int64_t> ignore_index) : ignore_index_(ignore_index) {
  add_state("preds", empty({0}, DType::f64), StateReduce::Cat);
  add_state("target", empty({0}, DType::i64), StateReduce::Cat);
}

void BinaryAUROC::update_impl(const Tensor& preds, const Tensor& target) {
  const std::string who = name();
  VOLT_CHECK(preds.defined(), who, ".update: preds is undefined");
  VOLT_CHECK(is_floating(preds.dtype()), who, ".update: preds has dtype ", dtype_name(preds.dtype()),
             "; expected float scores (probabilities or logits)");
  check_target(who, target);
  VOLT_CHECK(preds.shape() == target.shape(), who, ".update: preds has shape ", preds.shape_str(),
             " but target has shape ", target.shape_str(), "; expected the same shape");
  std::vector<double> p = preds.to_vector<double>();
  std::vector<int64_t> t = target.to_vector<int64_t>();
  std::vector<double> keep_p;
  std::vector<int64_t> keep_t;
  keep_p.reserve(p.size());
  keep_t.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (ignored(t[i], ignore_index_)) continue;
    VOLT_CHECK(t[i] == 0 || t[i] == 1, who, ".update: target value ", t[i], " at index ", i,
               " is not a binary label; expected 0 or 1");
    VOLT_CHECK(!std::isnan(p[i]), who, ".update: preds[", i, "] is NaN");
    keep_p.push_back(p[i]);
    keep_t.push_back(t[i]);
  }
  const int64_t n = static_cast<int64_t>(keep_t.size());
  append("preds", from_vector(keep_p, {n}));
  append("target", from_vector(keep_t, {n}));
}

Tensor BinaryAUROC::compute_impl() {
  std::vector<double> p = state("preds").tensor().to_vector<double>();
  std::vector<int64_t> t = state("target").tensor().to_vector<int64_t>();
  return scalar_tensor(roc_auc(p, t), DType::f32, device());
}

}  // namespace volt::metrics
