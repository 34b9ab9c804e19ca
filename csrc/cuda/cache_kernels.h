// Host entry points of the memory-hierarchy kernels (cache_sweep.cu, shared_mem.cu,
// latency.cu), callable from plain C++. Launches are enqueued on the given stream and
// checked; nothing here synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/random_fill.h"

namespace pgp::cuda {

// Integers 1..15 as uint32: a thread's running uint32 sum may wrap, and the host
// reproduces it exactly modulo 2^32.
PGP_HOST_DEVICE inline uint32_t small_int_at(uint64_t seed, uint64_t index) {
  return static_cast<uint32_t>(random_int(seed, index, 1, 15));
}

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t sum_of(const uint4& v) { return (v.x + v.y) + (v.z + v.w); }

// warp_sums[global warp index] = the warp's total, wrapping modulo 2^32 like the host
// reference. Every lane of the warp must call it.
__device__ __forceinline__ void store_warp_sum(uint32_t sum, uint32_t* warp_sums) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  sum = __reduce_add_sync(0xFFFFFFFFu, sum);  // one REDUX instruction from sm_80 on
#else
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
#endif
  if ((threadIdx.x & 31) == 0)
    warp_sums[(static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32] = sum;
}
#endif

// data[i] = small_int_at(seed, i) for i < n.
void fill_small_ints(uint32_t* data, size_t n, uint64_t seed, cudaStream_t stream);
const void* small_int_fill_kernel();

// Global-load cache operator: CA is plain ld.global (PTX's default .ca: a weak load,
// LDG.E, that allocates in L1; an explicit .ca assembles to LDG.E.STRONG.SM), CG is
// ld.global.cg (LDG.E.STRONG.GPU: served by L2, L1 bypassed).
enum class LoadCache { CA, CG };

// Hint that kernels which use no shared memory get the whole L1/shared array as L1.
void prefer_max_l1(const void* kernel);

// ---- cache_sweep.cu: read bandwidth vs working set -------------------------------------

constexpr int kSweepBlock = 1024;
// Independent 16-byte loads a thread has in flight before it adds them up.
constexpr int kSweepUnroll = 4;

struct SweepLaunch {
  const uint4* data = nullptr;
  // Vectors in one window; a multiple of 32, so a warp's 32 loads are one aligned chunk.
  uint32_t window_vectors = 0;
  // true: block b reads its own window at data + b * window_vectors (walking with
  // stride kSweepBlock); false: every block reads the one window at data, grid-stride.
  bool private_windows = false;
  // Loads per thread. Thread t reads vectors (t + k * threads) mod window_vectors for
  // k < steps, where threads = kSweepBlock (private) or grid * kSweepBlock (shared).
  uint32_t steps = 0;
  // One uint32 per warp: the wrap-around sum of every integer its lanes loaded.
  uint32_t* warp_sums = nullptr;
  // One per block: the SM it ran on (%smid), to check the one-block-per-SM layout.
  uint32_t* block_sm = nullptr;
  int grid = 0;
};

const void* sweep_kernel(LoadCache cache);
void launch_sweep(LoadCache cache, const SweepLaunch& launch, cudaStream_t stream);

// ---- shared_mem.cu: shared-memory read bandwidth ----------------------------------------

constexpr int kSharedBlock = 1024;

enum class SharedAccess {
  // ld.shared.v4: a warp reads 512 contiguous bytes, the conflict-free 4-phase minimum.
  Vector16,
  // ld.shared.u32 at a stride of 32 words: the 32 lanes of a warp hit one bank.
  Stride32,
};

// Independent shared loads per thread per iteration.
PGP_HOST_DEVICE constexpr int shared_loads_per_iteration(SharedAccess access) { return access == SharedAccess::Vector16 ? 4 : 8; }
PGP_HOST_DEVICE constexpr int shared_load_bytes(SharedAccess access) { return access == SharedAccess::Vector16 ? 16 : 4; }

// Each block copies words_per_block uint32 from src + block * words_per_block into
// shared memory, then every thread loads the same shared_loads_per_iteration words or
// vectors `iterations` times: for load u, Vector16 reads vector (t + u * kSharedBlock) mod
// (words / 4); Stride32 reads word (t * 32 + u) mod words. warp_sums: one uint32 per warp.
const void* shared_read_kernel(SharedAccess access);
// Raises the kernel's dynamic shared-memory limit (default 48 KiB); call before sizing the grid.
void allow_shared_bytes(SharedAccess access, size_t bytes);
void launch_shared_read(SharedAccess access, const uint32_t* src, uint32_t words_per_block, uint32_t iterations,
                        uint32_t* warp_sums, int grid, cudaStream_t stream);

// ---- latency.cu: dependent-load pointer chase -------------------------------------------

// Each chain element is a device pointer to the next one, one element per 128-byte line.
constexpr size_t kChaseLineBytes = 128;
constexpr size_t kChaseLineWords = kChaseLineBytes / sizeof(uint64_t);
// Loads per trip round the unrolled chase loop; steps must be a multiple of it.
constexpr int kChaseUnroll = 8;

// chain[i * kChaseLineWords] = address of line next_line[i], for i < lines.
void write_chain(uint64_t* chain, const uint32_t* next_line, size_t lines, cudaStream_t stream);
const void* chain_writer_kernel();

// One warp; lane 0 loads p = *p `steps` times starting from *cursor, then stores p to
// *cursor (the next run continues the walk) and writes out = {p, clock64 at start,
// clock64 at end}.
const void* chase_kernel(LoadCache cache);
void launch_chase(LoadCache cache, uint64_t* cursor, uint64_t steps, uint64_t* out, cudaStream_t stream);

}  // namespace pgp::cuda
