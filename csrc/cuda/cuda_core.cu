// CUDA-core arithmetic kernels: peak FFMA / HFMA2 / HFMA2.BF16 / DFMA / IMAD rates and
// the fp32 / fp16x2 arithmetic-intensity sweep. The recurrence, the value coding and
// the memory layouts are described in cuda_core.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/cuda_core.h"
#include "cuda/cuda_probe.h"  // DeviceBuffer

namespace pgp::cuda {
namespace {

// One arithmetic type per struct: Value lives in registers, Word is how it is stored.
// The packed types stay in b32 registers and use PTX fma directly (what __hfma2 emits),
// so no conversion sits between the steps. The ops are plain (non-volatile) asm or
// intrinsics: the compiler may schedule them but cannot fold or reassociate them.

struct Fp32Op {
  using Value = float;
  using Word = uint32_t;
  static constexpr int kLanes = 1;
  __device__ static Value from_word(Word w) { return __uint_as_float(w); }
  __device__ static Word to_word(Value v) { return __float_as_uint(v); }
  __device__ static Value from_eighths(const int (&e)[2]) { return static_cast<float>(e[0]) * 0.125f; }
  __device__ static Value fma(Value x, Value a, Value b) { return __fmaf_rn(x, a, b); }
};

struct Fp16x2Op {
  using Value = uint32_t;  // .f16x2 bits, lane 0 in the low half
  using Word = uint32_t;
  static constexpr int kLanes = 2;
  __device__ static Value from_word(Word w) { return w; }
  __device__ static Word to_word(Value v) { return v; }
  __device__ static Value from_eighths(const int (&e)[2]) {
    const uint32_t lo = __half_as_ushort(__float2half_rn(static_cast<float>(e[0]) * 0.125f));
    const uint32_t hi = __half_as_ushort(__float2half_rn(static_cast<float>(e[1]) * 0.125f));
    return lo | (hi << 16);
  }
  __device__ static Value fma(Value x, Value a, Value b) {
    Value d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(a), "r"(b));
    return d;
  }
};

struct Bf16x2Op {
  using Value = uint32_t;  // .bf16x2 bits, lane 0 in the low half
  using Word = uint32_t;
  static constexpr int kLanes = 2;
  __device__ static Value from_word(Word w) { return w; }
  __device__ static Word to_word(Value v) { return v; }
  // m/8 with |m| <= 128 has at most 8 significant bits: the top half of its fp32 bits.
  __device__ static Value from_eighths(const int (&e)[2]) {
    const uint32_t lo = __float_as_uint(static_cast<float>(e[0]) * 0.125f) >> 16;
    const uint32_t hi = __float_as_uint(static_cast<float>(e[1]) * 0.125f) >> 16;
    return lo | (hi << 16);
  }
  __device__ static Value fma(Value x, Value a, Value b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    Value d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(a), "r"(b));
    return d;
#else
    __trap();  // fma.rn.bf16x2 needs sm_80; waiver() keeps this from being launched
    return x;
#endif
  }
};

struct Fp64Op {
  using Value = double;
  using Word = unsigned long long;
  static constexpr int kLanes = 1;
  __device__ static Value from_word(Word w) { return __longlong_as_double(static_cast<long long>(w)); }
  __device__ static Word to_word(Value v) { return static_cast<Word>(__double_as_longlong(v)); }
  __device__ static Value from_eighths(const int (&e)[2]) { return static_cast<double>(e[0]) * 0.125; }
  __device__ static Value fma(Value x, Value a, Value b) { return __fma_rn(x, a, b); }
};

struct Int32Op {
  using Value = uint32_t;
  using Word = uint32_t;
  static constexpr int kLanes = 1;
  __device__ static Value from_word(Word w) { return w; }
  __device__ static Word to_word(Value v) { return v; }
  // asm, not x * a + b: integer arithmetic is associative, so the compiler could merge
  // unrolled steps into fewer multiply-adds with precomputed constants.
  __device__ static Value fma(Value x, Value a, Value b) {
    Value d;
    asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(a), "r"(b));
    return d;
  }
};

