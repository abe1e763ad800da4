// device_cuda.cu — the CUDA device behind kernels_cuda.hpp: finding and choosing a GPU, its memory
// (a caching allocator per device), copies, events and the side stream. The kernels and cuBLAS
// GEMMs are in kernels_cuda.cu. Every CUDA call is checked and reports file:line with the
// library's own message.
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_check.cuh"
#include "loom/rt/tensor/kernels_cuda.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::cuda {

namespace {

// cudaMalloc's out of memory is nullptr, for the allocator to give its cache back and try again.
void* cuda_fresh(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    return nullptr;
  }
  LOOM_CHECK_CUDA(e);
  return p;
}

void cuda_give_back(void* p) {
  if (cudaFree(p) != cudaSuccess) cudaGetLastError();  // a block the device already lost: nothing to do
}

// One cache per device, made on first use and kept to the end (Storage destructors may run after
// static destructors would have).
Allocator& device_cache(int dev) {
  static std::mutex mu;
  static auto* caches = new std::map<int, std::unique_ptr<Allocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*caches)[dev];
  if (!slot) slot = std::make_unique<Allocator>(cuda_fresh, cuda_give_back, 256, false);
  return *slot;
}

// One non-blocking stream per device beside the default stream: copies that must not wait for
// work queued after them there (checkpoints, staged gradients).
cudaStream_t side_stream() {
  static std::mutex mu;
  static std::map<int, cudaStream_t> side;
  int dev = 0;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = side[dev];
  if (!slot) LOOM_CHECK_CUDA(cudaStreamCreateWithFlags(&slot, cudaStreamNonBlocking));
  return slot;
}

// Launched never: asking for its attributes tells whether this build has code for the GPU.
__global__ void k_probe() {}

}  // namespace

bool available(std::string* why, bool* no_code) {
  int n = 0, dev = 0;
  if (no_code) *no_code = false;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  // The GPU must have code in this build (a cubin of its architecture, or PTX it can JIT): asking
  // for a kernel's attributes fails as its first launch would, without launching.
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    if (why) *why = cudaGetErrorString(cudaGetLastError());
    return false;
  }
  cudaFuncAttributes a{};
  e = cudaFuncGetAttributes(&a, k_probe);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    if (no_code) *no_code = true;
    if (why)
      *why = "GPU " + std::to_string(dev) + " (" + p.name + ", compute capability " + std::to_string(p.major) + "." +
             std::to_string(p.minor) + "): " + cudaGetErrorString(e);
    return false;
  }
  return true;
}

int select_device(int local_rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return -1;
  }
  const char* own = std::getenv("LOOM_GPU");  // the plugin put this task's own GPU first
  const int dev = own && *own ? 0 : local_rank % n;
  LOOM_CHECK_CUDA(cudaSetDevice(dev));
  return dev;
}

int current_device() {
  int dev = -1;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  return dev;
}

void set_device(int dev) { LOOM_CHECK_CUDA(cudaSetDevice(dev)); }

int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  LOOM_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LOOM_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

// On the current device; blocks it gives back to cudaFree are that device's too.
void* device_alloc(size_t bytes) {
  int dev = 0;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  return device_cache(dev).allocate(bytes);
}

// Kept for the device it lives on, whichever device is current here (threads-as-ranks each
// drive their own). Called by destructors: never throws (at exit the runtime may be gone).
void device_free(void* p, size_t bytes) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // not left for the next check to report
    return;
  }
  device_cache(attr.device).release(p, bytes);
}

void to_device(void* dst, const void* src, size_t bytes) { LOOM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); }
void to_host(void* dst, const void* src, size_t bytes) { LOOM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); }

void* mark_queued() {
  cudaEvent_t e;
  LOOM_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  LOOM_CHECK_CUDA(cudaEventRecord(e, cudaStreamLegacy));
  return e;
}

void to_host_after(void* mark, void* dst, const void* src, size_t bytes) {
  cudaStream_t s = side_stream();
  LOOM_CHECK_CUDA(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(mark), 0));
  LOOM_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  LOOM_CHECK_CUDA(cudaStreamSynchronize(s));
}

void to_device_beside(void* dst, const void* src, size_t bytes) {
  if (bytes) LOOM_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, side_stream()));
}

void* mark_beside() {
  cudaEvent_t e;
  LOOM_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  LOOM_CHECK_CUDA(cudaEventRecord(e, side_stream()));
  return e;
}

void queue_after(void* mark) { LOOM_CHECK_CUDA(cudaStreamWaitEvent(cudaStreamLegacy, static_cast<cudaEvent_t>(mark), 0)); }

bool pin_host(void* p, size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();  // not sticky: pageable memory still works, only slower
  return false;
}

void unpin_host(void* p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

void release_mark(void* mark) { LOOM_CHECK_CUDA(cudaEventDestroy(static_cast<cudaEvent_t>(mark))); }
void synchronize() { LOOM_CHECK_CUDA(cudaDeviceSynchronize()); }
void wait_default_stream() { LOOM_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy)); }

void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes) LOOM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

}  // namespace loom::rt::cuda
