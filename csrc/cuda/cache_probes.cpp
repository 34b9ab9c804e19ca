// Memory-hierarchy probes: read bandwidth against working-set size (memory.sweep),
// shared-memory bandwidth with and without bank conflicts (memory.shared.*), and
// dependent-load latency by pointer chase (latency.*). Every run is checked exactly:
// bandwidth probes against per-warp uint32 sums regenerated on the host from the RNG,
// latency probes against the chain position the host expects after every load issued.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <vector>

#include "core/registry.h"
#include "cuda/cache_kernels.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;
constexpr size_t kVectorBytes = sizeof(uint4);
constexpr size_t kWarp = 32;
// One warp's 32 vectors: the unit the host reference adds up.
constexpr size_t kChunkInts = kWarp * kVectorBytes / sizeof(uint32_t);

constexpr uint64_t kSweepSeed = 0x4341434845535701ull;
constexpr uint64_t kSharedSeed = 0x5348415245445202ull;
constexpr uint64_t kChainSeed = 0x434841494E4C4103ull;

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / MiB);
  return text;
}

std::string fixed(double value, int decimals) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

size_t round_to(double bytes, size_t unit) {
  return std::max<size_t>(unit, static_cast<size_t>(std::llround(bytes / static_cast<double>(unit))) * unit);
}

// Probe name, description, the kernels it launches and the device memory it needs:
// enough for the waiver, which must answer before any setup.
class HierarchyProbe : public CudaProbe {
 public:
  std::string name() const final { return name_; }
  std::string description() const final { return description_; }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    for (const void* kernel : kernels())
      if (auto reason = missing_kernel_image_reason(kernel, dev.index); !reason.empty()) return reason;
    const DeviceFacts f = query_device(dev.index);
    const size_t needed = device_bytes_needed(f);
    if (needed > f.free_bytes)
      return "not enough free device memory: needs " + mib(needed) + ", " + mib(f.free_bytes) + " free";
    return std::nullopt;
  }

 protected:
  HierarchyProbe(std::string name, std::string description)
      : name_(std::move(name)), description_(std::move(description)) {}
  virtual std::vector<const void*> kernels() const = 0;
  // The most any variant allocates, headroom included.
  virtual size_t device_bytes_needed(const DeviceFacts& f) const = 0;
  // cfg.variant, or the first variant when it is empty.
  std::string selected_variant(const Device& dev, const RunConfig& cfg) const {
    return cfg.variant.empty() ? variants(dev, false).front() : cfg.variant;
  }

 private:
  std::string name_;
  std::string description_;
};

// Device warp sums against the host's; 0xFFFFFFFF is what poison leaves.
Verification compare_warp_sums(const DeviceBuffer<uint32_t>& sums, const std::vector<uint32_t>& expected,
                               cudaStream_t stream) {
  std::vector<uint32_t> got(sums.size());
  PGP_CUDA_CHECK(cudaMemcpyAsync(got.data(), sums.get(), sums.bytes(), cudaMemcpyDeviceToHost, stream));
  PGP_CUDA_CHECK(cudaStreamSynchronize(stream));
  PGP_CHECK(got.size() == expected.size(), "warp sum count differs from the reference");
  size_t wrong = 0;
  size_t first = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;
    ++wrong;
    first = std::min(first, i);
  }
  const std::string all = std::to_string(got.size()) + " warp sums (uint32, modulo 2^32)";
  if (wrong == 0) return {true, "all " + all + " match"};
  return {false, std::to_string(wrong) + " of " + all + " wrong; first: warp " + std::to_string(first) + " got " +
                     std::to_string(got[first]) + " want " + std::to_string(expected[first]) +
                     (got[first] == ~0u ? " (poison: never written)" : "")};
}

// ---- memory.sweep ---------------------------------------------------------------------

// l1: per-block windows 16 KiB .. 2 MiB; l2: one window 1 MiB .. 4 x L2. Quarter-octave
// steps, rounded so a window is whole 512-byte warp chunks (4 KiB and 64 KiB units keep
// the pass count per run small when the grid stride and window share few factors).
constexpr size_t kL1First = 16 * KiB;
constexpr size_t kL1Last = 2 * MiB;
constexpr size_t kL1QuickLast = 1 * MiB;
constexpr size_t kL1Unit = 4 * KiB;
constexpr size_t kL2First = 1 * MiB;
constexpr size_t kL2Unit = 64 * KiB;
constexpr int kStepsPerOctave = 4;
// Bytes one run requests: at the fastest level (L1 about 30 TB/s, L2 about 10 TB/s) a run
// still lasts about 0.3 ms; from DRAM a few ms.
constexpr size_t kL1BytesPerBlock = 64 * MiB;
constexpr size_t kL2BytesPerRun = 4 * GiB;

// How one point runs: grid, window in 16-byte vectors, whole passes, loads per thread.
struct SweepPlan {
  int grid = 0;
  size_t window_vectors = 0;
  size_t passes = 0;
  size_t steps = 0;
};

struct SweepPoint {
  bool per_sm = true;  // "l1" mode: a private window per block, one block per SM
  size_t window_bytes = 0;
  std::string name() const { return (per_sm ? "l1." : "l2.") + std::to_string(window_bytes); }
};

// Quarter-octave points from `first` up to `last`, which ends the list; quick keeps every
// `quick_every`-th point up to `quick_last`, and `last` when quick_last reaches it.
void add_points(std::vector<SweepPoint>& points, bool per_sm, size_t first, size_t last, size_t unit, bool quick,
                int quick_every, size_t quick_last) {
  last = round_to(double(last), unit);
  for (int k = 0;; ++k) {
    const size_t bytes = std::min(last, round_to(double(first) * std::exp2(double(k) / kStepsPerOctave), unit));
    const bool final_point = bytes == last;
    const bool kept = (k % quick_every == 0 && bytes <= quick_last) || (final_point && quick_last >= last);
    if (!quick || kept) points.push_back({per_sm, bytes});
    if (final_point) break;
  }
}

std::vector<SweepPoint> sweep_points(size_t l2_bytes, bool quick) {
  std::vector<SweepPoint> points;
  add_points(points, true, kL1First, kL1Last, kL1Unit, quick, 2, kL1QuickLast);
  add_points(points, false, kL2First, std::max(4 * l2_bytes, kL2First), kL2Unit, quick, 4, SIZE_MAX);
  return points;
}

class SweepProbe final : public HierarchyProbe {
 public:
  SweepProbe()
      : HierarchyProbe("memory.sweep",
                       "Read bandwidth vs working set: l1.<bytes> = one block per SM re-reading its own window "
                       "(ld.global.ca), l2.<bytes> = the whole grid re-reading one window (ld.global.cg)") {}

  std::vector<std::string> variants(const Device& dev, bool quick) const override {
    if (!device_unavailable_reason(dev.index).empty()) return {""};
    std::vector<std::string> names;
    for (const auto& p : sweep_points(query_device(dev.index).l2_bytes, quick)) names.push_back(p.name());
    return names;
  }

  void setup(const Device& dev, const RunConfig& cfg) override {
    begin_setup(dev);
    point_ = parse(selected_variant(dev, cfg));
    const LoadCache cache = point_.per_sm ? LoadCache::CA : LoadCache::CG;
    prefer_max_l1(sweep_kernel(cache));
    plan_.grid = point_.per_sm ? facts().sm_count : occupancy_grid(sweep_kernel(cache), kSweepBlock);
    plan_.window_vectors = point_.window_bytes / kVectorBytes;
    PGP_CHECK(plan_.window_vectors % kWarp == 0 && plan_.window_vectors < (size_t{1} << 31),
              "window of " + std::to_string(point_.window_bytes) + " bytes is not whole 512-byte chunks under 32 GiB");
    size_passes();

    const size_t footprint_ints = footprint_bytes() / sizeof(uint32_t);
    data_ = DeviceBuffer<uint32_t>(footprint_ints);
    warp_sums_ = DeviceBuffer<uint32_t>(size_t(plan_.grid) * kSweepBlock / kWarp);
    block_sm_ = DeviceBuffer<uint32_t>(plan_.grid);
    fill_small_ints(data_.get(), footprint_ints, kSweepSeed, cuda_stream());
    expected_ = reference_sums();
    synchronize();
  }

