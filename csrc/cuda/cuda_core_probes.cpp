// CUDA-core arithmetic probes:
//   compute.cuda.{fp32, fp16x2, bf16x2, fp64, int32}: peak FFMA, HFMA2, HFMA2.BF16, DFMA
//     and IMAD rates, operands in registers;
//   compute.sweep: a mixbench-style arithmetic-intensity sweep (fp32, fp16x2) from
//     memory-bound to compute-bound, one variant per FLOP-per-byte point.
// The recurrence and value coding are in cuda_core.h. Every stored value is checked
// against a host simulation of the same recurrence in the same format (the peak probes
// on the host, the sweep on the device against a host-computed table).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_core.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

// ---- Host arithmetic in the device formats ---------------------------------------------

enum class Format { F32, F16, BF16, F64 };

Format format_of(CorePrecision p) {
  switch (p) {
    case CorePrecision::Fp16x2:
      return Format::F16;
    case CorePrecision::Bf16x2:
      return Format::BF16;
    case CorePrecision::Fp64:
      return Format::F64;
    default:
      return Format::F32;
  }
}

// Round-to-nearest-even of v to a format with `bits` significand bits whose normal
// exponents start at `min_exponent` (below it: subnormal spacing). v must be finite.
double round_to_bits(double v, int bits, int min_exponent) {
  if (v == 0.0) return v;
  int exponent = 0;
  std::frexp(v, &exponent);  // |v| in [2^(exponent-1), 2^exponent)
  const int quantum = std::max(exponent - 1, min_exponent) - (bits - 1);
  return std::ldexp(std::nearbyint(std::ldexp(v, -quantum)), quantum);  // default mode: ties to even
}

// One fused step x * a + b, rounded once, as the device's FFMA / HFMA2 / DFMA computes it.
double fused_step(double x, double a, double b, Format f) {
  if (f == Format::F64) return std::fma(x, a, b);
  if (f == Format::F32)
    return static_cast<double>(std::fma(static_cast<float>(x), static_cast<float>(a), static_cast<float>(b)));
  // fp16 / bf16: x * a is exact in double (a = 1/2); the sum must be too, so that the
  // only rounding is the one into the 16-bit format (TwoSum gives the double's error).
  const double product = x * a;
  const double sum = product + b;
  const double b_part = sum - product;
  const double error = (product - (sum - b_part)) + (b - b_part);
  PGP_CHECK(error == 0.0, "host reference: x * a + b is not exact in double; cannot round it once");
  return f == Format::F16 ? round_to_bits(sum, 11, -14) : round_to_bits(sum, 8, -126);
}

// Steps a fixed point takes to be reached from any start used here is < 100 in every
// format (the distance halves per step); more means the recurrence is not what we think.
constexpr int64_t kMaxSimulatedSteps = 10000;

// The recurrence x = x * a + b run `steps` times in format f. Stops early at a fixed
// point, which every later step returns unchanged.
double simulate(double x0, double a, double b, int64_t steps, Format f) {
  double x = x0;
  for (int64_t s = 0; s < steps; ++s) {
    const double next = fused_step(x, a, b, f);
    if (next == x) return x;
    PGP_CHECK(s < kMaxSimulatedSteps, "host reference: x = x*a + b did not settle within " +
                                          std::to_string(kMaxSimulatedSteps) + " steps");
    x = next;
  }
  return x;
}

uint64_t float_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// Bits of v in format f; v must be exactly representable (every value built here is).
uint64_t encode(double v, Format f) {
  switch (f) {
    case Format::F64: {
      uint64_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      return bits;
    }
    case Format::F32:
      return float_bits(static_cast<float>(v));
    case Format::BF16: {
      const uint64_t bits = float_bits(static_cast<float>(v));
      PGP_CHECK((bits & 0xFFFFu) == 0 && static_cast<double>(static_cast<float>(v)) == v,
                "value " + std::to_string(v) + " is not exact in bf16");
      return bits >> 16;
    }
    case Format::F16:
      break;
  }
  const uint64_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double magnitude = std::fabs(v);
  if (magnitude == 0.0) return sign;
  int exponent = 0;
  std::frexp(magnitude, &exponent);
  uint64_t bits;
  double significand;
  if (exponent - 1 >= -14) {  // normal
    significand = std::ldexp(magnitude, 11 - exponent) - 1024.0;
    bits = sign | (static_cast<uint64_t>(exponent - 1 + 15) << 10);
  } else {  // subnormal: multiples of 2^-24
    significand = std::ldexp(magnitude, 24);
    bits = sign;
  }
  PGP_CHECK(significand == std::floor(significand) && exponent - 1 <= 15,
            "value " + std::to_string(v) + " is not exact in fp16");
  return bits | static_cast<uint64_t>(significand);
}

