// User errors are volt::Error whose message names the op, the offending argument or value, and what was
// expected, so that a failing training script says what to fix.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include <volt/kernels/ops.h>
#include <volt/runtime/cuda_api.h>

using namespace volt;

TEST(Errors, ShapeErrorsNameBothShapes) {
  VOLT_EXPECT_ERROR(mul(zeros({2, 3}), zeros({2, 4})), "mul", "(2, 3)", "(2, 4)", "broadcast");
  VOLT_EXPECT_ERROR(zeros({6}).view({4, -1}), "view", "(4, -1)", "(6,)", "6 elements");
  VOLT_EXPECT_ERROR(zeros({2, 3}).expand({2, 5}), "expand", "3", "5");
  VOLT_EXPECT_ERROR(zeros({2}).item(), "item", "(2,)", "one-element");
  Tensor t = zeros({3});
  VOLT_EXPECT_ERROR(t.copy_(zeros({4})), "copy_", "(4,)", "(3,)");
  VOLT_EXPECT_ERROR(t.set_grad(zeros({2})), "set_grad", "(2,)", "(3,)");
}

TEST(Errors, DimErrorsNameTheDimAndRank) {
  VOLT_EXPECT_ERROR(sum(zeros({2, 3}), {2}), "sum", "dim 2", "2 dimension", "[-2, 1]");
  VOLT_EXPECT_ERROR(zeros({2, 3}).transpose(0, -3), "transpose", "-3");
  VOLT_EXPECT_ERROR(zeros({2, 3}).select(1, 3), "select", "index 3", "size 3");
  VOLT_EXPECT_ERROR(zeros({2, 3}).t().t().permute({1}), "permute", "1 dims", "2 dimensions");
  VOLT_EXPECT_ERROR(zeros({2, 3, 4}).t(), "t", "at most 2", "(2, 3, 4)");
}

TEST(Errors, DtypeErrorsNameTheDtypes) {
  VOLT_EXPECT_ERROR(zeros({2}).data<double>(), "data", "float32", "float64");
  VOLT_EXPECT_ERROR(zeros({2}, DType::i32).set_requires_grad(), "set_requires_grad", "int32");
  VOLT_EXPECT_ERROR(randn({2}, DType::i64), "randn", "int64");
  VOLT_EXPECT_ERROR(index_select(zeros({3}), 0, zeros({1})), "index_select", "index", "int64", "float32");
  VOLT_EXPECT_ERROR(parse_dtype("float8"), "float8");
}

TEST(Errors, DeviceErrorsNameTheDevice) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible";
  VOLT_EXPECT_ERROR(empty({2}, DType::f32, cuda_device(0)), "cuda:0", "CUDA");
  VOLT_EXPECT_ERROR(ones({2}).to(cuda_device(2)), "Tensor::to", "cuda:2");
  VOLT_EXPECT_ERROR(Device("cuda:x"), "Device", "cuda:x");
}

TEST(Errors, UndefinedTensorsAreReported) {
  Tensor u;
  VOLT_EXPECT_ERROR(u.shape(), "undefined");
  VOLT_EXPECT_ERROR(add(u, zeros({1})), "add", "undefined");
  VOLT_EXPECT_ERROR(cat({zeros({1}), u}), "cat", "tensors[1]", "undefined");
}

TEST(Errors, AreVoltErrorsDerivedFromRuntimeError) {
  try {
    zeros({2}).view({3});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
    EXPECT_NE(std::string(e.what()).find("view"), std::string::npos);
  }
}