  Work work() const override {
    Work w;
    w.bytes_read = double(plan_.passes) * double(point_.window_bytes) * (point_.per_sm ? plan_.grid : 1);
    return w;
  }

  void poison() override { poison_bytes(warp_sums_.get(), warp_sums_.bytes(), cuda_stream()); }

  void run() override {
    SweepLaunch launch;
    launch.data = reinterpret_cast<const uint4*>(data_.get());
    launch.window_vectors = static_cast<uint32_t>(plan_.window_vectors);
    launch.private_windows = point_.per_sm;
    launch.steps = static_cast<uint32_t>(plan_.steps);
    launch.warp_sums = warp_sums_.get();
    launch.block_sm = block_sm_.get();
    launch.grid = plan_.grid;
    launch_sweep(point_.per_sm ? LoadCache::CA : LoadCache::CG, launch, cuda_stream());
  }

  Verification verify() override {
    synchronize();
    std::vector<uint32_t> sm(block_sm_.size());
    PGP_CUDA_CHECK(cudaMemcpyAsync(sm.data(), block_sm_.get(), block_sm_.bytes(), cudaMemcpyDeviceToHost,
                                   cuda_stream()));
    synchronize();
    distinct_sms_ = std::set<uint32_t>(sm.begin(), sm.end()).size();
    return compare_warp_sums(warp_sums_, expected_, cuda_stream());
  }

  Params params() const override {
    Params p = {{"mode", point_.per_sm ? "l1" : "l2"},
                {"window_bytes", std::to_string(point_.window_bytes)},
                {"footprint_bytes", std::to_string(footprint_bytes())},
                {"passes", std::to_string(plan_.passes)},
                {"steps_per_thread", std::to_string(plan_.steps)},
                {"grid", std::to_string(plan_.grid)},
                {"block", std::to_string(kSweepBlock)},
                {"load", point_.per_sm ? "ca" : "cg"},
                {"vector_bytes", std::to_string(kVectorBytes)},
                {"unroll", std::to_string(kSweepUnroll)},
                {"l2_bytes", std::to_string(facts().l2_bytes)},
                {"distinct_sms", std::to_string(distinct_sms_)}};
    if (point_.per_sm) p["window_per"] = "block (one block per SM when distinct_sms == grid)";
    return p;
  }

  void teardown() override {
    CudaProbe::teardown();
    data_.reset();
    warp_sums_.reset();
    block_sm_.reset();
  }

 protected:
  std::vector<const void*> kernels() const override {
    return {sweep_kernel(LoadCache::CA), sweep_kernel(LoadCache::CG), small_int_fill_kernel()};
  }
  size_t device_bytes_needed(const DeviceFacts& f) const override {
    return std::max(size_t(f.sm_count) * kL1Last, 4 * f.l2_bytes) + 64 * MiB;
  }

 private:
  static SweepPoint parse(const std::string& variant) {
    const auto dot = variant.find('.');
    PGP_CHECK(dot != std::string::npos, "memory.sweep variant '" + variant + "' is not <mode>.<bytes>");
    return {variant.substr(0, dot) == "l1", std::stoull(variant.substr(dot + 1))};
  }

  size_t threads_per_window() const { return point_.per_sm ? kSweepBlock : size_t(plan_.grid) * kSweepBlock; }
  size_t footprint_bytes() const { return point_.window_bytes * (point_.per_sm ? plan_.grid : 1); }

  // Whole passes over the window, split evenly over the threads that share it: passes
  // is a multiple of threads / gcd(window vectors, threads).
  void size_passes() {
    const size_t threads = threads_per_window();
    const size_t unit = threads / std::gcd(plan_.window_vectors, threads);
    const size_t target = point_.per_sm ? kL1BytesPerBlock : kL2BytesPerRun;
    const size_t units = std::max<size_t>(1, (target + unit * point_.window_bytes - 1) / (unit * point_.window_bytes));
    plan_.passes = units * unit;
    plan_.steps = plan_.passes * plan_.window_vectors / threads;
    PGP_CHECK(plan_.steps < (size_t{1} << 31), "too many loads per thread: " + std::to_string(plan_.steps));
  }

  // Thread t's k-th load is vector (t + k * threads) mod n, so a warp's k-th load is
  // one whole chunk, and its chunk index advances by threads / 32 (mod chunks) per load.
  std::vector<uint32_t> reference_sums() const {
    const size_t chunks_total = footprint_bytes() / (kChunkInts * sizeof(uint32_t));
    std::vector<uint32_t> chunk(chunks_total);
    const auto total = static_cast<int64_t>(chunks_total);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < total; ++j) {
      uint32_t s = 0;
      for (size_t q = 0; q < kChunkInts; ++q) s += small_int_at(kSweepSeed, size_t(j) * kChunkInts + q);
      chunk[j] = s;
    }
    const size_t chunks = plan_.window_vectors / kWarp;
    const size_t chunk_step = (threads_per_window() / kWarp) % chunks;
    const size_t warps_per_block = kSweepBlock / kWarp;
    const auto warps = static_cast<int64_t>(size_t(plan_.grid) * warps_per_block);
    std::vector<uint32_t> sums(warps);
#pragma omp parallel for schedule(static)
    for (int64_t gw = 0; gw < warps; ++gw) {
      const size_t block = size_t(gw) / warps_per_block;
      const uint32_t* window = chunk.data() + (point_.per_sm ? block * chunks : 0);
      size_t c = (point_.per_sm ? size_t(gw) % warps_per_block : size_t(gw)) % chunks;
      uint32_t s = 0;
      for (size_t k = 0; k < plan_.steps; ++k) {
        s += window[c];
        c += chunk_step;
        if (c >= chunks) c -= chunks;
      }
      sums[gw] = s;
    }
    return sums;
  }

  SweepPoint point_;
  SweepPlan plan_;
  size_t distinct_sms_ = 0;
  DeviceBuffer<uint32_t> data_;
  DeviceBuffer<uint32_t> warp_sums_;
  DeviceBuffer<uint32_t> block_sm_;
  std::vector<uint32_t> expected_;
};

// ---- memory.shared.read, memory.shared.read_stride32 -----------------------------------

constexpr size_t kSharedBytesPerBlock = 64 * KiB;

class SharedReadProbe : public HierarchyProbe {
 public:
  void setup(const Device& dev, const RunConfig& cfg) override {
    begin_setup(dev);
    allow_shared_bytes(access_, kSharedBytesPerBlock);
    grid_ = occupancy_grid(shared_read_kernel(access_), kSharedBlock, kSharedBytesPerBlock);
    const double per_iteration = bytes_per_iteration();
    iterations_ = std::max<size_t>(1, static_cast<size_t>(std::ceil(double(target_bytes_) / per_iteration)));
    PGP_CHECK(iterations_ < (size_t{1} << 31), "too many iterations");
    src_ = DeviceBuffer<uint32_t>(size_t(grid_) * words());
    warp_sums_ = DeviceBuffer<uint32_t>(size_t(grid_) * kSharedBlock / kWarp);
    fill_small_ints(src_.get(), src_.size(), kSharedSeed, cuda_stream());
    expected_ = reference_sums();
    synchronize();
  }

  Work work() const override {
    Work w;
    w.bytes_read = bytes_per_iteration() * double(iterations_);  // useful bytes loaded from shared memory
    return w;
  }