double decode(uint64_t bits, Format f) {
  switch (f) {
    case Format::F64: {
      double v;
      std::memcpy(&v, &bits, sizeof v);
      return v;
    }
    case Format::F32:
    case Format::BF16: {
      const uint32_t word = static_cast<uint32_t>(f == Format::BF16 ? bits << 16 : bits);
      float v;
      std::memcpy(&v, &word, sizeof v);
      return v;
    }
    case Format::F16:
      break;
  }
  const int exponent = static_cast<int>((bits >> 10) & 0x1F);
  const double mantissa = static_cast<double>(bits & 0x3FF);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024.0 + mantissa, exponent - 25);
}

int lane_bits(Format f) { return f == Format::F16 || f == Format::BF16 ? 16 : (f == Format::F64 ? 64 : 32); }

uint64_t lane_of(uint64_t word, int lane, Format f) {
  const int bits = lane_bits(f);
  return bits == 64 ? word : (word >> (bits * lane)) & ((uint64_t{1} << bits) - 1);
}

std::string format_double(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string format_bits(uint64_t bits, Format f) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%0*llx", lane_bits(f) / 4, static_cast<unsigned long long>(bits));
  return text;
}

double start_value(uint32_t code) { return start_eighths(code) / 8.0; }
double offset_value(uint32_t code) { return fixed_point_quarters(code) / 8.0; }  // b = p / 2

int compute_major(int index) {
  int major = 0;
  PGP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  return major;
}

std::string compute_capability(int index) {
  int minor = 0;
  PGP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  return std::to_string(compute_major(index)) + "." + std::to_string(minor);
}

// ---- Peak rates ---------------------------------------------------------------------

// One run lasts about this long at the expected rate (2-10 ms on an H200 whatever the
// clock), long enough that launch overhead and the ramp-up of 1000+ blocks vanish.
constexpr double kTargetRunSeconds = 5e-3;
// At least 8 loop trips (>= 128 steps per chain: every chain has reached its fixed point).
constexpr int kMinTrips = 8;
constexpr int kMaxTrips = 1 << 24;
constexpr uint64_t kPeakSeed = 0x43554441434F5245ull;

struct PeakSpec {
  const char* name;
  const char* instruction;
  const char* type;
};

PeakSpec peak_spec(CorePrecision p) {
  switch (p) {
    case CorePrecision::Fp32:
      return {"compute.cuda.fp32", "FFMA (fma.rn.f32)", "fp32"};
    case CorePrecision::Fp16x2:
      return {"compute.cuda.fp16x2", "HFMA2 (fma.rn.f16x2)", "fp16x2"};
    case CorePrecision::Bf16x2:
      return {"compute.cuda.bf16x2", "HFMA2.BF16 (fma.rn.bf16x2)", "bf16x2"};
    case CorePrecision::Fp64:
      return {"compute.cuda.fp64", "DFMA (fma.rn.f64)", "fp64"};
    case CorePrecision::Int32:
      break;
  }
  return {"compute.cuda.int32", "IMAD (mad.lo.u32)", "int32"};
}

// Thread-instructions per clock per SM the probe expects (CUDA C++ Programming Guide,
// arithmetic instruction throughput), used only to size a run. A wrong guess makes runs
// longer or shorter, never the result wrong.
int expected_lanes_per_clock(CorePrecision p, int major, int minor) {
  switch (p) {
    case CorePrecision::Fp32:
      return major >= 9 || (major == 8 && minor != 0) ? 128 : 64;
    case CorePrecision::Fp16x2:
    case CorePrecision::Bf16x2:
      return major >= 8 ? 128 : 64;
    case CorePrecision::Fp64:
      if (major == 8 && minor == 0) return 32;
      return major == 9 || major == 10 ? 64 : 2;  // consumer parts: 1/64 of fp32
    case CorePrecision::Int32:
      break;
  }
  return 64;
}

