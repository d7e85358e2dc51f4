// World size 1: every collective is the identity, so code written for N ranks runs unchanged on one.
#include <volt/distributed/work_util.h>
#include <volt/kernels/ops.h>

namespace volt::dist {
namespace {

class ProcessGroupSingle final : public ProcessGroup {
 public:
  ProcessGroupSingle() : ProcessGroup(0, 1, 0, 1) {}
  std::string backend_name() const override { return "single"; }
  void local_barrier() override {}

 protected:
  bool supports_device(Device) const override { return true; }
  std::shared_ptr<Work> all_reduce_impl(Tensor&, ReduceOp, const CollectiveInfo& info) override {
    return std::make_shared<DoneWork>(info);
  }
  std::shared_ptr<Work> broadcast_impl(Tensor&, int, const CollectiveInfo& info) override {
    return std::make_shared<DoneWork>(info);
  }
  std::shared_ptr<Work> all_gather_impl(const Tensor& in, Tensor& out, const CollectiveInfo& info) override {
    NoGradGuard g;
    out.view(in.shape()).copy_(in);
    return std::make_shared<DoneWork>(info);
  }
  std::shared_ptr<Work> reduce_scatter_impl(const Tensor& in, Tensor& out, ReduceOp,
                                            const CollectiveInfo& info) override {
    NoGradGuard g;
    out.copy_(in);
    return std::make_shared<DoneWork>(info);
  }
  std::shared_ptr<Work> barrier_impl(const CollectiveInfo& info) override { return std::make_shared<DoneWork>(info); }
  std::vector<int64_t> exchange_records(const std::vector<int64_t>& mine, const CollectiveInfo&) override {
    return mine;
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_group() { return std::make_unique<ProcessGroupSingle>(); }

namespace detail {
void divide_inplace_cpu(Tensor& t, double d) {
  VOLT_ASSERT(t.is_contiguous() && t.device().is_cpu());
  int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = static_cast<float*>(t.data_ptr());
    float inv = static_cast<float>(d);
    for (int64_t i = 0; i < n; ++i) p[i] /= inv;
  } else if (t.dtype() == DType::f64) {
    double* p = static_cast<double*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) p[i] /= d;
  } else {
    VOLT_ASSERT(false, "divide_inplace_cpu: dtype ", dtype_name(t.dtype()));
  }
}
}  // namespace detail

}  // namespace volt::dist