  void poison() override { poison_bytes(warp_sums_.get(), warp_sums_.bytes(), cuda_stream()); }

  void run() override {
    launch_shared_read(access_, src_.get(), static_cast<uint32_t>(words()), static_cast<uint32_t>(iterations_),
                       warp_sums_.get(), grid_, cuda_stream());
  }

  Verification verify() override {
    synchronize();
    return compare_warp_sums(warp_sums_, expected_, cuda_stream());
  }

  Params params() const override {
    return {{"access", access_ == SharedAccess::Vector16 ? "v16" : "stride32"},
            {"bytes_per_block", std::to_string(kSharedBytesPerBlock)},
            {"iterations", std::to_string(iterations_)},
            {"loads_per_thread_per_iteration", std::to_string(shared_loads_per_iteration(access_))},
            {"load_bytes", std::to_string(shared_load_bytes(access_))},
            {"grid", std::to_string(grid_)},
            {"block", std::to_string(kSharedBlock)},
            {"staging", "global -> shared copy of bytes_per_block per block inside the timed kernel, not counted"}};
  }

  void teardown() override {
    CudaProbe::teardown();
    src_.reset();
    warp_sums_.reset();
  }

 protected:
  SharedReadProbe(SharedAccess access, const char* name, const char* description, size_t target_bytes)
      : HierarchyProbe(name, description), access_(access), target_bytes_(target_bytes) {}

  std::vector<const void*> kernels() const override { return {shared_read_kernel(access_), small_int_fill_kernel()}; }
  size_t device_bytes_needed(const DeviceFacts& f) const override {
    return size_t(f.sm_count) * 4 * kSharedBytesPerBlock + 64 * MiB;
  }

 private:
  static size_t words() { return kSharedBytesPerBlock / sizeof(uint32_t); }
  double bytes_per_iteration() const {
    return double(grid_) * kSharedBlock * shared_loads_per_iteration(access_) * shared_load_bytes(access_);
  }

  // Each thread reads the same addresses every iteration (see shared_read_kernel).
  std::vector<uint32_t> reference_sums() const {
    const size_t warps_per_block = kSharedBlock / kWarp;
    const size_t n = words();
    const auto warps = static_cast<int64_t>(size_t(grid_) * warps_per_block);
    std::vector<uint32_t> sums(warps);
#pragma omp parallel for schedule(static)
    for (int64_t gw = 0; gw < warps; ++gw) {
      const size_t block_base = size_t(gw) / warps_per_block * n;
      uint32_t once = 0;
      for (size_t lane = 0; lane < kWarp; ++lane) {
        const size_t t = size_t(gw) % warps_per_block * kWarp + lane;
        for (int u = 0; u < shared_loads_per_iteration(access_); ++u) {
          if (access_ == SharedAccess::Vector16) {
            const size_t first_word = (t + size_t(u) * kSharedBlock) % (n / 4) * 4;
            for (size_t q = 0; q < 4; ++q) once += small_int_at(kSharedSeed, block_base + first_word + q);
          } else {
            once += small_int_at(kSharedSeed, block_base + (t * 32 + size_t(u)) % n);
          }
        }
      }
      sums[gw] = once * static_cast<uint32_t>(iterations_);
    }
    return sums;
  }

  SharedAccess access_;
  size_t target_bytes_;
  int grid_ = 0;
  size_t iterations_ = 0;
  DeviceBuffer<uint32_t> src_;
  DeviceBuffer<uint32_t> warp_sums_;
  std::vector<uint32_t> expected_;
};

// About 0.5 ms per run at each case's expected rate (~30 TB/s conflict-free, 1/32 of it
// when every lane of a warp hits one bank).
class SharedVectorReadProbe final : public SharedReadProbe {
 public:
  SharedVectorReadProbe()
      : SharedReadProbe(SharedAccess::Vector16, "memory.shared.read",
                        "Shared-memory read bandwidth, all SMs, conflict-free 16-byte ld.shared.v4", 16 * GiB) {}
};

