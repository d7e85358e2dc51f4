// The CUDA elementwise launch plan (kernels/common/elementwise_plan.h), checked on the CPU: collapsed geometry
// reaches the same element offsets as the original for random shapes, strides and broadcasts; the vector / linear
// / strided decision for aligned, misaligned, odd-sized, broadcast and offset views; the vector path's tail split;
// and a host run of each path's index math (as the kernels in kernels/cuda/loops.cuh do it) against a reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include <volt/kernels/common/elementwise_plan.h>
#include <volt/volt.h>

using namespace volt;
using namespace volt::elementwise_plan;

namespace {

using Dims = std::vector<int64_t>;

std::vector<int64_t> all_offsets(const Dims& shape, const Dims& strides) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> out(n);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t rem = lin, off = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      off += (rem % shape[d]) * strides[d];
      rem /= shape[d];
    }
    out[lin] = off;
  }
  return out;
}

template <int N>
void expect_same_offsets(const Dims& shape, const std::array<Dims, N>& strides) {
  std::array<const Dims*, N> sp;
  for (int k = 0; k < N; ++k) sp[k] = &strides[k];
  const Geometry<N> g = collapse<N>(shape, sp);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  int64_t gn = 1;
  for (int d = 0; d < g.ndim; ++d) gn *= g.sizes[d];
  ASSERT_EQ(gn, n);
  ASSERT_LE(g.ndim, static_cast<int>(shape.size()));
  for (int k = 0; k < N; ++k) {
    const auto ref = all_offsets(shape, strides[k]);
    for (int64_t lin = 0; lin < n; ++lin) {
      int64_t off[N];
      offsets(g, lin, off);
      ASSERT_EQ(off[k], ref[lin]) << "operand " << k << " linear index " << lin << " of " << n;
    }
  }
}

template <int N>
Plan<N> plan_of(const Dims& shape, const std::array<Dims, N>& strides, const std::array<std::uintptr_t, N>& addrs,
                const std::array<size_t, N>& items) {
  std::array<const Dims*, N> sp;
  for (int k = 0; k < N; ++k) sp[k] = &strides[k];
  return make_plan<N>(shape, sp, addrs, items);
}

// Strides of a random view: dims permuted, some sliced with a step, some broadcast (stride 0).
Dims random_view_strides(std::mt19937& rng, const Dims& shape) {
  const size_t nd = shape.size();
  Dims base(nd);
  std::vector<int> perm(nd);
  for (size_t i = 0; i < nd; ++i) perm[i] = static_cast<int>(i);
  if (rng() % 2) std::shuffle(perm.begin(), perm.end(), rng);
  int64_t e = 1;
  for (size_t i = nd; i-- > 0;) {
    const int d = perm[i];
    const int64_t step = rng() % 4 == 0 ? 2 : 1;
    base[d] = e * step;
    e *= shape[d] * step;
  }
  for (size_t d = 0; d < nd; ++d)
    if (rng() % 4 == 0) base[d] = 0;
  return base;
}

}  // namespace

TEST(ElementwisePlan, CollapsedOffsetsMatchForRandomViews) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    Dims shape(1 + rng() % 5);
    for (auto& s : shape) s = 1 + rng() % 4;
    std::array<Dims, 3> st{contiguous_strides(shape), random_view_strides(rng, shape), random_view_strides(rng, shape)};
    if (trial % 3 == 0) st[0] = random_view_strides(rng, shape);  // a strided output too (no zero strides needed)
    ASSERT_NO_FATAL_FAILURE(expect_same_offsets<3>(shape, st)) << "trial " << trial;
  }
}

TEST(ElementwisePlan, CollapsedOffsetsMatchForSpecialCases) {
  expect_same_offsets<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{12, 4, 1}});
  expect_same_offsets<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{0, 0, 0}});      // scalar broadcast
  expect_same_offsets<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{0, 0, 1}});      // bias broadcast
  expect_same_offsets<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{1, 2, 6}});      // transposed input
  expect_same_offsets<2>({1, 5, 1, 3}, {Dims{15, 3, 3, 1}, Dims{99, 7, 5, 2}});  // size-1 dims, any stride
  expect_same_offsets<2>({}, {Dims{}, Dims{}});                            // 0-d
}