template <class Op>
__device__ __forceinline__ void seed_chain(uint64_t seed, uint64_t thread, int chain, typename Op::Value& x,
                                           typename Op::Value& b) {
  uint64_t hash[2] = {0, 0};
#pragma unroll
  for (int l = 0; l < Op::kLanes; ++l) hash[l] = mix64(seed, peak_chain_index(thread, chain, l, Op::kLanes));
  if constexpr (std::is_same_v<Op, Int32Op>) {
    x = static_cast<uint32_t>(hash[0]);
    b = static_cast<uint32_t>(hash[0] >> 32);
  } else {
    int start[2] = {0, 0}, offset[2] = {0, 0};
#pragma unroll
    for (int l = 0; l < Op::kLanes; ++l) {
      start[l] = start_eighths(start_code(hash[l]));
      offset[l] = fixed_point_quarters(fixed_point_code(hash[l]));  // b = p / 2 = k / 8
    }
    x = Op::from_eighths(start);
    b = Op::from_eighths(offset);
  }
}

// Registers only: kPeakChains independent chains per thread, so each warp has 8
// independent FMA-pipe instructions between dependent ones (latency 4-8 cycles).
// `trips` comes from the host, so the compiler cannot fold or shorten the loop.
// kUniformOffsets: chain j's addend is offsets.words[j] for every thread, a kernel
// parameter the FMA can read as an operand in place (the sweep kernel's form).
template <class Op, int kSteps, bool kUniformOffsets>
__global__ void __launch_bounds__(kCoreBlock)
    core_peak_kernel_t(typename Op::Word* out, uint64_t seed, typename Op::Word a_word, int trips,
                       PeakOffsets offsets) {
  using Value = typename Op::Value;
  const uint64_t thread = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t threads = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const Value a = Op::from_word(a_word);
  Value x[kPeakChains], b[kPeakChains];
#pragma unroll
  for (int j = 0; j < kPeakChains; ++j) seed_chain<Op>(seed, thread, j, x[j], b[j]);

  for (int trip = 0; trip < trips; ++trip) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int j = 0; j < kPeakChains; ++j) {
        if constexpr (kUniformOffsets) {
          x[j] = Op::fma(x[j], a, Op::from_word(static_cast<typename Op::Word>(offsets.words[j])));
        } else {
          x[j] = Op::fma(x[j], a, b[j]);
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < kPeakChains; ++j) out[j * threads + thread] = Op::to_word(x[j]);
}

template <class Op>
constexpr int kPeakSteps = core_peak_steps(std::is_same_v<Op, Fp64Op> ? CorePrecision::Fp64 : CorePrecision::Fp32);
template <class Op, bool kUniformOffsets = false>
constexpr auto peak_kernel_for = &core_peak_kernel_t<Op, kPeakSteps<Op>, kUniformOffsets>;

template <class Op, bool kUniformOffsets = false>
void launch_peak(void* out, uint64_t seed, typename Op::Word a, int trips, int grid, cudaStream_t stream,
                 const PeakOffsets& offsets = {}) {
  peak_kernel_for<Op, kUniformOffsets><<<grid, kCoreBlock, 0, stream>>>(static_cast<typename Op::Word*>(out), seed,
                                                                       a, trips, offsets);
  PGP_CUDA_CHECK_LAUNCH();
}

// ---- Sweep ------------------------------------------------------------------------

// Unrolled steps per loop trip once a word needs more than this many.
constexpr int kSweepUnroll = 32;

template <class Op, int kSteps>
__device__ __forceinline__ void sweep_steps_unrolled(typename Op::Value (&x)[kSweepWordsPerThread],
                                                     typename Op::Value a, const SweepConstants& c) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
#pragma unroll
    for (int v = 0; v < kSweepWordsPerThread; ++v) x[v] = Op::fma(x[v], a, Op::from_word(c.offsets[v]));
  }
}

template <class Op, int kFmasPerThread>
__global__ void __launch_bounds__(kCoreBlock)
    core_sweep_kernel_t(const uint4* __restrict__ in, uint4* __restrict__ out, SweepConstants c) {
  using Value = typename Op::Value;
  constexpr int kFull = kFmasPerThread / kSweepWordsPerThread;
  constexpr int kExtra = kFmasPerThread % kSweepWordsPerThread;
  const size_t first = static_cast<size_t>(blockIdx.x) * (2 * kCoreBlock) + threadIdx.x;
  // Both loads issue before any arithmetic: 32 bytes per thread in flight.
  const uint4 lo = in[first];
  const uint4 hi = in[first + kCoreBlock];
  Value x[kSweepWordsPerThread] = {Op::from_word(lo.x), Op::from_word(lo.y), Op::from_word(lo.z),
                                   Op::from_word(lo.w), Op::from_word(hi.x), Op::from_word(hi.y),
                                   Op::from_word(hi.z), Op::from_word(hi.w)};
  const Value a = Op::from_word(c.a);
  if constexpr (kFull <= kSweepUnroll) {
    sweep_steps_unrolled<Op, kFull>(x, a, c);
  } else {
    static_assert(kFull % kSweepUnroll == 0, "FMA counts are powers of two");
#pragma unroll 1
    for (int trip = 0; trip < kFull / kSweepUnroll; ++trip) sweep_steps_unrolled<Op, kSweepUnroll>(x, a, c);
  }
#pragma unroll
  for (int v = 0; v < kExtra; ++v) x[v] = Op::fma(x[v], a, Op::from_word(c.offsets[v]));
  out[first] = make_uint4(Op::to_word(x[0]), Op::to_word(x[1]), Op::to_word(x[2]), Op::to_word(x[3]));
  out[first + kCoreBlock] = make_uint4(Op::to_word(x[4]), Op::to_word(x[5]), Op::to_word(x[6]), Op::to_word(x[7]));
}

