// Shared-memory read bandwidth: each block stages random integers from global memory,
// then every thread re-reads the same few shared addresses. The loads are
// ld.volatile.shared: with plain ld.shared, even in asm volatile, ptxas merged the
// loop-invariant loads of 16 unrolled iterations into one (measured 3.7x the ceiling).
#include "cuda/cache_kernels.h"
#include "cuda/cuda_check.h"

namespace pgp::cuda {
namespace {

__device__ __forceinline__ uint4 load_shared_vector(uint32_t address) {
  uint4 v;
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

__device__ __forceinline__ uint32_t load_shared_word(uint32_t address) {
  uint32_t w;
  asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(w) : "r"(address));
  return w;
}

template <SharedAccess kAccess>
__device__ __forceinline__ uint32_t shared_address(uint32_t base, uint32_t words, int load) {
  if constexpr (kAccess == SharedAccess::Vector16)
    return base + ((threadIdx.x + load * kSharedBlock) % (words / 4)) * 16;
  else
    return base + ((threadIdx.x * 32 + load) % words) * 4;
}

template <SharedAccess kAccess>
__global__ void __launch_bounds__(kSharedBlock)
    shared_read(const uint32_t* src, uint32_t words, uint32_t iterations, uint32_t* warp_sums) {
  extern __shared__ uint4 staged[];
  const auto* block_src = reinterpret_cast<const uint4*>(src + static_cast<size_t>(blockIdx.x) * words);
  for (uint32_t v = threadIdx.x; v < words / 4; v += kSharedBlock) staged[v] = block_src[v];
  __syncthreads();

  constexpr int kLoads = shared_loads_per_iteration(kAccess);
  const auto base = static_cast<uint32_t>(__cvta_generic_to_shared(staged));
  uint32_t address[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) address[u] = shared_address<kAccess>(base, words, u);

  uint32_t sum = 0;
  for (uint32_t it = 0; it < iterations; ++it) {
    if constexpr (kAccess == SharedAccess::Vector16) {
      uint4 v[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) v[u] = load_shared_vector(address[u]);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) sum += sum_of(v[u]);
    } else {
      uint32_t w[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) w[u] = load_shared_word(address[u]);
#pragma unroll
      for (int u = 0; u < kLoads; ++u) sum += w[u];
    }
  }
  store_warp_sum(sum, warp_sums);
}

}  // namespace

const void* shared_read_kernel(SharedAccess access) {
  return access == SharedAccess::Vector16 ? reinterpret_cast<const void*>(&shared_read<SharedAccess::Vector16>)
                                          : reinterpret_cast<const void*>(&shared_read<SharedAccess::Stride32>);
}

void allow_shared_bytes(SharedAccess access, size_t bytes) {
  const void* kernel = shared_read_kernel(access);
  PGP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  PGP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared));
}

void launch_shared_read(SharedAccess access, const uint32_t* src, uint32_t words_per_block, uint32_t iterations,
                        uint32_t* warp_sums, int grid, cudaStream_t stream) {
  const size_t bytes = size_t{words_per_block} * sizeof(uint32_t);
  if (access == SharedAccess::Vector16)
    shared_read<SharedAccess::Vector16><<<grid, kSharedBlock, bytes, stream>>>(src, words_per_block, iterations,
                                                                               warp_sums);
  else
    shared_read<SharedAccess::Stride32><<<grid, kSharedBlock, bytes, stream>>>(src, words_per_block, iterations,
                                                                               warp_sums);
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda
