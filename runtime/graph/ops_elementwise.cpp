// ops_elementwise.cpp — arithmetic and comparisons with numpy broadcasting, Where, Cast and the
// unary functions. Same-shape and scalar operands take straight loops the compiler vectorises;
// other broadcasts walk the output row by row with each operand's strides.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <type_traits>

#include "ops.hpp"
#include "ops_fused.hpp"

namespace loom::rt::graph {
namespace {

// Calls f(offset_a, offset_b, out_offset, count, step_a, step_b) for each output row.
template <typename F>
void for_rows(const Shape& out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb, F f) {
  const size_t r = out.size();
  const int64_t inner = out[r - 1], total = numel_of(out);
  std::vector<int64_t> idx(r, 0);
  for (int64_t o = 0; o < total; o += inner) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d + 1 < r; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    f(oa, ob, o, inner, sa[r - 1], sb[r - 1]);
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

template <typename T, typename R, typename F>
Tensor binary_typed(const Node& n, const Tensor& a, const Tensor& b, DType out_dt, F f) {
  const Shape out = broadcast_shape(n, a.shape(), b.shape());
  Tensor y = Tensor::empty(out, out_dt);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* py = y.data<R>();
  const int64_t total = numel_of(out);
  if (total == 0) return y;
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < total; ++i) py[i] = f(pa[i], pb[i]);
  } else if (b.numel() == 1) {
    const T s = pb[0];
    for (int64_t i = 0; i < total; ++i) py[i] = f(pa[i], s);
  } else if (a.numel() == 1) {
    const T s = pa[0];
    for (int64_t i = 0; i < total; ++i) py[i] = f(s, pb[i]);
  } else {
    for_rows(out, broadcast_strides(a.shape(), out), broadcast_strides(b.shape(), out),
             [&](int64_t oa, int64_t ob, int64_t o, int64_t cnt, int64_t ia, int64_t ib) {
               if (ia == 1 && ib == 1) {
                 for (int64_t j = 0; j < cnt; ++j) py[o + j] = f(pa[oa + j], pb[ob + j]);
               } else if (ia == 1 && ib == 0) {
                 const T s = pb[ob];
                 for (int64_t j = 0; j < cnt; ++j) py[o + j] = f(pa[oa + j], s);
               } else if (ia == 0 && ib == 1) {
                 const T s = pa[oa];
                 for (int64_t j = 0; j < cnt; ++j) py[o + j] = f(s, pb[ob + j]);
               } else {
                 for (int64_t j = 0; j < cnt; ++j) py[o + j] = f(pa[oa + j * ia], pb[ob + j * ib]);
               }
             });
  }
  return y;
}

void same_type(const Node& n, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    op_error(n, std::string("operands are ") + dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()));
}

// Arithmetic on float32, int64, int32, int8 and uint8 (shape arithmetic runs on int64; the 8-bit
// types wrap around as numpy's do).
template <typename F>
void arith(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out, F f) {
  const Tensor &a = need(n, in, 0), &b = need(n, in, 1);
  same_type(n, a, b);
  switch (a.dtype()) {
    case DType::kF32: out[0] = binary_typed<float, float>(n, a, b, DType::kF32, f); return;
    case DType::kI64: out[0] = binary_typed<int64_t, int64_t>(n, a, b, DType::kI64, f); return;
    case DType::kI32: out[0] = binary_typed<int32_t, int32_t>(n, a, b, DType::kI32, f); return;
    case DType::kI8: out[0] = binary_typed<int8_t, int8_t>(n, a, b, DType::kI8, f); return;
    case DType::kU8: out[0] = binary_typed<uint8_t, uint8_t>(n, a, b, DType::kU8, f); return;
    default: op_error(n, std::string("arithmetic on ") + dtype_name(a.dtype()) + " is not supported");
  }
}

