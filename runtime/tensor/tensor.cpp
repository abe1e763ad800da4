// tensor.cpp — tensors, their storage and the CPU caching allocator.
#include "loom/rt/tensor/tensor.hpp"

#ifdef LOOM_HAVE_CUDA
#include "loom/rt/tensor/kernels_cuda.hpp"
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define LOOM_F16C 1
#endif

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <sstream>

namespace loom::rt {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::ostringstream os;
  os << file << ":" << line << ": check failed: " << expr << ": " << msg;
  throw Error(os.str());
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
  }
  return 4;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "?";
}

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint16_t float_to_half(float f) {
  uint32_t x = bits_of(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t mag = x & 0x7fffffff;
  if (mag > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (mag >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to >= 65520: inf
  if (mag < 0x38800000) {  // below the smallest normal half: subnormal or zero
    if (mag < 0x33000000) return sign;  // below half the smallest subnormal
    uint32_t mant = (mag & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(mag >> 23);  // subnormal half mantissa = mant >> shift
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = mag - 0x38000000;  // rebias exponent 127 -> 15
  uint32_t out = r >> 13, rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) ++out;
  return static_cast<uint16_t>(sign | out);
}

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t{h} & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return float_of(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

namespace {

#ifdef LOOM_F16C
__attribute__((target("avx,f16c"))) void f2h_f16c(const float* in, uint16_t* out, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm256_cvtps_ph(_mm256_loadu_ps(in + k), _MM_FROUND_TO_NEAREST_INT));
  for (; k < n; ++k) out[k] = float_to_half(in[k]);
}
__attribute__((target("avx,f16c"))) void h2f_f16c(const uint16_t* in, float* out, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(out + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + k))));
  for (; k < n; ++k) out[k] = half_to_float(in[k]);
}
__attribute__((target("avx,f16c"))) void round_f16c(float* x, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(x + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT)));
  for (; k < n; ++k) x[k] = half_to_float(float_to_half(x[k]));
}
bool have_f16c() {  // cpuid leaf 1: AVX, F16C, and the OS saving YMM state (xgetbv)
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1) || !((c >> 28) & 1) || !((c >> 29) & 1)) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
  }();
  return yes;
}
#endif

}  // namespace

void floats_to_halves(const float* in, uint16_t* out, size_t n) {
#ifdef LOOM_F16C
  if (have_f16c()) return f2h_f16c(in, out, n);
#endif
  for (size_t k = 0; k < n; ++k) out[k] = float_to_half(in[k]);
}

void halves_to_floats(const uint16_t* in, float* out, size_t n) {
#ifdef LOOM_F16C
  if (have_f16c()) return h2f_f16c(in, out, n);
#endif
  for (size_t k = 0; k < n; ++k) out[k] = half_to_float(in[k]);
}

void round_to_half(float* x, size_t n) {
#ifdef LOOM_F16C
  if (have_f16c()) return round_f16c(x, n);
#endif
  for (size_t k = 0; k < n; ++k) x[k] = half_to_float(float_to_half(x[k]));
}

uint16_t float_to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t b) { return float_of(uint32_t{b} << 16); }

Allocator::Allocator(Fresh fresh, GiveBack give_back, size_t align, bool give_back_at_exit)
    : fresh_(fresh), give_back_(give_back), align_(align), give_back_at_exit_(give_back_at_exit) {}

Allocator& Allocator::cpu() {
  static Allocator a([](size_t bytes) { return std::aligned_alloc(64, bytes); }, std::free, 64, true);
  return a;
}

size_t Allocator::rounded(size_t bytes) const { return (std::max<size_t>(bytes, 1) + align_ - 1) / align_ * align_; }

void* Allocator::allocate(size_t bytes) {
  bytes = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = free_.size(); i-- > 0;)  // the most recently released first: the oldest age out
    if (free_[i].first == bytes) {
      void* p = free_[i].second;
      free_.erase(free_.begin() + static_cast<long>(i));
      cached_ -= bytes;
      live_ += bytes;
      return p;
    }
  high_ = std::max(high_, live_ + bytes);
  evict(high_ - live_ - bytes);  // held (live and cached) stays within the most ever live at once
  void* p = fresh_(bytes);
  if (!p && cached_ > 0) {  // out of memory: whatever the cache holds goes back, then once more
    evict(0);
    p = fresh_(bytes);
  }
  if (!p)
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes (" + std::to_string(live_) +
                " bytes in use)");
  live_ += bytes;
  return p;
}

void Allocator::evict(size_t keep) {
  size_t n = 0;
  for (; n < free_.size() && cached_ > keep; ++n) {
    give_back_(free_[n].second);
    cached_ -= free_[n].first;
  }
  free_.erase(free_.begin(), free_.begin() + static_cast<long>(n));
}

void Allocator::release(void* p, size_t bytes) {
  bytes = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= bytes;
  free_.emplace_back(bytes, p);
  cached_ += bytes;
}

Allocator::~Allocator() {
  if (give_back_at_exit_)
    for (auto& f : free_) give_back_(f.second);
}

Storage::~Storage() {
  if (account) account->refund(bytes);
  if (!owned) return;
  if (data && device == Device::kCpu) Allocator::cpu().release(data, bytes);
#ifdef LOOM_HAVE_CUDA
  if (data && device == Device::kCuda) cuda::device_free(data, bytes);
#endif
}

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