using SweepKernel = void (*)(const uint4*, uint4*, SweepConstants);

template <class Op, size_t... E>
constexpr auto sweep_table(std::index_sequence<E...>) {
  return std::array<SweepKernel, sizeof...(E)>{&core_sweep_kernel_t<Op, (4 << E)>...};
}

// Index e holds the kernel for 4 << e FMAs per thread.
SweepKernel sweep_kernel_at(CorePrecision p, int fmas_per_thread) {
  static const auto fp32 = sweep_table<Fp32Op>(std::make_index_sequence<kSweepFmaExponents>());
  static const auto fp16x2 = sweep_table<Fp16x2Op>(std::make_index_sequence<kSweepFmaExponents>());
  for (int e = 0; e < kSweepFmaExponents; ++e) {
    if ((4 << e) != fmas_per_thread) continue;
    if (p == CorePrecision::Fp32) return fp32[e];
    if (p == CorePrecision::Fp16x2) return fp16x2[e];
  }
  return nullptr;
}

// ---- Sweep fill and check ------------------------------------------------------------

constexpr int kUtilityBlock = 256;
constexpr size_t kUtilityMaxGrid = 4096;

int utility_grid(size_t n) {
  const size_t blocks = (n + kUtilityBlock - 1) / kUtilityBlock;
  return static_cast<int>(blocks < kUtilityMaxGrid ? (blocks > 0 ? blocks : 1) : kUtilityMaxGrid);
}

__device__ uint32_t sweep_start_word(bool packed_half, uint64_t word, uint64_t seed) {
  if (!packed_half) {
    const int m = start_eighths(start_code(mix64(seed, word)));
    return __float_as_uint(static_cast<float>(m) * 0.125f);
  }
  const int m[2] = {start_eighths(start_code(mix64(seed, word * 2))),
                    start_eighths(start_code(mix64(seed, word * 2 + 1)))};
  return Fp16x2Op::from_eighths(m);
}

__global__ void __launch_bounds__(kUtilityBlock)
    fill_sweep_kernel(uint32_t* in, size_t words, uint64_t seed, bool packed_half) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride)
    in[w] = sweep_start_word(packed_half, w, seed);
}

// counters[0] += wrong words; counters[1] = min wrong word index.
__global__ void __launch_bounds__(kUtilityBlock)
    count_sweep_mismatches_kernel(const uint32_t* out, size_t words, uint64_t seed, bool packed_half,
                                  const uint32_t* expected, unsigned long long* counters) {
  unsigned long long wrong = 0, first = ~0ull;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t w = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride) {
    const int slot = sweep_slot(w);
    const uint32_t got = out[w];
    uint32_t want;
    if (!packed_half) {
      want = expected[slot * kStartCodes + start_code(mix64(seed, w))];
    } else {
      const uint32_t lo = expected[slot * kStartCodes + start_code(mix64(seed, w * 2))];
      const uint32_t hi = expected[(kSweepWordsPerThread + slot) * kStartCodes + start_code(mix64(seed, w * 2 + 1))];
      want = (lo & 0xFFFFu) | (hi << 16);
    }
    if (got != want) {
      ++wrong;
      if (w < first) first = w;
    }
  }
  // Every thread reaches the shuffles: the loop above has no early exit.
  for (int offset = 16; offset > 0; offset >>= 1) {
    wrong += __shfl_down_sync(0xFFFFFFFFu, wrong, offset);
    const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, first, offset);
    first = other < first ? other : first;
  }
  if ((threadIdx.x & 31) == 0 && wrong > 0) {
    atomicAdd(&counters[0], wrong);
    atomicMin(&counters[1], first);
  }
}

}  // namespace