TEST(ElementwisePlan, CollapseMergesContiguousDims) {
  const Dims shape{4, 5, 6};
  const Dims c = contiguous_strides(shape);
  EXPECT_EQ((collapse<2>(shape, {&c, &c}).ndim), 1);
  const Dims bias{0, 0, 1};  // (6,) broadcast over (4, 5, 6): the two outer dims merge, the bias dim stays
  auto g = collapse<3>(shape, {&c, &c, &bias});
  ASSERT_EQ(g.ndim, 2);
  EXPECT_EQ(g.sizes[0], 20);
  EXPECT_EQ(g.sizes[1], 6);
  EXPECT_EQ(g.strides[2][0], 0);
  EXPECT_EQ(g.strides[2][1], 1);
  const Dims scalar{0, 0, 0};
  const auto gs = collapse<2>(shape, {&c, &scalar});
  ASSERT_EQ(gs.ndim, 1);
  EXPECT_EQ(gs.strides[1][0], 0);
  const Dims slice{60, 12, 1};  // (4, 5, 6) narrowed from (4, 5, 12): rows of 6 with pitch 12, dims 0 and 1 merge
  const Dims cols{12, 2, 1};    // pitch 2 for rows of 6: nothing merges
  EXPECT_EQ((collapse<2>(shape, {&c, &slice}).ndim), 2);
  EXPECT_EQ((collapse<2>(shape, {&c, &cols}).ndim), 3);
}

TEST(ElementwisePlan, ManyDimsAcceptedWhenTheyCollapse) {
  const Dims shape(20, 2);  // 20 dims: past kMaxDims, but contiguous
  const Dims c = contiguous_strides(shape);
  EXPECT_EQ((collapse<2>(shape, {&c, &c}).ndim), 1);
  Dims gaps(20);
  int64_t e = 1;
  for (int d = 19; d >= 0; --d) {
    gaps[d] = e;
    e *= 3;  // pitch 3 for size 2: never mergeable
  }
  EXPECT_THROW((collapse<2>(shape, {&c, &gaps})), Error);
}

TEST(ElementwisePlan, VectorWidthPerDtype) {
  EXPECT_EQ(vector_elems(8), 2);   // f64, i64
  EXPECT_EQ(vector_elems(4), 4);   // f32, i32
  EXPECT_EQ(vector_elems(2), 8);   // f16, bf16
  EXPECT_EQ(vector_elems(1), 16);  // bool, u8
}

TEST(ElementwisePlan, TailSplit) {
  for (int vec : {2, 4, 8, 16})
    for (int64_t n = 0; n < 70; ++n) {
      EXPECT_EQ(vector_count(n, vec) * vec, tail_begin(n, vec));
      EXPECT_LT(n - tail_begin(n, vec), vec);
      EXPECT_GE(n - tail_begin(n, vec), 0);
    }
  EXPECT_EQ(vector_count(int64_t(1) << 40, 4), int64_t(1) << 38);  // int64 counts
  EXPECT_EQ(tail_begin((int64_t(1) << 40) + 3, 4), int64_t(1) << 40);
}

