// CUDA-core arithmetic probes (cuda_core.cu, cuda_core_probes.cpp): peak FFMA, HFMA2,
// HFMA2.BF16, DFMA and IMAD rates, and an arithmetic-intensity sweep.
//
// Every value goes through the recurrence x = x * a + b. For the floating-point types
// a = 1/2 and b = p/2, so the fixed point p is exactly representable and, with round-to-
// nearest-even, the iteration reaches p exactly (the distance to p halves each step and
// the last tie rounds to p, whose last significand bit is 0). Start values x0 = m/8 and
// fixed points p = k/4 come from a counter-based hash, so the host regenerates every
// value and checks it bit for bit against its own simulation of the same recurrence.
// IMAD uses wrap-around uint32 arithmetic, checked against a closed form.
//
// Host entry points enqueue on the given stream and check the launch; none synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/random_fill.h"  // mix64, PGP_HOST_DEVICE

namespace pgp::cuda {

enum class CorePrecision : int { Fp32, Fp16x2, Bf16x2, Fp64, Int32 };

constexpr int kCoreBlock = 256;

constexpr int core_lanes(CorePrecision p) {
  return p == CorePrecision::Fp16x2 || p == CorePrecision::Bf16x2 ? 2 : 1;
}
// Bytes of one stored value (all lanes): 8 for fp64, 4 for the rest.
constexpr int core_word_bytes(CorePrecision p) { return p == CorePrecision::Fp64 ? 8 : 4; }
// FLOPs (for IMAD: ops, multiply + add) of one instruction in one thread.
constexpr int core_flops_per_instruction(CorePrecision p) { return 2 * core_lanes(p); }

// ---- Values shared by kernels and host references -----------------------------------

// 256 start values m/8, m in +-{1..128}: never zero, exact in every format used.
constexpr int kStartCodes = 256;
// 128 fixed points k/4, k in +-{1..64}: at most 7 significant bits, so the last
// significand bit is 0 even in bf16 (8 bits), which makes the final tie round to p.
constexpr int kFixedPointCodes = 128;

PGP_HOST_DEVICE inline uint32_t start_code(uint64_t hash) { return static_cast<uint32_t>(hash & 0xFFu); }
PGP_HOST_DEVICE inline uint32_t fixed_point_code(uint64_t hash) { return static_cast<uint32_t>((hash >> 8) & 0x7Fu); }
PGP_HOST_DEVICE inline int start_eighths(uint32_t code) {
  return code < 128 ? static_cast<int>(code) + 1 : -static_cast<int>(code - 127);
}
PGP_HOST_DEVICE inline int fixed_point_quarters(uint32_t code) {
  return code < 64 ? static_cast<int>(code) + 1 : -static_cast<int>(code - 63);
}

// IMAD recurrence multiplier (odd, so x -> a x + b is a bijection and nothing collapses).
constexpr uint32_t kImadMultiplier = 0x9E3779B1u;

// ---- Peak rates ----------------------------------------------------------------------
//
// Thread t (of T), chain j, lane l seeds its chain from h = mix64(seed, (t * chains + j) *
// lanes + l): x0 = start(h), b = fixed_point(h) / 2 (floating point) or x0 = low 32 bits
// of h, b = high 32 bits (IMAD). It runs `trips` x core_peak_steps(p) steps and stores
// chain j's final value (all lanes, one word) at out[j * T + t].

constexpr int kPeakChains = 8;
// Steps unrolled per loop trip: 256 FMA-pipe instructions per trip for the 32-bit
// types (the 3 loop-control instructions cost ~1% of issue slots), 128 DFMAs for fp64.
constexpr int core_peak_steps(CorePrecision p) { return p == CorePrecision::Fp64 ? 16 : 32; }

PGP_HOST_DEVICE inline uint64_t peak_chain_index(uint64_t thread, int chain, int lane, int lanes) {
  return (thread * kPeakChains + static_cast<uint64_t>(chain)) * lanes + lane;
}

// The uniform-offset form (fp16x2 only): chain j's b is words[j] (both lanes) in every
// thread, with fixed-point code uniform_offset_code(seed, j, lane); x0 as above.
struct PeakOffsets {
  uint64_t words[kPeakChains] = {};
};
PGP_HOST_DEVICE inline uint32_t uniform_offset_code(uint64_t seed, int chain, int lane, int lanes) {
  return fixed_point_code(mix64(seed ^ 0x554E49464F524D31ull, static_cast<uint64_t>(chain) * lanes + lane));
}

const void* core_peak_kernel(CorePrecision p, bool uniform_offsets = false);
// out: kPeakChains x threads words of core_word_bytes(p) (threads = grid x kCoreBlock).
// uniform_offsets (fp16x2 only) selects the uniform-offset form with those addends.
void launch_core_peak(CorePrecision p, void* out, uint64_t seed, int trips, int grid, cudaStream_t stream,
                      const PeakOffsets* uniform_offsets = nullptr);

// ---- Arithmetic-intensity sweep (fp32, fp16x2) ----------------------------------------
//
// Block b owns a tile of 2 x kCoreBlock 16-byte vectors; thread t loads vectors
// tile + t and tile + kCoreBlock + t (8 words, each a float or a half2), applies the
// recurrence to each word, and stores them to the same place in `out`. Word slot
// s = 4 * (second vector) + component uses b = offsets[s]; slot s gets
// fmas / 8 steps, plus one more while s < fmas % 8.

constexpr int kSweepWordsPerThread = 8;
constexpr int kSweepTileWords = 2 * kCoreBlock * 4;
constexpr size_t kSweepTileBytes = static_cast<size_t>(kSweepTileWords) * 4;

PGP_HOST_DEVICE inline int sweep_slot(uint64_t word) {
  const uint64_t in_tile = word % kSweepTileWords;
  return (in_tile >= kSweepTileWords / 2 ? 4 : 0) + static_cast<int>(in_tile % 4);
}
PGP_HOST_DEVICE inline int sweep_steps(int slot, int fmas_per_thread) {
  return fmas_per_thread / kSweepWordsPerThread + (slot < fmas_per_thread % kSweepWordsPerThread ? 1 : 0);
}

struct SweepConstants {
  uint32_t a = 0;                                // 1/2 in the format (both lanes)
  uint32_t offsets[kSweepWordsPerThread] = {};   // b per word slot (both lanes)
};

// Built FMA counts per thread: 4 << e for e in [0, kSweepFmaExponents).
constexpr int kSweepFmaExponents = 14;  // 4 ... 32768
// nullptr when (p, fmas_per_thread) was not built (p other than Fp32 and Fp16x2).
const void* core_sweep_kernel(CorePrecision p, int fmas_per_thread);
// `words` is a multiple of kSweepTileWords.
void launch_core_sweep(CorePrecision p, int fmas_per_thread, const uint32_t* in, uint32_t* out, size_t words,
                       const SweepConstants& constants, cudaStream_t stream);
// in[w] lane l = start_eighths(start_code(mix64(seed, w * lanes + l))) / 8.
void fill_sweep_input(CorePrecision p, uint32_t* in, size_t words, uint64_t seed, cudaStream_t stream);
// Counts words of `out` that differ from expected[(l * 8 + slot) * kStartCodes + code]
// (per lane l; the lane's bits for fp16x2) where code is word w's start code. Waits for
// the stream. first_wrong is the lowest wrong word (undefined when none is).
struct SweepMismatches {
  uint64_t wrong = 0;
  uint64_t first_wrong = 0;
};
SweepMismatches count_sweep_mismatches(CorePrecision p, const uint32_t* out, size_t words, uint64_t seed,
                                       const uint32_t* expected, cudaStream_t stream);

}  // namespace pgp::cuda