const void* core_peak_kernel(CorePrecision p, bool uniform_offsets) {
  switch (p) {
    case CorePrecision::Fp32:
      return reinterpret_cast<const void*>(peak_kernel_for<Fp32Op>);
    case CorePrecision::Fp16x2:
      return uniform_offsets ? reinterpret_cast<const void*>(peak_kernel_for<Fp16x2Op, true>)
                             : reinterpret_cast<const void*>(peak_kernel_for<Fp16x2Op>);
    case CorePrecision::Bf16x2:
      return reinterpret_cast<const void*>(peak_kernel_for<Bf16x2Op>);
    case CorePrecision::Fp64:
      return reinterpret_cast<const void*>(peak_kernel_for<Fp64Op>);
    case CorePrecision::Int32:
      break;
  }
  return reinterpret_cast<const void*>(peak_kernel_for<Int32Op>);
}

void launch_core_peak(CorePrecision p, void* out, uint64_t seed, int trips, int grid, cudaStream_t stream,
                      const PeakOffsets* uniform_offsets) {
  // a is a kernel argument, not a literal, so no step can be strength-reduced.
  switch (p) {
    case CorePrecision::Fp32:
      return launch_peak<Fp32Op>(out, seed, 0x3F000000u, trips, grid, stream);
    case CorePrecision::Fp16x2:
      if (uniform_offsets)
        return launch_peak<Fp16x2Op, true>(out, seed, 0x38003800u, trips, grid, stream, *uniform_offsets);
      return launch_peak<Fp16x2Op>(out, seed, 0x38003800u, trips, grid, stream);
    case CorePrecision::Bf16x2:
      return launch_peak<Bf16x2Op>(out, seed, 0x3F003F00u, trips, grid, stream);
    case CorePrecision::Fp64:
      return launch_peak<Fp64Op>(out, seed, 0x3FE0000000000000ull, trips, grid, stream);
    case CorePrecision::Int32:
      return launch_peak<Int32Op>(out, seed, kImadMultiplier, trips, grid, stream);
  }
}

const void* core_sweep_kernel(CorePrecision p, int fmas_per_thread) {
  return reinterpret_cast<const void*>(sweep_kernel_at(p, fmas_per_thread));
}

void launch_core_sweep(CorePrecision p, int fmas_per_thread, const uint32_t* in, uint32_t* out, size_t words,
                       const SweepConstants& constants, cudaStream_t stream) {
  const SweepKernel kernel = sweep_kernel_at(p, fmas_per_thread);
  PGP_CHECK(kernel != nullptr, "no sweep kernel for " + std::to_string(fmas_per_thread) + " FMAs per thread");
  PGP_CHECK(words % kSweepTileWords == 0 && words > 0, "sweep words must be a positive multiple of the tile");
  const size_t grid = words / kSweepTileWords;
  PGP_CHECK(grid <= 0x7FFFFFFFu, "sweep buffer too large for one launch");
  kernel<<<static_cast<unsigned>(grid), kCoreBlock, 0, stream>>>(reinterpret_cast<const uint4*>(in),
                                                                 reinterpret_cast<uint4*>(out), constants);
  PGP_CUDA_CHECK_LAUNCH();
}

void fill_sweep_input(CorePrecision p, uint32_t* in, size_t words, uint64_t seed, cudaStream_t stream) {
  fill_sweep_kernel<<<utility_grid(words), kUtilityBlock, 0, stream>>>(in, words, seed, p == CorePrecision::Fp16x2);
  PGP_CUDA_CHECK_LAUNCH();
}

SweepMismatches count_sweep_mismatches(CorePrecision p, const uint32_t* out, size_t words, uint64_t seed,
                                       const uint32_t* expected, cudaStream_t stream) {
  DeviceBuffer<unsigned long long> counters(2);
  PGP_CUDA_CHECK(cudaMemsetAsync(counters.get(), 0, sizeof(unsigned long long), stream));
  PGP_CUDA_CHECK(cudaMemsetAsync(counters.get() + 1, 0xFF, sizeof(unsigned long long), stream));
  count_sweep_mismatches_kernel<<<utility_grid(words), kUtilityBlock, 0, stream>>>(
      out, words, seed, p == CorePrecision::Fp16x2, expected, counters.get());
  PGP_CUDA_CHECK_LAUNCH();
  unsigned long long result[2] = {0, 0};
  PGP_CUDA_CHECK(cudaMemcpyAsync(result, counters.get(), sizeof result, cudaMemcpyDeviceToHost, stream));
  PGP_CUDA_CHECK(cudaStreamSynchronize(stream));  // before `result` is read and `counters` freed
  return {result[0], result[1]};
}

}  // namespace pgp::cuda
