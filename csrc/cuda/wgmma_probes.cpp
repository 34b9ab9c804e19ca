// Tensor-core throughput probes with Hopper wgmma.mma_async (sm_90a): f16, bf16, tf32,
// e4m3 and s8 inputs, f32, f16 or s32 accumulators, one probe per combination and one
// variant per instruction shape (m64nNkK, N = 256, 128, 64) and A source (".ss": A from
// shared memory, ".rs": A from registers).
//
// Exact by construction: A and B hold small multiples of 1/4 (s8: small integers), C
// multiples of 1/16 (s32: integers), sized so that every partial sum in any order fits
// the accumulator's significand. Each warpgroup adds A*B and A*(-B) alternately and
// then A*B once, so its accumulators must equal C + A*B bit for bit. verify() checks
// every value every warpgroup wrote against a double-precision reference that reads A
// and B back from the very shared-memory image the kernel loads, through the same
// element -> address mapping (wgmma.h), and places values through the same fragment
// layout; a failure names the first wrong value's warpgroup, thread, register, row and
// column, and tests a few likely causes (wrong descriptor strides, no accumulation,
// nothing written).
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "cuda/random_fill.h"
#include "cuda/wgmma.h"

namespace pgp::cuda {
namespace {

// ~4 ms per run at the dense peak of a 2 GHz H100/H200 SM; longer where a variant is slower.
constexpr double kTargetRunSeconds = 0.004;
constexpr double kSizingClockHz = 2.0e9;
// More blocks per SM only lengthen a run; two blocks are four warpgroups.
constexpr int kMaxBlocksPerSm = 2;
constexpr uint64_t kSeedA = 0x5747'4D4D'4100'0001ull;
constexpr uint64_t kSeedB = 0x5747'4D4D'4200'0002ull;
constexpr uint64_t kSeedC = 0x5747'4D4D'4300'0003ull;

std::string format_value(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// ---- Number formats ------------------------------------------------------------------
// IEEE-like binary formats with `e` exponent and `m` mantissa bits (bias 2^(e-1) - 1).

// Bits of v, which must be zero or an exactly representable normal number.
uint32_t encode_exact(double v, int e, int m, const char* format) {
  if (v == 0.0) return 0;
  const int bias = (1 << (e - 1)) - 1;
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(v), &exponent);  // |v| = fraction * 2^exponent, fraction in [0.5, 1)
  const int biased = exponent - 1 + bias;
  const double mantissa = std::ldexp(fraction * 2.0 - 1.0, m);
  PGP_CHECK(biased >= 1 && biased <= (1 << e) - 2 && mantissa == std::floor(mantissa),
            "value " + format_value(v) + " is not an exact normal " + format);
  const uint32_t sign = v < 0 ? 1u : 0u;
  return sign << (e + m) | static_cast<uint32_t>(biased) << m | static_cast<uint32_t>(mantissa);
}

// Value of `bits`; an all-ones exponent is Inf/NaN (IEEE formats: fp16 for the outputs).
double decode_ieee(uint32_t bits, int e, int m) {
  const int bias = (1 << (e - 1)) - 1;
  const uint32_t exponent = (bits >> m) & ((1u << e) - 1);
  const uint32_t mantissa = bits & ((1u << m) - 1);
  const double sign = (bits >> (e + m)) & 1 ? -1.0 : 1.0;
  if (exponent == (1u << e) - 1) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - m);
  return sign * std::ldexp((1u << m) + mantissa, static_cast<int>(exponent) - bias - m);
}

// e4m3 (OCP FP8): no infinities; only S.1111.111 is NaN.
double decode_e4m3(uint8_t bits) {
  if ((bits & 0x7F) == 0x7F) return NAN;
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  const double sign = bits & 0x80 ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);
  return sign * std::ldexp(8 + mantissa, exponent - 10);
}

