// Host entry points of the CUDA kernels (.cu files), callable from plain C++.
// Every launch is enqueued on the given stream and checked; nothing here synchronizes
// unless its comment says so.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

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

// ---- hbm_stream.cu: grid-stride streams of 16-byte vectors -----------------------------

constexpr int kHbmBlock = 256;
// Independent 16-byte loads (or stores) each thread issues before using them.
constexpr int kHbmUnroll = 4;

enum class HbmOp { Read, Write, Copy };
const void* hbm_kernel(HbmOp op);
// block_sums[b] = sum over the elements block b read, as an exact integer; grid entries.
// Exact only while a thread's sum stays below 2^24: see hbm_read_max_vectors_per_thread.
void launch_hbm_read(const float4* src, size_t n4, unsigned long long* block_sums, int grid, cudaStream_t stream);
void launch_hbm_write(float4* dst, size_t n4, float value, int grid, cudaStream_t stream);
void launch_hbm_copy(const float4* src, float4* dst, size_t n4, int grid, cudaStream_t stream);
// Most float4 of values <= 15 one thread may add up in fp32 and stay exact (< 2^24).
constexpr size_t hbm_read_max_vectors_per_thread() { return ((size_t{1} << 24) - 1) / (4 * 15); }

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

}  // namespace pgp::cuda
