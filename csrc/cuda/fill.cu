// Device-side fills, poison and verification shared by the CUDA probes. Verification
// runs on the device and returns two integers, so checking GBs costs no host copy.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

constexpr int kUtilityBlock = 256;
// Grid-stride kernels: enough blocks to fill any current GPU, bounded launch size.
constexpr size_t kUtilityMaxGrid = 4096;

int utility_grid(size_t n) {
  const size_t blocks = (n + kUtilityBlock - 1) / kUtilityBlock;
  return static_cast<int>(blocks < kUtilityMaxGrid ? (blocks > 0 ? blocks : 1) : kUtilityMaxGrid);
}

__global__ void __launch_bounds__(kUtilityBlock) fill_expected_kernel(float* data, size_t n, ExpectedValues values) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = values.at(i);
}

__device__ unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, offset);
  return v;
}

__device__ unsigned long long warp_min(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, v, offset);
    v = other < v ? other : v;
  }
  return v;
}

// counters[0] += elements whose bits differ from expected; counters[1] = min such index.
// Bit comparison: NaN poison never matches, and neither would a sign-flipped zero.
__global__ void __launch_bounds__(kUtilityBlock)
    count_mismatches_kernel(const float* data, size_t n, ExpectedValues expected, unsigned long long* counters) {
  unsigned long long wrong = 0;
  unsigned long long first = ~0ull;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (bits_from_float(data[i]) != bits_from_float(expected.at(i))) {
      ++wrong;
      if (i < first) first = i;
    }
  }
  // All threads reach the shuffles: the loop above has no early exit.
  wrong = warp_sum(wrong);
  first = warp_min(first);
  if ((threadIdx.x & 31) == 0 && wrong > 0) {
    atomicAdd(&counters[0], wrong);
    atomicMin(&counters[1], first);
  }
}

std::string format_float(float v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g (0x%08" PRIx32 ")", static_cast<double>(v), bits_from_float(v));
  return text;
}

}  // namespace

void fill_expected(float* data, size_t n, const ExpectedValues& values, cudaStream_t stream) {
  if (n == 0) return;
  fill_expected_kernel<<<utility_grid(n), kUtilityBlock, 0, stream>>>(data, n, values);
  PGP_CUDA_CHECK_LAUNCH();
}

void poison_bytes(void* data, size_t bytes, cudaStream_t stream) {
  PGP_CUDA_CHECK(cudaMemsetAsync(data, 0xFF, bytes, stream));
}

const void* fill_kernel() { return reinterpret_cast<const void*>(&fill_expected_kernel); }

std::string describe_mismatches(uint64_t wrong, uint64_t n, uint64_t first_index, float got, float want) {
  if (wrong == 0) return "all " + std::to_string(n) + " elements match";
  return std::to_string(wrong) + " of " + std::to_string(n) + " elements wrong; first: index " +
         std::to_string(first_index) + " got " + format_float(got) + " want " + format_float(want);
}

Verification verify_on_device(const float* data, size_t n, const ExpectedValues& expected, cudaStream_t stream) {
  DeviceBuffer<unsigned long long> counters(2);
  PGP_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, sizeof(unsigned long long), stream));
  PGP_CUDA_CHECK(cudaMemsetAsync(counters.get() + 1, 0xFF, sizeof(unsigned long long), stream));
  if (n > 0) {
    count_mismatches_kernel<<<utility_grid(n), kUtilityBlock, 0, stream>>>(data, n, expected, counters.get());
    PGP_CUDA_CHECK_LAUNCH();
  }
  unsigned long long result[2] = {0, 0};
  PGP_CUDA_CHECK(cudaMemcpyAsync(result, counters.get(), sizeof result, cudaMemcpyDeviceToHost, stream));
  PGP_CUDA_CHECK(cudaStreamSynchronize(stream));
  const uint64_t wrong = result[0];
  const uint64_t first = result[1];
  if (wrong == 0) return {true, describe_mismatches(0, n, 0, 0.0f, 0.0f)};
  float got = 0.0f;
  PGP_CUDA_CHECK(cudaMemcpyAsync(&got, data + first, sizeof got, cudaMemcpyDeviceToHost, stream));
  PGP_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {false, describe_mismatches(wrong, n, first, got, expected.at(first))};
}

std::string device_unavailable_reason(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so no later launch check reports it
    return std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device visible";
  if (index < 0 || index >= count)
    return "CUDA device " + std::to_string(index) + " does not exist; " + std::to_string(count) + " visible";
  return "";
}

std::string missing_kernel_image_reason(const void* kernel, int index) {
  PGP_CUDA_CHECK(cudaSetDevice(index));
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err == cudaSuccess) return "";
  cudaGetLastError();  // not sticky; clear it so no later launch check reports it
  if (err != cudaErrorNoKernelImageForDevice && err != cudaErrorInvalidDeviceFunction) PGP_CUDA_CHECK(err);
  int major = 0, minor = 0;
  PGP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  PGP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  std::string reason = "this build has no kernel image for compute capability " + std::to_string(major) + "." +
                       std::to_string(minor) + " (" + cudaGetErrorName(err) + ")";
#ifdef PGP_CUDA_ARCHS
  reason += "; built for " PGP_CUDA_ARCHS;
#endif
  return reason;
}

}  // namespace pgp::cuda
