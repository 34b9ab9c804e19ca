// SIMD FMA peak probes: every OpenMP thread runs kAccumulators independent vector
// chains of x = x * a + b in registers. Independent chains cover FMA latency x FMA
// pipes, so the loop is limited by FMA throughput, not latency.
//
// The kernel is compiled three times with GCC vector extensions (AVX-512F, AVX2+FMA,
// 16-byte generic) and picked at setup from what the CPU supports.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "core/errors.h"
#include "core/registry.h"
#include "cpu/cpu_probe.h"

namespace pgp::cpu {
namespace {

// Zen 3/4 and recent Intel cores: FMA latency 4-5 cycles x 2 pipes = 8-10 chains in
// flight; 12 leaves margin and, with a and b, still fits 16 ymm registers.
constexpr int kAccumulators = 12;
// About 15-20 ms per run on a 3 GHz AVX2 core (12 FMAs per iteration at 2 per cycle).
constexpr int64_t kIterations = int64_t{1} << 23;
constexpr uint64_t kSeed = 0x464D415045414B01ull;
// Contractive recurrence: rounding errors decay by a per step, so the fp result stays
// within ~eps / (1 - a) of the exact one and never overflows or goes subnormal.
constexpr double kDecay = 0.999;

template <typename T>
using Kernel = void (*)(const T* x0, T* out, T a, T b, int64_t iters);

// Loads kAccumulators vectors from x0, iterates, stores them to out. Inlined into each
// ISA-specific kernel below, so it is compiled for that kernel's target.
template <typename T, int VectorBytes>
[[gnu::always_inline]] inline void fma_chains(const T* x0, T* out, T a, T b, int64_t iters) {
  typedef T Vector __attribute__((vector_size(VectorBytes)));
  constexpr int kLanes = VectorBytes / sizeof(T);
  Vector acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j) std::memcpy(&acc[j], x0 + j * kLanes, VectorBytes);
  const Vector va = Vector{} + a;  // broadcast
  const Vector vb = Vector{} + b;
  for (int64_t k = 0; k < iters; ++k) {
    // Fully unrolled, so every accumulator stays in a register. Without -ffast-math the
    // compiler may contract x * a + b into one FMA but may not reassociate the chains.
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j) acc[j] = acc[j] * va + vb;
  }
  for (int j = 0; j < kAccumulators; ++j) std::memcpy(out + j * kLanes, &acc[j], VectorBytes);
}

template <typename T>
void kernel_generic(const T* x0, T* out, T a, T b, int64_t iters) {
  fma_chains<T, 16>(x0, out, a, b, iters);
}

template <typename T>
struct KernelChoice {
  const char* isa;
  int vector_bytes;
  Kernel<T> kernel;
};

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
[[gnu::target("avx512f")]] void kernel_avx512(const T* x0, T* out, T a, T b, int64_t iters) {
  fma_chains<T, 64>(x0, out, a, b, iters);
}

template <typename T>
[[gnu::target("avx2,fma")]] void kernel_avx2(const T* x0, T* out, T a, T b, int64_t iters) {
  fma_chains<T, 32>(x0, out, a, b, iters);
}
#endif

// The widest kernel this CPU runs, or the one PYGPUPERF_CPU_ISA names (to compare
// ISAs, or to exercise the narrower kernels on a wide machine).
template <typename T>
KernelChoice<T> choose_kernel() {
  std::vector<KernelChoice<T>> supported;  // widest first
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // libgcc also checks that the OS saves the wider registers (XGETBV).
  if (__builtin_cpu_supports("avx512f")) supported.push_back({"avx512f", 64, kernel_avx512<T>});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    supported.push_back({"avx2+fma", 32, kernel_avx2<T>});
#endif
  supported.push_back({"generic", 16, kernel_generic<T>});
  const char* forced = std::getenv("PYGPUPERF_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return supported.front();
  std::string names;
  for (const auto& choice : supported) {
    if (choice.isa == std::string(forced)) return choice;
    names += std::string(names.empty() ? "" : ", ") + choice.isa;
  }
  throw_error(std::string("PYGPUPERF_CPU_ISA=") + forced + " is not an ISA this CPU runs; use one of: " + names +
                  " (or unset it)",
              __FILE__, __LINE__);
}

template <typename T>
constexpr const char* element_name() {
  return sizeof(T) == 4 ? "fp32" : "fp64";
}

template <typename T>
class FmaPeakProbe final : public Probe {
 public:
  std::string name() const override { return std::string("compute.simd.") + element_name<T>(); }
  std::string description() const override {
    return std::string("SIMD FMA peak, x = x * a + b on ") + std::to_string(kAccumulators) +
           " register accumulators per thread, " + element_name<T>() + ", OpenMP threads (size_bytes ignored)";
  }
  DeviceKind device_kind() const override { return DeviceKind::CPU; }

  void setup(const Device&, const RunConfig&) override {
    threads_ = cpu_threads();
    choice_ = choose_kernel<T>();
    lanes_ = choice_.vector_bytes / static_cast<int>(sizeof(T));
    per_thread_ = static_cast<size_t>(kAccumulators) * lanes_;
    x0_ = AlignedBuffer<T>(per_thread_ * threads_);
    out_ = AlignedBuffer<T>(per_thread_ * threads_);
    for (size_t i = 0; i < x0_.size(); ++i) x0_[i] = static_cast<T>(random_in_1_2(kSeed, i));
    a_ = static_cast<T>(kDecay);
    b_ = static_cast<T>(1.0 - static_cast<double>(a_));  // fixed point b / (1 - a) ~ 1
  }

  Work work() const override {
    return {0, 0, 2.0 * threads_ * static_cast<double>(kIterations) * static_cast<double>(per_thread_)};
  }

  void poison() override {
    for (size_t i = 0; i < out_.size(); ++i) out_[i] = std::numeric_limits<T>::quiet_NaN();
  }

  void run() override {
    const Kernel<T> kernel = choice_.kernel;
    for_each_part(threads_, [&](int p) {
      kernel(x0_.data() + p * per_thread_, out_.data() + p * per_thread_, a_, b_, kIterations);
    });
  }

  // Reference: the recurrence's exact value in double, x* + a^n (x0 - x*), from the same
  // (rounded) x0, a and b. Each step's rounding error (at most 2 roundings of values
  // below 2) decays by a, so |error| <= 4 u / (1 - a); the tolerance doubles that.
  // a^n underflows for this n, so every chain ends at the fixed point: the check proves
  // each lane of each thread was computed with the right a and b and stored, not the
  // iteration count (too few iterations would show as an implausible rate instead).
  Verification verify() override {
    const double a = a_, b = b_;
    const double fixed_point = b / (1.0 - a);
    const double decay = std::pow(a, static_cast<double>(kIterations));
    const double unit_roundoff = std::numeric_limits<T>::epsilon() / 2;
    const double tolerance = 8 * unit_roundoff / (1.0 - a);
    size_t wrong = 0, first_wrong = 0;
    double max_error = 0;
    for (size_t i = 0; i < out_.size(); ++i) {
      const double want = fixed_point + decay * (static_cast<double>(x0_[i]) - fixed_point);
      const double error = std::abs(static_cast<double>(out_[i]) - want) / std::abs(want);
      if (!(error <= tolerance)) {  // NaN fails too
        if (wrong++ == 0) first_wrong = i;
      } else {
        max_error = std::max(max_error, error);
      }
    }
    char tolerance_text[32], max_error_text[32];
    std::snprintf(tolerance_text, sizeof tolerance_text, "%.2g", tolerance);
    std::snprintf(max_error_text, sizeof max_error_text, "%.2g", max_error);
    const std::string values = std::to_string(out_.size()) + " values";
    if (wrong == 0)
      return {true, "ok: " + values + " within rel. " + tolerance_text + " of the recurrence (max rel. error " +
                        max_error_text + ")"};
    const double want = fixed_point + decay * (static_cast<double>(x0_[first_wrong]) - fixed_point);
    return {false, std::to_string(wrong) + " of " + values + " off the recurrence by more than rel. " +
                       tolerance_text + "; first at " + std::to_string(first_wrong) + ": got " +
                       format_double(out_[first_wrong]) + ", want " + format_double(want)};
  }

  void teardown() override {
    x0_.reset();
    out_.reset();
  }

  Params params() const override {
    return {{"isa", choice_.isa},
            {"lanes", std::to_string(lanes_)},
            {"accumulators", std::to_string(kAccumulators)},
            {"iters", std::to_string(kIterations)},
            {"threads", std::to_string(threads_)},
            {"element", element_name<T>()},
            {"a", format_double(a_)},
            {"b", format_double(b_)},
            {"size_bytes", "ignored: the work stays in registers"}};
  }

 private:
  int threads_ = 0;
  int lanes_ = 0;
  size_t per_thread_ = 0;  // values per thread: accumulators x lanes
  KernelChoice<T> choice_{"none", 0, nullptr};
  AlignedBuffer<T> x0_;
  AlignedBuffer<T> out_;
  T a_ = 0;
  T b_ = 0;
};

}  // namespace

PGP_REGISTER_PROBE(FmaPeakProbe<float>);
PGP_REGISTER_PROBE(FmaPeakProbe<double>);

}  // namespace pgp::cpu
