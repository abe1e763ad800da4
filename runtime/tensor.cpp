// tensor.cpp — tensors, their storage and the CPU caching allocator.
#include "loom/rt/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
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
  }
  return "?";
}

Allocator& Allocator::cpu() {
  static Allocator a;
  return a;
}

void* Allocator::allocate(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) & ~size_t{63};
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].first == bytes) {
      void* p = free_[i].second;
      free_.erase(free_.begin() + static_cast<long>(i));
      cached_ -= bytes;
      live_ += bytes;
      return p;
    }
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  live_ += bytes;
  return p;
}

void Allocator::release(void* p, size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) & ~size_t{63};
  live_ -= bytes;
  free_.emplace_back(bytes, p);
  cached_ += bytes;
}

Allocator::~Allocator() {
  for (auto& f : free_) std::free(f.second);
}

Storage::~Storage() {
  if (data && device == Device::kCpu) Allocator::cpu().release(data, bytes);
}

int64_t Tensor::numel() const {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<int64_t>());
}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw Error("negative dimension in shape");
  if (device != Device::kCpu) throw Error("CUDA tensors need a build with CUDA and a GPU");
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  t.storage_->data = Allocator::cpu().allocate(t.storage_->bytes);
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data<char>(), 0, static_cast<size_t>(t.numel()) * dtype_size(dtype));
  return t;
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
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.data<char>(), data<char>(), static_cast<size_t>(numel()) * dtype_size(dtype_));
  return t;
}

void Tensor::fill(float v) {
  float* p = f32();
  std::fill(p, p + numel(), v);
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace loom::rt