// (a^n, 1 + a + ... + a^(n-1)) mod 2^32: n IMAD steps map x to a^n x + b * sum.
std::pair<uint32_t, uint32_t> imad_closed_form(uint32_t a, uint64_t n) {
  uint32_t power = 1, sum = 0;           // the result so far: n' steps
  uint32_t step_power = a, step_sum = 1;  // 2^i steps
  for (; n > 0; n >>= 1) {
    if (n & 1) {
      sum = sum + power * step_sum;  // n' steps then 2^i more
      power = power * step_power;
    }
    step_sum = step_sum + step_power * step_sum;
    step_power = step_power * step_power;
  }
  return {power, sum};
}

class CudaCorePeakProbe : public CudaProbe {
 public:
  std::string name() const final { return spec_.name; }
  std::string description() const final {
    std::string text = std::string("Peak CUDA-core ") + spec_.type + " rate: " + spec_.instruction + ", " +
                       std::to_string(kPeakChains) + " independent register chains x = x*a + b per thread";
    if (precision_ == CorePrecision::Int32) text += "; one IMAD counts as 2 ops (multiply + add)";
    return text + " (size_bytes ignored)";
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    if (precision_ == CorePrecision::Bf16x2 && compute_major(dev.index) < 8)
      return std::string("HFMA2.BF16 (fma.rn.bf16x2) needs compute capability 8.0 or newer; device has ") +
             compute_capability(dev.index);
    if (auto reason = missing_kernel_image_reason(core_peak_kernel(precision_), dev.index); !reason.empty())
      return reason;
    return std::nullopt;
  }

  // fp16x2 in two forms: addends in registers (per thread), or per chain from kernel
  // parameters, which the FMA reads in place; ptxas schedules the two differently.
  std::vector<std::string> variants(const Device&, bool) const final {
    if (precision_ == CorePrecision::Fp16x2) return {"registers", "uniform-offsets"};
    return {""};
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    const DeviceFacts& f = facts();
    uniform_offsets_ = cfg.variant == "uniform-offsets";
    if (uniform_offsets_) offsets_ = uniform_offsets();
    grid_ = occupancy_grid(core_peak_kernel(precision_, uniform_offsets_), kCoreBlock);
    threads_ = static_cast<uint64_t>(grid_) * kCoreBlock;
    // Only sizes the run: without the attribute (newer runtimes may drop it), assume 1.5 GHz.
    if (cudaDeviceGetAttribute(&clock_khz_, cudaDevAttrClockRate, f.index) != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it so no later launch check reports it
      clock_khz_ = 0;
    }
    lanes_per_clock_ = expected_lanes_per_clock(precision_, f.cc_major, f.cc_minor);
    const double clock_hz = clock_khz_ > 0 ? clock_khz_ * 1e3 : 1.5e9;
    const double steps_per_chain =
        kTargetRunSeconds * lanes_per_clock_ * f.sm_count * clock_hz / (static_cast<double>(threads_) * kPeakChains);
    trips_ = static_cast<int>(std::clamp(std::ceil(steps_per_chain / core_peak_steps(precision_)),
                                         static_cast<double>(kMinTrips), static_cast<double>(kMaxTrips)));
    out_ = DeviceBuffer<uint8_t>(threads_ * kPeakChains * core_word_bytes(precision_));
  }

  Work work() const final {
    Work w;
    w.flops = static_cast<double>(threads_) * kPeakChains * static_cast<double>(steps_per_chain()) *
              core_flops_per_instruction(precision_);
    w.bytes_written = static_cast<double>(out_.bytes());  // once per run, after the loop
    return w;
  }

