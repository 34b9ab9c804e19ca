// HBM bandwidth probes (BabelStream-style read, write, copy, scale, triad) over fp32
// arrays much larger than L2, each measured in the variants hbm_stream.cu builds (access
// width, unroll, cache hints, launch shape). Every run is verified in full: read against a
// total computed on the host from the RNG, the others element by element on the device.
#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

// 4 GiB amortizes the launch ramp and tail (about 4.5 us per kernel on an H200) to < 0.5 %.
// The portable backend's default (pygpuperf/backends/portable.py) matches it.
constexpr size_t kMinDefaultArrayBytes = size_t{4} << 30;
// Default arrays are at least this many times L2, so L2 hits stay a small fraction.
constexpr size_t kDefaultL2Multiple = 8;
constexpr size_t kMinL2Multiple = 4;
// Arrays are whole 16-byte vectors, so every access width divides them.
constexpr size_t kArrayGranule = 16;
// s of scale and triad: small integer inputs times 3 stay exact integers in fp32.
constexpr float kStreamScalar = 3.0f;
// Quiet time before the timed runs: after a cudaFree of 3 GiB (the previous variant's
// arrays), the H200 ran the next ~5 ms of kernels ~13 % slower, presumably while the driver
// scrubbed the freed memory; 20 ms later no run was slow. This keeps each CV near 0.3 %.
constexpr auto kSettleTime = std::chrono::milliseconds(50);
constexpr uint64_t kReadSeed = 0x48424D5245414401ull;
constexpr uint64_t kWriteSeed = 0x48424D5752495402ull;
constexpr uint64_t kCopySeed = 0x48424D434F505903ull;
constexpr uint64_t kScaleSeed = 0x48424D5343414C04ull;
constexpr uint64_t kTriadSeedB = 0x48424D5452494105ull;
constexpr uint64_t kTriadSeedC = 0x48424D5452494106ull;

struct HbmSpec {
  const char* name;
  const char* description;
  int arrays_read;
  bool writes_array;
  double flops_per_element;
};

HbmSpec spec_of(HbmOp op) {
  switch (op) {
    case HbmOp::Read:
      return {"memory.hbm.read", "HBM read bandwidth: fp32 sums of one array, exact integer totals per block", 1,
              false, 0};
    case HbmOp::Write:
      return {"memory.hbm.write", "HBM write bandwidth: one value stored to every element of an array", 0, true, 0};
    case HbmOp::Copy:
      return {"memory.hbm.copy", "HBM copy bandwidth: b = a, read and write counted", 1, true, 0};
    case HbmOp::Scale:
      return {"memory.hbm.scale", "HBM scale bandwidth: b = s * a, read and write counted", 1, true, 1};
    case HbmOp::Triad:
      break;
  }
  return {"memory.hbm.triad", "HBM triad bandwidth: a = b + s * c, two reads and one write counted", 2, true, 2};
}

const char* load_name(HbmLoad h) { return h == HbmLoad::Cg ? "cg" : (h == HbmLoad::Cs ? "cs" : "ld"); }
const char* store_name(HbmStore h) { return h == HbmStore::Cs ? "cs" : "st"; }

// Stable, compact names: v16.u4.cg-cs.occ, v16.u8.ld.p2x512, v16.u1.st.t128, bulk.c16k.s4.p2.
std::string variant_name(HbmOp op, const HbmVariant& v) {
  std::string name;
  if (v.shape == HbmShape::Bulk) {
    name += "bulk.c";
    name += std::to_string(v.chunk_bytes / 1024);
    name += "k.s";
    name += std::to_string(v.unroll);
    name += ".p";
    name += std::to_string(v.blocks_per_sm);
    return name;
  }
  name += "v";
  name += std::to_string(v.vector_bytes);
  name += ".u";
  name += std::to_string(v.unroll);
  name += ".";
  if (op != HbmOp::Write) name += load_name(v.load);
  if (op != HbmOp::Write && op != HbmOp::Read) name += "-";
  if (op != HbmOp::Read) name += store_name(v.store);
  switch (v.shape) {
    case HbmShape::Occupancy:
      name += ".occ";
      break;
    case HbmShape::Persistent:
      name += ".p";
      name += std::to_string(v.blocks_per_sm);
      name += "x";
      name += std::to_string(v.block);
      break;
    default:
      name += ".t";
      name += std::to_string(v.block);
  }
  return name;
}

const char* shape_name(HbmShape s) {
  switch (s) {
    case HbmShape::Occupancy:
      return "persistent, full occupancy";
    case HbmShape::Persistent:
      return "persistent, fixed blocks per SM";
    case HbmShape::BlockTiles:
      return "one tile per block";
    case HbmShape::Bulk:
      break;
  }
  return "persistent, cp.async.bulk through shared memory";
}

// Compute-capability major of device `index`, 0 when it cannot be read.
int compute_major(int index) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess) {
    cudaGetLastError();  // not sticky; keep it from failing a later launch check
    return 0;
  }
  return major;
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

// Sum of the read probe's input, regenerated from the RNG on the host (independent of what
// the device holds). Every read variant of a suite uses the same array: computed once.
unsigned long long host_read_total(size_t floats) {
  static std::mutex mutex;
  static size_t cached_floats = 0;
  static unsigned long long cached_total = 0;
  const std::lock_guard<std::mutex> lock(mutex);
  if (cached_floats != floats) {
    const auto n = static_cast<int64_t>(floats);
    unsigned long long total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < n; ++i) total += static_cast<unsigned long long>(random_small_int_float(kReadSeed, i));
    cached_floats = floats;
    cached_total = total;
  }
  return cached_total;
}

class HbmStreamProbe : public CudaProbe {
 public:
  explicit HbmStreamProbe(HbmOp op) : op_(op), spec_(spec_of(op)) {}

  std::string name() const final { return spec_.name; }
  std::string description() const final { return spec_.description; }

  std::vector<std::string> variants(const Device& dev, bool quick) const final {
    const bool bulk_ok = compute_major(dev.index) >= 9;  // cp.async.bulk and mbarrier tx counts
    std::vector<std::string> names;
    for (const HbmVariant& v : hbm_variants(op_))
      if ((!quick || v.quick) && (v.shape != HbmShape::Bulk || bulk_ok)) names.push_back(variant_name(op_, v));
    return names;
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    for (const void* kernel : {hbm_kernel(op_, 0), fill_kernel()})
      if (auto reason = missing_kernel_image_reason(kernel, dev.index); !reason.empty()) return reason;
    // The smallest default size; an explicit smaller cfg.size_bytes is not visible here.
    const DeviceFacts f = query_device(dev.index);
    const size_t needed = arrays() * kMinL2Multiple * f.l2_bytes;
    if (needed > f.free_bytes / 2)
      return "not enough free device memory: " + std::to_string(arrays()) + " array(s) of at least " +
             std::to_string(kMinL2Multiple) + " x L2 (" + mib(kMinL2Multiple * f.l2_bytes) +
             " each) must fit in half of the " + mib(f.free_bytes) + " free";
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    select_variant(dev, cfg.variant);
    size_arrays(cfg);
    prepare_hbm_kernel(op_, index_);
    grid_ = launch_grid();
    allocate_and_fill();
    synchronize();  // setup is done when its fills are
    std::this_thread::sleep_for(kSettleTime);
  }

  Work work() const final {
    Work w;
    w.bytes_read = static_cast<double>(spec_.arrays_read) * array_bytes();
    w.bytes_written = spec_.writes_array ? static_cast<double>(array_bytes()) : 0.0;
    // The read kernel writes one 8-byte total per block: moved, so counted.
    if (op_ == HbmOp::Read) w.bytes_written = static_cast<double>(block_sums_.bytes());
    w.flops = spec_.flops_per_element * static_cast<double>(floats_);
    return w;
  }

  void poison() final {
    if (op_ == HbmOp::Read) poison_bytes(block_sums_.get(), block_sums_.bytes(), cuda_stream());
    else poison_bytes(out_.get(), out_.bytes(), cuda_stream());
  }

  void run() final { launch_hbm(op_, index_, arrays_, grid_, cuda_stream()); }

  Verification verify() final {
    synchronize();
    switch (op_) {
      case HbmOp::Read:
        return verify_read();
      case HbmOp::Write:
        return verify_on_device(out_.get(), floats_, ExpectedValues::all(write_value()), cuda_stream());
      case HbmOp::Copy:
        return verify_on_device(out_.get(), floats_, ExpectedValues::unit_floats(kCopySeed), cuda_stream());
      case HbmOp::Scale:
        return verify_on_device(out_.get(), floats_,
                                ExpectedValues::small_int_combination(kStreamScalar, kScaleSeed, 0.0f, kScaleSeed),
                                cuda_stream());
      case HbmOp::Triad:
        break;
    }
    return verify_on_device(out_.get(), floats_,
                            ExpectedValues::small_int_combination(1.0f, kTriadSeedB, kStreamScalar, kTriadSeedC),
                            cuda_stream());
  }

  Params params() const final {
    const size_t l2 = facts().l2_bytes;
    const size_t working_set = arrays() * array_bytes();
    const HbmVariant& v = variant();
    Params p{{"array_bytes", std::to_string(array_bytes())},
             {"arrays", std::to_string(arrays())},
             {"vector_bytes", std::to_string(v.vector_bytes)},
             {"load_hint", spec_.arrays_read > 0 ? load_name(v.load) : "none"},
             {"store_hint", spec_.writes_array ? store_name(v.store) : "none"},
             {"shape", shape_name(v.shape)},
             {"block", std::to_string(v.block)},
             {"grid", std::to_string(grid_)},
             {"blocks_per_sm", std::to_string(resident_blocks_per_sm_)},
             {"l2_bytes", std::to_string(l2)},
             {"fits_in_l2", working_set <= l2 ? "yes" : (array_bytes() < kMinL2Multiple * l2 ? "partly" : "no")},
             {"size", capped_ ? "default, capped by free memory" : (requested_ ? "requested" : "default")},
             {"write_allocate", "not counted"}};
    if (v.shape == HbmShape::Bulk) {
      p["stages"] = std::to_string(v.unroll);
      p["chunk_bytes"] = std::to_string(v.chunk_bytes);
    } else {
      p["unroll"] = std::to_string(v.unroll);
    }
    if (spec_.flops_per_element > 0) p["scalar"] = std::to_string(static_cast<int>(kStreamScalar));
    return p;
  }

  void teardown() final {
    CudaProbe::teardown();  // waits for the stream before buffers go
    in0_.reset();
    in1_.reset();
    out_.reset();
    block_sums_.reset();
  }

 private:
  int arrays() const { return spec_.arrays_read + (spec_.writes_array ? 1 : 0); }
  size_t array_bytes() const { return floats_ * sizeof(float); }
  const HbmVariant& variant() const { return hbm_variants(op_)[index_]; }
  static float write_value() { return random_unit_float(kWriteSeed, 0); }

  void select_variant(const Device& dev, const std::string& requested) {
    const std::vector<HbmVariant>& all = hbm_variants(op_);
    const std::string wanted = requested.empty() ? variants(dev, false).front() : requested;
    for (size_t i = 0; i < all.size(); ++i)
      if (variant_name(op_, all[i]) == wanted) {
        index_ = i;
        return;
      }
    throw_error("probe '" + name() + "' has no variant '" + wanted + "'", __FILE__, __LINE__);
  }

  // Per array: cfg.size_bytes exactly as asked (too large fails at allocation), else
  // max(8 x L2, 4 GiB) capped so all arrays fit in half the free memory, and no less
  // than 4 x L2. Whole 16-byte vectors either way.
  void size_arrays(const RunConfig& cfg) {
    const DeviceFacts& f = facts();
    size_t bytes = static_cast<size_t>(cfg.size_bytes);
    requested_ = cfg.size_bytes > 0;
    if (cfg.size_bytes == 0) {
      const size_t wanted = std::max(kDefaultL2Multiple * f.l2_bytes, kMinDefaultArrayBytes);
      const size_t cap = f.free_bytes / 2 / arrays();
      capped_ = wanted > cap;
      bytes = std::min(wanted, cap);
      PGP_CHECK(bytes >= kMinL2Multiple * f.l2_bytes,
                "not enough free device memory for arrays of 4 x L2: " + mib(bytes) + " per array fit");
    }
    floats_ = std::max<size_t>(bytes / kArrayGranule, 1) * (kArrayGranule / sizeof(float));
  }

  int launch_grid() {
    const HbmVariant& v = variant();
    const int sms = facts().sm_count;
    const void* kernel = hbm_kernel(op_, index_);
    const int resident = occupancy_grid(kernel, v.block, hbm_dynamic_smem(v)) / sms;
    resident_blocks_per_sm_ = resident;
    size_t grid = 0;
    switch (v.shape) {
      case HbmShape::Occupancy:
        grid = static_cast<size_t>(resident) * sms;
        break;
      case HbmShape::Persistent:
      case HbmShape::Bulk:
        // Fewer resident blocks than asked would make it a different shape: say so.
        PGP_CHECK(resident >= v.blocks_per_sm, "variant " + variant_name(op_, v) + " needs " +
                                                   std::to_string(v.blocks_per_sm) + " resident blocks per SM; " +
                                                   std::to_string(resident) + " fit");
        resident_blocks_per_sm_ = v.blocks_per_sm;
        grid = static_cast<size_t>(v.blocks_per_sm) * sms;
        break;
      case HbmShape::BlockTiles: {
        const size_t tile_floats = static_cast<size_t>(v.block) * v.unroll * (v.vector_bytes / sizeof(float));
        grid = (floats_ + tile_floats - 1) / tile_floats;
        break;
      }
    }
    if (op_ == HbmOp::Read) grid = std::max(grid, read_grid_for_exact_sums(v));
    PGP_CHECK(grid >= 1 && grid <= INT_MAX, "grid of " + std::to_string(grid) + " blocks cannot launch");
    return static_cast<int>(grid);
  }

  // fp32 per-thread sums stay exact only below 2^24: spread huge arrays over more blocks.
  size_t read_grid_for_exact_sums(const HbmVariant& v) const {
    const size_t floats_per_tile_and_thread = v.unroll * (v.vector_bytes / sizeof(float));
    // Loop tiles one thread may take, keeping room for its share of the partial last tile.
    const size_t max_tiles_per_thread = hbm_read_max_floats_per_thread() / floats_per_tile_and_thread - 1;
    const size_t full_tiles = floats_ / (floats_per_tile_and_thread * v.block);
    return (full_tiles + max_tiles_per_thread - 1) / max_tiles_per_thread;
  }

  void allocate_and_fill() {
    const std::string who = spec_.name;
    arrays_ = HbmArrays{};
    arrays_.floats = floats_;
    switch (op_) {
      case HbmOp::Read:
        allocate_filled(in0_, ExpectedValues::small_ints(kReadSeed), who);
        block_sums_ = DeviceBuffer<unsigned long long>(grid_);
        arrays_.block_sums = block_sums_.get();
        expected_total_ = host_read_total(floats_);
        break;
      case HbmOp::Write:
        arrays_.scalar = write_value();
        break;
      case HbmOp::Copy:
        allocate_filled(in0_, ExpectedValues::unit_floats(kCopySeed), who);
        break;
      case HbmOp::Scale:
        allocate_filled(in0_, ExpectedValues::small_ints(kScaleSeed), who);
        arrays_.scalar = kStreamScalar;
        break;
      case HbmOp::Triad:
        allocate_filled(in0_, ExpectedValues::small_ints(kTriadSeedB), who);
        allocate_filled(in1_, ExpectedValues::small_ints(kTriadSeedC), who);
        arrays_.scalar = kStreamScalar;
        break;
    }
    if (spec_.writes_array) out_ = allocate_array<float>(floats_, who);
    arrays_.in0 = in0_.get();
    arrays_.in1 = in1_.get();
    arrays_.out = out_.get();
  }

  void allocate_filled(DeviceBuffer<float>& buffer, const ExpectedValues& values, const std::string& who) {
    buffer = allocate_array<float>(floats_, who);
    fill_expected(buffer.get(), floats_, values, cuda_stream());
  }

  Verification verify_read() {
    std::vector<unsigned long long> sums(block_sums_.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(sums.data(), block_sums_.get(), block_sums_.bytes(), cudaMemcpyDeviceToHost,
                                   cuda_stream()));
    synchronize();
    // A block sum is at most 15 * floats < 2^64, so all-ones can only be leftover poison.
    const auto unwritten = std::count(sums.begin(), sums.end(), ~0ull);
    unsigned long long total = 0;
    for (auto s : sums) total += s;
    const std::string totals = "sum " + std::to_string(total) + ", expected " + std::to_string(expected_total_) +
                               " over " + std::to_string(floats_) + " elements";
    if (unwritten > 0)
      return {false, std::to_string(unwritten) + " of " + std::to_string(sums.size()) +
                         " block sums never written (still poison); " + totals};
    return {total == expected_total_, totals};
  }

  HbmOp op_;
  HbmSpec spec_;
  size_t index_ = 0;
  size_t floats_ = 0;
  int grid_ = 0;
  int resident_blocks_per_sm_ = 0;
  bool capped_ = false;
  bool requested_ = false;
  HbmArrays arrays_;
  DeviceBuffer<float> in0_;
  DeviceBuffer<float> in1_;
  DeviceBuffer<float> out_;
  DeviceBuffer<unsigned long long> block_sums_;
  unsigned long long expected_total_ = 0;
};

template <HbmOp Op>
class HbmProbe final : public HbmStreamProbe {
 public:
  HbmProbe() : HbmStreamProbe(Op) {}
};

PGP_REGISTER_PROBE(HbmProbe<HbmOp::Read>);
PGP_REGISTER_PROBE(HbmProbe<HbmOp::Write>);
PGP_REGISTER_PROBE(HbmProbe<HbmOp::Copy>);
PGP_REGISTER_PROBE(HbmProbe<HbmOp::Scale>);
PGP_REGISTER_PROBE(HbmProbe<HbmOp::Triad>);

}  // namespace
}  // namespace pgp::cuda
