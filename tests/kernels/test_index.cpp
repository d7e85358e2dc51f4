// Indexing and joining ops: values against hand-computed results, gradients against finite differences
// (including non-contiguous inputs and repeated indices), and error messages.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/graph.h>
#include <volt/kernels/ops.h>
#include <volt/kernels/tensor_ops.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;
using volt::testing::expect_gradients_match;
using volt::testing::rand_f64;

namespace {
Tensor iota_f64(const Shape& shape) {
  return arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, DType::f64).view(shape);
}
}  // namespace

// ---- cat / stack ------------------------------------------------------------------------------------------

TEST(Cat, ValuesAlongEachDim) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector<float>({5, 6}, {1, 2});
  Tensor c0 = cat({a, b}, 0);
  EXPECT_EQ(c0.shape(), (Shape{3, 2}));
  EXPECT_EQ(c0.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor d = from_vector<float>({7, 8}, {2, 1});
  Tensor c1 = cat({a, d}, -1);
  EXPECT_EQ(c1.shape(), (Shape{2, 3}));
  EXPECT_EQ(c1.to_vector<float>(), (std::vector<float>{1, 2, 7, 3, 4, 8}));
}

TEST(Cat, PromotesDtypesAndReadsStridedInputs) {
  Tensor a = from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).t();  // non-contiguous: [[1,3],[2,4]]
  Tensor b = from_vector<double>({0.5, 0.25}, {2, 1});
  Tensor c = cat({a, b}, 1);
  EXPECT_EQ(c.dtype(), DType::f64);
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{1, 3, 0.5, 2, 4, 0.25}));
}

TEST(Cat, EmptyPieceIsAllowed) {
  Tensor a = from_vector<float>({1, 2}, {1, 2});
  Tensor e = zeros({0, 2});
  Tensor c = cat({e, a, e}, 0);
  EXPECT_EQ(c.shape(), (Shape{1, 2}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(Cat, GradientsAreSlices) {
  Tensor a = rand_f64({2, 3}, 1).set_requires_grad();
  Tensor b = rand_f64({2, 2}, 2).set_requires_grad();
  Tensor c = rand_f64({3, 2}, 3).set_requires_grad();  // used transposed: non-contiguous
  expect_gradients_match([](const std::vector<Tensor>& in) { return cat({in[0], in[1], in[2].t()}, 1); }, {a, b, c});
}

TEST(Cat, GradientFlowsOnlyToInputsThatNeedIt) {
  Tensor a = from_vector<double>({1, 2}, {2}).set_requires_grad();
  Tensor b = from_vector<double>({3}, {1});
  Tensor y = cat({a, b}) * from_vector<double>({10, 20, 30}, {3});
  y.sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{10, 20}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Cat, Errors) {
  VOLT_EXPECT_ERROR(cat({}, 0), "cat", "empty");
  VOLT_EXPECT_ERROR(cat({zeros({2, 3}), zeros({2, 4})}, 0), "cat", "tensors[1]", "(2, 4)", "(2, 3)", "dim 1");
  VOLT_EXPECT_ERROR(cat({zeros({2, 3}), zeros({3})}, 0), "cat", "tensors[1]", "dims");
  VOLT_EXPECT_ERROR(cat({zeros({2, 3})}, 2), "cat", "dim 2");
  VOLT_EXPECT_ERROR(cat({scalar_tensor(1.0)}, 0), "cat", "zero-dimensional");
}

TEST(Stack, ValuesAndNewDim) {
  Tensor a = from_vector<float>({1, 2, 3}, {3});
  Tensor b = from_vector<float>({4, 5, 6}, {3});
  Tensor s0 = stack({a, b}, 0);
  EXPECT_EQ(s0.shape(), (Shape{2, 3}));
  EXPECT_EQ(s0.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor s1 = stack({a, b}, -1);
  EXPECT_EQ(s1.shape(), (Shape{3, 2}));
  EXPECT_EQ(s1.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Stack, GradientAndErrors) {
  Tensor a = rand_f64({2, 3}, 4).set_requires_grad();
  Tensor b = rand_f64({2, 3}, 5).set_requires_grad();
  expect_gradients_match([](const std::vector<Tensor>& in) { return stack({in[0], in[1], in[0]}, 1); }, {a, b});
  VOLT_EXPECT_ERROR(stack({zeros({2}), zeros({3})}), "stack", "tensors[1]", "(3,)", "(2,)");
}

// ---- index_select -------------------------------------------------------------------------------------------

TEST(IndexSelect, ValuesForI64AndI32Indices) {
  Tensor a = iota_f64({3, 4});  // rows [0..3], [4..7], [8..11]
  Tensor r = index_select(a, 0, from_vector<int64_t>({2, 0, 2}));
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}));
  Tensor c = index_select(a, 1, from_vector<int32_t>({3, 1}));
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{3, 1, 7, 5, 11, 9}));
  // Non-contiguous input, middle dim of a 3-D tensor.
  Tensor b = iota_f64({2, 3, 2}).transpose(0, 2);  // (2, 3, 2), b[i][j][k] = k*6 + j*2 + i
  Tensor m = index_select(b, 1, from_vector<int64_t>({1}));
  EXPECT_EQ(m.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{2, 8, 3, 9}));
}