class SharedConflictReadProbe final : public SharedReadProbe {
 public:
  SharedConflictReadProbe()
      : SharedReadProbe(SharedAccess::Stride32, "memory.shared.read_stride32",
                        "Shared-memory reads with 32-way bank conflicts: 4-byte words at a stride of 32 words, "
                        "useful bytes counted",
                        512 * MiB) {}
};

// ---- latency.l1, latency.l2, latency.dram, latency.sweep -------------------------------

constexpr size_t kL1ChainBytes = 16 * KiB;
constexpr size_t kDramChainMinBytes = 1 * GiB;
constexpr size_t kSweepChainFirst = 8 * KiB;
constexpr size_t kSweepChainLast = 1 * GiB;
constexpr size_t kHugePageBytes = 2 * MiB;
const std::vector<size_t> kQuickChainBytes = {16 * KiB, 1 * MiB, 8 * MiB, 256 * MiB};

enum class Level { L1, L2, Dram, Sweep };

// The last run's cost per load: SM cycles from clock64(), nanoseconds from CUDA events.
struct ChaseClock {
  double cycles_per_load = 0;
  double ns_per_load = 0;
};

// Chains up to 128 KiB should hit in L1 (~17 ns a load), up to 2 x L2 in L2 (~150 ns),
// beyond in DRAM (~600 ns): runs of roughly 5 to 50 ms each.
size_t chase_steps(size_t chain_bytes, size_t l2_bytes) {
  if (chain_bytes <= 128 * KiB) return 512 * 1024;
  if (chain_bytes <= 2 * l2_bytes) return 64 * 1024;
  return 16 * 1024;
}

// Sattolo's shuffle: a uniformly random permutation that is one cycle through all lines.
std::vector<uint32_t> single_cycle(size_t lines, uint64_t seed) {
  std::vector<uint32_t> next(lines);
  std::iota(next.begin(), next.end(), 0u);
  for (size_t i = lines - 1; i > 0; --i) std::swap(next[i], next[mix64(seed, i) % i]);
  return next;
}

class LatencyProbe : public HierarchyProbe {
 public:
  std::vector<std::string> variants(const Device& dev, bool quick) const override {
    if (level_ != Level::Sweep) return {""};
    std::vector<std::string> names;
    for (size_t bytes = kSweepChainFirst; bytes <= kSweepChainLast; bytes *= 2)
      if (!quick || std::find(kQuickChainBytes.begin(), kQuickChainBytes.end(), bytes) != kQuickChainBytes.end())
        names.push_back(std::to_string(bytes));
    return names;
  }

  void setup(const Device& dev, const RunConfig& cfg) override {
    begin_setup(dev);
    chain_bytes_ = level_ == Level::Sweep ? std::stoull(selected_variant(dev, cfg)) : fixed_chain_bytes(facts());
    lines_ = chain_bytes_ / kChaseLineBytes;
    PGP_CHECK(lines_ >= 2 && lines_ < (size_t{1} << 32), "chain of " + std::to_string(lines_) + " lines");
    steps_ = chase_steps(chain_bytes_, facts().l2_bytes);
    prefer_max_l1(chase_kernel(cache()));

    next_ = single_cycle(lines_, kChainSeed);
    chain_ = DeviceBuffer<uint64_t>(lines_ * kChaseLineWords);
    {
      DeviceBuffer<uint32_t> next_on_device(lines_);
      PGP_CUDA_CHECK(cudaMemcpyAsync(next_on_device.get(), next_.data(), next_on_device.bytes(),
                                     cudaMemcpyHostToDevice, cuda_stream()));
      write_chain(chain_.get(), next_on_device.get(), lines_, cuda_stream());
      synchronize();
    }
    if (chain_bytes_ > facts().l2_bytes) evict_l2();
    cursor_ = DeviceBuffer<uint64_t>(1);
    const uint64_t first = line_address(0);
    PGP_CUDA_CHECK(cudaMemcpyAsync(cursor_.get(), &first, sizeof first, cudaMemcpyHostToDevice, cuda_stream()));
    out_ = DeviceBuffer<uint64_t>(3);
    PGP_CUDA_CHECK(cudaEventCreate(&run_start_));
    PGP_CUDA_CHECK(cudaEventCreate(&run_stop_));
    runs_ = 0;
    synchronize();
  }

  Work work() const override {
    Work w;
    w.operations = double(steps_);
    return w;
  }

  void poison() override { poison_bytes(out_.get(), out_.bytes(), cuda_stream()); }

  // Each run continues where the last one stopped, so chains larger than the caches keep
  // meeting lines that no earlier run has touched.
  void run() override {
    PGP_CUDA_CHECK(cudaEventRecord(run_start_, cuda_stream()));
    launch_chase(cache(), cursor_.get(), steps_, out_.get(), cuda_stream());
    PGP_CUDA_CHECK(cudaEventRecord(run_stop_, cuda_stream()));
    ++runs_;
  }

  Verification verify() override {
    synchronize();
    uint64_t out[3] = {};
    PGP_CUDA_CHECK(cudaMemcpyAsync(out, out_.get(), sizeof out, cudaMemcpyDeviceToHost, cuda_stream()));
    synchronize();
    // Where runs x steps loads from line 0 end, walked on the host.
    const size_t loads = runs_ * steps_;
    size_t line = 0;
    for (size_t k = 0; k < loads % lines_; ++k) line = next_[line];
    const uint64_t want = line_address(line);
    clock_.cycles_per_load = 0;
    if (out[0] != want)
      return {false, "after " + std::to_string(loads) + " loads the chase holds " + std::to_string(out[0]) +
                         ", expected line " + std::to_string(line) + " at " + std::to_string(want)};
    clock_.cycles_per_load = double(out[2] - out[1]) / double(steps_);
    float ms = 0;
    PGP_CUDA_CHECK(cudaEventElapsedTime(&ms, run_start_, run_stop_));
    clock_.ns_per_load = double(ms) * 1e6 / double(steps_);
    return {true, "last run ended on line " + std::to_string(line) + " after " + std::to_string(loads) +
                      " dependent loads, as the host walk says"};
  }

  Params params() const override {
    const bool timed = clock_.cycles_per_load > 0 && clock_.ns_per_load > 0;
    return {{"chain_bytes", std::to_string(chain_bytes_)},
            {"lines", std::to_string(lines_)},
            {"stride_bytes", std::to_string(kChaseLineBytes)},
            {"load", cache() == LoadCache::CA ? "ca" : "cg"},
            {"steps", std::to_string(steps_)},
            {"order", "one random cycle (Sattolo), each run continuing the last"},
            {"cycles_per_load", timed ? fixed(clock_.cycles_per_load, 1) : "n/a"},
            {"last_run_ns_per_load", timed ? fixed(clock_.ns_per_load, 2) : "n/a"},
            {"implied_sm_clock_mhz", timed ? fixed(clock_.cycles_per_load / clock_.ns_per_load * 1e3, 0) : "n/a"},
            {"pages_2mib", std::to_string((chain_bytes_ + kHugePageBytes - 1) / kHugePageBytes)},
            {"tlb", chain_bytes_ > 32 * MiB ? "random lines over many 2 MiB pages: includes TLB misses"
                                             : "few pages: TLB hits"},
            {"l2_bytes", std::to_string(facts().l2_bytes)}};
  }

  void teardown() override {
    CudaProbe::teardown();
    chain_.reset();
    cursor_.reset();
    out_.reset();
    for (cudaEvent_t* e : {&run_start_, &run_stop_})
      if (*e) {
        cudaEventDestroy(*e);
        *e = nullptr;
      }
  }

 protected:
  LatencyProbe(Level level, const char* name, const char* description)
      : HierarchyProbe(name, description), level_(level) {}

  std::vector<const void*> kernels() const override { return {chase_kernel(cache()), chain_writer_kernel()}; }
  size_t device_bytes_needed(const DeviceFacts& f) const override {
    const size_t chain = level_ == Level::Sweep ? kSweepChainLast : fixed_chain_bytes(f);
    return chain + chain / kChaseLineWords + 2 * f.l2_bytes + 64 * MiB;
  }

 private:
  // l1: well inside any L1; l2: a quarter of L2 (inside the near half); dram: >= 8 x L2.
  size_t fixed_chain_bytes(const DeviceFacts& f) const {
    switch (level_) {
      case Level::L1:
        return kL1ChainBytes;
      case Level::L2:
        return std::max<size_t>(f.l2_bytes / 4 / MiB, 1) * MiB;
      default:
        return std::max(kDramChainMinBytes, 8 * f.l2_bytes);
    }
  }
  // .cg keeps L1 out of the l2 and dram figures; the sweep shows every level.
  LoadCache cache() const { return level_ == Level::L2 || level_ == Level::Dram ? LoadCache::CG : LoadCache::CA; }
  uint64_t line_address(size_t line) const {
    return reinterpret_cast<uint64_t>(chain_.get()) + uint64_t(line) * kChaseLineBytes;
  }
  // Writing the chain left its last lines in L2; overwrite L2 so DRAM chains start cold.
  void evict_l2() {
    DeviceBuffer<uint8_t> eviction_buffer(2 * facts().l2_bytes);
    PGP_CUDA_CHECK(cudaMemsetAsync(eviction_buffer.get(), 0x5A, eviction_buffer.bytes(), cuda_stream()));
    synchronize();
  }

  Level level_;
  size_t chain_bytes_ = 0;
  size_t lines_ = 0;
  size_t steps_ = 0;
  size_t runs_ = 0;
  ChaseClock clock_;
  std::vector<uint32_t> next_;
  DeviceBuffer<uint64_t> chain_;
  DeviceBuffer<uint64_t> cursor_;
  DeviceBuffer<uint64_t> out_;
  cudaEvent_t run_start_ = nullptr;
  cudaEvent_t run_stop_ = nullptr;
};

class L1LatencyProbe final : public LatencyProbe {
 public:
  L1LatencyProbe()
      : LatencyProbe(Level::L1, "latency.l1",
                     "L1 hit latency: one thread chasing a random cycle of pointers 128 B apart over 16 KiB, "
                     "ld.global.ca") {}
};

class L2LatencyProbe final : public LatencyProbe {
 public:
  L2LatencyProbe()
      : LatencyProbe(Level::L2, "latency.l2",
                     "L2 hit latency: pointer chase over a quarter of L2, 128 B apart, ld.global.cg (L1 bypassed)") {}
};

class DramLatencyProbe final : public LatencyProbe {
 public:
  DramLatencyProbe()
      : LatencyProbe(Level::Dram, "latency.dram",
                     "DRAM latency: pointer chase over max(1 GiB, 8 x L2), 128 B apart, ld.global.cg; includes "
                     "TLB misses") {}
};

class SweepLatencyProbe final : public LatencyProbe {
 public:
  SweepLatencyProbe()
      : LatencyProbe(Level::Sweep, "latency.sweep",
                     "Load latency vs chain size, 8 KiB .. 1 GiB in 2x steps (variant = bytes), ld.global.ca") {}
};

PGP_REGISTER_PROBE(SweepProbe);
PGP_REGISTER_PROBE(SharedVectorReadProbe);
PGP_REGISTER_PROBE(SharedConflictReadProbe);
PGP_REGISTER_PROBE(L1LatencyProbe);
PGP_REGISTER_PROBE(L2LatencyProbe);
PGP_REGISTER_PROBE(DramLatencyProbe);
PGP_REGISTER_PROBE(SweepLatencyProbe);

}  // namespace
}  // namespace pgp::cuda