TEST(ElementwisePlan, PathChoice) {
  const std::uintptr_t base = 0x10000;  // 16-byte aligned, as the allocator's blocks are
  const Dims c1{1};
  // Contiguous f32, aligned: vectors of 4.
  auto p = plan_of<2>({1024}, {c1, c1}, {base, base + 4096}, {4, 4});
  EXPECT_EQ(p.path, Path::Vector);
  EXPECT_EQ(p.vec, 4);
  EXPECT_EQ(p.steps[0], 1);
  EXPECT_EQ(p.steps[1], 1);
  // A (2, 3, 4) contiguous tensor collapses to the vector path too.
  p = plan_of<2>({2, 3, 4}, {Dims{12, 4, 1}, Dims{12, 4, 1}}, {base, base + 64}, {4, 4});
  EXPECT_EQ(p.path, Path::Vector);
  // Odd counts still vectorise (with a tail); fewer than one vector runs linear.
  EXPECT_EQ((plan_of<2>({7}, {c1, c1}, {base, base + 64}, {4, 4}).path), Path::Vector);
  EXPECT_EQ((plan_of<2>({3}, {c1, c1}, {base, base + 64}, {4, 4}).path), Path::Linear);
  // A view with a storage offset of 1 f32 element (4 bytes): misaligned, linear; of 4 elements (16 bytes): vector.
  EXPECT_EQ((plan_of<2>({100}, {c1, c1}, {base, base + 4}, {4, 4}).path), Path::Linear);
  EXPECT_EQ((plan_of<2>({100}, {c1, c1}, {base + 4, base}, {4, 4}).path), Path::Linear);
  EXPECT_EQ((plan_of<2>({100}, {c1, c1}, {base + 16, base + 32}, {4, 4}).path), Path::Vector);
  // f16: 8 per vector, so 8-byte alignment is not enough.
  p = plan_of<2>({100}, {c1, c1}, {base, base + 8}, {2, 2});
  EXPECT_EQ(p.path, Path::Linear);
  p = plan_of<2>({100}, {c1, c1}, {base, base + 16}, {2, 2});
  EXPECT_EQ(p.path, Path::Vector);
  EXPECT_EQ(p.vec, 8);
  // f64: 2 per vector.
  p = plan_of<2>({5}, {c1, c1}, {base, base + 16}, {8, 8});
  EXPECT_EQ(p.path, Path::Vector);
  EXPECT_EQ(p.vec, 2);
  // Cast f32 -> f16: 4 per step; the f16 output needs only 8-byte alignment.
  p = plan_of<2>({64}, {c1, c1}, {base + 8, base}, {2, 4});
  EXPECT_EQ(p.path, Path::Vector);
  EXPECT_EQ(p.vec, 4);
  EXPECT_EQ((plan_of<2>({64}, {c1, c1}, {base + 4, base}, {2, 4}).path), Path::Linear);
  // where(bool cond, f32, f32): the bool operand moves 4 bytes per step.
  const auto w = plan_of<4>({64}, {c1, c1, c1, c1}, {base, base + 4, base + 256, base + 512}, {4, 1, 4, 4});
  EXPECT_EQ(w.path, Path::Vector);
  EXPECT_EQ((plan_of<4>({64}, {c1, c1, c1, c1}, {base, base + 2, base + 256, base + 512}, {4, 1, 4, 4}).path),
            Path::Linear);
  // A broadcast scalar input at any address keeps the vector path; its step is 0.
  const auto sc = plan_of<3>({2, 8}, {Dims{8, 1}, Dims{8, 1}, Dims{0, 0}}, {base, base + 64, base + 3}, {4, 4, 4});
  EXPECT_EQ(sc.path, Path::Vector);
  EXPECT_EQ(sc.steps[2], 0);
  // A strided 1-D view (a column): linear with its step, no div/mod.
  p = plan_of<2>({10}, {c1, Dims{7}}, {base, base}, {4, 4});
  EXPECT_EQ(p.path, Path::Linear);
  EXPECT_EQ(p.steps[1], 7);
  // A strided output is never vectorised.
  EXPECT_EQ((plan_of<2>({10}, {Dims{2}, c1}, {base, base}, {4, 4}).path), Path::Linear);
  // Bias broadcast over a matrix: strided over 2 collapsed dims.
  const auto bias = plan_of<3>({3, 4, 8}, {Dims{32, 8, 1}, Dims{32, 8, 1}, Dims{0, 0, 1}}, {base, base, base},
                               {4, 4, 4});
  EXPECT_EQ(bias.path, Path::Strided);
  EXPECT_EQ(bias.geom.ndim, 2);
  // Transposed input: strided.
  EXPECT_EQ((plan_of<2>({3, 4}, {Dims{4, 1}, Dims{1, 3}}, {base, base}, {4, 4}).path), Path::Strided);
  // 0-d: one element, linear with steps 0.
  p = plan_of<2>({}, {Dims{}, Dims{}}, {base, base}, {4, 4});
  EXPECT_EQ(p.path, Path::Linear);
  EXPECT_EQ(p.steps[0], 0);
}