// Writes the element_bytes of value v in the input format at p (little endian).
void encode_input(WgmmaInput input, double v, uint8_t* p) {
  switch (input) {
    case WgmmaInput::F16: {
      const auto bits = static_cast<uint16_t>(encode_exact(v, 5, 10, "fp16"));
      std::memcpy(p, &bits, sizeof bits);
      return;
    }
    case WgmmaInput::BF16: {
      const auto bits = static_cast<uint16_t>(encode_exact(v, 8, 7, "bf16"));
      std::memcpy(p, &bits, sizeof bits);
      return;
    }
    case WgmmaInput::TF32: {
      // tf32 operands are fp32 words whose low 13 mantissa bits the tensor cores ignore;
      // these have them zero.
      const uint32_t bits = encode_exact(v, 8, 10, "tf32") << 13;
      std::memcpy(p, &bits, sizeof bits);
      return;
    }
    case WgmmaInput::E4M3: {
      const uint32_t bits = encode_exact(v, 4, 3, "e4m3");
      PGP_CHECK((bits & 0x7F) != 0x7F, "value " + format_value(v) + " encodes as the e4m3 NaN");
      *p = static_cast<uint8_t>(bits);
      return;
    }
    case WgmmaInput::S8: {
      PGP_CHECK(v == std::floor(v) && v >= -128 && v <= 127, "value " + format_value(v) + " is not an s8");
      *p = static_cast<uint8_t>(static_cast<int8_t>(v));
      return;
    }
  }
}

double decode_input(WgmmaInput input, const uint8_t* p) {
  switch (input) {
    case WgmmaInput::F16: {
      uint16_t bits;
      std::memcpy(&bits, p, sizeof bits);
      return decode_ieee(bits, 5, 10);
    }
    case WgmmaInput::BF16: {
      uint16_t bits;
      std::memcpy(&bits, p, sizeof bits);
      return decode_ieee(bits, 8, 7);
    }
    case WgmmaInput::TF32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case WgmmaInput::E4M3: return decode_e4m3(*p);
    case WgmmaInput::S8: return static_cast<int8_t>(*p);
  }
  return NAN;
}

// ---- Variants ----------------------------------------------------------------------------

struct Variant {
  int n;
  WgmmaASource source;
};

std::vector<Variant> all_variants() {
  std::vector<Variant> v;
  for (int n : kWgmmaNs)
    for (auto source : {WgmmaASource::Shared, WgmmaASource::Registers}) v.push_back({n, source});
  return v;
}

const char* source_suffix(WgmmaASource s) { return s == WgmmaASource::Shared ? "ss" : "rs"; }

std::string variant_name(WgmmaType t, const Variant& v) {
  return "wgmma.m64n" + std::to_string(v.n) + "k" + std::to_string(wgmma_type_info(t).k) + "." +
         source_suffix(v.source);
}

const char* input_name(WgmmaInput i) {
  switch (i) {
    case WgmmaInput::F16: return "f16";
    case WgmmaInput::BF16: return "bf16";
    case WgmmaInput::TF32: return "tf32";
    case WgmmaInput::E4M3: return "e4m3";
    case WgmmaInput::S8: return "s8";
  }
  return "?";
}

const char* accumulator_name(WgmmaAccumulator a) {
  switch (a) {
    case WgmmaAccumulator::F32: return "f32";
    case WgmmaAccumulator::F16: return "f16";
    case WgmmaAccumulator::S32: return "s32";
  }
  return "?";
}

// Operand address mappings the reference can read A and B through: the layout the
// descriptor describes, and the one it would describe were LBO and SBO meant the other
// way round (a diagnosis for failures only).
using OperandMapping = int (*)(int row, int byte_in_row);
int swapped_strides_offset(int row, int byte_in_row) {
  return (row / kWgmmaCoreRows) * kWgmmaLeadingByteOffset + (byte_in_row / 16) * kWgmmaStrideByteOffset +
         (row % kWgmmaCoreRows) * 16 + byte_in_row % 16;
}