  void poison() final { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  void run() final {
    launch_core_peak(precision_, out_.get(), seed(), trips_, grid_, cuda_stream(),
                     uniform_offsets_ ? &offsets_ : nullptr);
  }

  Verification verify() final {
    synchronize();
    std::vector<uint8_t> raw(out_.bytes());
    PGP_CUDA_CHECK(cudaMemcpyAsync(raw.data(), out_.get(), raw.size(), cudaMemcpyDeviceToHost, cuda_stream()));
    synchronize();
    return precision_ == CorePrecision::Int32 ? verify_imad(raw) : verify_float(raw);
  }

  void teardown() final {
    CudaProbe::teardown();
    out_.reset();
  }

  Params params() const final {
    Params p{{"instruction", spec_.instruction},
             {"addends", uniform_offsets_ ? "per chain, kernel parameters" : "per thread and chain, registers"},
             {"type", spec_.type},
             {"recurrence", precision_ == CorePrecision::Int32
                                ? "x = x * a + b mod 2^32, a = " + std::to_string(kImadMultiplier) +
                                      ", x0 and b random per chain"
                                : "x = x * a + b, a = 0.5, b = p/2 per chain and lane (fixed point p = k/4, "
                                  "x0 = m/8)"},
             {"chains", std::to_string(kPeakChains)},
             {"lanes", std::to_string(core_lanes(precision_))},
             {"iters", std::to_string(steps_per_chain())},
             {"unroll", std::to_string(core_peak_steps(precision_))},
             {"trips", std::to_string(trips_)},
             {"threads", std::to_string(threads_)},
             {"block", std::to_string(kCoreBlock)},
             {"grid", std::to_string(grid_)},
             {"blocks_per_sm", std::to_string(grid_ / std::max(facts().sm_count, 1))},
             {"flops_per_instruction", std::to_string(core_flops_per_instruction(precision_))},
             {"flops", "threads x chains x iters x flops_per_instruction"},
             {"sm_clock_khz", std::to_string(clock_khz_)},
             {"expected_lanes_per_clk_per_sm", std::to_string(lanes_per_clock_)},
             {"target_run_ms", format_double(kTargetRunSeconds * 1e3)},
             {"size_bytes", "ignored: the work stays in registers"}};
    if (precision_ == CorePrecision::Int32)
      p["op_count"] = "one IMAD = 2 ops (multiply + add); reported in the compute unit (TFLOP/s)";
    return p;
  }

 protected:
  explicit CudaCorePeakProbe(CorePrecision p) : precision_(p), spec_(peak_spec(p)) {}

 private:
  uint64_t steps_per_chain() const { return static_cast<uint64_t>(trips_) * core_peak_steps(precision_); }
  uint64_t seed() const { return kPeakSeed + static_cast<uint64_t>(precision_); }

  uint64_t word_at(const std::vector<uint8_t>& raw, size_t i) const {
    if (core_word_bytes(precision_) == 8) {
      uint64_t w;
      std::memcpy(&w, raw.data() + i * sizeof w, sizeof w);
      return w;
    }
    uint32_t w;
    std::memcpy(&w, raw.data() + i * sizeof w, sizeof w);
    return w;
  }

  // Chain j's addend b = p / 2 in both lanes, as the kernel reads it.
  PeakOffsets uniform_offsets() const {
    const Format f = format_of(precision_);
    const int lanes = core_lanes(precision_);
    PeakOffsets o;
    for (int j = 0; j < kPeakChains; ++j)
      for (int l = 0; l < lanes; ++l)
        o.words[j] |= encode(offset_value(uniform_offset_code(seed(), j, l, lanes)), f) << (lane_bits(f) * l);
    return o;
  }

  // Every chain ends where the host's simulation in the same format ends (its fixed
  // point p: the start value and iteration count are not visible in it, and an
  // implausible rate, not this check, shows too few iterations).
  Verification verify_float(const std::vector<uint8_t>& raw) const {
    const Format f = format_of(precision_);
    const int lanes = core_lanes(precision_);
    const uint64_t steps = steps_per_chain();
    // expected[k * kStartCodes + m]: the lane's bits after `steps` steps.
    std::vector<uint64_t> expected(static_cast<size_t>(kFixedPointCodes) * kStartCodes);
    for (uint32_t k = 0; k < kFixedPointCodes; ++k)
      for (uint32_t m = 0; m < kStartCodes; ++m)
        expected[k * kStartCodes + m] = encode(simulate(start_value(m), 0.5, offset_value(k), steps, f), f);

    uint64_t wrong = 0, checked = 0;
    std::string first;
    for (uint64_t t = 0; t < threads_; ++t)
      for (int j = 0; j < kPeakChains; ++j) {
        const uint64_t word = word_at(raw, j * threads_ + t);
        for (int l = 0; l < lanes; ++l) {
          ++checked;
          const uint64_t hash = mix64(seed(), peak_chain_index(t, j, l, lanes));
          const uint32_t m = start_code(hash);
          const uint32_t k = uniform_offsets_ ? uniform_offset_code(seed(), j, l, lanes) : fixed_point_code(hash);
          const uint64_t want = expected[k * kStartCodes + m];
          const uint64_t got = lane_of(word, l, f);
          if (got == want) continue;
          if (wrong++ == 0)
            first = "thread " + std::to_string(t) + " chain " + std::to_string(j) + " lane " + std::to_string(l) +
                    ": got " + format_double(decode(got, f)) + " (" + format_bits(got, f) + ") want " +
                    format_double(decode(want, f)) + " (" + format_bits(want, f) + "); x0 = " +
                    format_double(start_value(m)) + ", b = " + format_double(offset_value(k));
        }
      }
    if (wrong == 0)
      return {true, "all " + std::to_string(checked) + " values equal the host simulation of " +
                        std::to_string(steps) + " steps bit for bit"};
    return {false, std::to_string(wrong) + " of " + std::to_string(checked) + " values wrong; first: " + first};
  }

  // Exact: x_n = a^n x0 + b (1 + a + ... + a^(n-1)) mod 2^32, which depends on n.
  Verification verify_imad(const std::vector<uint8_t>& raw) const {
    const uint64_t steps = steps_per_chain();
    const auto [power, sum] = imad_closed_form(kImadMultiplier, steps);
    uint64_t wrong = 0, checked = 0;
    std::string first;
    for (uint64_t t = 0; t < threads_; ++t)
      for (int j = 0; j < kPeakChains; ++j) {
        ++checked;
        const uint64_t hash = mix64(seed(), peak_chain_index(t, j, 0, 1));
        const uint32_t x0 = static_cast<uint32_t>(hash), b = static_cast<uint32_t>(hash >> 32);
        const uint32_t want = power * x0 + sum * b;
        const uint32_t got = static_cast<uint32_t>(word_at(raw, j * threads_ + t));
        if (got == want) continue;
        if (wrong++ == 0)
          first = "thread " + std::to_string(t) + " chain " + std::to_string(j) + ": got " + std::to_string(got) +
                  " want " + std::to_string(want) + " (x0 = " + std::to_string(x0) + ", b = " + std::to_string(b) + ")";
      }
    if (wrong == 0)
      return {true, "all " + std::to_string(checked) + " values equal the closed form of " + std::to_string(steps) +
                        " wrap-around IMAD steps"};
    return {false, std::to_string(wrong) + " of " + std::to_string(checked) + " values wrong; first: " + first};
  }

  CorePrecision precision_;
  PeakSpec spec_;
  int grid_ = 0;
  uint64_t threads_ = 0;
  int trips_ = 0;
  int clock_khz_ = 0;
  int lanes_per_clock_ = 0;
  bool uniform_offsets_ = false;
  PeakOffsets offsets_;
  DeviceBuffer<uint8_t> out_;
};

struct Fp32PeakProbe final : CudaCorePeakProbe {
  Fp32PeakProbe() : CudaCorePeakProbe(CorePrecision::Fp32) {}
};
struct Fp16x2PeakProbe final : CudaCorePeakProbe {
  Fp16x2PeakProbe() : CudaCorePeakProbe(CorePrecision::Fp16x2) {}
};
struct Bf16x2PeakProbe final : CudaCorePeakProbe {
  Bf16x2PeakProbe() : CudaCorePeakProbe(CorePrecision::Bf16x2) {}
};
struct Fp64PeakProbe final : CudaCorePeakProbe {
  Fp64PeakProbe() : CudaCorePeakProbe(CorePrecision::Fp64) {}
};
struct Int32PeakProbe final : CudaCorePeakProbe {
  Int32PeakProbe() : CudaCorePeakProbe(CorePrecision::Int32) {}
};

PGP_REGISTER_PROBE(Fp32PeakProbe);
PGP_REGISTER_PROBE(Fp16x2PeakProbe);
PGP_REGISTER_PROBE(Bf16x2PeakProbe);
PGP_REGISTER_PROBE(Fp64PeakProbe);
PGP_REGISTER_PROBE(Int32PeakProbe);

// ---- Arithmetic-intensity sweep ------------------------------------------------------

// FLOP per byte moved (read + written), from memory-bound to far past any ridge point.
constexpr std::array<double, 13> kIntensities = {0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
constexpr std::array<double, 4> kQuickIntensities = {0.25, 4, 64, 1024};
// Per buffer (in and out): at least 4 x L2, so every run streams from DRAM.
constexpr size_t kSweepMinL2Multiple = 4;
constexpr size_t kSweepDefaultBufferBytes = size_t{256} << 20;
constexpr uint64_t kSweepInputSeed = 0x5357454550494E31ull;
constexpr uint64_t kSweepOffsetSeed = 0x53574545504F4631ull;
constexpr int kSweepExpectedEntries = 2 * kSweepWordsPerThread * kStartCodes;

std::string intensity_name(double intensity) {
  char text[16];
  std::snprintf(text, sizeof text, "%g", intensity);
  return text;
}

const char* sweep_precision_name(CorePrecision p) { return p == CorePrecision::Fp32 ? "fp32" : "fp16x2"; }

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

class CudaCoreSweepProbe final : public CudaProbe {
 public:
  std::string name() const override { return "compute.sweep"; }
  std::string description() const override {
    return "Arithmetic-intensity sweep (mixbench-style): each thread loads 8 fp32 or fp16x2 words, applies F "
           "fused multiply-adds to each, stores them; one variant per FLOP/byte from memory- to compute-bound";
  }

  std::vector<std::string> variants(const Device&, bool quick) const override {
    std::vector<std::string> names;
    for (CorePrecision p : {CorePrecision::Fp32, CorePrecision::Fp16x2}) {
      const auto add = [&](double intensity) {
        names.push_back(std::string(sweep_precision_name(p)) + "." + intensity_name(intensity));
      };
      if (quick) std::for_each(kQuickIntensities.begin(), kQuickIntensities.end(), add);
      else std::for_each(kIntensities.begin(), kIntensities.end(), add);
    }
    return names;
  }

  std::optional<std::string> waiver(const Device& dev) const override {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    for (CorePrecision p : {CorePrecision::Fp32, CorePrecision::Fp16x2})
      if (auto reason = missing_kernel_image_reason(core_sweep_kernel(p, 32), dev.index); !reason.empty())
        return reason;
    const DeviceFacts f = query_device(dev.index);
    const size_t needed = 2 * kSweepMinL2Multiple * f.l2_bytes;
    if (needed > f.free_bytes / 2)
      return "not enough free device memory: 2 buffers of " + std::to_string(kSweepMinL2Multiple) + " x L2 (" +
             mib(needed / 2) + " each) must fit in half of the " + mib(f.free_bytes) + " free";
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) override {
    begin_setup(dev);
    select_variant(cfg.variant.empty() ? variants(dev, false).front() : cfg.variant);
    size_buffers(cfg);
    in_ = DeviceBuffer<uint32_t>(words_);
    out_ = DeviceBuffer<uint32_t>(words_);
    expected_ = DeviceBuffer<uint32_t>(kSweepExpectedEntries);
    fill_sweep_input(precision_, in_.get(), words_, kSweepInputSeed, cuda_stream());
    build_reference();
    PGP_CUDA_CHECK(cudaMemcpyAsync(expected_.get(), expected_host_.data(), expected_.bytes(),
                                   cudaMemcpyHostToDevice, cuda_stream()));
    synchronize();  // the upload reads expected_host_, and setup is done when the fill is
  }

  Work work() const override {
    Work w;
    w.bytes_read = static_cast<double>(in_.bytes());
    w.bytes_written = static_cast<double>(out_.bytes());
    w.flops = static_cast<double>(threads()) * fmas_per_thread_ * core_flops_per_instruction(precision_);
    return w;
  }

  void poison() override { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  void run() override {
    launch_core_sweep(precision_, fmas_per_thread_, in_.get(), out_.get(), words_, constants_, cuda_stream());
  }

  Verification verify() override {
    synchronize();
    const SweepMismatches result =
        count_sweep_mismatches(precision_, out_.get(), words_, kSweepInputSeed, expected_.get(), cuda_stream());
    if (result.wrong == 0)
      return {true, "all " + std::to_string(words_) + " words equal the host simulation of their " +
                        fmas_per_element() + " step(s)"};
    uint32_t got = 0;
    PGP_CUDA_CHECK(cudaMemcpyAsync(&got, out_.get() + result.first_wrong, sizeof got, cudaMemcpyDeviceToHost,
                                   cuda_stream()));
    synchronize();
    return {false, std::to_string(result.wrong) + " of " + std::to_string(words_) + " words wrong; first: " +
                       describe_word(result.first_wrong, got)};
  }

  void teardown() override {
    CudaProbe::teardown();
    in_.reset();
    out_.reset();
    expected_.reset();
  }

  Params params() const override {
    const Work w = work();
    const size_t l2 = facts().l2_bytes;
    return {{"precision", sweep_precision_name(precision_)},
            {"instruction", precision_ == CorePrecision::Fp32 ? "FFMA (fma.rn.f32)" : "HFMA2 (fma.rn.f16x2)"},
            {"flop_per_byte", intensity_name(intensity_)},
            {"flops_per_element", format_double(w.flops / static_cast<double>(words_))},
            {"fmas_per_element", fmas_per_element()},
            {"fmas_per_thread", std::to_string(fmas_per_thread_)},
            {"element_bytes", "4"},
            {"elements", std::to_string(words_)},
            {"buffer_bytes", std::to_string(in_.bytes())},
            {"bytes_per_run", format_double(w.bytes_read + w.bytes_written)},
            {"flops_per_run", format_double(w.flops)},
            {"words_per_thread", std::to_string(kSweepWordsPerThread)},
            {"block", std::to_string(kCoreBlock)},
            {"grid", std::to_string(words_ / kSweepTileWords)},
            {"resident_blocks", std::to_string(resident_blocks_)},
            {"waves", format_double(static_cast<double>(words_ / kSweepTileWords) /
                                    static_cast<double>(std::max<size_t>(resident_blocks_, 1)))},
            {"l2_bytes", std::to_string(l2)},
            {"fits_in_l2", 2 * in_.bytes() <= l2 ? "yes" : (in_.bytes() < kSweepMinL2Multiple * l2 ? "partly" : "no")},
            {"size", size_note_},
            {"recurrence", "x = x * a + b, a = 0.5, b per word slot; out-of-place (in -> out)"}};
  }

 private:
  uint64_t threads() const { return words_ / kSweepWordsPerThread; }

  std::string fmas_per_element() const {
    if (fmas_per_thread_ >= kSweepWordsPerThread) return std::to_string(fmas_per_thread_ / kSweepWordsPerThread);
    return std::to_string(fmas_per_thread_) + "/" + std::to_string(kSweepWordsPerThread) + " (" +
           std::to_string(fmas_per_thread_) + " of every " + std::to_string(kSweepWordsPerThread) +
           " words get one, the rest are copied)";
  }

  void select_variant(const std::string& variant) {
    for (CorePrecision p : {CorePrecision::Fp32, CorePrecision::Fp16x2})
      for (double intensity : kIntensities)
        if (variant == std::string(sweep_precision_name(p)) + "." + intensity_name(intensity)) {
          precision_ = p;
          intensity_ = intensity;
          // FLOPs per thread = intensity x (32 bytes read + 32 written).
          const double fmas = intensity * 2 * kSweepWordsPerThread * 4 / core_flops_per_instruction(p);
          fmas_per_thread_ = static_cast<int>(fmas);
          PGP_CHECK(fmas_per_thread_ == fmas && core_sweep_kernel(p, fmas_per_thread_) != nullptr,
                    "compute.sweep variant " + variant + " has no kernel");
          return;
        }
    throw_error("probe 'compute.sweep' has no variant '" + variant + "'", __FILE__, __LINE__);
  }

  // Per buffer: cfg.size_bytes when given, else max(4 x L2, 256 MiB) capped so both fit
  // in half the free memory, and no less than 4 x L2. Whole tiles either way; the default
  // is also a whole number of waves of resident blocks, so no partial last wave idles
  // most SMs at the compute-bound end.
  void size_buffers(const RunConfig& cfg) {
    const DeviceFacts& f = facts();
    resident_blocks_ = static_cast<size_t>(occupancy_grid(core_sweep_kernel(precision_, fmas_per_thread_), kCoreBlock));
    if (cfg.size_bytes > 0) {
      size_note_ = "requested";
      words_ = std::max<size_t>(static_cast<size_t>(cfg.size_bytes) / kSweepTileBytes, 1) * kSweepTileWords;
      return;
    }
    const size_t wanted = std::max(kSweepMinL2Multiple * f.l2_bytes, kSweepDefaultBufferBytes);
    const size_t cap = f.free_bytes / 2 / 2;
    size_note_ = wanted > cap ? "default, capped by free memory" : "default";
    const size_t wave_bytes = resident_blocks_ * kSweepTileBytes;
    size_t bytes = (std::min(wanted, cap) + wave_bytes - 1) / wave_bytes * wave_bytes;  // whole waves, up
    if (bytes > cap) bytes = cap / wave_bytes * wave_bytes;                              // or down
    if (bytes == 0) bytes = cap / kSweepTileBytes * kSweepTileBytes;
    PGP_CHECK(bytes >= kSweepMinL2Multiple * f.l2_bytes,
              "not enough free device memory for 2 buffers of 4 x L2: " + mib(bytes) + " per buffer fit");
    words_ = bytes / kSweepTileBytes * kSweepTileWords;
  }

  // b per word slot and lane, and the expected bits of every (lane, slot, start) triple.
  void build_reference() {
    const Format f = format_of(precision_);
    const int lanes = core_lanes(precision_);
    constants_.a = precision_ == CorePrecision::Fp32 ? 0x3F000000u : 0x38003800u;
    expected_host_.assign(kSweepExpectedEntries, 0);
    for (int slot = 0; slot < kSweepWordsPerThread; ++slot) {
      uint32_t offset_word = 0;
      const int steps = sweep_steps(slot, fmas_per_thread_);
      for (int l = 0; l < lanes; ++l) {
        const double b = offset_value(fixed_point_code(mix64(kSweepOffsetSeed, slot * lanes + l)));
        offsets_[slot][l] = b;
        offset_word |= static_cast<uint32_t>(encode(b, f) << (lane_bits(f) * l));
        for (uint32_t m = 0; m < kStartCodes; ++m)
          expected_host_[(l * kSweepWordsPerThread + slot) * kStartCodes + m] =
              static_cast<uint32_t>(encode(simulate(start_value(m), 0.5, b, steps, f), f));
      }
      constants_.offsets[slot] = offset_word;
    }
  }

  std::string describe_word(uint64_t word, uint32_t got) const {
    const Format f = format_of(precision_);
    const int lanes = core_lanes(precision_);
    const int slot = sweep_slot(word);
    std::string text = "word " + std::to_string(word) + " (slot " + std::to_string(slot) + ", " +
                       std::to_string(sweep_steps(slot, fmas_per_thread_)) + " steps)";
    for (int l = 0; l < lanes; ++l) {
      const uint32_t m = start_code(mix64(kSweepInputSeed, word * lanes + l));
      const uint64_t want = expected_host_[(l * kSweepWordsPerThread + slot) * kStartCodes + m];
      const uint64_t lane_got = lane_of(got, l, f);
      text += (lanes > 1 ? " lane " + std::to_string(l) + ":" : std::string()) + " got " +
              format_double(decode(lane_got, f)) + " (" + format_bits(lane_got, f) + ") want " +
              format_double(decode(want, f)) + " (" + format_bits(want, f) + "); x0 = " +
              format_double(start_value(m)) + ", b = " + format_double(offsets_[slot][l]);
    }
    return text;
  }

  CorePrecision precision_ = CorePrecision::Fp32;
  double intensity_ = 0;
  int fmas_per_thread_ = 0;
  size_t words_ = 0;
  size_t resident_blocks_ = 0;
  std::string size_note_;
  SweepConstants constants_;
  double offsets_[kSweepWordsPerThread][2] = {};
  std::vector<uint32_t> expected_host_;
  DeviceBuffer<uint32_t> in_, out_, expected_;
};

PGP_REGISTER_PROBE(CudaCoreSweepProbe);

}  // namespace
}  // namespace pgp::cuda
