// Counter-based random values shared by device fills and host references.
// Element i of a stream depends only on (seed, i), so the host can regenerate any
// element a kernel wrote (or should have written) without reading device memory.
// Compiles under nvcc (host and device) and plain C++ compilers alike.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PGP_HOST_DEVICE __host__ __device__
#else
#define PGP_HOST_DEVICE
#endif

namespace pgp::cuda {

// SplitMix64 finalizer over a seed-dependent Weyl sequence: neighbouring indices and
// neighbouring seeds give unrelated values.
PGP_HOST_DEVICE inline uint64_t mix64(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

PGP_HOST_DEVICE inline float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

PGP_HOST_DEVICE inline uint32_t bits_from_float(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// Integer in [lo, hi] (hi - lo small, so the modulo bias is negligible).
PGP_HOST_DEVICE inline int64_t random_int(uint64_t seed, uint64_t index, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(mix64(seed, index) % static_cast<uint64_t>(hi - lo + 1));
}

// +-{1, ..., max_magnitude}: never zero.
PGP_HOST_DEVICE inline int random_signed_nonzero(uint64_t seed, uint64_t index, int max_magnitude) {
  const uint64_t h = mix64(seed, index);
  const int magnitude = 1 + static_cast<int>((h >> 1) % static_cast<uint64_t>(max_magnitude));
  return (h & 1) ? -magnitude : magnitude;
}

// 1..15 as float: any sum of fewer than 2^24 / 15 of them is exact in fp32.
PGP_HOST_DEVICE inline float random_small_int_float(uint64_t seed, uint64_t index) {
  return static_cast<float>(1 + mix64(seed, index) % 15);
}

// +-[1, 2) with 23 random mantissa bits: never zero or NaN, and a misplaced element
// almost surely differs from the one expected there.
PGP_HOST_DEVICE inline float random_unit_float(uint64_t seed, uint64_t index) {
  const uint64_t h = mix64(seed, index);
  const uint32_t sign = static_cast<uint32_t>(h >> 63) << 31;
  return float_from_bits(sign | 0x3F800000u | static_cast<uint32_t>(h & 0x7FFFFFu));
}

// What every element of a float array holds: a random stream or one constant.
// Used both to fill arrays and to check them, on either side.
struct ExpectedValues {
  enum class Kind : uint32_t { SmallInts, UnitFloats, Constant, SmallIntCombination };
  Kind kind = Kind::Constant;
  uint64_t seed = 0;
  float constant = 0.0f;
  // SmallIntCombination only: constant * small_ints(seed) + weight2 * small_ints(seed2).
  uint64_t seed2 = 0;
  float weight2 = 0.0f;

  static ExpectedValues small_ints(uint64_t seed) { return {Kind::SmallInts, seed, 0.0f, 0, 0.0f}; }
  static ExpectedValues unit_floats(uint64_t seed) { return {Kind::UnitFloats, seed, 0.0f, 0, 0.0f}; }
  static ExpectedValues all(float value) { return {Kind::Constant, 0, value, 0, 0.0f}; }
  // What scale (w2 = 0) and triad write from small_ints inputs; exact in fp32 (and so
  // independent of FMA contraction) while the weights are small integers.
  static ExpectedValues small_int_combination(float weight, uint64_t seed, float weight2, uint64_t seed2) {
    return {Kind::SmallIntCombination, seed, weight, seed2, weight2};
  }

  PGP_HOST_DEVICE float at(uint64_t index) const {
    switch (kind) {
      case Kind::SmallInts:
        return random_small_int_float(seed, index);
      case Kind::UnitFloats:
        return random_unit_float(seed, index);
      case Kind::SmallIntCombination:
        return constant * random_small_int_float(seed, index) + weight2 * random_small_int_float(seed2, index);
      default:
        return constant;
    }
  }
};

}  // namespace pgp::cuda
