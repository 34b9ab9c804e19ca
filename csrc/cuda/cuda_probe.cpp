#include "cuda/cuda_probe.h"

namespace pgp::cuda {

DeviceFacts query_device(int index) {
  int count = 0;
  PGP_CUDA_CHECK(cudaGetDeviceCount(&count));
  PGP_CHECK(index >= 0 && index < count,
            "CUDA device " + std::to_string(index) + " does not exist; " + std::to_string(count) + " visible");
  cudaDeviceProp prop{};
  PGP_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceFacts f;
  f.index = index;
  f.sm_count = prop.multiProcessorCount;
  f.cc_major = prop.major;
  f.cc_minor = prop.minor;
  f.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  f.name = prop.name;
  PGP_CUDA_CHECK(cudaSetDevice(index));
  PGP_CUDA_CHECK(cudaMemGetInfo(&f.free_bytes, &f.total_bytes));
  return f;
}

void CudaProbe::begin_setup(const Device& dev) {
  facts_ = query_device(dev.index);
  if (!stream_) PGP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

void CudaProbe::teardown() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

int CudaProbe::occupancy_grid(const void* kernel, int block, size_t dynamic_smem) const {
  int per_sm = 0;
  PGP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, dynamic_smem));
  PGP_CHECK(per_sm > 0, "kernel cannot be resident with " + std::to_string(block) + " threads per block");
  return per_sm * facts_.sm_count;
}

}  // namespace pgp::cuda
