// Shared base for CUDA probes: device selection, a private stream, device facts,
// and RAII buffers. Compiled as host C++ against the CUDA runtime; no torch.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "core/probe.h"
#include "cuda/cuda_check.h"

namespace pgp::cuda {

struct DeviceFacts {
  int index = 0;
  int sm_count = 0;
  int cc_major = 0;
  int cc_minor = 0;
  size_t l2_bytes = 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  std::string name;
};

DeviceFacts query_device(int index);

// Device memory owned for the lifetime of a measurement.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) { PGP_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T))); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    reset();
    ptr_ = o.ptr_;
    count_ = o.count_;
    o.ptr_ = nullptr;
    o.count_ = 0;
    return *this;
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Page-locked host memory (cudaMallocHost).
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) : count_(count) {
    PGP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    reset();
    ptr_ = o.ptr_;
    count_ = o.count_;
    o.ptr_ = nullptr;
    o.count_ = 0;
    return *this;
  }
  void reset() {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Base for every CUDA probe: selects the device and owns a non-blocking stream.
class CudaProbe : public Probe {
 public:
  DeviceKind device_kind() const override { return DeviceKind::CUDA; }
  void* stream() const override { return stream_; }
  void teardown() override;

 protected:
  // Call first in setup(): sets the device, queries facts, creates the stream.
  void begin_setup(const Device& dev);
  void synchronize() const { PGP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  const DeviceFacts& facts() const { return facts_; }
  cudaStream_t cuda_stream() const { return stream_; }
  // Grid of `blocks per SM at full occupancy` x SM count for `kernel` with `block` threads.
  int occupancy_grid(const void* kernel, int block, size_t dynamic_smem = 0) const;

 private:
  DeviceFacts facts_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace pgp::cuda