template <typename F>
void compare(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out, F f) {
  const Tensor &a = need(n, in, 0), &b = need(n, in, 1);
  same_type(n, a, b);
  switch (a.dtype()) {
    case DType::kF32: out[0] = binary_typed<float, uint8_t>(n, a, b, DType::kBool, f); return;
    case DType::kI64: out[0] = binary_typed<int64_t, uint8_t>(n, a, b, DType::kBool, f); return;
    case DType::kI32: out[0] = binary_typed<int32_t, uint8_t>(n, a, b, DType::kBool, f); return;
    case DType::kBool: out[0] = binary_typed<uint8_t, uint8_t>(n, a, b, DType::kBool, f); return;
    default: op_error(n, std::string("comparison of ") + dtype_name(a.dtype()) + " is not supported");
  }
}

// The most negative value over -1 traps (SIGFPE) in C++: its quotient wraps as numpy's does.
template <typename T>
T int_div(const Node& n, T a, T b) {
  if (b == 0) op_error(n, "integer division by zero");
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
    if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
  return a / b;
}

}  // namespace

void op_add(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  arith(n, in, out, [](auto a, auto b) { return a + b; });
}
void op_sub(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  arith(n, in, out, [](auto a, auto b) { return a - b; });
}
void op_mul(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  arith(n, in, out, [](auto a, auto b) { return a * b; });
}
void op_div(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (need(n, in, 0).dtype() == DType::kF32) {
    arith(n, in, out, [](auto a, auto b) { return a / b; });
    return;
  }
  arith(n, in, out, [&n](auto a, auto b) { return int_div(n, a, b); });
}

namespace {

// A float toward zero into an integer type, saturated at its ends (NaN gives 0): C++ leaves the
// conversion of a value the type cannot hold undefined, and a request may carry 1e30.
template <typename T>
T saturate(double v) {
  if (std::isnan(v)) return T(0);
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

double load_as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kI64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kI32: return t.data<int32_t>()[i];
    case DType::kU8:
    case DType::kBool: return t.data<uint8_t>()[i];
    case DType::kI8: return t.data<int8_t>()[i];
    case DType::kF16: return half_to_float(t.data<uint16_t>()[i]);
    case DType::kBF16: return bf16_to_float(t.data<uint16_t>()[i]);
  }
  return 0;
}

void store_from_double(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = static_cast<float>(v); return;
    case DType::kI64: t.data<int64_t>()[i] = saturate<int64_t>(v); return;
    case DType::kI32: t.data<int32_t>()[i] = saturate<int32_t>(v); return;
    case DType::kU8: t.data<uint8_t>()[i] = saturate<uint8_t>(v); return;
    case DType::kBool: t.data<uint8_t>()[i] = v != 0; return;
    case DType::kI8: t.data<int8_t>()[i] = saturate<int8_t>(v); return;
    case DType::kF16: t.data<uint16_t>()[i] = float_to_half(static_cast<float>(v)); return;
    case DType::kBF16: t.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v)); return;
  }
}

namespace {

// An integer base to an integer exponent (a float one must hold an integer): repeated squaring,
// wrapping as the type does; a negative exponent gives 0 but for bases 1 and -1.
void int_pow(const Node& n, const Tensor& a, const Tensor& b, std::vector<Tensor>& out) {
  Tensor e = Tensor::empty(b.shape(), a.dtype());
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double v = load_as_double(b, i);
    if (v != std::floor(v) || std::fabs(v) > 1e18) op_error(n, "an integer base to a fractional exponent is not supported");
    store_from_double(e, i, v);
  }
  const std::vector<const Tensor*> two = {&a, &e};
  arith(n, two, out, [](auto x, auto k) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      if (k < 0) return static_cast<T>(x == 1 ? 1 : x == -1 ? (k % 2 ? -1 : 1) : 0);
      uint64_t r = 1, base = static_cast<uint64_t>(x);  // unsigned: wraps without overflow
      for (auto m = static_cast<uint64_t>(k); m; m >>= 1, base *= base)
        if (m & 1) r *= base;
      return static_cast<T>(r);
    }
    return x;  // (a's type is an integer one here)
  });
}

}  // namespace

