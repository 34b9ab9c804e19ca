// HBM bandwidth probes (BabelStream-style read, write, copy) over float4 arrays much
// larger than L2. Each verifies its last run in full: read against a total computed on
// the host from the RNG, write and copy element by element on the device.
#include <algorithm>
#include <climits>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

constexpr size_t kVectorBytes = sizeof(float4);
constexpr size_t kMinDefaultArrayBytes = size_t{1} << 30;
// Default arrays are at least this many times L2, so L2 hits stay a small fraction.
constexpr size_t kDefaultL2Multiple = 8;
constexpr size_t kMinL2Multiple = 4;
constexpr uint64_t kReadSeed = 0x48424D5245414401ull;
constexpr uint64_t kWriteSeed = 0x48424D5752495402ull;
constexpr uint64_t kCopySeed = 0x48424D434F505903ull;

struct HbmSpec {
  const char* name;
  const char* description;
  int arrays;
  int arrays_read;
  int arrays_written;
};

HbmSpec spec_of(HbmOp op) {
  switch (op) {
    case HbmOp::Read:
      return {"memory.hbm.read", "HBM read bandwidth, 16-byte vector loads summed per block, grid from occupancy", 1,
              1, 0};
    case HbmOp::Write:
      return {"memory.hbm.write", "HBM write bandwidth, 16-byte vector stores of one value, grid from occupancy", 1, 0,
              1};
    case HbmOp::Copy:
      return {"memory.hbm.copy", "HBM copy bandwidth, 16-byte vector loads/stores, grid from occupancy", 2, 1, 1};
  }
  return {};
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// DeviceBuffer, adding which probe asked for how much when the allocation fails.
template <typename T>
DeviceBuffer<T> allocate_array(size_t count, const std::string& probe) {
  try {
    return DeviceBuffer<T>(count);
  } catch (const Error& e) {
    cudaGetLastError();  // out of memory is not sticky: keep it from failing a later launch check
    throw_error(std::string(e.what()) + "; allocating " + mib(count * sizeof(T)) + " for " + probe, __FILE__,
                __LINE__);
  }
}

// Setup, sizing, grid and reporting shared by the three stream probes; subclasses own
// their buffers, the timed kernel and the check.
class HbmStreamProbe : public CudaProbe {
 public:
  std::string name() const final { return spec_.name; }
  std::string description() const final { return spec_.description; }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    for (const void* kernel : {hbm_kernel(op_), fill_kernel()})
      if (auto reason = missing_kernel_image_reason(kernel, dev.index); !reason.empty()) return reason;
    // The smallest default size; an explicit smaller cfg.size_bytes is not visible here.
    const DeviceFacts f = query_device(dev.index);
    const size_t needed = spec_.arrays * kMinL2Multiple * f.l2_bytes;
    if (needed > f.free_bytes / 2)
      return "not enough free device memory: " + std::to_string(spec_.arrays) + " array(s) of at least " +
             std::to_string(kMinL2Multiple) + " x L2 (" + mib(kMinL2Multiple * f.l2_bytes) +
             " each) must fit in half of the " + mib(f.free_bytes) + " free";
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    size_arrays(cfg);
    grid_ = occupancy_grid(hbm_kernel(op_), kHbmBlock);
    allocate_and_fill();
    synchronize();  // setup is done when its fills are
  }

  Work work() const final {
    Work w;
    w.bytes_read = static_cast<double>(spec_.arrays_read) * array_bytes();
    w.bytes_written = static_cast<double>(spec_.arrays_written) * array_bytes();
    return w;
  }

  Params params() const final {
    const size_t l2 = facts().l2_bytes;
    const size_t working_set = spec_.arrays * array_bytes();
    return {{"array_bytes", std::to_string(array_bytes())},
            {"arrays", std::to_string(spec_.arrays)},
            {"vector_bytes", std::to_string(kVectorBytes)},
            {"unroll", std::to_string(kHbmUnroll)},
            {"block", std::to_string(kHbmBlock)},
            {"grid", std::to_string(grid_)},
            {"l2_bytes", std::to_string(l2)},
            {"fits_in_l2", working_set <= l2 ? "yes" : (array_bytes() < kMinL2Multiple * l2 ? "partly" : "no")},
            {"size", capped_ ? "default, capped by free memory" : (requested_ ? "requested" : "default")},
            {"write_allocate", "not counted"}};
  }

  void teardown() final {
    CudaProbe::teardown();  // waits for the stream before buffers go
    release();
  }

 protected:
  explicit HbmStreamProbe(HbmOp op) : op_(op), spec_(spec_of(op)) {}

  virtual void allocate_and_fill() = 0;
  virtual void release() = 0;

  size_t vectors() const { return n4_; }
  size_t floats() const { return n4_ * 4; }
  size_t array_bytes() const { return n4_ * kVectorBytes; }
  int grid() const { return grid_; }
  void set_grid(int grid) { grid_ = grid; }

 private:
  // Per array: cfg.size_bytes exactly as asked (too large fails at allocation), else
  // max(8 x L2, 1 GiB) capped so all arrays fit in half the free memory, and no less
  // than 4 x L2. Whole float4s either way.
  void size_arrays(const RunConfig& cfg) {
    const DeviceFacts& f = facts();
    size_t bytes = static_cast<size_t>(cfg.size_bytes);
    requested_ = cfg.size_bytes > 0;
    if (cfg.size_bytes == 0) {
      const size_t wanted = std::max(kDefaultL2Multiple * f.l2_bytes, kMinDefaultArrayBytes);
      const size_t cap = f.free_bytes / 2 / spec_.arrays;
      capped_ = wanted > cap;
      bytes = std::min(wanted, cap);
      PGP_CHECK(bytes >= kMinL2Multiple * f.l2_bytes,
                "not enough free device memory for arrays of 4 x L2: " + mib(bytes) + " per array fit");
    }
    n4_ = std::max<size_t>(bytes / kVectorBytes, 1);
  }

  HbmOp op_;
  HbmSpec spec_;
  size_t n4_ = 0;
  int grid_ = 0;
  bool capped_ = false;
  bool requested_ = false;
};

class HbmReadProbe final : public HbmStreamProbe {
 public:
  HbmReadProbe() : HbmStreamProbe(HbmOp::Read) {}

  void poison() override { poison_bytes(block_sums_.get(), block_sums_.bytes(), cuda_stream()); }
  void run() override { launch_hbm_read(src_.get(), vectors(), block_sums_.get(), grid(), cuda_stream()); }

  Verification verify() override {
    synchronize();
    std::vector<unsigned long long> sums(block_sums_.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(sums.data(), block_sums_.get(), block_sums_.bytes(), cudaMemcpyDeviceToHost,
                                   cuda_stream()));
    synchronize();
    // A block sum is at most 15 * floats < 2^64, so all-ones can only be leftover poison.
    const auto unwritten = std::count(sums.begin(), sums.end(), ~0ull);
    unsigned long long total = 0;
    for (auto s : sums) total += s;
    const std::string totals = "sum " + std::to_string(total) + ", expected " + std::to_string(expected_total_) +
                               " over " + std::to_string(floats()) + " elements";
    if (unwritten > 0)
      return {false, std::to_string(unwritten) + " of " + std::to_string(sums.size()) +
                         " block sums never written (still poison); " + totals};
    return {total == expected_total_, totals};
  }

 protected:
  void allocate_and_fill() override {
    src_ = allocate_array<float4>(vectors(), name());
    fill_expected(reinterpret_cast<float*>(src_.get()), floats(), ExpectedValues::small_ints(kReadSeed),
                  cuda_stream());
    // fp32 sums stay exact only up to 2^24 per thread: spread huge arrays over more threads.
    const size_t max_per_thread = hbm_read_max_vectors_per_thread();
    const size_t threads_needed = (vectors() + max_per_thread - 1) / max_per_thread;
    const size_t grid_needed = (threads_needed + kHbmBlock - 1) / kHbmBlock;
    PGP_CHECK(grid_needed <= INT_MAX, "array too large for exact fp32 per-thread sums");
    set_grid(std::max(grid(), static_cast<int>(grid_needed)));
    const size_t per_thread = (vectors() + size_t(grid()) * kHbmBlock - 1) / (size_t(grid()) * kHbmBlock);
    PGP_CHECK(per_thread * 4 * 15 < (size_t{1} << 24), "per-thread fp32 sum could exceed 2^24");
    block_sums_ = DeviceBuffer<unsigned long long>(grid());
    expected_total_ = host_total();
  }

  void release() override {
    src_.reset();
    block_sums_.reset();
  }

 private:
  // Regenerated from the RNG on the host: independent of what the device holds.
  unsigned long long host_total() const {
    const auto n = static_cast<int64_t>(floats());
    unsigned long long total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n; ++i) total += static_cast<unsigned long long>(random_small_int_float(kReadSeed, i));
    return total;
  }

  DeviceBuffer<float4> src_;
  DeviceBuffer<unsigned long long> block_sums_;
  unsigned long long expected_total_ = 0;
};

class HbmWriteProbe final : public HbmStreamProbe {
 public:
  HbmWriteProbe() : HbmStreamProbe(HbmOp::Write) {}

  void poison() override { poison_bytes(dst_.get(), dst_.bytes(), cuda_stream()); }
  void run() override { launch_hbm_write(dst_.get(), vectors(), value_, grid(), cuda_stream()); }
  Verification verify() override {
    synchronize();
    return verify_on_device(reinterpret_cast<const float*>(dst_.get()), floats(), ExpectedValues::all(value_),
                            cuda_stream());
  }

 protected:
  void allocate_and_fill() override { dst_ = allocate_array<float4>(vectors(), name()); }
  void release() override { dst_.reset(); }

 private:
  DeviceBuffer<float4> dst_;
  const float value_ = random_unit_float(kWriteSeed, 0);
};

class HbmCopyProbe final : public HbmStreamProbe {
 public:
  HbmCopyProbe() : HbmStreamProbe(HbmOp::Copy) {}

  void poison() override { poison_bytes(dst_.get(), dst_.bytes(), cuda_stream()); }
  void run() override { launch_hbm_copy(src_.get(), dst_.get(), vectors(), grid(), cuda_stream()); }
  Verification verify() override {
    synchronize();
    return verify_on_device(reinterpret_cast<const float*>(dst_.get()), floats(), ExpectedValues::unit_floats(kCopySeed),
                            cuda_stream());
  }

 protected:
  void allocate_and_fill() override {
    src_ = allocate_array<float4>(vectors(), name());
    dst_ = allocate_array<float4>(vectors(), name());
    fill_expected(reinterpret_cast<float*>(src_.get()), floats(), ExpectedValues::unit_floats(kCopySeed),
                  cuda_stream());
  }
  void release() override {
    src_.reset();
    dst_.reset();
  }

 private:
  DeviceBuffer<float4> src_;
  DeviceBuffer<float4> dst_;
};

PGP_REGISTER_PROBE(HbmReadProbe);
PGP_REGISTER_PROBE(HbmWriteProbe);
PGP_REGISTER_PROBE(HbmCopyProbe);

}  // namespace
}  // namespace pgp::cuda
