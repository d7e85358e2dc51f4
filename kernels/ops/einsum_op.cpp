// einsum (kernels/tensor_ops.h): parsed into letters per operand, then contracted left to right. Each step sums away
// the letters no later operand or the output needs, and joins two operands as one batched matmul
// (batch letters, the left's own letters, the summed letters) x (batch, summed, the right's own), so the CUDA path,
// autocast and autograd are matmul's, permute's, reshape's and sum's.
#include <algorithm>
#include <string>

#include <volt/kernels/ops.h>
#include <volt/runtime/trace.h>
#include <volt/kernels/tensor_ops.h>

namespace volt {

namespace {

struct Term {
  Tensor t;
  std::string letters;  // one per dim of t, all distinct
};

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Sums t over every letter not in `keep`.
Term sum_away(Term a, const std::string& keep) {
  std::vector<int64_t> dims;
  std::string left;
  for (size_t i = 0; i < a.letters.size(); ++i) {
    if (keep.find(a.letters[i]) == std::string::npos)
      dims.push_back(static_cast<int64_t>(i));
    else
      left += a.letters[i];
  }
  if (!dims.empty()) a = {sum(a.t, dims), left};
  return a;
}

// t's dims reordered to `order` (a permutation of t's letters).
Tensor arrange(const Term& a, const std::string& order) {
  Shape perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(a.letters.find(c)));
  return a.t.permute(perm);
}

int64_t size_product(const Term& a, const std::string& letters) {
  int64_t n = 1;
  for (char c : letters) n *= a.t.size(static_cast<int64_t>(a.letters.find(c)));
  return n;
}

// a and b joined, keeping the letters in `keep`, as one batched matmul.
Term contract(const Term& a, const Term& b, const std::string& keep) {
  std::string batch, a_own, b_own, summed;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos, kept = keep.find(c) != std::string::npos;
    if (in_b)
      (kept ? batch : summed) += c;
    else
      a_own += c;  // letters only in a that nothing needs were summed away before
  }
  for (char c : b.letters)
    if (a.letters.find(c) == std::string::npos) b_own += c;
  const int64_t B = size_product(a, batch), M = size_product(a, a_own), K = size_product(a, summed),
                N = size_product(b, b_own);
  Tensor lhs = arrange(a, batch + a_own + summed).reshape({B, M, K});
  Tensor rhs = arrange(b, batch + summed + b_own).reshape({B, K, N});
  Shape out_shape;
  for (char c : batch) out_shape.push_back(a.t.size(static_cast<int64_t>(a.letters.find(c))));
  for (char c : a_own) out_shape.push_back(a.t.size(static_cast<int64_t>(a.letters.find(c))));
  for (char c : b_own) out_shape.push_back(b.t.size(static_cast<int64_t>(b.letters.find(c))));
  return {matmul(lhs, rhs).reshape(out_shape), batch + a_own + b_own};
}

// The parsed equation: each operand's subscripts, the output's, and every letter's size across the operands.
struct Subscripts {
  std::vector<std::string> inputs;
  std::string output;
  std::string all_letters;  // in order of first appearance
  int64_t size_of[128];     // per letter; -1: unused
};

// "ab,bc" -> {"ab", "bc"}.
std::vector<std::string> split_operands(const std::string& lhs) {
  std::vector<std::string> inputs;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return inputs;
}

// Letter sizes, checked across operands (size 1 broadcasts, as in PyTorch).
void check_operands(Subscripts& sub, const std::vector<Tensor>& operands, const std::string& eq_text) {
  std::fill(std::begin(sub.size_of), std::end(sub.size_of), int64_t{-1});
  for (size_t k = 0; k < sub.inputs.size(); ++k) {
    const std::string& in = sub.inputs[k];
    const Tensor& t = operands[k];
    VOLT_CHECK(t.defined(), "einsum: operand ", k, " is an undefined tensor");
    for (char c : in)
      VOLT_CHECK(is_letter(c), "einsum: \"", eq_text, "\": unexpected character '", c,
                 "' in the subscripts of operand ", k, "; expected letters a-z, A-Z");
    VOLT_CHECK(static_cast<int64_t>(in.size()) == t.dim(), "einsum: \"", eq_text, "\": operand ", k, " has shape ",
               t.shape_str(), " (", t.dim(), " dims) but its subscripts \"", in, "\" name ", in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      VOLT_CHECK(in.find(in[i]) == i, "einsum: \"", eq_text, "\": letter '", in[i], "' appears twice in operand ", k,
                 " (\"", in, "\"); diagonals and traces are not supported");
      const int64_t n = t.size(static_cast<int64_t>(i));
      int64_t& s = sub.size_of[static_cast<int>(in[i])];
      VOLT_CHECK(s == -1 || s == n || s == 1 || n == 1, "einsum: \"", eq_text, "\": letter '", in[i], "' has size ",
                 n, " in operand ", k, " but ", s, " in an earlier operand; expected equal sizes (or 1)");
      if (s == -1 || s == 1) s = n;
      if (sub.all_letters.find(in[i]) == std::string::npos) sub.all_letters += in[i];
    }
  }
}

// The output subscripts: the explicit ones after "->" (checked), or the letters used exactly once, in
// alphabetical order.
std::string output_letters(const std::string& eq, size_t arrow, const Subscripts& sub, const std::string& eq_text) {
  std::string output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
    for (size_t i = 0; i < output.size(); ++i) {
      const char c = output[i];
      VOLT_CHECK(is_letter(c), "einsum: \"", eq_text, "\": unexpected character '", c,
                 "' in the output subscripts; expected letters a-z, A-Z");
      VOLT_CHECK(output.find(c) == i, "einsum: \"", eq_text, "\": letter '", c, "' appears twice in the output");
      VOLT_CHECK(sub.all_letters.find(c) != std::string::npos, "einsum: \"", eq_text, "\": output letter '", c,
                 "' does not appear in any operand");
    }
    return output;
  }
  for (char c : sub.all_letters) {
    int count = 0;
    for (const std::string& in : sub.inputs) count += static_cast<int>(std::count(in.begin(), in.end(), c));
    if (count == 1) output += c;
  }
  std::sort(output.begin(), output.end());
  return output;
}

// Contracts the operands left to right (see the top of the file).
Tensor contract_all(const Subscripts& sub, const std::vector<Tensor>& operands) {
  // Operands with size-1 dims broadcast to the letter's size.
  std::vector<Term> terms;
  for (size_t k = 0; k < sub.inputs.size(); ++k) {
    Shape s;
    for (char c : sub.inputs[k]) s.push_back(sub.size_of[static_cast<int>(c)]);
    Tensor t = operands[k].shape() == s ? operands[k] : operands[k].expand(s);
    terms.push_back({t, sub.inputs[k]});
  }
  // The letters still needed after operand k: the output's and those of operands after k.
  auto needed_after = [&](size_t k) {
    std::string need = sub.output;
    for (size_t j = k + 1; j < terms.size(); ++j) need += terms[j].letters;
    return need;
  };
  Term acc = sum_away(terms[0], needed_after(0) + (terms.size() > 1 ? terms[1].letters : ""));
  for (size_t k = 1; k < terms.size(); ++k) {
    const std::string need = needed_after(k);
    Term next = sum_away(terms[k], need + acc.letters);
    acc = sum_away(acc, need + next.letters);
    acc = contract(acc, next, need);
  }
  acc = sum_away(acc, sub.output);
  return acc.letters == sub.output ? acc.t : arrange(acc, sub.output);
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  trace::Range op_range(trace::Layer::op, "einsum");
  const std::string eq_text(equation);
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  VOLT_CHECK(eq.find("...") == std::string::npos, "einsum: \"", eq_text,
             "\": ellipses ('...') are not supported; write every dim's letter");
  const size_t arrow = eq.find("->");
  Subscripts sub;
  sub.inputs = split_operands(eq.substr(0, arrow));
  VOLT_CHECK(sub.inputs.size() == operands.size(), "einsum: \"", eq_text, "\" names ", sub.inputs.size(),
             " operand(s) but ", operands.size(), " tensor(s) were given");
  check_operands(sub, operands, eq_text);
  sub.output = output_letters(eq, arrow, sub, eq_text);
  return contract_all(sub, operands);
}

}  // namespace volt