void op_pow(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& a = need(n, in, 0);
  Tensor b = need(n, in, 1);
  if (a.dtype() == DType::kI64 || a.dtype() == DType::kI32) return int_pow(n, a, b, out);
  if (a.dtype() != DType::kF32) op_error(n, std::string("Pow of ") + dtype_name(a.dtype()) + " is not supported");
  if (b.dtype() == DType::kI64 || b.dtype() == DType::kI32) {  // an integer exponent
    const std::vector<int64_t> e = ints_of(n, b);
    Tensor f = Tensor::empty(b.shape());
    for (size_t i = 0; i < e.size(); ++i) f.f32()[i] = static_cast<float>(e[i]);
    b = f;
  }
  if (b.numel() == 1 && b.dtype() == DType::kF32) {  // x^2, x^3 and x^0.5 without pow()
    const float e = b.f32()[0];
    Tensor y = Tensor::empty(broadcast_shape(n, a.shape(), b.shape()));
    const float* x = a.f32();
    float* py = y.f32();
    const int64_t total = y.numel();
    if (e == 2.0f) {
      for (int64_t i = 0; i < total; ++i) py[i] = x[i] * x[i];
    } else if (e == 3.0f) {
      for (int64_t i = 0; i < total; ++i) py[i] = x[i] * x[i] * x[i];
    } else if (e == 0.5f) {
      for (int64_t i = 0; i < total; ++i) py[i] = std::sqrt(x[i]);
    } else {
      for (int64_t i = 0; i < total; ++i) py[i] = std::pow(x[i], e);
    }
    out[0] = y;
    return;
  }
  std::vector<const Tensor*> args = {&a, &b};
  arith(n, args, out, [](auto x, auto y) { return static_cast<decltype(x)>(std::pow(x, y)); });
}

void op_equal(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  compare(n, in, out, [](auto a, auto b) -> uint8_t { return a == b; });
}
void op_less(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  compare(n, in, out, [](auto a, auto b) -> uint8_t { return a < b; });
}
void op_greater(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  compare(n, in, out, [](auto a, auto b) -> uint8_t { return a > b; });
}

void op_greater_equal(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  compare(n, in, out, [](auto a, auto b) -> uint8_t { return a >= b; });
}
void op_less_equal(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  compare(n, in, out, [](auto a, auto b) -> uint8_t { return a <= b; });
}

// And, Or, Xor: bool tensors, broadcast.
void op_logic(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (need(n, in, 0).dtype() != DType::kBool || need(n, in, 1).dtype() != DType::kBool)
    op_error(n, std::string(dtype_name(need(n, in, 0).dtype())) + " operands are not supported (" + n.op + " takes bool tensors)");
  if (n.op == "And") compare(n, in, out, [](auto a, auto b) -> uint8_t { return a && b; });
  else if (n.op == "Or") compare(n, in, out, [](auto a, auto b) -> uint8_t { return a || b; });
  else compare(n, in, out, [](auto a, auto b) -> uint8_t { return (a != 0) != (b != 0); });
}

// Max, Min, Sum, Mean of one or more tensors, broadcast (Mean: float32).
void op_variadic(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  Tensor acc = need(n, in, 0);
  if (in.size() == 1) acc = acc.clone();
  for (size_t k = 1; k < in.size(); ++k) {
    std::vector<const Tensor*> two = {&acc, &need(n, in, k)};
    std::vector<Tensor> r(1);
    if (n.op == "Max") arith(n, two, r, [](auto a, auto b) { return a < b ? b : a; });
    else if (n.op == "Min") arith(n, two, r, [](auto a, auto b) { return b < a ? b : a; });
    else arith(n, two, r, [](auto a, auto b) { return a + b; });
    acc = r[0];
  }
  if (n.op == "Mean") {
    if (acc.dtype() != DType::kF32) op_error(n, std::string("Mean of ") + dtype_name(acc.dtype()) + " is not supported");
    for (int64_t i = 0; i < acc.numel(); ++i) acc.f32()[i] /= static_cast<float>(in.size());
  }
  out[0] = acc;
}

