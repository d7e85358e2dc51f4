#pragma once
// The building blocks of the backend interface (kernels/backend/registry.h). Each family header in this folder
// declares one struct of Kernel<> members, one per kernel with its contract, and a Family<> specialisation that
// names them; kernels/cpu and kernels/cuda each define one constant table per family. Internal, not installed.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <type_traits>

#include <volt/runtime/dtype.h>

namespace volt::backend {

// A set of dtypes: the dtypes a backend's kernel accepts for the tensor it dispatches on (each kernel's comment
// says which tensor that is).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= bit(d);
  }
  constexpr bool contains(DType d) const { return (bits_ & bit(d)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  std::string str() const;  // "float32, float64", or "none"

 private:
  static constexpr uint32_t bit(DType d) { return uint32_t{1} << static_cast<unsigned>(d); }
  uint32_t bits_ = 0;
};

inline constexpr DTypeSet kAllDTypes{DType::f32, DType::f16, DType::bf16, DType::f64,    DType::i64,
                                     DType::i32, DType::u8,  DType::i8,   DType::boolean};
inline constexpr DTypeSet kNumeric{DType::f32, DType::f16, DType::bf16, DType::f64,
                                   DType::i64, DType::i32, DType::u8,   DType::i8};
inline constexpr DTypeSet kFloating{DType::f32, DType::f16, DType::bf16, DType::f64};
inline constexpr DTypeSet kF32F64{DType::f32, DType::f64};

// One kernel of one backend: the function and the dtypes it accepts. A default-constructed entry (fn null)
// means the backend has no such kernel; calling it through backend::call is then a volt::Error, not a crash.
template <class Sig>
struct Kernel;
template <class... Args>
struct Kernel<void(Args...)> {
  void (*fn)(Args...) = nullptr;
  DTypeSet dtypes;
};

// A kernel's name, paired with its member of the family struct: the name of its trace range
// (runtime/trace.h, layer kernel), of its errors and of the public kernel_supported() query.
template <class M>
struct Named {
  M member;
  const char* name;
};
template <class M>
Named(M, const char*) -> Named<M>;

// Specialised by each family header: `name` (the family) and `kernels`, a tuple of Named, one per member.
template <class F>
struct Family;

template <class M>
struct member_class;
template <class C, class T>
struct member_class<T C::*> {
  using type = C;
};

// The name listed for kernel K (a pointer to a Kernel member, e.g. &SoftmaxKernels::softmax_fwd), or nullptr
// when its family's list misses it.
template <auto K>
constexpr const char* kernel_name() {
  using F = typename member_class<decltype(K)>::type;
  const char* found = nullptr;
  std::apply(
      [&](const auto&... named) {
        (
            [&] {
              if constexpr (std::is_same_v<std::remove_cvref_t<decltype(named.member)>, decltype(K)>)
                if (named.member == K) found = named.name;
            }(),
            ...);
      },
      Family<F>::kernels);
  return found;
}

}  // namespace volt::backend
