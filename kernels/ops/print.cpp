#include <iomanip>
#include <sstream>

#include <volt/kernels/ops.h>

namespace volt {

namespace {
void print_rec(std::ostringstream& os, const std::vector<double>& v, const Shape& shape, size_t dim, int64_t& pos,
               bool integral, int indent) {
  if (dim == shape.size()) {
    double x = v[static_cast<size_t>(pos++)];
    if (integral) os << static_cast<int64_t>(x);
    else os << std::setprecision(6) << x;
    return;
  }
  os << "[";
  const int64_t n = shape[dim];
  const bool elide = n > 12;
  int64_t per = 1;  // elements under one index of this dim
  for (size_t d = dim + 1; d < shape.size(); ++d) per *= shape[d];
  auto sep = [&] {
    os << ",";
    if (dim + 1 < shape.size()) os << "\n" << std::string(static_cast<size_t>(indent + 1), ' ');
    else os << " ";
  };
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) sep();
    if (elide && i == 6) {  // show the first and last six entries
      os << "...";
      pos += (n - 12) * per;
      i = n - 7;
      continue;
    }
    print_rec(os, v, shape, dim + 1, pos, integral, indent + 1);
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  std::vector<double> v = to_vector<double>();
  int64_t pos = 0;
  print_rec(os, v, shape(), 0, pos, !is_floating(dtype()), 7);
  os << ", shape=" << shape_str() << ", dtype=" << dtype_name(dtype());
  if (device().is_cuda()) os << ", device=" << device().str();
  if (requires_grad()) os << (grad_fn() ? ", grad_fn=" + grad_fn()->name() : std::string(", requires_grad=true"));
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace volt