// Runs a plan on the host with the kernels' index math, a grid of `threads` threads walking it grid-stride, and
// checks each output element is written exactly once with the right inputs.
namespace {

struct HostRun {
  std::vector<int> writes;  // per output element offset
  std::vector<double> out;
};

template <int N>
HostRun run_plan(const Plan<N>& p, int64_t n, int64_t threads, size_t out_span, const std::array<const double*, N>& in) {
  HostRun r{std::vector<int>(out_span, 0), std::vector<double>(out_span, 0)};
  auto write = [&](int64_t off, double v) {
    r.writes[off] += 1;
    r.out[off] = v;
  };
  auto sum_at = [&](const int64_t (&off)[N]) {
    double s = 0;
    for (int k = 1; k < N; ++k) s += in[k][off[k]] * k;
    return s;
  };
  for (int64_t t = 0; t < threads; ++t) {
    if (p.path == Path::Vector) {
      for (int64_t v = t; v < vector_count(n, p.vec); v += threads)
        for (int j = 0; j < p.vec; ++j) {
          int64_t off[N];
          for (int k = 0; k < N; ++k) off[k] = p.steps[k] == 0 ? 0 : v * p.vec + j;
          write(off[0], sum_at(off));
        }
      for (int64_t i = tail_begin(n, p.vec) + t; i < n; i += threads) {
        int64_t off[N];
        for (int k = 0; k < N; ++k) off[k] = i * p.steps[k];
        write(off[0], sum_at(off));
      }
    } else if (p.path == Path::Linear) {
      for (int64_t i = t; i < n; i += threads) {
        int64_t off[N];
        for (int k = 0; k < N; ++k) off[k] = i * p.steps[k];
        write(off[0], sum_at(off));
      }
    } else {
      for (int64_t i = t; i < n; i += threads) {
        int64_t off[N];
        offsets(p.geom, i, off);
        write(off[0], sum_at(off));
      }
    }
  }
  return r;
}

}  // namespace

TEST(ElementwisePlan, HostRunOfEachPathMatchesReference) {
  std::mt19937 rng(11);
  int paths[3] = {0, 0, 0};
  for (int trial = 0; trial < 300; ++trial) {
    Dims shape(1 + rng() % 4);
    for (auto& s : shape) s = 1 + rng() % 6;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    const Dims out_st = contiguous_strides(shape);
    std::array<Dims, 3> st{out_st, trial % 2 ? random_view_strides(rng, shape) : out_st,
                           trial % 5 == 0 ? Dims(shape.size(), 0) : random_view_strides(rng, shape)};
    const auto oa = all_offsets(shape, st[1]), ob = all_offsets(shape, st[2]);
    std::vector<double> a(*std::max_element(oa.begin(), oa.end()) + 1), b(*std::max_element(ob.begin(), ob.end()) + 1);
    for (size_t i = 0; i < a.size(); ++i) a[i] = double(i) * 0.5;
    for (size_t i = 0; i < b.size(); ++i) b[i] = double(i) * -0.25 + 3;
    const size_t item = trial % 3 == 0 ? 2 : 4;  // pretend f16 / f32 for the width choice
    const std::uintptr_t misalign = trial % 7 == 0 ? item : 0;
    const auto p = plan_of<3>(shape, st, {0x1000 + misalign, 0x2000, 0x3000}, {item, item, item});
    paths[static_cast<int>(p.path)] += 1;
    for (int64_t threads : {1, 3, 256}) {
      const HostRun r = run_plan<3>(p, n, threads, static_cast<size_t>(n), {nullptr, a.data(), b.data()});
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(r.writes[i], 1) << "trial " << trial << " element " << i << " threads " << threads;
        ASSERT_EQ(r.out[i], a[oa[i]] * 1 + b[ob[i]] * 2) << "trial " << trial << " element " << i;
      }
    }
  }
  EXPECT_GT(paths[0], 0);  // every path exercised
  EXPECT_GT(paths[1], 0);
  EXPECT_GT(paths[2], 0);
}

// The offsets the plan sees for real tensors: a contiguous tensor, a view with a storage offset, a broadcast.
TEST(ElementwisePlan, RealTensorViews) {
  Tensor x = zeros({4, 8}, DType::f32);
  const Tensor row1 = x.narrow(0, 1, 2);                          // offset 8 elements: 32 bytes, aligned
  const Tensor col1 = x.narrow(1, 1, 7);                          // rows of 7 with pitch 8, offset 1 element
  const Tensor shifted = x.reshape({32}).narrow(0, 1, 16);        // offset 4 bytes: misaligned
  auto plan1 = [](const Tensor& t) {
    return make_plan<2>(t.shape(), {&t.strides(), &t.strides()},
                        {reinterpret_cast<std::uintptr_t>(t.data_ptr()), reinterpret_cast<std::uintptr_t>(t.data_ptr())},
                        {4, 4});
  };
  EXPECT_EQ(plan1(x).path, Path::Vector);
  EXPECT_EQ(plan1(row1).path, Path::Vector);
  EXPECT_EQ(plan1(col1).path, Path::Strided);
  EXPECT_EQ(plan1(col1).geom.ndim, 2);
  EXPECT_EQ(plan1(shifted).path, Path::Linear);
}
