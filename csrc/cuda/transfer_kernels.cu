// Transfer kernels: SM-driven copies across a link (mapped pinned host memory, or a peer GPU
// through peer access) and a single-thread ping-pong with the host through mapped flags.
#include "cuda/transfer_kernels.h"

namespace pgp::cuda {
namespace {

// ---- SM copies ---------------------------------------------------------------------------

template <SmCopyKind kKind>
__device__ __forceinline__ uint4 load_vector(const uint4* p) {
  if constexpr (kKind == SmCopyKind::Pull) return __ldcv(p);
  else return *p;
}

template <SmCopyKind kKind>
__device__ __forceinline__ void store_vector(uint4* p, const uint4& v) {
  if constexpr (kKind == SmCopyKind::Push) __stwt(p, v);
  else *p = v;
}

template <SmCopyKind kKind>
__device__ __forceinline__ void copy_byte(const unsigned char* src, unsigned char* dst) {
  if constexpr (kKind == SmCopyKind::Pull) *dst = __ldcv(src);
  else __stwt(dst, *src);
}

// Thread `thread` of `threads` copies vectors thread, thread + threads, ...; each warp access
// is one coalesced 512-byte run.
template <SmCopyKind kKind>
__device__ __forceinline__ void copy_share(const SmCopyJob& job, size_t thread, size_t threads) {
  const auto* src = static_cast<const uint4*>(job.src);
  auto* dst = static_cast<uint4*>(job.dst);
  const size_t vectors = job.bytes / sizeof(uint4);
  size_t i = thread;
  for (; i + (kSmCopyUnroll - 1) * threads < vectors; i += kSmCopyUnroll * threads) {
    uint4 v[kSmCopyUnroll];
#pragma unroll
    for (int u = 0; u < kSmCopyUnroll; ++u) v[u] = load_vector<kKind>(src + i + u * threads);
#pragma unroll
    for (int u = 0; u < kSmCopyUnroll; ++u) store_vector<kKind>(dst + i + u * threads, v[u]);
  }
  for (; i < vectors; i += threads) store_vector<kKind>(dst + i, load_vector<kKind>(src + i));
  // A size that is not whole vectors: the last bytes one per thread (fewer than 16).
  const size_t done = vectors * sizeof(uint4);
  if (thread < job.bytes - done)
    copy_byte<kKind>(static_cast<const unsigned char*>(job.src) + done + thread,
                     static_cast<unsigned char*>(job.dst) + done + thread);
}

template <SmCopyKind kKind>
__global__ void __launch_bounds__(kSmCopyBlock) sm_copy(SmCopyJob job) {
  copy_share<kKind>(job, static_cast<size_t>(blockIdx.x) * kSmCopyBlock + threadIdx.x,
                    static_cast<size_t>(gridDim.x) * kSmCopyBlock);
}

__global__ void __launch_bounds__(kSmCopyBlock) sm_copy_bidir(SmCopyJob pull, SmCopyJob push) {
  const unsigned half = gridDim.x / 2;
  if (blockIdx.x < half)
    copy_share<SmCopyKind::Pull>(pull, static_cast<size_t>(blockIdx.x) * kSmCopyBlock + threadIdx.x,
                                 static_cast<size_t>(half) * kSmCopyBlock);
  else
    copy_share<SmCopyKind::Push>(push, static_cast<size_t>(blockIdx.x - half) * kSmCopyBlock + threadIdx.x,
                                 static_cast<size_t>(gridDim.x - half) * kSmCopyBlock);
}

void check_job(const SmCopyJob& job) {
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(uint4) != 0; };
  PGP_CHECK(!misaligned(job.src) && !misaligned(job.dst), "SM copy buffers must be 16-byte aligned");
}

// ---- host <-> GPU ping-pong --------------------------------------------------------------

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(32) pingpong(const uint32_t* to_device, uint32_t* to_host, uint32_t first,
                                               uint32_t round_trips, uint64_t timeout_ns, PingPongResult* result) {
  if (threadIdx.x != 0) return;
  // Volatile: every poll reads host memory again (system-scope relaxed loads and stores).
  const volatile uint32_t* in = to_device;
  volatile uint32_t* out = to_host;
  uint32_t completed = 0;
  uint32_t last = 0;
  uint32_t outcome = kPingPongDone;
  for (uint32_t k = 0; k < round_trips; ++k) {
    const uint32_t want = first + k;
    const uint64_t since = global_ns();
    uint32_t seen;
    while ((seen = *in) != want) {
      if (seen == kPingPongAbort) {
        outcome = kPingPongAborted;
        break;
      }
      if (global_ns() - since > timeout_ns) {
        outcome = kPingPongTimedOut;
        break;
      }
    }
    if (outcome != kPingPongDone) break;
    *out = want;
    __threadfence_system();  // the acknowledgement leaves before the next poll
    completed = k + 1;
    last = want;
  }
  result->completed = completed;
  result->last_seen = last;
  result->outcome = outcome;
  result->pad = 0;
}

}  // namespace

const void* sm_copy_kernel(SmCopyKind kind) {
  return kind == SmCopyKind::Pull ? reinterpret_cast<const void*>(&sm_copy<SmCopyKind::Pull>)
                                  : reinterpret_cast<const void*>(&sm_copy<SmCopyKind::Push>);
}

void launch_sm_copy(SmCopyKind kind, const SmCopyJob& job, int grid, cudaStream_t stream) {
  check_job(job);
  PGP_CHECK(grid >= 1, "SM copy grid must be at least 1 block");
  if (kind == SmCopyKind::Pull)
    sm_copy<SmCopyKind::Pull><<<grid, kSmCopyBlock, 0, stream>>>(job);
  else
    sm_copy<SmCopyKind::Push><<<grid, kSmCopyBlock, 0, stream>>>(job);
  PGP_CUDA_CHECK_LAUNCH();
}

const void* sm_copy_bidir_kernel() { return reinterpret_cast<const void*>(&sm_copy_bidir); }

void launch_sm_copy_bidir(const SmCopyJob& pull, const SmCopyJob& push, int grid, cudaStream_t stream) {
  check_job(pull);
  check_job(push);
  PGP_CHECK(grid >= 2, "a two-way SM copy needs at least 2 blocks");
  sm_copy_bidir<<<grid, kSmCopyBlock, 0, stream>>>(pull, push);
  PGP_CUDA_CHECK_LAUNCH();
}

const void* pingpong_kernel() { return reinterpret_cast<const void*>(&pingpong); }

void launch_pingpong(const uint32_t* to_device, uint32_t* to_host, uint32_t first, uint32_t round_trips,
                     uint64_t timeout_ns, PingPongResult* result, cudaStream_t stream) {
  pingpong<<<1, 32, 0, stream>>>(to_device, to_host, first, round_trips, timeout_ns, result);
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda
