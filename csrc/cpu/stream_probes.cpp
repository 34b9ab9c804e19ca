// STREAM/BabelStream-style DRAM bandwidth probes: read, write, copy, scale and triad over
// fp64 arrays much larger than the last-level cache, split statically over OpenMP
// threads. Inputs are random integers in [1, 15], so every result is exact in fp64
// and verification compares bit for bit against values regenerated from the RNG.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/errors.h"
#include "core/registry.h"
#include "cpu/cpu_probe.h"

namespace pgp::cpu {
namespace {

enum class StreamOp { Read, Write, Copy, Scale, Triad };

struct StreamSpec {
  const char* name;
  const char* description;
  int arrays;          // a; a, b; or a, b, c
  int arrays_read;     // arrays streamed in per run
  int arrays_written;  // arrays streamed out per run
  int flops_per_element;
};

constexpr StreamSpec spec_of(StreamOp op) {
  switch (op) {
    case StreamOp::Read:
      return {"memory.dram.read", "DRAM read bandwidth, s += a[i], fp64, OpenMP threads", 1, 1, 0, 0};
    case StreamOp::Write:
      return {"memory.dram.write", "DRAM write bandwidth, a[i] = v, fp64, OpenMP threads", 1, 0, 1, 0};
    case StreamOp::Copy:
      return {"memory.dram.copy", "DRAM copy bandwidth, b[i] = a[i], fp64, OpenMP threads", 2, 1, 1, 0};
    case StreamOp::Scale:
      return {"memory.dram.scale", "DRAM scale bandwidth, b[i] = s * a[i], fp64, OpenMP threads", 2, 1, 1, 1};
    case StreamOp::Triad:
      return {"memory.dram.triad", "DRAM triad bandwidth, a[i] = b[i] + s * c[i], fp64, OpenMP threads", 3, 2, 1, 2};
  }
  return {};
}

constexpr uint64_t kSeed = 0x53545245414D0001ull;
// Parts are whole granules: 64 fp64 = 512 B, so each thread starts on a cache line
// and the unrolled loops need no remainder.
constexpr size_t kGranule = 64;
constexpr int64_t kMinArrayBytes = 1ll << 20;
constexpr int64_t kMinDefaultArrayBytes = 64ll << 20;
constexpr int64_t kMaxDefaultArrayBytes = 1ll << 30;
constexpr double kScalar = 3.0;  // scale and triad
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Element i of input array `array` (0 = a, 1 = b, 2 = c).
inline double input_value(int array, size_t i) { return static_cast<double>(random_int(kSeed + array, i, 1, 15)); }

// One cache line per thread, so threads storing their partial sums never share a line.
struct alignas(64) PartialSum {
  double value;
};

// Elements per array: cfg.size_bytes when given, else enough to spill the L3 cache.
size_t array_elements(int64_t size_bytes, int arrays) {
  int64_t bytes = size_bytes;
  if (bytes == 0) bytes = std::min(std::max(4 * l3_cache_bytes(), kMinDefaultArrayBytes), kMaxDefaultArrayBytes);
  PGP_CHECK(bytes >= kMinArrayBytes, "size_bytes is the size of one array and must be at least " +
                                         format_bytes(kMinArrayBytes) + ", got " + std::to_string(bytes) +
                                         "; pass 0 to size the arrays from the L3 cache");
  const int64_t memory = physical_memory_bytes();
  PGP_CHECK(memory == 0 || bytes <= memory / 4 * 3 / arrays,
            std::to_string(arrays) + " arrays of " + format_bytes(bytes) + " do not fit in 3/4 of the " +
                format_bytes(memory) + " of host memory; pass a smaller size_bytes");
  return static_cast<size_t>(bytes) / sizeof(double) / kGranule * kGranule;
}

// Sixteen independent partial sums hide the FP-add latency, so loads are the limit.
double sum_of(const double* __restrict x, size_t count) {
  double acc[16] = {};
  for (size_t i = 0; i < count; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j];
  double sum = 0;
  for (double partial : acc) sum += partial;
  return sum;
}

// Plain loops over restrict pointers: the compiler vectorizes them without alias checks.
void fill_range(double* __restrict a, size_t count, double v) {
  for (size_t i = 0; i < count; ++i) a[i] = v;
}

void scale_range(const double* __restrict a, double* __restrict b, double s, size_t count) {
  for (size_t i = 0; i < count; ++i) b[i] = s * a[i];
}

void triad_range(double* __restrict a, const double* __restrict b, const double* __restrict c, double s,
                 size_t count) {
  for (size_t i = 0; i < count; ++i) a[i] = b[i] + s * c[i];
}

// Copy must stay a loop of plain loads and stores: compilers turn it into memcpy, and
// glibc's memcpy switches to non-temporal stores on large sizes, which would skip the
// write-allocate that write and triad pay and make copy incomparable with them.
#if defined(__clang__)
[[clang::no_builtin("memcpy", "memmove")]]
#elif defined(__GNUC__)
[[gnu::optimize("no-tree-loop-distribute-patterns")]]
#endif
void copy_range(const double* __restrict a, double* __restrict b, size_t count) {
  for (size_t i = 0; i < count; ++i) b[i] = a[i];
}

// Compares got[i] with want(i) for every i, in parallel with the kernels' split.
template <typename Want>
Verification check_elements(const double* got, size_t n, int parts, const Want& want) {
  std::vector<size_t> wrong(parts, 0), first_wrong(parts, n);
  for_each_part(parts, [&](int p) {
    const Range r = part_of(n, kGranule, p, parts);
    size_t count = 0, first = n;
    for (size_t i = r.begin; i < r.end; ++i) {
      if (got[i] != want(i)) {  // NaN never compares equal, so poison is caught
        if (count == 0) first = i;
        ++count;
      }
    }
    wrong[p] = count;
    first_wrong[p] = first;
  });
  size_t total_wrong = 0;
  for (size_t count : wrong) total_wrong += count;
  const std::string elements = std::to_string(n) + " elements";
  if (total_wrong == 0) return {true, "ok: " + elements + " checked"};
  const size_t first = *std::min_element(first_wrong.begin(), first_wrong.end());
  return {false, std::to_string(total_wrong) + " of " + elements + " wrong; first at " + std::to_string(first) +
                     ": got " + format_double(got[first]) + ", want " + format_double(want(first))};
}

template <StreamOp Op>
class StreamProbe final : public Probe {
  static constexpr StreamSpec kSpec = spec_of(Op);

 public:
  std::string name() const override { return kSpec.name; }
  std::string description() const override { return kSpec.description; }
  DeviceKind device_kind() const override { return DeviceKind::CPU; }

  void setup(const Device&, const RunConfig& cfg) override {
    threads_ = cpu_threads();
    n_ = array_elements(cfg.size_bytes, kSpec.arrays);
    for (int k = 0; k < kSpec.arrays; ++k) arrays_[k] = AlignedBuffer<double>(n_);
    if constexpr (Op == StreamOp::Read) partial_sums_ = AlignedBuffer<PartialSum>(threads_);
    // A non-integer, so it differs from every value the array held before the runs.
    write_value_ = random_in_1_2(kSeed + 3, 0) + 1.0;

    // First touch with the kernels' split places each page near the thread that streams it.
    std::vector<uint64_t> partial_expected(threads_, 0);
    for_each_part(threads_, [&](int p) {
      const Range r = part_of(n_, kGranule, p, threads_);
      uint64_t sum = 0;
      for (int k = 0; k < kSpec.arrays; ++k) {
        double* x = arrays_[k].data();
        for (size_t i = r.begin; i < r.end; ++i) x[i] = input_value(k, i);
      }
      if constexpr (Op == StreamOp::Read)  // from the RNG, not from the array, so it is independent
        for (size_t i = r.begin; i < r.end; ++i) sum += static_cast<uint64_t>(input_value(0, i));
      partial_expected[p] = sum;
    });
    uint64_t expected = 0;
    for (uint64_t s : partial_expected) expected += s;
    expected_sum_ = static_cast<double>(expected);  // < 2^53: exact, whatever the summation order
  }

  Work work() const override {
    const double array_bytes = static_cast<double>(n_ * sizeof(double));
    return {kSpec.arrays_read * array_bytes, kSpec.arrays_written * array_bytes,
            static_cast<double>(kSpec.flops_per_element) * static_cast<double>(n_)};
  }

  void poison() override {
    if constexpr (Op == StreamOp::Read) {
      for (size_t t = 0; t < partial_sums_.size(); ++t) partial_sums_[t].value = kNaN;
    } else {
      double* out = output();
      for_each_part(threads_, [&](int p) {
        const Range r = part_of(n_, kGranule, p, threads_);
        std::fill(out + r.begin, out + r.end, kNaN);
      });
    }
  }

  void run() override {
    double* a = arrays_[0].data();
    double* b = arrays_[1].data();
    double* c = arrays_[2].data();
    for_each_part(threads_, [&](int p) {
      const Range r = part_of(n_, kGranule, p, threads_);
      const size_t count = r.end - r.begin;
      if constexpr (Op == StreamOp::Read) partial_sums_[p].value = sum_of(a + r.begin, count);
      if constexpr (Op == StreamOp::Write) fill_range(a + r.begin, count, write_value_);
      if constexpr (Op == StreamOp::Copy) copy_range(a + r.begin, b + r.begin, count);
      if constexpr (Op == StreamOp::Scale) scale_range(a + r.begin, b + r.begin, kScalar, count);
      if constexpr (Op == StreamOp::Triad) triad_range(a + r.begin, b + r.begin, c + r.begin, kScalar, count);
    });
  }

  Verification verify() override {
    if constexpr (Op == StreamOp::Read) {
      double total = 0;
      for (size_t t = 0; t < partial_sums_.size(); ++t) total += partial_sums_[t].value;
      const std::string what = "sum of " + std::to_string(n_) + " elements";
      if (total == expected_sum_) return {true, "ok: " + what + " = " + format_double(total)};
      return {false, what + ": got " + format_double(total) + ", want " + format_double(expected_sum_)};
    } else {
      return check_elements(output(), n_, threads_, [this](size_t i) { return expected_output(i); });
    }
  }

  void teardown() override {
    for (auto& array : arrays_) array.reset();
    partial_sums_.reset();
  }

  Params params() const override {
    Params p{{"array_bytes", std::to_string(n_ * sizeof(double))},
             {"elements", std::to_string(n_)},
             {"threads", std::to_string(threads_)},
             {"element", "fp64"},
             {"write_allocate", kSpec.arrays_written ? "not counted: plain stores may also read the line first"
                                                     : "none: no stores"}};
    if constexpr (Op == StreamOp::Read) p["flops"] = "0 counted: a bandwidth probe, the adds are not reported";
    if constexpr (Op == StreamOp::Scale || Op == StreamOp::Triad) p["scalar"] = format_double(kScalar);
    return p;
  }

 private:
  double* output() const { return arrays_[Op == StreamOp::Copy || Op == StreamOp::Scale ? 1 : 0].data(); }

  // The value a correct run leaves at i, regenerated from the RNG rather than read back.
  double expected_output(size_t i) const {
    if constexpr (Op == StreamOp::Write) return write_value_;
    if constexpr (Op == StreamOp::Copy) return input_value(0, i);
    if constexpr (Op == StreamOp::Scale) return kScalar * input_value(0, i);
    return input_value(1, i) + kScalar * input_value(2, i);
  }

  int threads_ = 0;
  size_t n_ = 0;
  AlignedBuffer<double> arrays_[3];  // a, b, c; only the first kSpec.arrays are allocated
  AlignedBuffer<PartialSum> partial_sums_;
  double write_value_ = 0;
  double expected_sum_ = 0;
};

}  // namespace

PGP_REGISTER_PROBE(StreamProbe<StreamOp::Read>);
PGP_REGISTER_PROBE(StreamProbe<StreamOp::Write>);
PGP_REGISTER_PROBE(StreamProbe<StreamOp::Copy>);
PGP_REGISTER_PROBE(StreamProbe<StreamOp::Scale>);
PGP_REGISTER_PROBE(StreamProbe<StreamOp::Triad>);

}  // namespace pgp::cpu
