// Tensor-core throughput with warp-level mma.sync.aligned.m16n8k16.row.col (fp16
// inputs, fp32 or fp16 accumulators), operands held in registers.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .f16 inputs), with
// g = lane >> 2 (groupID) and t = lane % 4 (threadID_in_group):
//   A (16x16, .row): a0..a7, row g for a0,a1,a4,a5 and g + 8 for a2,a3,a6,a7,
//                    column 2t + (i & 1), plus 8 for a4..a7.
//   B (16x8,  .col): b0..b3, row (k) 2t + (i & 1), plus 8 for b2,b3; column (n) g.
//   C, D (16x8):     c0..c3, row g for c0,c1 and g + 8 for c2,c3; column 2t + (i & 1).
// Each .b32 register holds two consecutive elements, the lower index in the low half.
// With A row-major, B column-major and C row-major, every such pair is adjacent in
// memory, so each register is one aligned 32-bit (or for fp32 C, 64-bit) load.
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

struct F32Accumulator {
  using Reg = float;
  static constexpr int kRegs = 4;  // c0..c3, one fp32 each
  static constexpr int kTileRegs = 16 * 8;
};

struct F16Accumulator {
  using Reg = uint32_t;
  static constexpr int kRegs = 2;  // {c0, c1}, {c2, c3} as .f16x2
  static constexpr int kTileRegs = 16 * 8 / 2;
};

// Flips the sign of both fp16 halves: exact negation.
constexpr uint32_t kNegateHalf2 = 0x80008000u;

// asm volatile: the compiler must neither drop nor merge these, though their results
// cancel algebraically.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void mma(uint32_t (&d)[2], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
      : "+r"(d[0]), "+r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// a32, b32: the fp16 matrices viewed as pairs; c: kAcc row-major 16x8 tiles.
template <class Acc, int kAcc>
__global__ void __launch_bounds__(kMmaBlock, kMmaMinBlocksPerSm)
    mma_sync_kernel(const uint32_t* a32, const uint32_t* b32, const typename Acc::Reg* c, typename Acc::Reg* out,
                    int iters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // mma.m16n8k16 needs sm_80; waiver() keeps this from being launched
#else
  using Reg = typename Acc::Reg;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;

  // Row-major 16x16 A: pair (row r, columns 2t, 2t+1) is a32[r * 8 + t].
  const uint32_t a[4] = {a32[g * 8 + t], a32[(g + 8) * 8 + t], a32[g * 8 + t + 4], a32[(g + 8) * 8 + t + 4]};
  // Column-major 16x8 B: pair (rows 2t, 2t+1, column g) is b32[g * 8 + t].
  const uint32_t b[2] = {b32[g * 8 + t], b32[g * 8 + t + 4]};
  const uint32_t neg_b[2] = {b[0] ^ kNegateHalf2, b[1] ^ kNegateHalf2};

  // Row-major 16x8 C: elements (row r, columns 2t, 2t+1) start at r * 8 + 2t.
  Reg acc[kAcc][Acc::kRegs];
#pragma unroll
  for (int j = 0; j < kAcc; ++j) {
    const Reg* tile = c + j * Acc::kTileRegs;
    if constexpr (Acc::kRegs == 4) {
      acc[j][0] = tile[g * 8 + 2 * t];
      acc[j][1] = tile[g * 8 + 2 * t + 1];
      acc[j][2] = tile[(g + 8) * 8 + 2 * t];
      acc[j][3] = tile[(g + 8) * 8 + 2 * t + 1];
    } else {
      // fp16 tile viewed as pairs: (row r, columns 2t, 2t+1) is pair r * 4 + t.
      acc[j][0] = tile[g * 4 + t];
      acc[j][1] = tile[(g + 8) * 4 + t];
    }
  }

  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) mma(acc[j], a, b);
#pragma unroll
    for (int j = 0; j < kAcc; ++j) mma(acc[j], a, neg_b);
  }
#pragma unroll
  for (int j = 0; j < kAcc; ++j) mma(acc[j], a, b);

  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
#pragma unroll
  for (int j = 0; j < kAcc; ++j) {
    Reg* dst = out + ((warp * kAcc + j) * 32 + lane) * Acc::kRegs;
    if constexpr (Acc::kRegs == 4) {
      *reinterpret_cast<float4*>(dst) = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    } else {
      *reinterpret_cast<uint2*>(dst) = make_uint2(acc[j][0], acc[j][1]);
    }
  }
#endif
}

constexpr int kF32Acc = mma_accumulators(MmaAccumulator::F32);
constexpr int kF16Acc = mma_accumulators(MmaAccumulator::F16);

// ---- Typed probes: one kernel template over a traits struct per input type ----------
// The host lays A, B and C out in fragment order (see kernels.h), so the kernel needs
// only each type's instruction, its accumulator register type and its minimum arch.

#define PGP_MMA_TYPED_ASM(shape_types, constraint)                                                          \
  asm volatile("mma.sync.aligned." shape_types " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "          \
               "{%0, %1, %2, %3};\n"                                                                       \
               : "+" constraint(d[0]), "+" constraint(d[1]), "+" constraint(d[2]), "+" constraint(d[3])    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

struct Bf16Traits {
  using Acc = float;
  static constexpr int kMinArch = 800;
  __device__ static __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    PGP_MMA_TYPED_ASM("m16n8k16.row.col.f32.bf16.bf16.f32", "f");
#endif
  }
};

struct Tf32Traits {
  using Acc = float;
  static constexpr int kMinArch = 800;
  __device__ static __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    PGP_MMA_TYPED_ASM("m16n8k8.row.col.f32.tf32.tf32.f32", "f");
#endif
  }
};

struct S8Traits {
  using Acc = int;
  static constexpr int kMinArch = 800;
  __device__ static __forceinline__ void mma(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    PGP_MMA_TYPED_ASM("m16n8k32.row.col.s32.s8.s8.s32", "r");
#endif
  }
};

struct E4m3Traits {
  using Acc = float;
  static constexpr int kMinArch = 890;
  __device__ static __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    PGP_MMA_TYPED_ASM("m16n8k32.row.col.f32.e4m3.e4m3.f32", "f");
#endif
  }
};

#undef PGP_MMA_TYPED_ASM

__device__ __forceinline__ uint32_t to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t to_bits(int v) { return static_cast<uint32_t>(v); }
template <class Acc>
__device__ __forceinline__ Acc from_bits(uint32_t v) {
  if constexpr (std::is_same_v<Acc, float>) return __uint_as_float(v);
  else return static_cast<Acc>(v);
}

template <class T>
__global__ void __launch_bounds__(kMmaBlock, kMmaMinBlocksPerSm)
    mma_sync_typed_kernel(const uint32_t* a_frag, const uint32_t* b_frag, const uint32_t* neg_b_frag,
                          const typename T::Acc* c, typename T::Acc* out, int iters) {
#if defined(__CUDA_ARCH__)
  // A plain if (constant-folded), so T::mma stays referenced on every arch.
  if (__CUDA_ARCH__ < T::kMinArch) {
    __trap();  // the instruction needs a newer arch; the probe's waiver keeps this from being launched
  } else {
    using Acc = typename T::Acc;
    constexpr int kAcc = kMmaTypedAccumulators;
    const int lane = threadIdx.x & 31;
    const uint4 a4 = reinterpret_cast<const uint4*>(a_frag)[lane];
    const uint2 b2 = reinterpret_cast<const uint2*>(b_frag)[lane];
    const uint2 nb2 = reinterpret_cast<const uint2*>(neg_b_frag)[lane];
    const uint32_t a[4] = {a4.x, a4.y, a4.z, a4.w};
    const uint32_t b[2] = {b2.x, b2.y};
    const uint32_t neg_b[2] = {nb2.x, nb2.y};

    Acc acc[kAcc][4];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      const uint4 v = reinterpret_cast<const uint4*>(c)[j * 32 + lane];  // c0..c3, one 16-byte load
      acc[j][0] = from_bits<Acc>(v.x);
      acc[j][1] = from_bits<Acc>(v.y);
      acc[j][2] = from_bits<Acc>(v.z);
      acc[j][3] = from_bits<Acc>(v.w);
    }

    for (int it = 0; it < iters; ++it) {
#pragma unroll
      for (int j = 0; j < kAcc; ++j) T::mma(acc[j], a, b);
#pragma unroll
      for (int j = 0; j < kAcc; ++j) T::mma(acc[j], a, neg_b);
    }
#pragma unroll
    for (int j = 0; j < kAcc; ++j) T::mma(acc[j], a, b);

    const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
#pragma unroll
    for (int j = 0; j < kAcc; ++j) {
      Acc* dst = out + ((warp * kAcc + j) * 32 + lane) * 4;
      *reinterpret_cast<uint4*>(dst) =
          make_uint4(to_bits(acc[j][0]), to_bits(acc[j][1]), to_bits(acc[j][2]), to_bits(acc[j][3]));
    }
  }
#endif
}

template <class T>
void launch_typed(const uint32_t* a, const uint32_t* b, const uint32_t* neg_b, const void* c, void* out, int iters,
                  int grid, cudaStream_t stream) {
  using Acc = typename T::Acc;
  mma_sync_typed_kernel<T><<<grid, kMmaBlock, 0, stream>>>(a, b, neg_b, static_cast<const Acc*>(c),
                                                           static_cast<Acc*>(out), iters);
}

}  // namespace

const void* mma_kernel(MmaAccumulator acc) {
  if (acc == MmaAccumulator::F32) return reinterpret_cast<const void*>(&mma_sync_kernel<F32Accumulator, kF32Acc>);
  return reinterpret_cast<const void*>(&mma_sync_kernel<F16Accumulator, kF16Acc>);
}

void launch_mma_sync(MmaAccumulator acc, const uint16_t* a, const uint16_t* b, const void* c, void* out, int iters,
                     int grid, cudaStream_t stream) {
  const auto* a32 = reinterpret_cast<const uint32_t*>(a);
  const auto* b32 = reinterpret_cast<const uint32_t*>(b);
  if (acc == MmaAccumulator::F32) {
    mma_sync_kernel<F32Accumulator, kF32Acc><<<grid, kMmaBlock, 0, stream>>>(
        a32, b32, static_cast<const float*>(c), static_cast<float*>(out), iters);
  } else {
    mma_sync_kernel<F16Accumulator, kF16Acc><<<grid, kMmaBlock, 0, stream>>>(
        a32, b32, static_cast<const uint32_t*>(c), static_cast<uint32_t*>(out), iters);
  }
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda

namespace pgp::cuda {

const void* mma_typed_kernel(MmaSyncInput input) {
  switch (input) {
    case MmaSyncInput::BF16: return reinterpret_cast<const void*>(&mma_sync_typed_kernel<Bf16Traits>);
    case MmaSyncInput::TF32: return reinterpret_cast<const void*>(&mma_sync_typed_kernel<Tf32Traits>);
    case MmaSyncInput::S8: return reinterpret_cast<const void*>(&mma_sync_typed_kernel<S8Traits>);
    case MmaSyncInput::E4M3: return reinterpret_cast<const void*>(&mma_sync_typed_kernel<E4m3Traits>);
  }
  PGP_CHECK(false, "unknown mma.sync input type");
  return nullptr;
}

void launch_mma_sync_typed(MmaSyncInput input, const uint32_t* a, const uint32_t* b, const uint32_t* neg_b,
                           const void* c, void* out, int iters, int grid, cudaStream_t stream) {
  switch (input) {
    case MmaSyncInput::BF16: launch_typed<Bf16Traits>(a, b, neg_b, c, out, iters, grid, stream); break;
    case MmaSyncInput::TF32: launch_typed<Tf32Traits>(a, b, neg_b, c, out, iters, grid, stream); break;
    case MmaSyncInput::S8: launch_typed<S8Traits>(a, b, neg_b, c, out, iters, grid, stream); break;
    case MmaSyncInput::E4M3: launch_typed<E4m3Traits>(a, b, neg_b, c, out, iters, grid, stream); break;
    default: PGP_CHECK(false, "unknown mma.sync input type");
  }
  PGP_CUDA_CHECK_LAUNCH();
}

}  // namespace pgp::cuda