// PRelu(x, slope): x where x >= 0, slope * x elsewhere; the slope broadcast to x.
void op_prelu(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  arith(n, in, out, [](auto x, auto s) { return x < 0 ? static_cast<decltype(x)>(s * x) : x; });
}

// Mod: integers take the divisor's sign (Python's %), or the dividend's with fmod=1 (C's fmod);
// floats need fmod=1.
void op_mod(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const bool c_style = attr_i(n, "fmod", 0) != 0;
  if (need(n, in, 0).dtype() == DType::kF32) {
    if (!c_style) op_error(n, "fmod=0 on float32 is not supported (ONNX asks fmod=1 for floats)");
    arith(n, in, out, [](auto a, auto b) { return static_cast<decltype(a)>(std::fmod(a, b)); });
    return;
  }
  arith(n, in, out, [&n, c_style](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) op_error(n, "integer modulo by zero");
      T r = b == -1 ? T(0) : static_cast<T>(a % b);  // the most negative value % -1 traps
      if (!c_style && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(std::fmod(a, b));  // not reached: float32 took the branch above
    }
  });
}

void op_not(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& a = need(n, in, 0);
  if (a.dtype() != DType::kBool) op_error(n, "Not takes a bool tensor");
  Tensor y = Tensor::empty(a.shape(), DType::kBool);
  for (int64_t i = 0; i < a.numel(); ++i) y.data<uint8_t>()[i] = !a.data<uint8_t>()[i];
  out[0] = y;
}

// Where(cond, x, y): three-way broadcast, any element type (copied by size).
void op_where(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &c = need(n, in, 0), &x = need(n, in, 1), &y = need(n, in, 2);
  if (c.dtype() != DType::kBool) op_error(n, "the condition must be bool");
  same_type(n, x, y);
  const Shape shape = broadcast_shape(n, broadcast_shape(n, c.shape(), x.shape()), y.shape());
  Tensor r = Tensor::empty(shape, x.dtype());
  const size_t es = dtype_size(x.dtype());
  const auto sc = broadcast_strides(c.shape(), shape), sx = broadcast_strides(x.shape(), shape),
             sy = broadcast_strides(y.shape(), shape);
  const uint8_t* pc = c.data<uint8_t>();
  const char *px = x.data<char>(), *py = y.data<char>();
  char* pr = r.data<char>();
  // Each run of the last dimension at once (its three strides fixed), the outer index stepped after.
  const size_t nd = shape.size();
  const int64_t inner = nd ? shape[nd - 1] : 1, total = r.numel();
  const int64_t ic = nd ? sc[nd - 1] : 0, ix = nd ? sx[nd - 1] : 0, iy = nd ? sy[nd - 1] : 0;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t o = 0; inner > 0 && o < total; o += inner) {
    int64_t oc = 0, ox = 0, oy = 0;
    for (size_t d = 0; d + 1 < nd; ++d) oc += idx[d] * sc[d], ox += idx[d] * sx[d], oy += idx[d] * sy[d];
    if (es == 4) {
      const auto *fx = reinterpret_cast<const uint32_t*>(px), *fy = reinterpret_cast<const uint32_t*>(py);
      uint32_t* fr = reinterpret_cast<uint32_t*>(pr) + o;
      for (int64_t j = 0; j < inner; ++j) fr[j] = pc[oc + j * ic] ? fx[ox + j * ix] : fy[oy + j * iy];
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(pr + (o + j) * es, pc[oc + j * ic] ? px + (ox + j * ix) * es : py + (oy + j * iy) * es, es);
    }
    for (size_t d = nd ? nd - 1 : 0; d-- > 0;) {  // the dimensions above the last
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  out[0] = r;
}

namespace {

bool castable(DType t) {
  return t == DType::kF32 || t == DType::kI64 || t == DType::kI32 || t == DType::kU8 || t == DType::kBool ||
         t == DType::kI8 || t == DType::kF16;
}

// An integer tensor's elements as floats in one typed loop; false for another element type.
template <class T>
void widen(const T* x, int64_t n, float* y) { for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]); }
bool widen_to_float(const Tensor& a, float* y) {
  switch (a.dtype()) {
    case DType::kI64: return widen(a.data<int64_t>(), a.numel(), y), true;
    case DType::kI32: return widen(a.data<int32_t>(), a.numel(), y), true;
    case DType::kU8: return widen(a.data<uint8_t>(), a.numel(), y), true;
    case DType::kI8: return widen(a.data<int8_t>(), a.numel(), y), true;
    default: return false;
  }
}

}  // namespace

