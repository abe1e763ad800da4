// tensor.hpp — n-dimensional arrays with a dtype and a device, backed by a per-device caching
// allocator. Contiguous row-major storage; views (reshape, row ranges) share it without copies.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"

namespace loom::rt {

// kI64, kU8 and kBool (one byte, 0 or 1) are the ONNX graph's index, pixel and mask types.
enum class DType { kF32, kF16, kBF16, kI8, kI32, kI64, kU8, kBool };
enum class Device { kCpu, kCuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

// The element count of `shape`, every dimension checked (>= 0) and the product computed without
// wrapping; a negative dimension, a count past 2^62 elements, or an empty shape whose other
// dimensions hold more than 2^28 (loops would still run over them) is AllocationRefused (below)
// naming the shape. Shapes computed from data (an ONNX request) go through here before anything
// is allocated or indexed.
int64_t checked_numel(const std::vector<int64_t>& shape);

// A budget of bytes for the tensors the calling thread makes while it is in scope (an ONNX
// graph's run for one request): it counts the bytes of those that are alive, so it bounds the
// run's peak memory, and an allocation that would pass it throws AllocationRefused before any
// memory is taken. Nested budgets: the innermost counts.
class AllocationRefused : public InvalidInput {
 public:
  using InvalidInput::InvalidInput;
};
struct BudgetAccount {  // shared by the budget and every tensor charged to it (which may outlive it)
  size_t limit = 0;
  std::atomic<size_t> live{0};
  void charge(size_t bytes);  // AllocationRefused past the limit
  void refund(size_t bytes) { live.fetch_sub(bytes); }
};
class AllocationBudget {
 public:
  explicit AllocationBudget(size_t bytes);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;
  size_t live() const { return account_->live.load(); }
  static const std::shared_ptr<BudgetAccount>& current();

 private:
  std::shared_ptr<BudgetAccount> account_, outer_;
};

// IEEE binary16 and bfloat16 conversions, round to nearest even (NaN stays NaN, overflow to inf).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);
// The same conversions over arrays, 8 at a time with the CPU's F16C instructions where it has
// them (the same results; a NaN may keep its payload): what fp16 gradients and the fp16 pass
// of mixed precision spend their time on.
void floats_to_halves(const float* in, uint16_t* out, size_t n);
void halves_to_floats(const uint16_t* in, float* out, size_t n);
void round_to_half(float* x, size_t n);  // x = half_to_float(float_to_half(x)), in place

// A cache of freed blocks by exact size, so that a training step allocates nothing after the
// first one; one for host memory (cpu()) and one per GPU (kernels_cuda.cu). It never holds more
// than the most that was ever in use at once: a miss gives back the blocks released longest ago
// (sizes the program stopped asking for, as when the balancer moves a rank's share, or a server's
// batch sizes vary) until the new block fits under that mark. Where the backing allocator is out
// of memory, every cached block is given back and the allocation tried once more.
class Allocator {  // thread-safe: ranks as threads, communication threads, serving workers
 public:
  using Fresh = void* (*)(size_t bytes);  // nullptr: out of memory
  using GiveBack = void (*)(void* p);
  // align: sizes are rounded up to it; give_back_at_exit: whether the destructor frees the cache
  // (not for a GPU's: at exit the CUDA runtime may be gone first).
  Allocator(Fresh fresh, GiveBack give_back, size_t align, bool give_back_at_exit);
  static Allocator& cpu();
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);
  size_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  size_t live_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  size_t high_water_bytes() const {  // the most in use at once
    std::lock_guard<std::mutex> lock(mu_);
    return high_;
  }
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

 private:
  size_t rounded(size_t bytes) const;  // the block size a request takes (at least 1, aligned)
  void evict(size_t keep);  // gives back the oldest cached blocks until cached_ <= keep; mu_ held
  Fresh fresh_;
  GiveBack give_back_;
  size_t align_;
  bool give_back_at_exit_;
  mutable std::mutex mu_;
  std::vector<std::pair<size_t, void*>> free_;  // the oldest released first
  size_t cached_ = 0, live_ = 0, high_ = 0;
};

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::kCpu;
  std::shared_ptr<BudgetAccount> account;  // refunded when the storage goes (AllocationBudget)
  bool owned = true;  // false: memory another framework owns and frees (Tensor::borrow)
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(std::vector<int64_t> shape, DType dtype = DType::kF32, Device device = Device::kCpu);
  static Tensor zeros(std::vector<int64_t> shape, DType dtype = DType::kF32, Device device = Device::kCpu);
  // A tensor over memory another framework owns (a PyTorch gradient): never freed here, valid
  // only while that owner keeps it.
  static Tensor borrow(void* data, std::vector<int64_t> shape, DType dtype, Device device);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + static_cast<int>(shape_.size()) : i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const {  // inline: it sits in loop conditions of hot element-wise code
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::kCpu; }
  bool defined() const { return storage_ != nullptr; }
  bool sole() const { return storage_ && storage_.use_count() == 1; }  // no other tensor shares the storage

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data) + offset_ * dtype_size(dtype_));
  }
  float* f32() const {
    LOOM_CHECK(dtype_ == DType::kF32, "tensor is not float32");
    return data<float>();
  }

  Tensor reshape(std::vector<int64_t> shape) const;  // a view: same storage
  Tensor rows(int64_t begin, int64_t end) const;      // a view of rows [begin, end) of dim 0
  Tensor clone() const;
  // A copy in another dtype: float32 <-> float16 / bfloat16 / int32 (int8 needs a scale: see
  // loom-compress). Throws Error for other pairs.
  Tensor to(DType dtype) const;
  // A copy on another device (host <-> CUDA).
  Tensor to(Device device) const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void fill(float v);
  std::string shape_str() const;

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::kF32;
};

}  // namespace loom::rt