class WgmmaProbe : public CudaProbe {
 public:
  std::string name() const final { return name_; }
  std::string description() const final {
    const auto info = wgmma_type_info(type_);
    return std::string("Tensor-core ") + input_name(info.input) + " throughput, Hopper wgmma.mma_async m64nNk" +
           std::to_string(info.k) + " with " + accumulator_name(info.accumulator) +
           " accumulators (sm_90a); B from shared memory, A from shared memory (.ss) or registers (.rs)";
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    int major = 0, minor = 0;
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev.index));
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev.index));
    if (major != 9 || minor != 0)
      return "wgmma needs sm_90a (Hopper, compute capability 9.0); device has " + std::to_string(major) + "." +
             std::to_string(minor);
    for (const auto& v : all_variants())
      if (auto reason = missing_kernel_image_reason(wgmma_kernel(type_, v.n, v.source), dev.index); !reason.empty())
        return reason;
    if (auto reason = wgmma_missing_sm90a_reason(dev.index); !reason.empty()) return reason;
    return std::nullopt;
  }

  // Largest N first: the first is the default and the --quick choice.
  std::vector<std::string> variants(const Device& dev, bool quick) const final {
    std::vector<std::string> names;
    for (const auto& v : all_variants()) names.push_back(variant_name(type_, v));
    if (quick) names.resize(1);
    return names;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    variant_ = all_variants().front();
    bool found = cfg.variant.empty();
    for (const auto& v : all_variants())
      if (variant_name(type_, v) == cfg.variant) {
        variant_ = v;
        found = true;
      }
    PGP_CHECK(found, "probe '" + name_ + "' has no variant '" + cfg.variant + "'");

    const auto info = wgmma_type_info(type_);
    const void* kernel = wgmma_kernel(type_, variant_.n, variant_.source);
    registers_ = wgmma_accumulator_registers(type_, variant_.n);
    attributes_ = wgmma_kernel_attributes(type_, variant_.n, variant_.source);
    const int sms = facts().sm_count;
    blocks_per_sm_ = std::min(occupancy_grid(kernel, kWgmmaBlock) / sms, kMaxBlocksPerSm);
    grid_ = blocks_per_sm_ * sms;
    warpgroups_ = static_cast<size_t>(grid_) * kWgmmaWarpgroupsPerBlock;

    const double per_warpgroup_per_sm =
        static_cast<double>(blocks_per_sm_) * kWgmmaWarpgroupsPerBlock * kWgmmaPerGroup * ops_per_wgmma();
    iters_ = std::max(16, static_cast<int>(std::lround(kTargetRunSeconds * kSizingClockHz *
                                                       info.ops_per_clock_per_sm / per_warpgroup_per_sm)));

    make_inputs();
    out_ = DeviceBuffer<uint32_t>(warpgroups_ * registers_ * kWgmmaWarpgroupThreads);
    synchronize();  // the uploads read host vectors that setup owns
  }

  Work work() const final {
    Work w;
    w.flops = static_cast<double>(warpgroups_) * static_cast<double>(wgmmas_per_warpgroup()) * ops_per_wgmma();
    return w;
  }

  void poison() final { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  void run() final {
    launch_wgmma(type_, variant_.n, variant_.source, image_.get(), c_.get(), out_.get(), iters_, grid_,
                 cuda_stream());
  }

  Verification verify() final {
    synchronize();
    std::vector<uint32_t> raw(out_.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(raw.data(), out_.get(), out_.bytes(), cudaMemcpyDeviceToHost, cuda_stream()));
    synchronize();

    const size_t per_warpgroup = static_cast<size_t>(registers_) * kWgmmaWarpgroupThreads;
    const int per_register = values_per_register();
    size_t wrong = 0, first = 0, wrong_warpgroups = 0, last_wrong_warpgroup = SIZE_MAX;
    int first_half = 0;
    double first_got = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      const size_t slot = i % per_warpgroup;
      for (int h = 0; h < per_register; ++h) {
        const double got = output_value(raw[i], h);
        if (got == expected_[slot * per_register + h]) continue;  // NaN poison never equals
        if (i / per_warpgroup != last_wrong_warpgroup) {
          last_wrong_warpgroup = i / per_warpgroup;
          ++wrong_warpgroups;
        }
        if (wrong++ == 0) {
          first = i;
          first_half = h;
          first_got = got;
        }
      }
    }
    const size_t values = raw.size() * per_register;
    if (wrong == 0)
      return {true, "all " + std::to_string(values) + " accumulator values of " + std::to_string(warpgroups_) +
                        " warpgroups equal C + A*B exactly"};

    const size_t warpgroup = first / per_warpgroup;
    const int reg = static_cast<int>(first % per_warpgroup / kWgmmaWarpgroupThreads);
    const int thread = static_cast<int>(first % kWgmmaWarpgroupThreads);
    const int value = reg * per_register + first_half;
    std::string detail = std::to_string(wrong) + " of " + std::to_string(values) + " values wrong; first: warpgroup " +
                         std::to_string(warpgroup) + " thread " + std::to_string(thread) + " reg " +
                         std::to_string(reg) + (per_register > 1 ? " half " + std::to_string(first_half) : "") +
                         " (row " + std::to_string(wgmma_d_row(thread, value)) + ", col " +
                         std::to_string(wgmma_d_col(thread, value)) + ") got " + format_value(first_got) + " want " +
                         format_value(expected_[(first % per_warpgroup) * per_register + first_half]) + "; in " +
                         std::to_string(wrong_warpgroups) + " of " + std::to_string(warpgroups_) + " warpgroups";
    return {false, detail + diagnose(raw, warpgroup)};
  }

  void teardown() final {
    CudaProbe::teardown();
    image_.reset();
    c_.reset();
    out_.reset();
  }

  Params params() const final {
    const auto info = wgmma_type_info(type_);
    return {{"instruction", wgmma_opcode(type_, variant_.n)},
            {"a_source", source_suffix(variant_.source)},
            {"m", std::to_string(kWgmmaM)},
            {"n", std::to_string(variant_.n)},
            {"k", std::to_string(info.k)},
            {"inputs", input_name(info.input)},
            {"accumulator", accumulator_name(info.accumulator)},
            {"iters", std::to_string(iters_)},
            {"wgmmas_per_iter", std::to_string(kWgmmaPerGroup)},
            // iters * wgmmas_per_iter + the final +B that makes D = C + A*B
            {"wgmmas_per_warpgroup", std::to_string(wgmmas_per_warpgroup())},
            {"grid", std::to_string(grid_)},
            {"block", std::to_string(kWgmmaBlock)},
            {"blocks_per_sm", std::to_string(blocks_per_sm_)},
            {"warpgroups_per_block", std::to_string(kWgmmaWarpgroupsPerBlock)},
            {"warpgroups", std::to_string(warpgroups_)},
            {"ops_per_wgmma", format_value(ops_per_wgmma())},
            {"op_unit", info.accumulator == WgmmaAccumulator::S32 ? "OP" : "FLOP"},
            {"registers_per_thread", std::to_string(attributes_.numRegs)},
            {"local_bytes_per_thread", std::to_string(attributes_.localSizeBytes)},
            {"smem_layout", "K-major, no swizzle, LBO " + std::to_string(kWgmmaLeadingByteOffset) + " B, SBO " +
                                std::to_string(kWgmmaStrideByteOffset) + " B"}};
  }

 protected:
  WgmmaProbe(WgmmaType type, std::string name) : type_(type), name_(std::move(name)) {}

 private:
  double ops_per_wgmma() const { return 2.0 * kWgmmaM * variant_.n * wgmma_type_info(type_).k; }
  long long wgmmas_per_warpgroup() const { return static_cast<long long>(iters_) * kWgmmaPerGroup + 1; }
  int values_per_register() const {
    return wgmma_type_info(type_).accumulator == WgmmaAccumulator::F16 ? 2 : 1;
  }

  // Value `half` of one 32-bit accumulator register (half is 0 unless f16).
  double output_value(uint32_t bits, int half) const {
    switch (wgmma_type_info(type_).accumulator) {
      case WgmmaAccumulator::F32: {
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
      }
      case WgmmaAccumulator::F16: return decode_ieee((bits >> (16 * half)) & 0xFFFF, 5, 10);
      case WgmmaAccumulator::S32: return static_cast<int32_t>(bits);
    }
    return NAN;
  }

  uint32_t accumulator_bits(double v) const {
    switch (wgmma_type_info(type_).accumulator) {
      case WgmmaAccumulator::F32: {
        const float f = static_cast<float>(v);
        PGP_CHECK(static_cast<double>(f) == v, "C value " + format_value(v) + " is not exact in fp32");
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        return bits;
      }
      case WgmmaAccumulator::F16: return encode_exact(v, 5, 10, "fp16");
      case WgmmaAccumulator::S32: return static_cast<uint32_t>(static_cast<int32_t>(v));
    }
    return 0;
  }

  // Largest |A| and |B| numerators (multiples of 1/4; s8: integers). Every partial sum
  // of C + A*B - A*B in any order stays below 2^11 sixteenths where the accumulator is
  // f16 (11-bit significand): |C| + 2 * K * max|a| * max|b| < 128.
  int max_a() const { return wgmma_type_info(type_).input == WgmmaInput::S8 ? 127 : 7; }
  int max_b() const {
    const auto info = wgmma_type_info(type_);
    if (info.input == WgmmaInput::S8) return 127;
    return info.k >= 32 ? 4 : 7;  // K = 32: 4 + 2 * 32 * 7/4 * 4/4 = 116; K = 16: 4 + 2 * 16 * 49/16 = 102
  }

  // A (64 x K), B (N rows of K) and -B into one image in the operand layout, C into one
  // warpgroup's registers, and the expected accumulator values of one warpgroup.
  void make_inputs() {
    const auto info = wgmma_type_info(type_);
    const int n = variant_.n;
    const int a_bytes = wgmma_operand_bytes(kWgmmaM);
    const int b_bytes = wgmma_operand_bytes(n);
    const bool integer = info.input == WgmmaInput::S8;
    const double scale = integer ? 1.0 : 0.25;
    image_host_.assign(static_cast<size_t>(a_bytes) + 2 * b_bytes, 0);
    for (int m = 0; m < kWgmmaM; ++m)
      for (int k = 0; k < info.k; ++k) {
        const double a = random_signed_nonzero(kSeedA, m * info.k + k, max_a()) * scale;
        encode_input(info.input, a, &image_host_[wgmma_operand_offset(m, k * info.element_bytes)]);
      }
    for (int col = 0; col < n; ++col)
      for (int k = 0; k < info.k; ++k) {
        const double b = random_signed_nonzero(kSeedB, col * info.k + k, max_b()) * scale;
        const int offset = wgmma_operand_offset(col, k * info.element_bytes);
        encode_input(info.input, b, &image_host_[a_bytes + offset]);
        encode_input(info.input, -b, &image_host_[a_bytes + b_bytes + offset]);
      }

    c_host_.assign(static_cast<size_t>(kWgmmaM) * n, 0.0);
    for (size_t i = 0; i < c_host_.size(); ++i)
      c_host_[i] = integer ? static_cast<double>(random_int(kSeedC, i, -(1 << 20), 1 << 20))
                           : random_int(kSeedC, i, -64, 64) / 16.0;

    const int per_register = values_per_register();
    std::vector<uint32_t> c_regs(static_cast<size_t>(registers_) * kWgmmaWarpgroupThreads, 0);
    for (int r = 0; r < registers_; ++r)
      for (int t = 0; t < kWgmmaWarpgroupThreads; ++t)
        for (int h = 0; h < per_register; ++h) {
          const int v = r * per_register + h;
          const double c = c_host_[static_cast<size_t>(wgmma_d_row(t, v)) * n + wgmma_d_col(t, v)];
          c_regs[static_cast<size_t>(r) * kWgmmaWarpgroupThreads + t] |= accumulator_bits(c) << (16 * h);
        }

    expected_ = reference(&wgmma_operand_offset, &wgmma_operand_offset);

    image_ = DeviceBuffer<uint8_t>(image_host_.size());
    c_ = DeviceBuffer<uint32_t>(c_regs.size());
    PGP_CUDA_CHECK(
        cudaMemcpyAsync(image_.get(), image_host_.data(), image_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    PGP_CUDA_CHECK(cudaMemcpyAsync(c_.get(), c_regs.data(), c_.bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    synchronize();
  }

  // One warpgroup's expected values, [(r * 128 + t) * values_per_register + h], with A
  // and B read from the image through the given mappings: D = C + A * B.
  std::vector<double> reference(OperandMapping a_mapping, OperandMapping b_mapping) const {
    const auto info = wgmma_type_info(type_);
    const int n = variant_.n;
    const uint8_t* a_tile = image_host_.data();
    const uint8_t* b_tile = image_host_.data() + wgmma_operand_bytes(kWgmmaM);
    std::vector<double> d(c_host_);  // row-major 64 x N
    for (int row = 0; row < kWgmmaM; ++row)
      for (int col = 0; col < n; ++col) {
        double sum = 0;
        for (int k = 0; k < info.k; ++k) {
          const int byte = k * info.element_bytes;
          sum += decode_input(info.input, a_tile + a_mapping(row, byte)) *
                 decode_input(info.input, b_tile + b_mapping(col, byte));
        }
        d[static_cast<size_t>(row) * n + col] += sum;
      }
    const int per_register = values_per_register();
    std::vector<double> expected(static_cast<size_t>(registers_) * kWgmmaWarpgroupThreads * per_register);
    for (int r = 0; r < registers_; ++r)
      for (int t = 0; t < kWgmmaWarpgroupThreads; ++t)
        for (int h = 0; h < per_register; ++h) {
          const int v = r * per_register + h;
          expected[(static_cast<size_t>(r) * kWgmmaWarpgroupThreads + t) * per_register + h] =
              d[static_cast<size_t>(wgmma_d_row(t, v)) * n + wgmma_d_col(t, v)];
        }
    return expected;
  }

  // Likely causes, tested on the warpgroup of the first wrong value.
  std::string diagnose(const std::vector<uint32_t>& raw, size_t warpgroup) const {
    const size_t per_warpgroup = static_cast<size_t>(registers_) * kWgmmaWarpgroupThreads;
    const uint32_t* mine = raw.data() + warpgroup * per_warpgroup;
    auto all_match = [&](const std::vector<double>& want) {
      const int per_register = values_per_register();
      for (size_t i = 0; i < per_warpgroup; ++i)
        for (int h = 0; h < per_register; ++h)
          if (output_value(mine[i], h) != want[i * per_register + h]) return false;
      return true;
    };
    bool untouched = true;
    for (size_t i = 0; i < per_warpgroup; ++i) untouched = untouched && mine[i] == 0xFFFFFFFFu;
    if (untouched)
      return "; this warpgroup's output is all poison (0xFFFFFFFF): nothing the kernel wrote is there (not "
             "launched, poisoned afterwards, or an image without the sm_90a code ran)";
    const int per_register = values_per_register();
    std::vector<double> c_only(per_warpgroup * per_register);
    for (int r = 0; r < registers_; ++r)
      for (int t = 0; t < kWgmmaWarpgroupThreads; ++t)
        for (int h = 0; h < per_register; ++h) {
          const int v = r * per_register + h;
          c_only[(static_cast<size_t>(r) * kWgmmaWarpgroupThreads + t) * per_register + h] =
              c_host_[static_cast<size_t>(wgmma_d_row(t, v)) * variant_.n + wgmma_d_col(t, v)];
        }
    if (all_match(c_only))
      return "; this warpgroup's output equals C: no wgmma product reached the accumulators";
    const bool a_through_descriptor = variant_.source == WgmmaASource::Shared;
    if (all_match(reference(a_through_descriptor ? &swapped_strides_offset : &wgmma_operand_offset,
                            &swapped_strides_offset)))
      return "; this warpgroup's output equals C + A*B with A and B read as if LBO and SBO were swapped: the "
             "descriptor's stride fields disagree with the hardware's reading of them";
    return "";
  }

  WgmmaType type_;
  std::string name_;
  Variant variant_{};
  int registers_ = 0;
  cudaFuncAttributes attributes_{};
  int blocks_per_sm_ = 0;
  int grid_ = 0;
  size_t warpgroups_ = 0;
  int iters_ = 0;
  std::vector<uint8_t> image_host_;
  std::vector<double> c_host_;        // row-major 64 x N
  std::vector<double> expected_;      // one warpgroup; every warpgroup computes the same
  DeviceBuffer<uint8_t> image_;
  DeviceBuffer<uint32_t> c_, out_;
};

#define PGP_WGMMA_PROBE(CLASS, TYPE, NAME)              \
  class CLASS final : public WgmmaProbe {                \
   public:                                               \
    CLASS() : WgmmaProbe(WgmmaType::TYPE, NAME) {}       \
  };                                                     \
  PGP_REGISTER_PROBE(CLASS);

PGP_WGMMA_PROBE(WgmmaF16F32Probe, F16F32, "compute.tensor.fp16.acc32")
PGP_WGMMA_PROBE(WgmmaF16F16Probe, F16F16, "compute.tensor.fp16.acc16")
PGP_WGMMA_PROBE(WgmmaBF16F32Probe, BF16F32, "compute.tensor.bf16.acc32")
PGP_WGMMA_PROBE(WgmmaTF32F32Probe, TF32F32, "compute.tensor.tf32.acc32")
PGP_WGMMA_PROBE(WgmmaE4M3F32Probe, E4M3F32, "compute.tensor.fp8.acc32")
PGP_WGMMA_PROBE(WgmmaE4M3F16Probe, E4M3F16, "compute.tensor.fp8.acc16")
PGP_WGMMA_PROBE(WgmmaS8S32Probe, S8S32, "compute.tensor.int8.acc32")

}  // namespace
}  // namespace pgp::cuda