void op_cast(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& a = need(n, in, 0);
  DType to = DType::kF32;
  const bool like = n.op == "CastLike";  // the type of input 1
  if (like) to = need(n, in, 1).dtype();
  if ((!like && !dtype_from_onnx(static_cast<int32_t>(attr_i(n, "to", 0)), &to)) || !castable(to) || !castable(a.dtype()))
    op_error(n, "Cast to " + (like ? std::string(dtype_name(to)) : "ONNX type " + std::to_string(attr_i(n, "to", 0))) + " from " + dtype_name(a.dtype()) +
                    " is not supported");
  if (to == a.dtype()) {
    out[0] = a;
    return;
  }
  Tensor y = Tensor::empty(a.shape(), to);
  if (to != DType::kF32 || !widen_to_float(a, y.f32()))
    for (int64_t i = 0; i < a.numel(); ++i) store_from_double(y, i, load_as_double(a, i));
  out[0] = y;
}

namespace {

// The element-wise float32 functions without a fused or special path, with ONNX's attributes and
// defaults (alpha, beta, gamma); null for an operator that is not one of them.
std::function<float(float)> math_fn(const Node& n) {
  const std::string& op = n.op;
  static const std::map<std::string, float (*)(float)> plain = {
      {"Sin", std::sin}, {"Cos", std::cos}, {"Tan", std::tan}, {"Asin", std::asin}, {"Acos", std::acos},
      {"Atan", std::atan}, {"Sinh", std::sinh}, {"Cosh", std::cosh}, {"Asinh", std::asinh}, {"Acosh", std::acosh},
      {"Atanh", std::atanh}, {"Floor", std::floor}, {"Ceil", std::ceil}, {"Round", std::nearbyint}};
  if (auto it = plain.find(op); it != plain.end()) return it->second;  // Round: half to even (the default rounding mode)
  if (op == "Sign") return [](float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f; };
  if (op == "Softplus") return [](float x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0f); };
  if (op == "Softsign") return [](float x) { return x / (1 + std::fabs(x)); };
  if (op == "LeakyRelu") return [a = attr_f(n, "alpha", 0.01f)](float x) { return x < 0 ? a * x : x; };
  if (op == "Elu") return [a = attr_f(n, "alpha", 1.0f)](float x) { return x < 0 ? a * std::expm1(x) : x; };
  if (op == "Celu") return [a = attr_f(n, "alpha", 1.0f)](float x) { return std::max(0.0f, x) + std::min(0.0f, a * std::expm1(x / a)); };
  if (op == "Selu")
    return [a = attr_f(n, "alpha", 1.67326319217681884765625f), g = attr_f(n, "gamma", 1.05070102214813232421875f)](float x) {
      return g * (x > 0 ? x : a * std::expm1(x));
    };
  if (op == "Shrink")
    return [l = attr_f(n, "lambd", 0.5f), b = attr_f(n, "bias", 0.0f)](float x) { return x < -l ? x + b : x > l ? x - b : 0.0f; };
  if (op == "ThresholdedRelu") return [a = attr_f(n, "alpha", 1.0f)](float x) { return x > a ? x : 0.0f; };
  if (op == "HardSigmoid")
    return [a = attr_f(n, "alpha", 0.2f), b = attr_f(n, "beta", 0.5f)](float x) { return std::clamp(a * x + b, 0.0f, 1.0f); };
  if (op == "HardSwish") return [](float x) { return x * std::clamp(x / 6 + 0.5f, 0.0f, 1.0f); };
  return nullptr;
}

}  // namespace

