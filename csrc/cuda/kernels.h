// Host entry points of the CUDA kernels (.cu files), callable from plain C++.
// Every launch is enqueued on the given stream and checked; nothing here synchronizes
// unless its comment says so.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/probe.h"
#include "cuda/random_fill.h"

namespace pgp::cuda {

// ---- fill.cu: fills, poison and verification shared by all CUDA probes ---------------

// data[i] = values.at(i) for i < n.
void fill_expected(float* data, size_t n, const ExpectedValues& values, cudaStream_t stream);
// Every byte 0xFF: NaN as fp32 and as fp16, a value no correct run produces.
void poison_bytes(void* data, size_t bytes, cudaStream_t stream);
// Counts on the device the elements whose bits differ from expected.at(i), then waits
// for the stream and reports the count and the first wrong element.
Verification verify_on_device(const float* data, size_t n, const ExpectedValues& expected, cudaStream_t stream);
// "3 of 1024 elements wrong; first: index 7 got nan (0xffffffff) want 1.5 (0x3fc00000)".
std::string describe_mismatches(uint64_t wrong, uint64_t n, uint64_t first_index, float got, float want);
const void* fill_kernel();

// Why CUDA device `index` cannot be used (none visible, index out of range), or "".
std::string device_unavailable_reason(int index);
// Why `kernel` cannot launch on device `index` (no image for its architecture), or "".
std::string missing_kernel_image_reason(const void* kernel, int index);

// ---- hbm_stream.cu: HBM streams (read, write, copy, scale, triad) in variants -----------
//
// One kernel template covers every op, access width, unroll and cache hint; the variant
// tables in hbm_stream.cu say which combinations are built and how each is launched.

enum class HbmOp { Read, Write, Copy, Scale, Triad };
// ld.global (default caching), ld.global.cg (L2 only, no L1 allocation) or ld.global.cs
// (evict-first streaming load).
enum class HbmLoad : uint8_t { Plain, Cg, Cs };
// st.global (default) or st.global.cs (evict-first streaming store).
enum class HbmStore : uint8_t { Plain, Cs };
enum class HbmShape : uint8_t {
  Occupancy,   // persistent grid: blocks per SM at full occupancy x SMs
  Persistent,  // persistent grid: blocks_per_sm x SMs (fewer, fatter blocks)
  BlockTiles,  // one tile of block x unroll vectors per block, grid covers the array
  Bulk,        // copy only, sm_90+: cp.async.bulk global -> shared -> global
};

struct HbmVariant {
  HbmShape shape;
  int vector_bytes;   // 4, 8 or 16 (float, float2, float4); Bulk: 16
  int unroll;         // independent accesses per array in flight per thread; Bulk: stages
  HbmLoad load;
  HbmStore store;
  int block;          // threads per block
  int blocks_per_sm;  // Persistent and Bulk
  int chunk_bytes;    // Bulk: bytes per stage
  bool quick;         // one of the few the --quick suite measures
};

// What a run reads and writes. Arrays hold `floats` elements, a multiple of 4.
struct HbmArrays {
  const float* in0 = nullptr;  // read, copy, scale: the source; triad: b
  const float* in1 = nullptr;  // triad: c
  float* out = nullptr;        // write: dst; copy, scale: b; triad: a
  unsigned long long* block_sums = nullptr;  // read: one exact integer total per block
  size_t floats = 0;
  float scalar = 0.0f;  // write: the value; scale (b = s * a), triad (a = b + s * c): s
};

// The variants built for `op`, in listing order (the first is the default).
const std::vector<HbmVariant>& hbm_variants(HbmOp op);
const void* hbm_kernel(HbmOp op, size_t variant);
inline size_t hbm_dynamic_smem(const HbmVariant& v) {
  return v.shape == HbmShape::Bulk ? static_cast<size_t>(v.unroll) * v.chunk_bytes : 0;
}
// Once per measurement, before launches: raises the kernel's dynamic shared-memory limit.
void prepare_hbm_kernel(HbmOp op, size_t variant);
void launch_hbm(HbmOp op, size_t variant, const HbmArrays& arrays, int grid, cudaStream_t stream);
// Most floats of values <= 15 one thread may add up in fp32 and stay exact (< 2^24).
constexpr size_t hbm_read_max_floats_per_thread() { return ((size_t{1} << 24) - 1) / 15; }

// ---- mma_sync.cu: mma.sync.aligned.m16n8k16.row.col, fp16 inputs ---------------------

enum class MmaAccumulator { F32, F16 };

constexpr int kMmaBlock = 128;
// __launch_bounds__ minimum: caps registers at 65536 / (128 * 4) = 128 per thread,
// room for every accumulator without spilling.
constexpr int kMmaMinBlocksPerSm = 4;
// Accumulator values per lane per mma: c0..c3 of the 16x8 tile.
constexpr int kMmaValuesPerLane = 4;
// Independent accumulators per warp; 32 registers of accumulators either way.
constexpr int mma_accumulators(MmaAccumulator acc) { return acc == MmaAccumulator::F32 ? 8 : 16; }

const void* mma_kernel(MmaAccumulator acc);
// Storage (fp16 as raw bits):
//   a: 16x16 row-major, a[m * 16 + k];
//   b: 16x8 column-major, b[n * 16 + k] (the `.col` operand: one column is contiguous);
//   c: one 16x8 row-major tile per accumulator j, c[(j * 16 + m) * 8 + n], float (F32) or
//      fp16 bits (F16);
//   out: D of accumulator j of global warp w, lane l, fragment element e (d0..d3) at
//        out[((w * accumulators + j) * 32 + l) * 4 + e], float (F32) or fp16 bits (F16).
// Each warp runs acc = mma(A, B, acc); acc = mma(A, -B, acc) `iters` times per
// accumulator, then acc = mma(A, B, acc) once, so D_j = C_j + A * B.
void launch_mma_sync(MmaAccumulator acc, const uint16_t* a, const uint16_t* b, const void* c, void* out, int iters,
                     int grid, cudaStream_t stream);


// ---- mma_sync.cu: typed mma.sync probes (bf16, tf32, s8, e4m3), one template ------------

// Input types of mma.sync.aligned.<shape>.row.col with 32-bit accumulators:
//   BF16: m16n8k16 .f32.bf16.bf16.f32 (sm_80)   TF32: m16n8k8 .f32.tf32.tf32.f32 (sm_80)
//   S8:   m16n8k32 .s32.s8.s8.s32     (sm_80)   E4M3: m16n8k32 .f32.e4m3.e4m3.f32 (sm_89)
enum class MmaSyncInput { BF16, TF32, S8, E4M3 };

// Independent accumulators per warp: 8 x 4 registers, as for fp16 with fp32 accumulators.
constexpr int kMmaTypedAccumulators = 8;
// Fragment registers per lane: A 4, B 2, C/D 4 (32-bit each) for all four shapes.
constexpr int kMmaTypedARegs = 4;
constexpr int kMmaTypedBRegs = 2;

const void* mma_typed_kernel(MmaSyncInput input);
// Operands arrive already in fragment order (the host applies the PTX ISA layouts):
//   a: a[lane * 4 + r], b and neg_b (-B, elementwise): b[lane * 2 + r], packed 32-bit
//      registers exactly as the instruction consumes them;
//   c: c[(j * 32 + lane) * 4 + e], float (S8: int32) c0..c3 of accumulator j;
//   out: out[((w * kMmaTypedAccumulators + j) * 32 + lane) * 4 + e], same type as c.
// Each warp runs acc = mma(A, B, acc); acc = mma(A, -B, acc) `iters` times per
// accumulator, then acc = mma(A, B, acc) once, so D_j = C_j + A * B.
void launch_mma_sync_typed(MmaSyncInput input, const uint32_t* a, const uint32_t* b, const uint32_t* neg_b,
                           const void* c, void* out, int iters, int grid, cudaStream_t stream);

}  // namespace pgp::cuda