thread_local std::shared_ptr<BudgetAccount> t_budget;
}  // namespace

int64_t checked_numel(const std::vector<int64_t>& shape) {
  constexpr int64_t kMost = int64_t{1} << 62;
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0) throw AllocationRefused("negative dimension in shape " + shape_text(shape));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > kMost)
      throw AllocationRefused("shape " + shape_text(shape) + " has more elements than any memory holds");
  // An empty tensor costs no memory, but a kernel's loops over its other dimensions still run
  // (a Softmax over an axis of 0 beside 2^62 others would spin for years): those are bounded too.
  constexpr int64_t kMostBesideEmpty = int64_t{1} << 28;
  int64_t beside = 1;
  for (int64_t d : shape)
    if (n == 0 && d > 0 && (__builtin_mul_overflow(beside, d, &beside) || beside > kMostBesideEmpty))
      throw AllocationRefused("shape " + shape_text(shape) + " is empty, yet its other dimensions hold more than 2^28 elements");
  return n;
}

void BudgetAccount::charge(size_t bytes) {
  size_t now = live.load();
  do {
    if (bytes > limit || now > limit - bytes)
      throw AllocationRefused("needs " + std::to_string(bytes) + " bytes more, past the memory budget of " +
                              std::to_string(limit) + " bytes (" + std::to_string(now) + " in use)");
  } while (!live.compare_exchange_weak(now, now + bytes));
}

AllocationBudget::AllocationBudget(size_t bytes) : account_(std::make_shared<BudgetAccount>()), outer_(t_budget) {
  account_->limit = bytes;
  t_budget = account_;
}
AllocationBudget::~AllocationBudget() { t_budget = outer_; }
const std::shared_ptr<BudgetAccount>& AllocationBudget::current() { return t_budget; }

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  const int64_t n = checked_numel(shape);
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &bytes))
    throw AllocationRefused("shape " + shape_text(shape) + " has more bytes than any memory holds");
  if (t_budget) t_budget->charge(bytes);
#ifndef LOOM_HAVE_CUDA
  if (device != Device::kCpu) throw Error("CUDA tensors need a build of Loom with CUDA");
#endif
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = bytes;
  t.storage_->device = device;
  t.storage_->account = t_budget;
#ifdef LOOM_HAVE_CUDA
  if (device == Device::kCuda) {
    t.storage_->data = cuda::device_alloc(t.storage_->bytes);
    return t;
  }
#endif
  t.storage_->data = Allocator::cpu().allocate(t.storage_->bytes);
  return t;
}

Tensor Tensor::borrow(void* data, std::vector<int64_t> shape, DType dtype, Device device) {
  const int64_t n = checked_numel(shape);
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->bytes = static_cast<size_t>(n) * dtype_size(dtype);
  t.storage_->device = device;
  t.storage_->owned = false;
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
#ifdef LOOM_HAVE_CUDA
  if (device == Device::kCuda) {
    Tensor host = zeros(t.shape_, dtype);
    cuda::to_device(t.data<char>(), host.data<char>(), t.bytes());
    return t;
  }
#endif
  std::memset(t.data<char>(), 0, t.bytes());
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return clone();
  Tensor out = empty(shape_, dtype_, device);
#ifdef LOOM_HAVE_CUDA
  if (device == Device::kCuda) cuda::to_device(out.data<char>(), data<char>(), bytes());
  else cuda::to_host(out.data<char>(), data<char>(), bytes());
#endif
  return out;
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  LOOM_CHECK(t.numel() == numel(), "reshape from " + shape_str() + " changes the element count");
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  LOOM_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "row range out of bounds");
  Tensor t = *this;
  int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  t.offset_ = offset_ + begin * row;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  if (device() != Device::kCpu) {
#ifdef LOOM_HAVE_CUDA
    Tensor t = empty(shape_, dtype_, device());
    cuda::copy_on_device(t.data<char>(), data<char>(), bytes());
    return t;
#else
    throw Error("this build of Loom has no CUDA support");
#endif
  }
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.data<char>(), data<char>(), static_cast<size_t>(numel()) * dtype_size(dtype_));
  return t;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return clone();
  if (device() != Device::kCpu) throw Error("dtype conversion runs on host tensors");
  Tensor out = empty(shape_, dt);
  const int64_t n = numel();
  if (dtype_ == DType::kF32) {
    const float* src = data<float>();
    switch (dt) {
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = float_to_half(src[i]);
        return out;
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = float_to_bf16(src[i]);
        return out;
      case DType::kI32:
        for (int64_t i = 0; i < n; ++i) out.data<int32_t>()[i] = static_cast<int32_t>(std::lrint(src[i]));
        return out;
      default: break;
    }
  } else if (dt == DType::kF32) {
    float* dst = out.data<float>();
    switch (dtype_) {
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(data<uint16_t>()[i]);
        return out;
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(data<uint16_t>()[i]);
        return out;
      case DType::kI32:
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(data<int32_t>()[i]);
        return out;
      default: break;
    }
  }
  throw Error(std::string("no conversion from ") + dtype_name(dtype_) + " to " + dtype_name(dt));
}

void Tensor::fill(float v) {
  float* p = f32();
#ifdef LOOM_HAVE_CUDA
  if (device() == Device::kCuda) {
    cuda::fill(p, v, numel());
    return;
  }
#endif
  std::fill(p, p + numel(), v);
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace loom::rt