TEST(IndexSelect, GradientScatterAddsRepeatedIndices) {
  Tensor a = rand_f64({4, 3}, 6).set_requires_grad();
  Tensor idx = from_vector<int64_t>({1, 3, 1, 1});
  expect_gradients_match([idx](const std::vector<Tensor>& in) { return index_select(in[0], 0, idx); }, {a});
  Tensor b = rand_f64({4, 5}, 7).set_requires_grad();
  expect_gradients_match([idx](const std::vector<Tensor>& in) { return index_select(in[0].t(), 1, idx); }, {b});
  // Exact counts: row 1 picked three times.
  Tensor w = ones({4, 2}, DType::f32).set_requires_grad();
  index_select(w, 0, idx).sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 3, 3, 0, 0, 1, 1}));
}

// The kernels check the indices (runtime/index_check.h), in the backward too: an index tensor changed in place
// between the two is an error, not a write outside the gradient.
TEST(IndexSelect, TheBackwardChecksItsIndicesToo) {
  Tensor a = rand_f64({3, 5}, 2).set_requires_grad();
  Tensor idx = from_vector<int64_t>({4, 0});
  Tensor out = index_select(a, 1, idx);
  idx.copy_(from_vector<int64_t>({4, 5}));
  VOLT_EXPECT_ERROR(out.backward(ones_like(out)), "index_select", "value 5 at position 1", "size 5");
}

// On a GPU, as embedding's: the bad index is reported at the next synchronisation; along dim 0 (the row kernels)
// and dim 1 (the element kernels).
TEST(IndexSelectCuda, BadIndexIsReportedAtTheNextSynchronisation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA index kernels run on a GPU only";
  const Device dev = cuda_device(0);
  Tensor a = iota_f64({40, 40}).to(DType::f32);
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    Tensor ac = a.to(dev).set_requires_grad();
    Tensor out = index_select(ac, dim, from_vector<int64_t>({3, 40, 1}).to(dev));
    VOLT_EXPECT_ERROR(synchronize(dev), "index_select", "value 40 at position 1", "size 40");
    Tensor want = index_select(a, dim, from_vector<int64_t>({3, 0, 1}));
    want.narrow(dim, 1, 1).zero_();
    EXPECT_EQ(out.to(kCPU).to_vector<float>(), want.to_vector<float>());
    out.backward(ones_like(out));
    VOLT_EXPECT_ERROR(ac.grad().sum().item(), "index_select", "value 40 at position 1");
    EXPECT_EQ(ac.grad().sum().item(), 2.0 * 40);  // the two good rows or columns only
  }
}