void op_unary(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& a = need(n, in, 0);
  if (a.dtype() == DType::kI64 && (n.op == "Neg" || n.op == "Abs")) {
    Tensor y = Tensor::empty(a.shape(), DType::kI64);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const int64_t v = a.data<int64_t>()[i];
      y.data<int64_t>()[i] = n.op == "Neg" ? -v : (v < 0 ? -v : v);
    }
    out[0] = y;
    return;
  }
  if (a.dtype() != DType::kF32) op_error(n, std::string(n.op) + " of " + dtype_name(a.dtype()) + " is not supported");
  Tensor y = Tensor::empty(a.shape());
  const float* x = a.f32();
  float* r = y.f32();
  const int64_t total = a.numel();
  const std::string& op = n.op;
  if (unary_rows(op.c_str(), x, r, total)) {
    out[0] = y;
    return;
  }
  if (op == "Relu") {
    for (int64_t i = 0; i < total; ++i) r[i] = x[i] > 0 ? x[i] : 0.0f;
  } else if (op == "Sqrt") {
    for (int64_t i = 0; i < total; ++i) r[i] = std::sqrt(x[i]);
  } else if (op == "Neg") {
    for (int64_t i = 0; i < total; ++i) r[i] = -x[i];
  } else if (op == "Log") {
    for (int64_t i = 0; i < total; ++i) r[i] = std::log(x[i]);
  } else if (op == "Reciprocal") {
    for (int64_t i = 0; i < total; ++i) r[i] = 1.0f / x[i];
  } else if (op == "Abs") {
    for (int64_t i = 0; i < total; ++i) r[i] = std::fabs(x[i]);
  } else if (const auto f = math_fn(n)) {
    for (int64_t i = 0; i < total; ++i) r[i] = f(x[i]);
  } else {
    op_error(n, "no unary kernel");
  }
  out[0] = y;
}

// IsNaN and IsInf (detect_negative, detect_positive) of float32: bool.
void op_is_special(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& a = need(n, in, 0);
  if (a.dtype() != DType::kF32) op_error(n, std::string(n.op) + " of " + dtype_name(a.dtype()) + " is not supported");
  const bool nan = n.op == "IsNaN", neg = attr_i(n, "detect_negative", 1) != 0, pos = attr_i(n, "detect_positive", 1) != 0;
  Tensor y = Tensor::empty(a.shape(), DType::kBool);
  const float* x = a.f32();
  uint8_t* r = y.data<uint8_t>();
  for (int64_t i = 0; i < a.numel(); ++i) r[i] = nan ? std::isnan(x[i]) : std::isinf(x[i]) && (x[i] < 0 ? neg : pos);
  out[0] = y;
}

// Loom.Affine (fuse.cpp): y = x * scale + shift in one pass, x float32 or uint8.
void op_affine(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const float a = attr_f(n, "loom.scale", 1), b = attr_f(n, "loom.shift", 0);
  Tensor y = Tensor::empty(x.shape());
  float* py = y.f32();
  const int64_t total = x.numel();
  if (x.dtype() == DType::kU8) {
    const uint8_t* px = x.data<uint8_t>();
    for (int64_t i = 0; i < total; ++i) py[i] = static_cast<float>(px[i]) * a + b;
  } else if (x.dtype() == DType::kF32) {
    const float* px = x.f32();
    for (int64_t i = 0; i < total; ++i) py[i] = px[i] * a + b;
  } else {
    op_error(n, std::string("an affine pass over ") + dtype_name(x.dtype()));
  }
  out[0] = y;
}

}  // namespace loom::rt::graph
