// Pointer chase: every load's address is the value the previous load returned, so one
// thread has exactly one load in flight and a run's time is the sum of load latencies.
// The chain holds full device pointers, so no address arithmetic sits between loads.
#include "cuda/cache_kernels.h"
#include "cuda/cuda_check.h"

namespace pgp::cuda {
namespace {

constexpr int kChainBlock = 256;
constexpr size_t kChainMaxGrid = 4096;

__global__ void __launch_bounds__(kChainBlock) chain_writer(uint64_t* chain, const uint32_t* next_line, size_t lines) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kChainBlock;
  const auto origin = reinterpret_cast<uint64_t>(chain);
  for (size_t i = static_cast<size_t>(blockIdx.x) * kChainBlock + threadIdx.x; i < lines; i += stride)
    chain[i * kChaseLineWords] = origin + static_cast<uint64_t>(next_line[i]) * kChaseLineBytes;
}

template <LoadCache kCache>
__device__ __forceinline__ uint64_t load_pointer(uint64_t address) {
  uint64_t next;
  if constexpr (kCache == LoadCache::CA)
    asm volatile("ld.global.u64 %0, [%1];" : "=l"(next) : "l"(address));
  else
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(next) : "l"(address));
  return next;
}

template <LoadCache kCache>
__global__ void __launch_bounds__(32) chase(uint64_t* cursor, uint64_t steps, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t p = *cursor;
  const long long start = clock64();
  for (uint64_t k = 0; k < steps; k += kChaseUnroll) {
#pragma unroll
    for (int u = 0; u < kChaseUnroll; ++u) p = load_pointer<kCache>(p);
  }
  // Read after the last load was issued, not completed: one latency in `steps` is missed.
  const long long stop = clock64();
  *cursor = p;
  out[0] = p;
  out[1] = static_cast<uint64_t>(start);
  out[2] = static_cast<uint64_t>(stop);
}

}  // namespace

void write_chain(uint64_t* chain, const uint32_t* next_line, size_t lines, cudaStream_t stream) {
  if (lines == 0) return;
  const size_t blocks = (lines + kChainBlock - 1) / kChainBlock;
  chain_writer<<<static_cast<int>(blocks < kChainMaxGrid ? blocks : kChainMaxGrid), kChainBlock, 0, stream>>>(
      chain, next_line, lines);
  PGP_CUDA_CHECK_LAUNCH();
}

const void* chain_writer_kernel() { return reinterpret_cast<const void*>(&chain_writer); }

const void* chase_kernel(LoadCache cache) {
  return cache == LoadCache::CA ? reinterpret_cast<const void*>(&chase<LoadCache::CA>)
                                : reinterpret_cast<const void*>(&chase<LoadCache::CG>);
}

void launch_chase(LoadCache cache, uint64_t* cursor, uint64_t steps, uint64_t* out, cudaStream_t stream) {
  if (cache == LoadCache::CA)
    chase<LoadCache::CA><<<1, 32, 0, stream>>>(cursor, steps, out);
  else
    chase<LoadCache::CG><<<1, 32, 0, stream>>>(cursor, steps, out);
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda
