// Read bandwidth against working-set size. Each thread walks a window with a fixed
// stride, wrapping at its end, so every load is independent of the others and a warp's
// 32 loads are always one aligned 512-byte chunk. Loads go through inline PTX so the
// cache operator (.ca or .cg) is exactly the one asked for.
#include "cuda/cache_kernels.h"
#include "cuda/cuda_check.h"

namespace pgp::cuda {
namespace {

constexpr int kFillBlock = 256;
constexpr size_t kFillMaxGrid = 2048;

__global__ void __launch_bounds__(kFillBlock) small_int_fill(uint32_t* data, size_t n, uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kFillBlock;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kFillBlock + threadIdx.x; i < n; i += stride)
    data[i] = small_int_at(seed, i);
}

template <LoadCache kCache>
__device__ __forceinline__ uint4 load_vector(const uint4* address) {
  uint4 v;
  // volatile: the loads must all issue, in this order, however the sums are used.
  if constexpr (kCache == LoadCache::CA)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(address));
  else
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(address));
  return v;
}

// Both below n, so i + step cannot wrap 32 bits (n < 2^31 is checked on the host).
__device__ __forceinline__ uint32_t advance(uint32_t i, uint32_t step, uint32_t n) {
  i += step;
  return i >= n ? i - n : i;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

template <LoadCache kCache>
__global__ void __launch_bounds__(kSweepBlock) sweep_read(SweepLaunch p) {
  const uint32_t n = p.window_vectors;
  const uint32_t threads = p.private_windows ? kSweepBlock : gridDim.x * kSweepBlock;
  const uint32_t thread = p.private_windows ? threadIdx.x : blockIdx.x * kSweepBlock + threadIdx.x;
  const uint4* window = p.data + (p.private_windows ? static_cast<size_t>(blockIdx.x) * n : 0);
  const uint32_t step = threads % n;
  const uint32_t steps = p.steps;
  uint32_t i = thread % n;
  uint32_t sum = 0;
  uint32_t k = 0;
  for (; k + kSweepUnroll <= steps; k += kSweepUnroll) {
    uint4 v[kSweepUnroll];
#pragma unroll
    for (int u = 0; u < kSweepUnroll; ++u) {
      v[u] = load_vector<kCache>(window + i);
      i = advance(i, step, n);
    }
#pragma unroll
    for (int u = 0; u < kSweepUnroll; ++u) sum += sum_of(v[u]);
  }
  for (; k < steps; ++k) {
    sum += sum_of(load_vector<kCache>(window + i));
    i = advance(i, step, n);
  }
  store_warp_sum(sum, p.warp_sums);
  if (threadIdx.x == 0) p.block_sm[blockIdx.x] = sm_id();
}

}  // namespace

void fill_small_ints(uint32_t* data, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = (n + kFillBlock - 1) / kFillBlock;
  small_int_fill<<<static_cast<int>(blocks < kFillMaxGrid ? blocks : kFillMaxGrid), kFillBlock, 0, stream>>>(data, n,
                                                                                                            seed);
  PGP_CUDA_CHECK_LAUNCH();
}

const void* small_int_fill_kernel() { return reinterpret_cast<const void*>(&small_int_fill); }

void prefer_max_l1(const void* kernel) {
  PGP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0));
}

const void* sweep_kernel(LoadCache cache) {
  return cache == LoadCache::CA ? reinterpret_cast<const void*>(&sweep_read<LoadCache::CA>)
                                : reinterpret_cast<const void*>(&sweep_read<LoadCache::CG>);
}

void launch_sweep(LoadCache cache, const SweepLaunch& launch, cudaStream_t stream) {
  if (cache == LoadCache::CA)
    sweep_read<LoadCache::CA><<<launch.grid, kSweepBlock, 0, stream>>>(launch);
  else
    sweep_read<LoadCache::CG><<<launch.grid, kSweepBlock, 0, stream>>>(launch);
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda
