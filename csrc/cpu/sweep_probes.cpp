// Cache-hierarchy sweep on the CPU, memory.sweep: every OpenMP thread reads its own
// private window over and over, one variant per window size, from 4 KiB up to a
// footprint (window x threads) of 8x the last-level cache. Plotted against the
// footprint, the bandwidth steps down at each cache's capacity; pygpuperf.hierarchy
// finds those plateaus and knees.
//
// Mode "l1" in the shared naming: private per-worker windows (on a GPU, per SM). On a
// CPU the private windows walk through L1, L2 (per core) and L3 (shared: there the
// footprint, not the window, is what has to fit).
//
// Windows hold random 64-bit integers; a run sums each window `passes` times into a
// per-thread slot with wrapping integer adds, so the result is exact in any order and
// checked against passes x the window's sum regenerated from the RNG.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/errors.h"
#include "core/registry.h"
#include "cpu/cpu_probe.h"

namespace pgp::cpu {
namespace {

constexpr uint64_t kSeed = 0x5357454550000001ull;
constexpr int64_t kMinWindowBytes = 4ll << 10;
// Windows are whole unrolled iterations of the widest kernel: 8 accumulators x 64 B.
constexpr int64_t kWindowGranuleBytes = 512;
constexpr int kAccumulators = 8;
// Footprint of the last point, in multiples of the L3 cache the OS reports: far enough to
// see DRAM even where that figure is low (a VM whose vCPUs sit on two CCDs, each with its
// own L3, reports one).
constexpr int64_t kLastLevelMultiple = 8;
// A run lasts about this long: long enough to dwarf the OpenMP fork/join, short enough
// that the full sweep (about 30 points) stays within seconds.
constexpr double kTargetRunSeconds = 8e-3;
constexpr double kCalibrationSeconds = 1e-3;
constexpr double kCalibrationBudgetSeconds = 0.25;
constexpr size_t kHugePageBytes = 2u << 20;

using SumKernel = uint64_t (*)(const uint64_t* window, size_t count, int64_t passes);

// Sums `count` values `passes` times with wrapping adds, kAccumulators vectors deep so
// the loads, not the add latency, set the pace. Inlined into each ISA's kernel below.
// (T is a template parameter only because GCC drops vector_size on a non-dependent typedef.)
template <typename T, int VectorBytes>
[[gnu::always_inline]] inline T sum_passes(const T* window, size_t count, int64_t passes) {
  typedef T Vector __attribute__((vector_size(VectorBytes)));
  constexpr size_t kLanes = VectorBytes / sizeof(T);
  constexpr size_t kStep = kAccumulators * kLanes;
  Vector acc[kAccumulators] = {};
  for (int64_t pass = 0; pass < passes; ++pass) {
    // The window might have changed as far as the compiler knows, so it cannot hoist
    // the sum out of the pass loop: every pass really loads the whole window.
    asm volatile("" ::: "memory");
    for (size_t i = 0; i < count; i += kStep) {
#pragma GCC unroll 8
      for (int j = 0; j < kAccumulators; ++j) {
        Vector v;
        std::memcpy(&v, window + i + j * kLanes, VectorBytes);
        acc[j] += v;
      }
    }
  }
  T total = 0;
  for (int j = 0; j < kAccumulators; ++j)
    for (size_t lane = 0; lane < kLanes; ++lane) total += acc[j][lane];
  return total;
}

uint64_t kernel_generic(const uint64_t* window, size_t count, int64_t passes) {
  return sum_passes<uint64_t, 16>(window, count, passes);
}

#if defined(__x86_64__) || defined(__i386__)
[[gnu::target("avx512f")]] uint64_t kernel_avx512(const uint64_t* window, size_t count, int64_t passes) {
  return sum_passes<uint64_t, 64>(window, count, passes);
}

[[gnu::target("avx2")]] uint64_t kernel_avx2(const uint64_t* window, size_t count, int64_t passes) {
  return sum_passes<uint64_t, 32>(window, count, passes);
}
#endif

struct KernelChoice {
  const char* isa;
  int vector_bytes;
  SumKernel kernel;
};

// The widest kernel this CPU runs, or the one PYGPUPERF_CPU_ISA names (as for the FMA probes).
KernelChoice choose_kernel() {
  std::vector<KernelChoice> supported;  // widest first
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) supported.push_back({"avx512f", 64, kernel_avx512});
  if (__builtin_cpu_supports("avx2")) supported.push_back({"avx2", 32, kernel_avx2});
#endif
  supported.push_back({"generic", 16, kernel_generic});
  const char* forced = std::getenv("PYGPUPERF_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return supported.front();
  std::string names;
  for (const auto& choice : supported) {
    // The FMA probes call AVX2 "avx2+fma"; accept that spelling here too.
    if (choice.isa == std::string(forced) || (std::string(forced) == "avx2+fma" && choice.isa == std::string("avx2")))
      return choice;
    names += std::string(names.empty() ? "" : ", ") + choice.isa;
  }
  throw_error(std::string("PYGPUPERF_CPU_ISA=") + forced + " is not an ISA this CPU runs; use one of: " + names +
                  " (or unset it)",
              __FILE__, __LINE__);
}

// Per-thread windows: 2^k bytes and (full sweep) 2^(k + 1/2) between them, from 4 KiB
// until the footprint reaches kLastLevelMultiple x the L3 cache.
std::vector<int64_t> sweep_windows(int threads, bool quick) {
  int64_t last = kLastLevelMultiple * l3_cache_bytes() / std::max(threads, 1);
  if (const int64_t memory = physical_memory_bytes(); memory > 0)
    last = std::min(last, memory / 4 / std::max(threads, 1));  // a small VM must not swap
  last = std::max(last, kMinWindowBytes);
  std::vector<int64_t> windows;
  for (int64_t power = kMinWindowBytes; power <= last; power *= 2) {
    windows.push_back(power);
    // sqrt(2) rounded to sixteenths of the power of two: 1.375 x 4 KiB, else 1.4375 x,
    // which keeps the window names short ("l1-1472KiB").
    const int64_t sixteenth = std::max<int64_t>(power / 16, kWindowGranuleBytes);
    const int64_t between = std::llround(static_cast<double>(power) * 1.4142135623730951 / sixteenth) * sixteenth;
    if (!quick && between <= last) windows.push_back(between);
  }
  return windows;
}

// "l1-4KiB", "l1-5.5KiB", "chase-64MiB": the mode and the per-thread window.
std::string variant_name(const char* prefix, int64_t window) {
  char text[48];
  if (window % (1ll << 20) == 0)
    std::snprintf(text, sizeof text, "%s-%lldMiB", prefix, static_cast<long long>(window >> 20));
  else if (window % 1024 == 0)
    std::snprintf(text, sizeof text, "%s-%lldKiB", prefix, static_cast<long long>(window >> 10));
  else
    std::snprintf(text, sizeof text, "%s-%gKiB", prefix, static_cast<double>(window) / 1024);
  return text;
}

// The window a variant names, from the windows of `threads` threads; throws for an unknown one.
int64_t window_of_variant(const std::string& probe, const char* prefix, const std::string& variant, int threads) {
  for (int64_t window : sweep_windows(threads, false))
    if (variant_name(prefix, window) == variant) return window;
  throw_error(probe + " has no variant '" + variant + "'", __FILE__, __LINE__);
}

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// One cache line per thread, so the per-thread results never share a line.
struct alignas(64) Slot {
  uint64_t value;
};

class CacheSweepProbe final : public Probe {
 public:
  std::string name() const override { return "memory.sweep"; }
  std::string description() const override {
    return "cache-hierarchy sweep: each OpenMP thread sums its own window (4 KiB up to 8x the L3 in total) "
           "repeatedly, uint64 wrapping adds; one variant per window";
  }
  DeviceKind device_kind() const override { return DeviceKind::CPU; }

  std::vector<std::string> variants(const Device&, bool quick) const override {
    std::vector<std::string> names;
    for (int64_t window : sweep_windows(cpu_threads(), quick)) names.push_back(variant_name("l1", window));
    return names;
  }

  void setup(const Device&, const RunConfig& cfg) override {
    threads_ = cpu_threads();
    window_bytes_ = window_for(cfg);
    count_ = static_cast<size_t>(window_bytes_) / sizeof(uint64_t);
    // Each window starts on its own 2 MiB boundary, so the allocation gets transparent huge
    // pages: physically contiguous windows spread evenly over the sets of the physically
    // indexed L2/L3, instead of 4 KiB pages colliding in some sets and moving the knee
    // below the capacity. (Each thread's small window thus costs a 2 MiB page.)
    stride_ = (count_ * sizeof(uint64_t) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes / sizeof(uint64_t);
    choice_ = choose_kernel();
    windows_ = AlignedBuffer<uint64_t>(stride_ * threads_);
    slots_ = AlignedBuffer<Slot>(threads_);
    expected_.assign(threads_, 0);
    // First touch by the thread that reads the window places its pages near that core.
    for_each_part(threads_, [&](int t) {
      uint64_t* window = windows_.data() + t * stride_;
      uint64_t sum = 0;
      for (size_t i = 0; i < count_; ++i) {
        const uint64_t value = hash64(kSeed + t, i) | 1;  // odd: never zero
        window[i] = value;
        sum += value;  // from the RNG, not read back from the window: an independent reference
      }
      expected_[t] = sum;
    });
    passes_ = 1;
    passes_ = calibrated_passes();
  }

  Work work() const override {
    return {static_cast<double>(threads_) * static_cast<double>(passes_) * static_cast<double>(window_bytes_), 0, 0,
            0};
  }

  // Off by one from the right answer: no correct run leaves that in a slot.
  void poison() override {
    for (int t = 0; t < threads_; ++t) slots_[t].value = want(t) + 1;
  }

  void run() override {
    const SumKernel kernel = choice_.kernel;
    for_each_part(threads_, [&](int t) { slots_[t].value = kernel(windows_.data() + t * stride_, count_, passes_); });
  }

  Verification verify() override {
    int wrong = 0, first = -1;
    for (int t = 0; t < threads_; ++t) {
      if (slots_[t].value != want(t)) {
        if (wrong++ == 0) first = t;
      }
    }
    const std::string what = std::to_string(threads_) + " per-thread sums of " + std::to_string(passes_) +
                             " passes over " + std::to_string(count_) + " values";
    if (wrong == 0) return {true, "ok: " + what + " exact"};
    return {false, std::to_string(wrong) + " of " + what + " wrong; first thread " + std::to_string(first) +
                       ": got " + std::to_string(slots_[first].value) + ", want " + std::to_string(want(first))};
  }

  void teardown() override {
    windows_.reset();
    slots_.reset();
  }

  Params params() const override {
    return {{"mode", "l1"},
            {"window_bytes", std::to_string(window_bytes_)},
            {"footprint_bytes", std::to_string(window_bytes_ * threads_)},
            {"workers", std::to_string(threads_)},
            {"threads", std::to_string(threads_)},
            {"passes", std::to_string(passes_)},
            {"isa", choice_.isa},
            {"element", "uint64"},
            {"access", "private window per thread, sequential, read only"}};
  }

 private:
  // The window of cfg.variant; without one, cfg.size_bytes (rounded to 512 B), else the first.
  int64_t window_for(const RunConfig& cfg) const {
    if (!cfg.variant.empty()) return window_of_variant(name(), "l1", cfg.variant, cpu_threads());
    if (cfg.size_bytes == 0) return kMinWindowBytes;
    PGP_CHECK(cfg.size_bytes >= kMinWindowBytes, "size_bytes is the per-thread window and must be at least " +
                                                     format_bytes(kMinWindowBytes) + ", got " +
                                                     std::to_string(cfg.size_bytes));
    const int64_t memory = physical_memory_bytes();
    PGP_CHECK(memory == 0 || cfg.size_bytes <= memory / 2 / threads_,
              std::to_string(threads_) + " windows of " + format_bytes(cfg.size_bytes) + " do not fit in half of the " +
                  format_bytes(memory) + " of host memory; pass a smaller size_bytes");
    return cfg.size_bytes / kWindowGranuleBytes * kWindowGranuleBytes;
  }

  // passes x the window's sum, wrapping like the kernel's adds.
  uint64_t want(int t) const { return expected_[t] * static_cast<uint64_t>(passes_); }

  // Passes for a run of about kTargetRunSeconds. Pass counts grow until a run takes a
  // millisecond and its time grows with the count (the passes, not the OpenMP fork and
  // join, dominate it: with one pass over a 4 KiB window a run would time the fork). Each
  // count is timed three times and the fastest kept, so one run slowed by another process
  // cannot shrink the count. Calibration stops after kCalibrationBudgetSeconds regardless.
  int64_t calibrated_passes() {
    passes_ = 1;
    run();  // starts the thread team and faults the pages in
    const auto start = std::chrono::steady_clock::now();
    int64_t passes = 1, previous_passes = 0;
    double previous = 0;
    for (;;) {
      passes_ = passes;
      double fastest = 0;
      for (int repeat = 0; repeat < 3; ++repeat) {
        const auto begin = std::chrono::steady_clock::now();
        run();
        const double seconds = seconds_since(begin);
        fastest = repeat == 0 ? seconds : std::min(fastest, seconds);
      }
      const bool scales = previous_passes > 0 && fastest - previous >= 0.75 * previous / previous_passes *
                                                                          static_cast<double>(passes - previous_passes);
      const double spent = seconds_since(start);
      if ((fastest >= kCalibrationSeconds && scales) || spent >= kCalibrationBudgetSeconds ||
          passes >= (int64_t{1} << 40)) {
        // Time per pass from the last two counts, which cancels the fixed fork/join cost.
        const double per_pass = scales ? (fastest - previous) / static_cast<double>(passes - previous_passes)
                                       : fastest / static_cast<double>(passes);
        return std::max<int64_t>(1, static_cast<int64_t>(kTargetRunSeconds / per_pass + 0.5));
      }
      previous = fastest;
      previous_passes = passes;
      // Below a millisecond, jump most of the way there (at most 1024x at a time); above it
      // but not yet growing with the count, the fork and join dominate: jump 8x past them.
      const double factor = fastest >= kCalibrationSeconds ? 8.0
                            : fastest > 0                  ? std::clamp(1.2 * kCalibrationSeconds / fastest, 2.0, 1024.0)
                                                           : 1024.0;
      passes = static_cast<int64_t>(static_cast<double>(passes) * factor);
    }
  }

  int threads_ = 0;
  int64_t window_bytes_ = 0;
  size_t count_ = 0;   // values per window
  size_t stride_ = 0;  // values between the starts of two threads' windows
  int64_t passes_ = 1;
  KernelChoice choice_{"none", 0, nullptr};
  AlignedBuffer<uint64_t> windows_;
  AlignedBuffer<Slot> slots_;
  std::vector<uint64_t> expected_;  // one window's sum per thread
};

// Load-to-use latency sweep, latency.sweep: one thread chases pointers through a window
// of cache lines linked into one random cycle (a shuffled visiting order closed into a
// ring: the single-cycle permutations Sattolo's algorithm draws from), so every load
// depends on the one before and no prefetcher can guess the next line. Runs continue
// where the last one stopped, so a window larger than a cache is never served from it.
// Verification: after n loads in total the chase must stand on line order[n mod lines].
class LatencySweepProbe final : public Probe {
 public:
  std::string name() const override { return "latency.sweep"; }
  std::string description() const override {
    return "load-to-use latency sweep: one thread chases pointers through a random cycle of 64 B lines in "
           "windows from 4 KiB to 8x the L3; one variant per window";
  }
  DeviceKind device_kind() const override { return DeviceKind::CPU; }

  std::vector<std::string> variants(const Device&, bool quick) const override {
    std::vector<std::string> names;
    for (int64_t window : sweep_windows(1, quick)) names.push_back(variant_name("chase", window));
    return names;
  }

  void setup(const Device&, const RunConfig& cfg) override {
    window_bytes_ = cfg.variant.empty() ? kMinWindowBytes : window_of_variant(name(), "chase", cfg.variant, 1);
    lines_ = static_cast<size_t>(window_bytes_) / kLineBytes;
    // At least 2 MiB, so the kernel backs even small windows with a huge page: the chase
    // measures the caches, not page walks.
    lines_buffer_ = AlignedBuffer<Line>(std::max<size_t>(lines_, kHugePageBytes / kLineBytes));
    order_.resize(lines_);
    for (size_t i = 0; i < lines_; ++i) order_[i] = static_cast<uint32_t>(i);
    for (size_t i = lines_ - 1; i > 0; --i) std::swap(order_[i], order_[hash64(kSeed, i) % (i + 1)]);
    Line* lines = lines_buffer_.data();
    for (size_t k = 0; k < lines_; ++k) lines[order_[k]].next = &lines[order_[(k + 1) % lines_]];
    position_ = &lines[order_[0]];
    loads_done_ = 0;
    loads_ = calibrated_loads();
  }

  Work work() const override { return {0, 0, 0, static_cast<double>(loads_)}; }

  void poison() override { result_ = nullptr; }

  void run() override {
    const Line* p = position_;
    for (int64_t i = 0; i < loads_; ++i) p = p->next;
    position_ = p;
    result_ = p;
    loads_done_ += static_cast<uint64_t>(loads_);
  }

  Verification verify() override {
    const Line* want = &lines_buffer_[order_[loads_done_ % lines_]];
    const std::string what = std::to_string(loads_done_) + " dependent loads over a cycle of " +
                             std::to_string(lines_) + " lines";
    if (result_ == want) return {true, "ok: " + what + " end on the expected line"};
    const std::string got = result_ == nullptr ? "the poison (null)"
                                               : "line " + std::to_string(static_cast<size_t>(result_ - lines_buffer_.data()));
    return {false, what + ": ended on " + got + ", want line " + std::to_string(order_[loads_done_ % lines_])};
  }

  void teardown() override {
    lines_buffer_.reset();
    order_.clear();
    order_.shrink_to_fit();
  }

  Params params() const override {
    return {{"window_bytes", std::to_string(window_bytes_)},
            {"footprint_bytes", std::to_string(window_bytes_)},
            {"lines", std::to_string(lines_)},
            {"stride_bytes", std::to_string(kLineBytes)},
            {"loads", std::to_string(loads_)},
            {"threads", "1"},
            {"order", "one random cycle through the window's cache lines"}};
  }

 private:
  struct alignas(64) Line {
    const Line* next;
  };
  static constexpr size_t kLineBytes = sizeof(Line);
  static constexpr uint64_t kSeed = 0x4C4154454E435901ull;

  // Loads for a run of about kTargetRunSeconds, from the fastest of three timed runs.
  int64_t calibrated_loads() {
    loads_ = static_cast<int64_t>(std::min<size_t>(lines_, 1 << 16));
    run();  // warms the window into whatever cache holds it
    loads_ = 1 << 14;
    double fastest = 0;
    for (int repeat = 0; repeat < 3; ++repeat) {
      const auto begin = std::chrono::steady_clock::now();
      run();
      const double seconds = seconds_since(begin);
      fastest = repeat == 0 ? seconds : std::min(fastest, seconds);
    }
    const double per_load = std::max(fastest, 1e-9) / static_cast<double>(loads_);
    return std::max<int64_t>(1 << 10, static_cast<int64_t>(kTargetRunSeconds / per_load));
  }

  int64_t window_bytes_ = 0;
  size_t lines_ = 0;
  AlignedBuffer<Line> lines_buffer_;
  std::vector<uint32_t> order_;  // the cycle: line order_[k + 1] follows line order_[k]
  const Line* position_ = nullptr;
  const Line* result_ = nullptr;
  uint64_t loads_done_ = 0;  // every load since setup, warm-up and calibration included
  int64_t loads_ = 0;
};

}  // namespace

PGP_REGISTER_PROBE(CacheSweepProbe);
PGP_REGISTER_PROBE(LatencySweepProbe);

}  // namespace pgp::cpu
