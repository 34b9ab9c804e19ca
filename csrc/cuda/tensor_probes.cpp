// Tensor-core throughput probes: mma.sync m16n8k16 with fp16 inputs, fp32 or fp16
// accumulators, operands in registers. Inputs are small multiples of 1/4 (A, B) and
// 1/16 (C), so every partial result is exact in fp16 and fp32 and the kernel's output
// must equal C + A * B bit for bit; verify() checks every value written.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

constexpr int kM = 16, kN = 8, kK = 16;
constexpr double kFlopsPerMma = 2.0 * kM * kN * kK;
// ~3-7 ms per run on an H200 at ~600 TFLOP/s with 8 blocks of 4 warps per SM.
constexpr int kDefaultIters = 8192;
// Enough warps per SM sub-partition to hide mma latency; more only lengthens a run.
constexpr int kMaxBlocksPerSm = 8;
constexpr uint64_t kSeedA = 0x4D4D4131365F4101ull;
constexpr uint64_t kSeedB = 0x4D4D4131365F4202ull;
constexpr uint64_t kSeedC = 0x4D4D4131365F4303ull;

// fp16 bits of v, which must be exactly representable as a normal fp16 (or zero).
uint16_t exact_half_bits(double v) {
  if (v == 0.0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(v), &exponent);  // |v| = fraction * 2^exponent, fraction in [0.5, 1)
  const int biased = exponent - 1 + 15;
  const double mantissa = (fraction * 2.0 - 1.0) * 1024.0;
  PGP_CHECK(biased >= 1 && biased <= 30 && mantissa == std::floor(mantissa),
            "value " + std::to_string(v) + " is not an exact normal fp16");
  return static_cast<uint16_t>(sign | (biased << 10) | static_cast<uint16_t>(mantissa));
}

double half_bits_value(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

std::string format_value(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// What every mma.sync probe reports, whatever its input type.
Params mma_sync_params(const std::string& instruction, int accumulators, int iters, int grid, int blocks_per_sm) {
  return {{"instruction", instruction},
          {"accumulators", std::to_string(accumulators)},
          {"iters", std::to_string(iters)},
          {"block", std::to_string(kMmaBlock)},
          {"grid", std::to_string(grid)},
          {"blocks_per_sm", std::to_string(blocks_per_sm)},
          {"operands", "registers"}};
}

// Compares n outputs with the one-warp reference (every warp computes the same tile) and
// locates the first wrong one in the C/D fragment layout.
template <class ValueAt>
Verification check_against_reference(size_t n, ValueAt value_at, const std::vector<double>& reference,
                                     int accumulators) {
  size_t wrong = 0, first = 0;
  double first_got = 0;
  for (size_t i = 0; i < n; ++i) {
    const double got = value_at(i);
    if (got == reference[i % reference.size()]) continue;  // NaN poison never equals
    if (wrong++ == 0) {
      first = i;
      first_got = got;
    }
  }
  if (wrong == 0) return {true, "all " + std::to_string(n) + " values equal C + A*B exactly"};
  const size_t per_warp = static_cast<size_t>(accumulators) * 32 * kMmaValuesPerLane;
  return {false, std::to_string(wrong) + " of " + std::to_string(n) + " values wrong; first: warp " +
                     std::to_string(first / per_warp) + " acc " +
                     std::to_string(first / (32 * kMmaValuesPerLane) % accumulators) + " lane " +
                     std::to_string(first / kMmaValuesPerLane % 32) + " elem " +
                     std::to_string(first % kMmaValuesPerLane) + " got " + format_value(first_got) + " want " +
                     format_value(reference[first % reference.size()])};
}

class MmaSyncProbe : public CudaProbe {
 public:
  std::string name() const final { return is_f32() ? "compute.tensor.fp16.acc32" : "compute.tensor.fp16.acc16"; }
  std::string description() const final {
    return std::string("Tensor-core FP16 throughput, mma.sync m16n8k16 with ") + (is_f32() ? "fp32" : "fp16") +
           " accumulators, operands in registers";
  }

  // One implementation of the fp16 tensor names; wgmma_probes.cpp adds Hopper's.
  std::vector<std::string> variants(const Device&, bool) const final { return {"mma.sync.m16n8k16"}; }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    int major = 0, minor = 0;
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev.index));
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev.index));
    if (major < 8)
      return "mma.sync m16n8k16 with fp16 inputs needs compute capability 8.0 or newer; device has " +
             std::to_string(major) + "." + std::to_string(minor);
    if (auto reason = missing_kernel_image_reason(mma_kernel(acc_), dev.index); !reason.empty()) return reason;
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    const int sms = facts().sm_count;
    blocks_per_sm_ = std::min(occupancy_grid(mma_kernel(acc_), kMmaBlock) / sms, kMaxBlocksPerSm);
    grid_ = blocks_per_sm_ * sms;
    warps_ = static_cast<size_t>(grid_) * (kMmaBlock / 32);
    make_inputs();
    out_ = DeviceBuffer<uint8_t>(out_values() * value_bytes());
    synchronize();  // the uploads read host vectors that setup owns
  }

  Work work() const final {
    Work w;
    w.flops = static_cast<double>(warps_) * accumulators_ * (2.0 * iters_ + 1.0) * kFlopsPerMma;
    return w;
  }

  void poison() final { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  void run() final {
    launch_mma_sync(acc_, a_.get(), b_.get(), c_.get(), out_.get(), iters_, grid_, cuda_stream());
  }

  Verification verify() final {
    synchronize();
    std::vector<uint8_t> raw(out_.bytes());
    PGP_CUDA_CHECK(cudaMemcpyAsync(raw.data(), out_.get(), raw.size(), cudaMemcpyDeviceToHost, cuda_stream()));
    synchronize();
    return check_against_reference(out_values(), [&](size_t i) { return value_at(raw, i); }, reference_,
                                   accumulators_);
  }

  void teardown() final {
    CudaProbe::teardown();
    a_.reset();
    b_.reset();
    c_.reset();
    out_.reset();
  }

  Params params() const final {
    const std::string acc_type = is_f32() ? "f32" : "f16";
    return mma_sync_params("mma.sync.aligned.m16n8k16.row.col." + acc_type + ".f16.f16." + acc_type, accumulators_,
                           iters_, grid_, blocks_per_sm_);
  }

 protected:
  explicit MmaSyncProbe(MmaAccumulator acc) : acc_(acc), accumulators_(mma_accumulators(acc)) {}

 private:
  bool is_f32() const { return acc_ == MmaAccumulator::F32; }
  size_t value_bytes() const { return is_f32() ? sizeof(float) : sizeof(uint16_t); }
  size_t out_values() const { return warps_ * accumulators_ * 32 * kMmaValuesPerLane; }

  double value_at(const std::vector<uint8_t>& raw, size_t i) const {
    if (is_f32()) {
      float v;
      std::memcpy(&v, raw.data() + i * sizeof v, sizeof v);
      return v;
    }
    uint16_t bits;
    std::memcpy(&bits, raw.data() + i * sizeof bits, sizeof bits);
    return half_bits_value(bits);
  }

  // A, B: k/4 with k in +-{1..7}; C: m/16 with m in [-64, 64]. Then |C + A*B| <= 53 on a
  // 1/16 grid, exact in fp16 (11-bit significand) and fp32. Builds the reference for
  // one warp: D of accumulator j, lane l, element e at (j * 32 + l) * 4 + e.
  void make_inputs() {
    double a[kM][kK], b[kK][kN];
    std::vector<uint16_t> a_bits(kM * kK), b_bits(kK * kN);
    for (int m = 0; m < kM; ++m)
      for (int k = 0; k < kK; ++k) {
        a[m][k] = random_signed_nonzero(kSeedA, m * kK + k, 7) / 4.0;
        a_bits[m * kK + k] = exact_half_bits(a[m][k]);  // row-major
      }
    for (int k = 0; k < kK; ++k)
      for (int n = 0; n < kN; ++n) {
        b[k][n] = random_signed_nonzero(kSeedB, k * kN + n, 7) / 4.0;
        b_bits[n * kK + k] = exact_half_bits(b[k][n]);  // column-major
      }
    const size_t c_count = static_cast<size_t>(accumulators_) * kM * kN;
    std::vector<double> c(c_count);
    std::vector<uint8_t> c_raw(c_count * value_bytes());
    for (size_t i = 0; i < c_count; ++i) {  // i = (j * 16 + m) * 8 + n: row-major tile per accumulator
      c[i] = random_int(kSeedC, i, -64, 64) / 16.0;
      if (is_f32()) {
        const float v = static_cast<float>(c[i]);
        std::memcpy(c_raw.data() + i * sizeof v, &v, sizeof v);
      } else {
        const uint16_t bits = exact_half_bits(c[i]);
        std::memcpy(c_raw.data() + i * sizeof bits, &bits, sizeof bits);
      }
    }

    reference_.assign(static_cast<size_t>(accumulators_) * 32 * kMmaValuesPerLane, 0.0);
    for (int j = 0; j < accumulators_; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < kMmaValuesPerLane; ++e) {
          // C/D fragment layout: row groupID (+8 for c2, c3), column 2 * threadID_in_group + (e & 1).
          const int row = (lane >> 2) + 8 * (e >> 1);
          const int col = 2 * (lane & 3) + (e & 1);
          double d = c[(static_cast<size_t>(j) * kM + row) * kN + col];
          for (int k = 0; k < kK; ++k) d += a[row][k] * b[k][col];
          reference_[(static_cast<size_t>(j) * 32 + lane) * kMmaValuesPerLane + e] = d;
        }

    a_ = DeviceBuffer<uint16_t>(a_bits.size());
    b_ = DeviceBuffer<uint16_t>(b_bits.size());
    c_ = DeviceBuffer<uint8_t>(c_raw.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(a_.get(), a_bits.data(), a_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(cudaMemcpyAsync(b_.get(), b_bits.data(), b_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(cudaMemcpyAsync(c_.get(), c_raw.data(), c_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    synchronize();
  }

  MmaAccumulator acc_;
  int accumulators_;
  int iters_ = kDefaultIters;
  int blocks_per_sm_ = 0;
  int grid_ = 0;
  size_t warps_ = 0;
  DeviceBuffer<uint16_t> a_, b_;
  DeviceBuffer<uint8_t> c_, out_;
  std::vector<double> reference_;  // one warp's outputs; every warp computes the same
};

class MmaSyncF32Probe final : public MmaSyncProbe {
 public:
  MmaSyncF32Probe() : MmaSyncProbe(MmaAccumulator::F32) {}
};

class MmaSyncF16Probe final : public MmaSyncProbe {
 public:
  MmaSyncF16Probe() : MmaSyncProbe(MmaAccumulator::F16) {}
};

PGP_REGISTER_PROBE(MmaSyncF32Probe);
PGP_REGISTER_PROBE(MmaSyncF16Probe);

// ---- bf16, tf32, s8 and e4m3 inputs: one probe class over a per-type traits entry -------
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16, m16n8k8 .tf32, m16n8k32 .s8/.e4m3): with
// E = 32 / bits elements per 32-bit register (bf16 2, tf32 1, s8/e4m3 4), K = 8 E,
// g = lane >> 2 and t = lane % 4, element e (0..E-1, lowest bits first) of
//   A register r (0..3) is at row g + 8 (r & 1),  column t E + e + 4 E (r >> 1);
//   B register r (0..1) is at row (k) t E + e + 4 E r, column (n) g;
//   C/D element i (0..3) is at row g + 8 (i >> 1), column 2 t + (i & 1).
// The host packs A, B, -B and C in that order, so the kernel loads whole fragments.

struct MmaTypeTraits {
  MmaSyncInput input;
  const char* name;         // registered probe name
  const char* type_name;    // for descriptions
  const char* instruction;  // full PTX instruction
  const char* variant;
  int bits;                 // bits per input element
  int min_major, min_minor;
  int max_major;            // newest major measured natively (see kE4m3Traits)
  bool int_acc;             // s32 accumulators (else f32)
  double scale;             // A, B = k * scale; C = m * scale^2
};

constexpr MmaTypeTraits kBf16Traits{MmaSyncInput::BF16, "compute.tensor.bf16.acc32", "BF16",
                                    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "mma.sync.m16n8k16",
                                    16, 8, 0, 99, false, 0.25};
constexpr MmaTypeTraits kTf32Traits{MmaSyncInput::TF32, "compute.tensor.tf32.acc32", "TF32",
                                    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "mma.sync.m16n8k8",
                                    32, 8, 0, 99, false, 0.25};
constexpr MmaTypeTraits kS8Traits{MmaSyncInput::S8, "compute.tensor.int8.acc32", "INT8",
                                  "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", "mma.sync.m16n8k32",
                                  8, 8, 0, 99, true, 1.0};
// e4m3 mma.sync is native (QMMA.16832) on sm_89 only among the built targets. On sm_90
// ptxas emulates it (F2FP unpack to f16, two HMMA.16816 per mma, FADD into the
// accumulator) and hoists the loop-invariant A*B out of the loop, so a run would time
// FADDs, not the tensor cores; Hopper's fp8 rate comes from the wgmma implementation.
constexpr MmaTypeTraits kE4m3Traits{MmaSyncInput::E4M3, "compute.tensor.fp8.acc32", "FP8 (e4m3)",
                                    "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", "mma.sync.m16n8k32",
                                    8, 8, 9, 8, false, 0.25};

double e4m3_value(uint32_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 7;
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  if ((bits & 0x7F) == 0x7F) return NAN;
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);
  return sign * std::ldexp(8 + mantissa, exponent - 10);
}

// Bits of v in the input type; v must be exactly representable.
uint32_t encode_exact(MmaSyncInput input, double v) {
  switch (input) {
    case MmaSyncInput::BF16:
    case MmaSyncInput::TF32: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      const uint32_t dropped = input == MmaSyncInput::BF16 ? 0xFFFFu : 0x1FFFu;  // bf16: top 16 bits; tf32: 10-bit mantissa
      PGP_CHECK(static_cast<double>(f) == v && (bits & dropped) == 0,
                "value " + format_value(v) + " is not exact in the mma input type");
      return input == MmaSyncInput::BF16 ? bits >> 16 : bits;
    }
    case MmaSyncInput::S8:
      PGP_CHECK(v == std::floor(v) && v >= -128 && v <= 127, "value " + format_value(v) + " is not an s8");
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case MmaSyncInput::E4M3:
      for (uint32_t bits = 0; bits < 256; ++bits)
        if (e4m3_value(bits) == v && !(v == 0 && bits != 0)) return bits;
      PGP_CHECK(false, "value " + format_value(v) + " is not an exact e4m3");
  }
  PGP_CHECK(false, "unknown mma.sync input type");
  return 0;
}

class MmaSyncTypedProbe : public CudaProbe {
 public:
  std::string name() const final { return t_.name; }
  std::string description() const final {
    return std::string("Tensor-core ") + t_.type_name + " throughput, " + t_.instruction +
           ", operands in registers";
  }

  // One implementation of this name; wgmma_probes.cpp adds Hopper's.
  std::vector<std::string> variants(const Device&, bool) const final { return {t_.variant}; }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    int major = 0, minor = 0;
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev.index));
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev.index));
    if (major < t_.min_major || (major == t_.min_major && minor < t_.min_minor))
      return std::string(t_.instruction) + " needs compute capability " + std::to_string(t_.min_major) + "." +
             std::to_string(t_.min_minor) + " or newer; device has " + std::to_string(major) + "." +
             std::to_string(minor);
    if (major > t_.max_major)
      return std::string(t_.instruction) + " runs natively on the tensor cores only up to compute capability " +
             std::to_string(t_.max_major) + ".x here (sm_90 emulates it with F2FP + HMMA and hoists the " +
             "loop-invariant products); device has " + std::to_string(major) + "." + std::to_string(minor);
    if (auto reason = missing_kernel_image_reason(mma_typed_kernel(t_.input), dev.index); !reason.empty())
      return reason;
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    const int sms = facts().sm_count;
    blocks_per_sm_ = std::min(occupancy_grid(mma_typed_kernel(t_.input), kMmaBlock) / sms, kMaxBlocksPerSm);
    grid_ = blocks_per_sm_ * sms;
    warps_ = static_cast<size_t>(grid_) * (kMmaBlock / 32);
    make_inputs();
    out_ = DeviceBuffer<uint32_t>(out_values());
    synchronize();
  }

  Work work() const final {
    Work w;
    w.flops = static_cast<double>(warps_) * kMmaTypedAccumulators * (2.0 * iters_ + 1.0) * 2.0 * kM * kN * k();
    return w;
  }

  void poison() final { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  void run() final {
    launch_mma_sync_typed(t_.input, a_.get(), b_.get(), neg_b_.get(), c_.get(), out_.get(), iters_, grid_,
                          cuda_stream());
  }

  Verification verify() final {
    synchronize();
    std::vector<uint32_t> raw(out_values());
    PGP_CUDA_CHECK(
        cudaMemcpyAsync(raw.data(), out_.get(), out_.bytes(), cudaMemcpyDeviceToHost, cuda_stream()));
    synchronize();
    return check_against_reference(raw.size(), [&](size_t i) { return value_of(raw[i]); }, reference_,
                                   kMmaTypedAccumulators);
  }

  void teardown() final {
    CudaProbe::teardown();
    a_.reset();
    b_.reset();
    neg_b_.reset();
    c_.reset();
    out_.reset();
  }

  Params params() const final {
    return mma_sync_params(t_.instruction, kMmaTypedAccumulators, iters_, grid_, blocks_per_sm_);
  }

 protected:
  explicit MmaSyncTypedProbe(const MmaTypeTraits& traits) : t_(traits) {}

 private:
  static constexpr int kMaxK = 32;
  int elems_per_reg() const { return 32 / t_.bits; }
  int k() const { return 8 * elems_per_reg(); }
  size_t out_values() const { return warps_ * kMmaTypedAccumulators * 32 * 4; }

  double value_of(uint32_t bits) const {
    if (t_.int_acc) return static_cast<int32_t>(bits);
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }

  uint32_t acc_bits(double v) const {
    if (t_.int_acc) return static_cast<uint32_t>(static_cast<int32_t>(v));
    const float f = static_cast<float>(v);
    PGP_CHECK(static_cast<double>(f) == v, "accumulator value " + format_value(v) + " is not exact in fp32");
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
  }

  // A, B: k * scale with k in +-{1..7} (scale 1/4; s8: 1); C: m * scale^2 with m in
  // [-64, 64]. |A*B| sums over K <= 32 stay <= 32 * 49 * scale^2 on a scale^2 grid:
  // at most 11 significant bits, exact in fp32 and in the inputs' products; s8/s32 is
  // exact integer arithmetic. Builds the reference for one warp, as the fp16 probe does.
  void make_inputs() {
    const int kk = k(), per = elems_per_reg(), bits = t_.bits;
    const uint32_t mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
    double a[kM][kMaxK], b[kMaxK][kN];
    for (int m = 0; m < kM; ++m)
      for (int q = 0; q < kk; ++q) a[m][q] = random_signed_nonzero(kSeedA, m * kk + q, 7) * t_.scale;
    for (int q = 0; q < kk; ++q)
      for (int n = 0; n < kN; ++n) b[q][n] = random_signed_nonzero(kSeedB, q * kN + n, 7) * t_.scale;

    std::vector<uint32_t> a_frag(32 * kMmaTypedARegs, 0), b_frag(32 * kMmaTypedBRegs, 0),
        neg_b_frag(32 * kMmaTypedBRegs, 0);
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      for (int r = 0; r < kMmaTypedARegs; ++r)
        for (int e = 0; e < per; ++e) {
          const int row = g + 8 * (r & 1), col = t * per + e + 4 * per * (r >> 1);
          a_frag[lane * kMmaTypedARegs + r] |= (encode_exact(t_.input, a[row][col]) & mask) << (e * bits);
        }
      for (int r = 0; r < kMmaTypedBRegs; ++r)
        for (int e = 0; e < per; ++e) {
          const int row = t * per + e + 4 * per * r, col = g;
          b_frag[lane * kMmaTypedBRegs + r] |= (encode_exact(t_.input, b[row][col]) & mask) << (e * bits);
          neg_b_frag[lane * kMmaTypedBRegs + r] |= (encode_exact(t_.input, -b[row][col]) & mask) << (e * bits);
        }
    }

    const size_t c_count = static_cast<size_t>(kMmaTypedAccumulators) * kM * kN;
    std::vector<double> c(c_count);  // c[(j * 16 + m) * 8 + n]
    for (size_t i = 0; i < c_count; ++i) c[i] = random_int(kSeedC, i, -64, 64) * t_.scale * t_.scale;

    const size_t per_warp = static_cast<size_t>(kMmaTypedAccumulators) * 32 * 4;
    std::vector<uint32_t> c_frag(per_warp);
    reference_.assign(per_warp, 0.0);
    for (int j = 0; j < kMmaTypedAccumulators; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int row = (lane >> 2) + 8 * (e >> 1);
          const int col = 2 * (lane & 3) + (e & 1);
          const size_t idx = (static_cast<size_t>(j) * 32 + lane) * 4 + e;
          const double cv = c[(static_cast<size_t>(j) * kM + row) * kN + col];
          c_frag[idx] = acc_bits(cv);
          double d = cv;
          for (int q = 0; q < kk; ++q) d += a[row][q] * b[q][col];
          reference_[idx] = d;
        }

    a_ = DeviceBuffer<uint32_t>(a_frag.size());
    b_ = DeviceBuffer<uint32_t>(b_frag.size());
    neg_b_ = DeviceBuffer<uint32_t>(neg_b_frag.size());
    c_ = DeviceBuffer<uint32_t>(c_frag.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(a_.get(), a_frag.data(), a_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(cudaMemcpyAsync(b_.get(), b_frag.data(), b_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(
        cudaMemcpyAsync(neg_b_.get(), neg_b_frag.data(), neg_b_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(cudaMemcpyAsync(c_.get(), c_frag.data(), c_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    synchronize();
  }

  const MmaTypeTraits& t_;
  int iters_ = kDefaultIters;
  int blocks_per_sm_ = 0;
  int grid_ = 0;
  size_t warps_ = 0;
  DeviceBuffer<uint32_t> a_, b_, neg_b_, c_, out_;
  std::vector<double> reference_;  // one warp's outputs; every warp computes the same
};

class MmaSyncBf16Probe final : public MmaSyncTypedProbe {
 public:
  MmaSyncBf16Probe() : MmaSyncTypedProbe(kBf16Traits) {}
};
class MmaSyncTf32Probe final : public MmaSyncTypedProbe {
 public:
  MmaSyncTf32Probe() : MmaSyncTypedProbe(kTf32Traits) {}
};
class MmaSyncS8Probe final : public MmaSyncTypedProbe {
 public:
  MmaSyncS8Probe() : MmaSyncTypedProbe(kS8Traits) {}
};
class MmaSyncE4m3Probe final : public MmaSyncTypedProbe {
 public:
  MmaSyncE4m3Probe() : MmaSyncTypedProbe(kE4m3Traits) {}
};

PGP_REGISTER_PROBE(MmaSyncBf16Probe);
PGP_REGISTER_PROBE(MmaSyncTf32Probe);
PGP_REGISTER_PROBE(MmaSyncS8Probe);
PGP_REGISTER_PROBE(MmaSyncE4m3Probe);

}  // namespace
}  // namespace pgp::cuda