TEST(IndexSelect, Errors) {
  Tensor a = zeros({3, 5});
  VOLT_EXPECT_ERROR(index_select(a, 1, from_vector<int64_t>({0, 7})), "index_select", "7", "position 1", "size 5");
  VOLT_EXPECT_ERROR(index_select(a, 0, from_vector<int64_t>({-1})), "index_select", "-1");
  VOLT_EXPECT_ERROR(index_select(a, 0, from_vector<float>({0})), "index_select", "index", "int64", "float32");
  VOLT_EXPECT_ERROR(index_select(a, 0, zeros({1, 1}, DType::i64)), "index_select", "1-D", "(1, 1)");
  VOLT_EXPECT_ERROR(index_select(a, 2, from_vector<int64_t>({0})), "index_select", "dim 2");
}

// ---- gather ------------------------------------------------------------------------------------------------

TEST(Gather, ValuesAlongDims) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor g1 = gather(a, 1, from_vector<int64_t>({2, 0, 1, 1}, {2, 2}));
  EXPECT_EQ(g1.shape(), (Shape{2, 2}));
  EXPECT_EQ(g1.to_vector<float>(), (std::vector<float>{3, 1, 5, 5}));
  Tensor g0 = gather(a, 0, from_vector<int64_t>({1, 0, 1}, {1, 3}));
  EXPECT_EQ(g0.to_vector<float>(), (std::vector<float>{4, 2, 6}));
  // Strided input: gather from the transpose without a copy.
  Tensor gt = gather(a.t(), 1, from_vector<int64_t>({1, 0, 1}, {3, 1}));  // a.t() = [[1,4],[2,5],[3,6]]
  EXPECT_EQ(gt.to_vector<float>(), (std::vector<float>{4, 2, 6}));
}

TEST(Gather, GradientScatterAdds) {
  Tensor a = rand_f64({3, 4}, 8).set_requires_grad();
  Tensor idx = from_vector<int64_t>({0, 0, 3, 2, 1, 1}, {3, 2});
  expect_gradients_match([idx](const std::vector<Tensor>& in) { return gather(in[0], 1, idx); }, {a});
  Tensor b = rand_f64({4, 3}, 9).set_requires_grad();
  expect_gradients_match([idx](const std::vector<Tensor>& in) { return gather(in[0].t(), 1, idx); }, {b});
  Tensor c = rand_f64({2, 3, 2}, 10).set_requires_grad();
  Tensor idx3 = from_vector<int64_t>({2, 2, 0, 1}, {1, 2, 2});
  expect_gradients_match([idx3](const std::vector<Tensor>& in) { return gather(in[0], 1, idx3); }, {c});
}

TEST(Gather, Errors) {
  Tensor a = zeros({2, 3});
  VOLT_EXPECT_ERROR(gather(a, 1, from_vector<int64_t>({3}, {1, 1})), "gather", "3", "size 3");
  VOLT_EXPECT_ERROR(gather(a, 1, from_vector<int64_t>({0, 1})), "gather", "index", "same number of dims");
  VOLT_EXPECT_ERROR(gather(a, 1, zeros({3, 1}, DType::i64)), "gather", "(3, 1)", "dim 0");
}

// The kernels check the indices (runtime/index_check.h), the backward's scatter too: the message names the op, the
// position, the value and the dim, and an index tensor changed in place after the forward is an error in the
// backward, not an add outside the gradient.
TEST(Gather, TheKernelsCheckTheIndicesForwardAndBackward) {
  Tensor a = rand_f64({2, 3}, 4).set_requires_grad();
  try {
    gather(a, 1, from_vector<int64_t>({0, 3}, {1, 2}));
    ADD_FAILURE() << "gather accepted index 3 along a dim of size 3";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "gather: index value 3 at position 1 is out of range for dim 1 of size 3 "
                           "(expected 0 <= index < 3)");
  }
  Tensor idx = from_vector<int64_t>({2, 0, 1, 1}, {2, 2});
  Tensor out = gather(a, 1, idx);
  idx.copy_(from_vector<int64_t>({2, 0, -1, 1}, {2, 2}));
  VOLT_EXPECT_ERROR(out.backward(ones_like(out)), "gather", "value -1 at position 2", "dim 1", "size 3");
}

// Rows with no elements run no copy, but their indices are still checked.
TEST(IndexSelect, RowsWithoutElementsStillCheckTheirIndices) {
  VOLT_EXPECT_ERROR(index_select(zeros({3, 0}), 0, from_vector<int64_t>({0, 3})), "index_select",
                    "value 3 at position 1", "dim 0", "size 3");
  VOLT_EXPECT_ERROR(embedding(zeros({4, 0}), from_vector<int64_t>({4})), "embedding", "value 4 at position 0");
  EXPECT_EQ(index_select(zeros({3, 0}), 0, from_vector<int64_t>({2, 0})).shape(), (Shape{2, 0}));
  VOLT_EXPECT_ERROR(index_add(zeros({0, 3}), 1, from_vector<int64_t>({5}), zeros({0, 1})), "index_add",
                    "value 5 at position 0", "dim 1", "size 3");
}

// On a GPU, gather, its backward, scatter_add, index_add and one_hot check their indices in the kernels: nothing is
// read back on the host, a bad index's output is zero (gather, one_hot) or adds nothing (scatter_add, index_add, the
// backward), and the first is reported at the next synchronisation, once.
TEST(GatherCuda, BadIndicesAreReportedAtTheNextSynchronisation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA index kernels run on a GPU only";
  const Device dev = cuda_device(0);
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor ac = a.to(dev).set_requires_grad();
  Tensor g = gather(ac, 1, from_vector<int64_t>({2, 7, 1, 0}, {2, 2}).to(dev));
  VOLT_EXPECT_ERROR(synchronize(dev), "gather", "value 7 at position 1", "dim 1", "size 3", "next synchronisation");
  EXPECT_NO_THROW(synchronize(dev));
  EXPECT_EQ(g.to(kCPU).to_vector<float>(), (std::vector<float>{3, 0, 5, 4}));
  g.backward(ones_like(g));
  VOLT_EXPECT_ERROR(ac.grad().to(kCPU), "gather", "value 7 at position 1");
  EXPECT_EQ(ac.grad().to(kCPU).to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 1, 0}));

  Tensor s = scatter_add(zeros({2, 3}).to(dev), 1, from_vector<int64_t>({0, 3}, {1, 2}).to(dev),
                         ones({1, 2}).to(dev));
  VOLT_EXPECT_ERROR(s.to(kCPU), "scatter_add", "value 3 at position 1", "dim 1", "size 3");
  EXPECT_EQ(s.to(kCPU).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 0}));

  Tensor ia = index_add(zeros({2, 3}).to(dev), 0, from_vector<int64_t>({-1, 1}).to(dev), ones({2, 3}).to(dev));
  VOLT_EXPECT_ERROR(ia.sum().item(), "index_add", "value -1 at position 0", "dim 0", "size 2");
  EXPECT_EQ(ia.to(kCPU).to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 1, 1}));

  Tensor oh = one_hot(from_vector<int64_t>({1, 4, 0}).to(dev), 3);
  VOLT_EXPECT_ERROR(synchronize(dev), "one_hot", "value 4 at position 1", "num_classes", "size 3");
  EXPECT_EQ(oh.to(kCPU).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 1, 0, 0}));

  Tensor empty_rows = index_select(zeros({3, 0}).to(dev), 0, from_vector<int64_t>({0, 3}).to(dev));
  VOLT_EXPECT_ERROR(synchronize(dev), "index_select", "value 3 at position 1", "size 3");
  EXPECT_EQ(empty_rows.shape(), (Shape{2, 0}));
}

// ---- embedding ---------------------------------------------------------------------------------------------

TEST(Embedding, LooksUpRowsForAnyIndexShape) {
  Tensor w = iota_f64({5, 3});
  Tensor idx = from_vector<int64_t>({4, 0, 2, 4}, {2, 2});
  Tensor e = embedding(w, idx);
  EXPECT_EQ(e.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{12, 13, 14, 0, 1, 2, 6, 7, 8, 12, 13, 14}));
  Tensor s = embedding(w, scalar_tensor(1.0, DType::i64));
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3, 4, 5}));
}

TEST(Embedding, BackwardScatterAddsIntoTable) {
  Tensor w = zeros({4, 2}).set_requires_grad();
  Tensor idx = from_vector<int64_t>({3, 1, 3}, {3});
  Tensor g = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  embedding(w, idx).backward(g);
  EXPECT_EQ(w.grad().shape(), (Shape{4, 2}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 0, 3, 4, 0, 0, 6, 8}));
  Tensor w2 = rand_f64({5, 3}, 11).set_requires_grad();
  Tensor idx2 = from_vector<int64_t>({0, 4, 4, 2, 0, 0}, {2, 3});
  expect_gradients_match([idx2](const std::vector<Tensor>& in) { return embedding(in[0], idx2); }, {w2});
}

TEST(Embedding, HalfPrecisionGradientAccumulatesInFloat) {
  // 2048 + 1 + 1 in f16 would round back to 2048 after each step; accumulating in f32 gives 2050.
  Tensor w = zeros({2, 1}, DType::f16).set_requires_grad();
  Tensor idx = from_vector<int64_t>({0, 0, 0});
  embedding(w, idx).backward(from_vector<float>({2048, 1, 1}, {3, 1}).to(DType::f16));
  EXPECT_EQ(w.grad().dtype(), DType::f16);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2050, 0}));
}

TEST(Embedding, Errors) {
  Tensor w = zeros({4, 2});
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({1, 4})), "embedding", "value 4 at position 1", "size 4");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<int64_t>({0, 1, -1}, {1, 3})), "embedding", "value -1 at position 2",
                    "0 <= index < 4");
  VOLT_EXPECT_ERROR(embedding(zeros({4}), from_vector<int64_t>({1})), "embedding", "weight", "2-D", "(4,)");
  VOLT_EXPECT_ERROR(embedding(w, from_vector<double>({1})), "embedding", "indices", "int64");
}

// The kernels check the indices (runtime/index_check.h), so a captured embedding reads none on the host: the
// capture succeeds whatever the index tensor holds then, each replay checks the indices it is given, and a bad
// one is an error naming the op and the index; the backward drops nothing and adds no bad row.
TEST(Embedding, CapturedLookupChecksTheIndicesOfEachReplay) {
  Tensor w = iota_f64({5, 2}).set_requires_grad();
  Tensor idx = full({3}, 99.0, DType::i64);  // out of range while capturing: not read then
  Graph g(kCPU);
  g.capture_begin();
  Tensor out = embedding(w.detach(), idx);
  g.capture_end();
  idx.copy_(from_vector<int64_t>({4, 0, 4}));
  ASSERT_TRUE(g.replay());
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{8, 9, 0, 1, 8, 9}));
  idx.copy_(from_vector<int64_t>({1, 5, 0}));
  VOLT_EXPECT_ERROR(g.replay(), "embedding", "value 5 at position 1", "size 5");
  // The backward's scatter checks too (the same indices, e.g. replaced between forward and backward).
  Tensor good = from_vector<int64_t>({1, 1});
  Tensor e = embedding(w, good);
  good.copy_(from_vector<int64_t>({1, 7}));
  VOLT_EXPECT_ERROR(e.backward(ones_like(e)), "embedding", "value 7 at position 1");
}

// On a GPU a bad index is found by the kernel and reported at the next synchronisation: its row is zero, the
// good rows are right, the error names the op, the position and the value, and it is reported once. Widths 2 and
// 40: the element kernels and the row kernels.
TEST(EmbeddingCuda, BadIndexIsReportedAtTheNextSynchronisation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA embedding kernels run on a GPU only";
  const Device dev = cuda_device(0);
  for (int64_t width : {2, 40}) {
    SCOPED_TRACE("width " + std::to_string(width));
    Tensor table = iota_f64({5, width}).to(DType::f32);
    Tensor w = table.to(dev).set_requires_grad();
    Tensor out = embedding(w, from_vector<int64_t>({2, 9, 0}).to(dev));  // no host read: no error yet
    VOLT_EXPECT_ERROR(synchronize(dev), "embedding", "value 9 at position 1", "size 5", "next synchronisation");
    EXPECT_NO_THROW(synchronize(dev));  // reported once
    std::vector<float> want = table.narrow(0, 2, 1).to_vector<float>();
    want.resize(2 * static_cast<size_t>(width), 0.0f);
    for (float v : table.narrow(0, 0, 1).to_vector<float>()) want.push_back(v);
    EXPECT_EQ(out.to(kCPU).to_vector<float>(), want);
    // The backward drops the bad row (no write outside the table) and reports it at item()/to(cpu).
    out.backward(ones_like(out));
    VOLT_EXPECT_ERROR(w.grad().to(kCPU), "embedding", "value 9 at position 1");
    std::vector<float> grad(5 * static_cast<size_t>(width), 0.0f);
    for (int64_t c = 0; c < width; ++c) grad[static_cast<size_t>(c)] = grad[static_cast<size_t>(2 * width + c)] = 1;
    EXPECT_EQ(w.grad().to(kCPU).to_vector<float>(), grad);
    Tensor neg = embedding(w.detach(), from_vector<int64_t>({-3}).to(dev));
    VOLT_EXPECT_ERROR(neg.sum().item(), "embedding", "value -3 at position 0");
  }
}

