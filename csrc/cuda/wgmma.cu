// Tensor-core throughput with Hopper warpgroup MMA, wgmma.mma_async.sync.aligned.m64nNkK
// (sm_90a only): B from shared memory through a matrix descriptor, A either from shared
// memory (".ss") or from registers (".rs"), the accumulators in registers. wgmma.h
// describes the shared-memory layout and the fragments.
//
// Each warpgroup chains every wgmma through one accumulator: that dependency is how
// wgmma accumulates, and the tensor cores pipeline it. Groups of kWgmmaPerGroup are
// committed together and at most two groups are in flight (wait_group 1), so the next
// group is queued while the previous one runs, with no global memory traffic in the loop.
//
// Device code exists only in the sm_90a pass (__CUDA_ARCH_FEAT_SM90_ALL); the other
// architecture passes compile empty kernels, which the probe never launches (it waives
// on compute capability != 9.0 and checks wgmma_missing_sm90a_reason()).
#include <map>
#include <mutex>

#include "cuda/cuda_check.h"
#include "cuda/wgmma.h"

namespace pgp::cuda {
namespace {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PGP_WGMMA_ENABLED 1
#define PGP_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define PGP_WGMMA_ENABLED 0
#define PGP_WGMMA_ASM(...) \
  do {                     \
  } while (0)
#endif

// ---- Operand lists of the asm statements ------------------------------------------------
// Accumulators are operands %0..%(R-1); the A descriptor (or the four A registers) and
// the B descriptor follow.
#define PGP_WGMMA_D_16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define PGP_WGMMA_D_32                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PGP_WGMMA_D_64                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define PGP_WGMMA_D_128                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "   \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "    \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "     \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "     \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "     \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, " \
  "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "     \
  "%124, %125, %126, %127}"
#define PGP_WGMMA_SS_16 "%16, %17"
#define PGP_WGMMA_SS_32 "%32, %33"
#define PGP_WGMMA_SS_64 "%64, %65"
#define PGP_WGMMA_SS_128 "%128, %129"
#define PGP_WGMMA_RS_16 "{%16, %17, %18, %19}, %20"
#define PGP_WGMMA_RS_32 "{%32, %33, %34, %35}, %36"
#define PGP_WGMMA_RS_64 "{%64, %65, %66, %67}, %68"
#define PGP_WGMMA_RS_128 "{%128, %129, %130, %131}, %132"

#define PGP_WGMMA_ACC4(C, d, i) C(d[(i)]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3])
#define PGP_WGMMA_ACC16(C, d, i) \
  PGP_WGMMA_ACC4(C, d, i), PGP_WGMMA_ACC4(C, d, (i) + 4), PGP_WGMMA_ACC4(C, d, (i) + 8), PGP_WGMMA_ACC4(C, d, (i) + 12)
#define PGP_WGMMA_ACC_16(C, d) PGP_WGMMA_ACC16(C, d, 0)
#define PGP_WGMMA_ACC_32(C, d) PGP_WGMMA_ACC16(C, d, 0), PGP_WGMMA_ACC16(C, d, 16)
#define PGP_WGMMA_ACC_64(C, d) PGP_WGMMA_ACC_32(C, d), PGP_WGMMA_ACC16(C, d, 32), PGP_WGMMA_ACC16(C, d, 48)
#define PGP_WGMMA_ACC_128(C, d)                                                                         \
  PGP_WGMMA_ACC_64(C, d), PGP_WGMMA_ACC16(C, d, 64), PGP_WGMMA_ACC16(C, d, 80), PGP_WGMMA_ACC16(C, d, 96), \
      PGP_WGMMA_ACC16(C, d, 112)

// Trailing immediates after the B descriptor (PTX ISA wgmma.mma_async syntax):
//   f16/bf16 .ss: scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b
//   f16/bf16 .rs: scale-d, imm-scale-a, imm-scale-b, imm-trans-b
//   tf32, e4m3:   scale-d, imm-scale-a, imm-scale-b (no transpose: K-major only)
//   s8:           scale-d
// scale-d = 1 (D = A*B + D), no negation (-B is a second tile, as s8 has no
// imm-scale-b), trans = 0 (both operands K-major).
#define PGP_WGMMA_TAIL_SS_F16 ", 1, 1, 1, 0, 0"
#define PGP_WGMMA_TAIL_RS_F16 ", 1, 1, 1, 0"
#define PGP_WGMMA_TAIL_SS_NOTRANS ", 1, 1, 1"
#define PGP_WGMMA_TAIL_RS_NOTRANS ", 1, 1, 1"
#define PGP_WGMMA_TAIL_SS_INT ", 1"
#define PGP_WGMMA_TAIL_RS_INT ", 1"

template <WgmmaType T, int N>
struct Wgmma;

// One specialization per (type, N): the accumulator register type and count, and the
// .ss / .rs instructions. REGS must be a literal (16, 32, 64, 128): it names the lists.
#define PGP_WGMMA_DEFINE(TYPE, N, K, REGS, REG_T, CONSTRAINT, TAIL)                                            \
  template <>                                                                                                  \
  struct Wgmma<WgmmaType::TYPE, N> {                                                                           \
    using Reg = REG_T;                                                                                         \
    static constexpr int kRegs = REGS;                                                                         \
    static_assert(REGS == wgmma_accumulator_registers(WgmmaType::TYPE, N), "accumulator register count");     \
    static_assert(K == wgmma_type_info(WgmmaType::TYPE).k, "K of the instruction");                            \
    static __device__ __forceinline__ void ss(Reg (&d)[REGS], uint64_t a_desc, uint64_t b_desc) {              \
      PGP_WGMMA_ASM("wgmma.mma_async.sync.aligned.m64n" #N "k" #K "." PGP_WGMMA_TYPES_##TYPE " " PGP_WGMMA_D_##REGS \
                    ", " PGP_WGMMA_SS_##REGS PGP_WGMMA_TAIL_SS_##TAIL ";\n"                                    \
                    : PGP_WGMMA_ACC_##REGS(CONSTRAINT, d)                                                      \
                    : "l"(a_desc), "l"(b_desc)                                                                 \
                    : "memory");                                                                               \
    }                                                                                                          \
    static __device__ __forceinline__ void rs(Reg (&d)[REGS], const uint32_t (&a)[kWgmmaARegisters],           \
                                              uint64_t b_desc) {                                               \
      PGP_WGMMA_ASM("wgmma.mma_async.sync.aligned.m64n" #N "k" #K "." PGP_WGMMA_TYPES_##TYPE " " PGP_WGMMA_D_##REGS \
                    ", " PGP_WGMMA_RS_##REGS PGP_WGMMA_TAIL_RS_##TAIL ";\n"                                    \
                    : PGP_WGMMA_ACC_##REGS(CONSTRAINT, d)                                                      \
                    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc)                                  \
                    : "memory");                                                                               \
    }                                                                                                          \
  };

PGP_WGMMA_DEFINE(F16F32, 256, 16, 128, float, "+f", F16)
PGP_WGMMA_DEFINE(F16F32, 128, 16, 64, float, "+f", F16)
PGP_WGMMA_DEFINE(F16F32, 64, 16, 32, float, "+f", F16)
PGP_WGMMA_DEFINE(F16F16, 256, 16, 64, uint32_t, "+r", F16)
PGP_WGMMA_DEFINE(F16F16, 128, 16, 32, uint32_t, "+r", F16)
PGP_WGMMA_DEFINE(F16F16, 64, 16, 16, uint32_t, "+r", F16)
PGP_WGMMA_DEFINE(BF16F32, 256, 16, 128, float, "+f", F16)
PGP_WGMMA_DEFINE(BF16F32, 128, 16, 64, float, "+f", F16)
PGP_WGMMA_DEFINE(BF16F32, 64, 16, 32, float, "+f", F16)
PGP_WGMMA_DEFINE(TF32F32, 256, 8, 128, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(TF32F32, 128, 8, 64, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(TF32F32, 64, 8, 32, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F32, 256, 32, 128, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F32, 128, 32, 64, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F32, 64, 32, 32, float, "+f", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F16, 256, 32, 64, uint32_t, "+r", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F16, 128, 32, 32, uint32_t, "+r", NOTRANS)
PGP_WGMMA_DEFINE(E4M3F16, 64, 32, 16, uint32_t, "+r", NOTRANS)
PGP_WGMMA_DEFINE(S8S32, 256, 32, 128, uint32_t, "+r", INT)
PGP_WGMMA_DEFINE(S8S32, 128, 32, 64, uint32_t, "+r", INT)
PGP_WGMMA_DEFINE(S8S32, 64, 32, 32, uint32_t, "+r", INT)

// Device helpers exist only where the kernels have a body.
#if PGP_WGMMA_ENABLED
// wgmma.fence: orders this thread's earlier register and shared-memory accesses before
// the wgmmas that follow; required before the first one (PTX ISA wgmma.fence).
__device__ __forceinline__ void wgmma_fence() { PGP_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { PGP_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  PGP_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins a register after wait_group, so no read of it is scheduled before the wait.
__device__ __forceinline__ void pin(float& r) { PGP_WGMMA_ASM("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void pin(uint32_t& r) { PGP_WGMMA_ASM("" : "+r"(r)::"memory"); }

__device__ __forceinline__ float from_bits(uint32_t bits, float*) { return __uint_as_float(bits); }
__device__ __forceinline__ uint32_t from_bits(uint32_t bits, uint32_t*) { return bits; }
__device__ __forceinline__ uint32_t to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t to_bits(uint32_t v) { return v; }

// Matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4,
// 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset (0: no swizzle), 62-63 layout
// type (0: no swizzle).
__device__ __forceinline__ uint64_t operand_descriptor(const void* smem) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<uint64_t>(kWgmmaLeadingByteOffset >> 4) << 16 |
         static_cast<uint64_t>(kWgmmaStrideByteOffset >> 4) << 32;
}
#endif  // PGP_WGMMA_ENABLED

template <class Op, WgmmaASource kSource>
__device__ __forceinline__ void mma(typename Op::Reg (&acc)[Op::kRegs], uint64_t a_desc,
                                    const uint32_t (&a)[kWgmmaARegisters], uint64_t b_desc) {
  if constexpr (kSource == WgmmaASource::Shared) {
    Op::ss(acc, a_desc, b_desc);
  } else {
    Op::rs(acc, a, b_desc);
  }
}

// Register-capped so two blocks (four warpgroups) fit per SM where the accumulators
// allow; the 128-register f32 accumulators of N = 256 need one block per SM.
constexpr int wgmma_min_blocks(int registers) { return registers > 64 ? 1 : 2; }

template <WgmmaType T, int N, WgmmaASource kSource>
__global__ void __launch_bounds__(kWgmmaBlock, wgmma_min_blocks(Wgmma<T, N>::kRegs))
    wgmma_kernel_impl(const uint8_t* __restrict__ image, const uint32_t* __restrict__ c, uint32_t* __restrict__ out,
                      int iters) {
#if PGP_WGMMA_ENABLED
  using Op = Wgmma<T, N>;
  using Reg = typename Op::Reg;
  constexpr int kABytes = wgmma_operand_bytes(kWgmmaM);
  constexpr int kBBytes = wgmma_operand_bytes(N);
  constexpr int kImageBytes = kABytes + 2 * kBBytes;
  // 128-byte aligned: every core matrix starts on a 16-byte (here 128-byte) boundary.
  __shared__ alignas(128) uint8_t smem[kImageBytes];

  // The image is already in the operand layout: a straight 16-byte copy.
  for (int i = threadIdx.x; i < kImageBytes / 16; i += kWgmmaBlock)
    reinterpret_cast<uint4*>(smem)[i] = reinterpret_cast<const uint4*>(image)[i];
  // Generic-proxy stores must be made visible to the async proxy the tensor cores read
  // through, before the barrier (PTX ISA memory consistency, async proxy).
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int thread = threadIdx.x % kWgmmaWarpgroupThreads;
  const int warpgroup = threadIdx.x / kWgmmaWarpgroupThreads;
  const uint8_t* a_tile = smem;
  const uint64_t a_desc = operand_descriptor(a_tile);
  const uint64_t b_desc = operand_descriptor(smem + kABytes);
  const uint64_t neg_b_desc = operand_descriptor(smem + kABytes + kBBytes);

  uint32_t a[kWgmmaARegisters];
#pragma unroll
  for (int i = 0; i < kWgmmaARegisters; ++i)
    a[i] = *reinterpret_cast<const uint32_t*>(a_tile +
                                              wgmma_operand_offset(wgmma_a_row(thread, i), wgmma_a_byte(thread, i)));

  Reg acc[Op::kRegs];
#pragma unroll
  for (int r = 0; r < Op::kRegs; ++r) acc[r] = from_bits(c[r * kWgmmaWarpgroupThreads + thread], &acc[r]);

  // A fence opens every group: the loop's back edge and exit join paths, and ptxas
  // would otherwise inject one there itself (info C7519).
#pragma unroll 1
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < kWgmmaPerGroup / 2; ++j) {
      mma<Op, kSource>(acc, a_desc, a, b_desc);
      mma<Op, kSource>(acc, a_desc, a, neg_b_desc);
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_fence();
  mma<Op, kSource>(acc, a_desc, a, b_desc);
  wgmma_commit();
  wgmma_wait<0>();

  uint32_t* dst = out + static_cast<size_t>(blockIdx.x * kWgmmaWarpgroupsPerBlock + warpgroup) * Op::kRegs *
                            kWgmmaWarpgroupThreads;
#pragma unroll
  for (int r = 0; r < Op::kRegs; ++r) {
    pin(acc[r]);
    dst[r * kWgmmaWarpgroupThreads + thread] = to_bits(acc[r]);
  }
#endif
}

template <WgmmaType T, int N>
const void* kernel_for(WgmmaASource source) {
  if (source == WgmmaASource::Shared)
    return reinterpret_cast<const void*>(&wgmma_kernel_impl<T, N, WgmmaASource::Shared>);
  return reinterpret_cast<const void*>(&wgmma_kernel_impl<T, N, WgmmaASource::Registers>);
}

template <WgmmaType T>
const void* kernel_for(int n, WgmmaASource source) {
  switch (n) {
    case 256: return kernel_for<T, 256>(source);
    case 128: return kernel_for<T, 128>(source);
    case 64: return kernel_for<T, 64>(source);
    default: return nullptr;
  }
}

// Writes 1 from the sm_90a pass, 0 from every other pass: which image the device runs.
__global__ void wgmma_feature_kernel(int* has_wgmma) { *has_wgmma = PGP_WGMMA_ENABLED; }

}  // namespace

std::string wgmma_opcode(WgmmaType t, int n) {
  const auto info = wgmma_type_info(t);
  return "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k" + std::to_string(info.k) + "." +
         info.ptx_types;
}

const void* wgmma_kernel(WgmmaType t, int n, WgmmaASource source) {
  switch (t) {
    case WgmmaType::F16F32: return kernel_for<WgmmaType::F16F32>(n, source);
    case WgmmaType::F16F16: return kernel_for<WgmmaType::F16F16>(n, source);
    case WgmmaType::BF16F32: return kernel_for<WgmmaType::BF16F32>(n, source);
    case WgmmaType::TF32F32: return kernel_for<WgmmaType::TF32F32>(n, source);
    case WgmmaType::E4M3F32: return kernel_for<WgmmaType::E4M3F32>(n, source);
    case WgmmaType::E4M3F16: return kernel_for<WgmmaType::E4M3F16>(n, source);
    case WgmmaType::S8S32: return kernel_for<WgmmaType::S8S32>(n, source);
  }
  return nullptr;
}

cudaFuncAttributes wgmma_kernel_attributes(WgmmaType t, int n, WgmmaASource source) {
  const void* kernel = wgmma_kernel(t, n, source);
  PGP_CHECK(kernel != nullptr, "no wgmma kernel for N = " + std::to_string(n));
  cudaFuncAttributes attributes{};
  PGP_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes;
}

std::string wgmma_missing_sm90a_reason(int device) {
  static std::mutex mutex;
  static std::map<int, std::string> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(device); it != cache.end()) return it->second;

  PGP_CUDA_CHECK(cudaSetDevice(device));
  int* flag = nullptr;
  PGP_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  int has_wgmma = -1;
  wgmma_feature_kernel<<<1, 1>>>(flag);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaMemcpy(&has_wgmma, flag, sizeof has_wgmma, cudaMemcpyDeviceToHost);
  cudaFree(flag);
  PGP_CUDA_CHECK(err);
  std::string reason;
  if (has_wgmma != 1) {
    reason =
        "this build's kernel image for the device lacks the sm_90a wgmma code (a plain sm_90 or older image ran; "
        "build with TORCH_CUDA_ARCH_LIST containing 9.0a)";
#ifdef PGP_CUDA_ARCHS
    reason += "; built for " PGP_CUDA_ARCHS;
#endif
  }
  cache[device] = reason;
  return reason;
}

void launch_wgmma(WgmmaType t, int n, WgmmaASource source, const uint8_t* image, const uint32_t* c, uint32_t* out,
                  int iters, int grid, cudaStream_t stream) {
  const void* kernel = wgmma_kernel(t, n, source);
  PGP_CHECK(kernel != nullptr, "no wgmma kernel for N = " + std::to_string(n));
  void* args[] = {&image, &c, &out, &iters};
  PGP_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(kWgmmaBlock), args, 0, stream));
}

}  // namespace pgp::cuda