// The CUDA kernels against the CPU: the row kernels (a warp per index, 16-byte pieces when rows allow) at widths
// 768 and 40, the element kernels below 32; half, f32 and f64 tables; repeated indices in the backward's atomics.
TEST(EmbeddingCuda, RowKernelsMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA embedding kernels run on a GPU only";
  const Device dev = cuda_device(0);
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int64_t width : {768, 40, 5, 12, 1}) {
      Tensor w = rand_f64({37, width}, 3).to(dt);
      Tensor idx = from_vector<int64_t>({0, 36, 5, 5, 17, 36, 2, 0, 9}, {3, 3});
      Tensor wc = w.to(dev).set_requires_grad(), wh = w.clone().set_requires_grad();
      Tensor oc = embedding(wc, idx.to(dev)), oh = embedding(wh, idx);
      EXPECT_EQ(oc.to(kCPU).to(DType::f64).to_vector<double>(), oh.to(DType::f64).to_vector<double>())
          << dtype_name(dt) << " width " << width;
      Tensor g = rand_f64({3, 3, width}, 4).to(dt);
      oc.backward(g.to(dev));
      oh.backward(g);
      // Sums of up to two values per row in f32/f64: the atomics' order cannot change them.
      EXPECT_EQ(wc.grad().to(kCPU).to(DType::f64).to_vector<double>(), wh.grad().to(DType::f64).to_vector<double>())
          << dtype_name(dt) << " width " << width;
    }
  }
  // index_select along dim 0 takes the same row kernel.
  Tensor a = rand_f64({6, 8}, 5).to(DType::f32);
  Tensor i = from_vector<int64_t>({5, 0, 5});
  EXPECT_EQ(index_select(a.to(dev), 0, i.to(dev)).to(kCPU).to_vector<float>(),
            index_select(a, 0, i).to_vector<float>());
}

// ---- one_hot -----------------------------------------------------------------------------------------------

TEST(OneHot, ExplicitAndInferredClasses) {
  Tensor idx = from_vector<int64_t>({2, 0, 1, 2}, {2, 2});
  Tensor o = one_hot(idx, 4);
  EXPECT_EQ(o.dtype(), DType::i64);
  EXPECT_EQ(o.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(o.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  Tensor inferred = one_hot(from_vector<int64_t>({1, 3}), -1);
  EXPECT_EQ(inferred.shape(), (Shape{2, 4}));
  EXPECT_EQ(inferred.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 0, 1}));
}

TEST(OneHot, Errors) {
  VOLT_EXPECT_ERROR(one_hot(from_vector<int64_t>({0, 3}), 3), "one_hot", "3", "num_classes");
  VOLT_EXPECT_ERROR(one_hot(from_vector<int64_t>({-2}), 3), "one_hot", "-2");
  VOLT_EXPECT_ERROR(one_hot(from_vector<int64_t>({2, -1, 0}), -1), "one_hot", "value -1 at position 1", "size 3");
  VOLT_EXPECT_ERROR(one_hot(from_vector<int32_t>({0}), 3), "one_hot", "int64", "int32");
  VOLT_EXPECT_ERROR(one_hot(from_vector<int64_t>({0}), 0), "one_hot", "num_classes", "0");
}
