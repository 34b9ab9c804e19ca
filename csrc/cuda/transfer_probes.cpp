// Host <-> device transfers: bandwidth over pinned and pageable host memory on the copy
// engines (cudaMemcpyAsync), SM-driven copies over mapped pinned memory, both directions at
// once, and the round-trip latency of a flag ping-pong through mapped memory.
//
// Each variant is one copy size, 4 KiB .. 1 GiB; small copies repeat back to back within a
// run. The payload is counted once per direction, as nvbandwidth and bandwidthTest report it.
// Every element of every destination is checked after the timed runs.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#if __has_include(<numaif.h>)
#include <numaif.h>
#endif
#ifndef MPOL_F_NODE
#define MPOL_F_NODE (1 << 0)
#endif
#ifndef MPOL_F_ADDR
#define MPOL_F_ADDR (1 << 1)
#endif

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "cuda/transfer_kernels.h"

namespace pgp::cuda {
namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;
constexpr size_t kSmallestTransfer = 4 * KiB;
constexpr size_t kLargestTransfer = 1 * GiB;
// One timed run moves at least this much (up to kMaxCopiesPerRun copies).
constexpr size_t kMinRunBytes = 4 * MiB;
constexpr int kMaxCopiesPerRun = 256;

std::string size_name(size_t bytes) {
  if (bytes % GiB == 0) return std::to_string(bytes / GiB) + "GiB";
  if (bytes % MiB == 0) return std::to_string(bytes / MiB) + "MiB";
  return std::to_string(bytes / KiB) + "KiB";
}

}  // namespace

std::vector<std::string> transfer_sizes(bool quick) {
  if (quick) return {"4KiB", "256KiB", "16MiB", "256MiB"};
  std::vector<std::string> names;
  for (size_t bytes = kSmallestTransfer; bytes <= kLargestTransfer; bytes *= 2) names.push_back(size_name(bytes));
  return names;
}

size_t parse_transfer_size(const std::string& name) {
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
  const std::string unit = name.substr(digits);
  const size_t scale = unit == "KiB" ? KiB : (unit == "MiB" ? MiB : (unit == "GiB" ? GiB : 0));
  PGP_CHECK(digits > 0 && digits <= 7 && scale > 0, "transfer size '" + name + "' is not like 4KiB, 16MiB or 1GiB");
  const size_t value = std::stoull(name.substr(0, digits));
  PGP_CHECK(value > 0, "transfer size '" + name + "' is zero");
  return value * scale;
}

int copies_per_run(size_t bytes) {
  const size_t copies = (kMinRunBytes + std::max<size_t>(bytes, 1) - 1) / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp<size_t>(copies, 1, kMaxCopiesPerRun));
}

Verification verify_on_host(const float* data, size_t n, const ExpectedValues& expected) {
  const auto count = static_cast<int64_t>(n);
  uint64_t wrong = 0;
  int64_t first = count;
#pragma omp parallel for reduction(+ : wrong) reduction(min : first) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    if (bits_from_float(data[i]) != bits_from_float(expected.at(i))) {
      ++wrong;
      if (i < first) first = i;
    }
  }
  if (wrong == 0) return {true, describe_mismatches(0, n, 0, 0.0f, 0.0f)};
  return {false, describe_mismatches(wrong, n, first, data[first], expected.at(first))};
}

namespace {

constexpr uint64_t kH2DSeed = 0x5452414E53483201ull;
constexpr uint64_t kD2HSeed = 0x5452414E53443202ull;
constexpr size_t kPageBytes = 4 * KiB;

// ---- NUMA placement ----------------------------------------------------------------------

// The NUMA node sysfs gives the GPU's PCI function ("-1": none), or "unknown".
std::string gpu_numa_node(int device) {
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so no later launch check reports it
    return "unknown";
  }
  // The runtime may print the domain with 8 digits; sysfs names are "%04x:%02x:%02x.%x".
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) return "unknown";
  char name[64];
  std::snprintf(name, sizeof name, "%04x:%02x:%02x.%x", domain, bus, slot, function);
  // C stdio: istream's number parsing crashed in the extension next to torch (libstdc++ mix).
  const std::string path = std::string("/sys/bus/pci/devices/") + name + "/numa_node";
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (!file) return "unknown";
  int node = 0;
  const bool read = std::fscanf(file, "%d", &node) == 1;
  std::fclose(file);
  return read ? std::to_string(node) : "unknown";
}

// The node holding the page at `address` (touched already, so no page is allocated here).
std::string host_numa_node(const void* address) {
#ifdef SYS_get_mempolicy
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(address),
              static_cast<unsigned long>(MPOL_F_NODE | MPOL_F_ADDR)) == 0)
    return std::to_string(node);
#endif
  return "unknown";
}

// ---- host buffers ------------------------------------------------------------------------

enum class HostMemory {
  Pinned,    // cudaMallocHost
  Pageable,  // page-aligned, ordinary memory
  Mapped,    // cudaHostAlloc(cudaHostAllocMapped): pinned and addressable by kernels
};

// Host memory of one kind, owned for the lifetime of a measurement. Allocation touches every
// page from the calling thread, so the pages sit on one NUMA node before any parallel fill.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostMemory kind, size_t bytes) : kind_(kind), bytes_(bytes) {
    switch (kind) {
      case HostMemory::Pinned:
        PGP_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
        break;
      case HostMemory::Mapped:
        PGP_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocMapped));
        PGP_CUDA_CHECK(cudaHostGetDevicePointer(&device_ptr_, ptr_, 0));
        break;
      case HostMemory::Pageable:
        ptr_ = std::aligned_alloc(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
        PGP_CHECK(ptr_ != nullptr, "cannot allocate " + std::to_string(bytes) + " bytes of pageable host memory");
        break;
    }
    std::memset(ptr_, 0, bytes);
  }
  ~HostBuffer() { reset(); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    reset();
    std::swap(kind_, o.kind_);
    std::swap(ptr_, o.ptr_);
    std::swap(device_ptr_, o.device_ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void reset() {
    if (ptr_) {
      if (kind_ == HostMemory::Pageable) std::free(ptr_);
      else cudaFreeHost(ptr_);
    }
    ptr_ = nullptr;
    device_ptr_ = nullptr;
    bytes_ = 0;
  }
  float* get() const { return static_cast<float*>(ptr_); }
  // The address kernels use (Mapped only).
  float* device_pointer() const { return static_cast<float*>(device_ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  HostMemory kind_ = HostMemory::Pageable;
  void* ptr_ = nullptr;
  void* device_ptr_ = nullptr;
  size_t bytes_ = 0;
};

void fill_on_host(float* data, size_t n, const ExpectedValues& values) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) data[i] = values.at(i);
}

std::optional<std::string> host_link_waiver(const Device& dev, bool maps_host_memory,
                                            std::initializer_list<const void*> kernels) {
  if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
  for (const void* kernel : kernels)
    if (auto reason = missing_kernel_image_reason(kernel, dev.index); !reason.empty()) return reason;
  if (maps_host_memory) {
    int can_map = 0;
    PGP_CUDA_CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev.index));
    if (!can_map) return std::string("the device cannot map host memory (cudaDevAttrCanMapHostMemory = 0)");
  }
  return std::nullopt;
}

// ---- bandwidth ---------------------------------------------------------------------------

enum class Direction { ToDevice, ToHost, Both };
enum class Engine { CopyEngine, Sm };

struct HostTransferSpec {
  const char* name;
  Direction direction;
  HostMemory memory;
  Engine engine;
};

const char* memory_name(HostMemory m) {
  switch (m) {
    case HostMemory::Pinned:
      return "pinned";
    case HostMemory::Pageable:
      return "pageable";
    case HostMemory::Mapped:
      break;
  }
  return "pinned, mapped (cudaHostAllocMapped)";
}

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::ToDevice:
      return "host to device";
    case Direction::ToHost:
      return "device to host";
    case Direction::Both:
      break;
  }
  return "both at once";
}

class HostTransferProbe : public CudaProbe {
 public:
  explicit HostTransferProbe(HostTransferSpec spec) : spec_(spec) {}

  std::string name() const final { return spec_.name; }
  std::string description() const final {
    std::string what = spec_.direction == Direction::ToDevice
                           ? "Host-to-device"
                           : (spec_.direction == Direction::ToHost ? "Device-to-host"
                                                                   : "Bidirectional (host-to-device and "
                                                                     "device-to-host at once)");
    what += " copy bandwidth, ";
    what += memory_name(spec_.memory);
    what += " host memory, ";
    if (spec_.engine == Engine::Sm) {
      what += "a kernel on the SMs copying through mapped memory (16-byte loads and stores)";
    } else {
      what += "cudaMemcpyAsync on the copy engine";
      if (spec_.direction == Direction::Both) what += "s (one stream per direction)";
    }
    what += "; variant = bytes of one copy, 4KiB .. 1GiB";
    if (spec_.direction == Direction::Both) what += "; both directions counted";
    return what;
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (spec_.engine == Engine::Sm)
      return host_link_waiver(dev, true, {fill_kernel(), sm_copy_kernel(SmCopyKind::Pull), sm_copy_bidir_kernel()});
    return host_link_waiver(dev, false, {fill_kernel()});
  }

  std::vector<std::string> variants(const Device& dev, bool quick) const final { return transfer_sizes(quick); }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    const size_t requested = !cfg.variant.empty() ? parse_transfer_size(cfg.variant)
                                                  : (cfg.size_bytes > 0 ? static_cast<size_t>(cfg.size_bytes)
                                                                        : kTransferDefaultBytes);
    n_ = std::max<size_t>(requested / sizeof(float), 1);
    copies_ = copies_per_run(bytes());
    std::string nodes;
    if (to_device()) {
      host_in_ = HostBuffer(spec_.memory, bytes());
      fill_on_host(host_in_.get(), n_, ExpectedValues::unit_floats(kH2DSeed));
      device_out_ = DeviceBuffer<float>(n_);
      nodes = host_numa_node(host_in_.get());
    }
    if (to_host()) {
      device_in_ = DeviceBuffer<float>(n_);
      fill_expected(device_in_.get(), n_, ExpectedValues::unit_floats(kD2HSeed), cuda_stream());
      host_out_ = HostBuffer(spec_.memory, bytes());
      const std::string node = host_numa_node(host_out_.get());
      if (nodes.empty()) nodes = node;
      else if (node != nodes) nodes += "," + node;  // h2d source, d2h destination
    }
    host_node_ = nodes;
    gpu_node_ = gpu_numa_node(dev.index);
    if (spec_.engine == Engine::Sm) size_grid();
    if (spec_.engine == Engine::CopyEngine && spec_.direction == Direction::Both) {
      PGP_CUDA_CHECK(cudaStreamCreateWithFlags(&second_, cudaStreamNonBlocking));
      PGP_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
      PGP_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    }
    synchronize();
  }

  Work work() const final {
    Work w;
    // Payload once per direction: GB/s = payload / time.
    w.bytes_read = static_cast<double>(bytes()) * copies_ * directions();
    return w;
  }

  void poison() final {
    if (to_device()) poison_bytes(device_out_.get(), bytes(), cuda_stream());
    if (to_host()) {
      synchronize();  // no copy may still be writing the host buffer (the second stream joins this one)
      std::memset(host_out_.get(), 0xFF, bytes());
    }
  }

  void run() final {
    if (spec_.engine == Engine::Sm) {
      run_sm();
      return;
    }
    if (second_) {
      // Fork: the second stream starts after everything before on the probe stream.
      PGP_CUDA_CHECK(cudaEventRecord(fork_, cuda_stream()));
      PGP_CUDA_CHECK(cudaStreamWaitEvent(second_, fork_, 0));
    }
    // Interleaved, so the second direction starts with the first when copies are many.
    for (int c = 0; c < copies_; ++c) {
      if (to_device())
        PGP_CUDA_CHECK(cudaMemcpyAsync(device_out_.get(), host_in_.get(), bytes(), cudaMemcpyHostToDevice,
                                       cuda_stream()));
      if (to_host())
        PGP_CUDA_CHECK(cudaMemcpyAsync(host_out_.get(), device_in_.get(), bytes(), cudaMemcpyDeviceToHost,
                                       second_ ? second_ : cuda_stream()));
    }
    if (second_) {
      // Join: the probe stream's stop event waits for the second direction too.
      PGP_CUDA_CHECK(cudaEventRecord(join_, second_));
      PGP_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(), join_, 0));
    }
  }

  Verification verify() final {
    synchronize();
    Verification result{true, ""};
    if (to_device()) {
      // On the device against the RNG: no copy back over the link under test.
      const Verification v =
          verify_on_device(device_out_.get(), n_, ExpectedValues::unit_floats(kH2DSeed), cuda_stream());
      result.passed = v.passed;
      result.detail = spec_.direction == Direction::Both ? "host to device: " + v.detail : v.detail;
    }
    if (to_host()) {
      const Verification v = verify_on_host(host_out_.get(), n_, ExpectedValues::unit_floats(kD2HSeed));
      result.passed = result.passed && v.passed;
      result.detail += spec_.direction == Direction::Both ? "; device to host: " + v.detail : v.detail;
    }
    return result;
  }

  void teardown() final {
    CudaProbe::teardown();  // waits for the probe stream, which the second one joins
    if (second_) {
      cudaStreamSynchronize(second_);
      cudaStreamDestroy(second_);
      second_ = nullptr;
    }
    for (cudaEvent_t* e : {&fork_, &join_})
      if (*e) {
        cudaEventDestroy(*e);
        *e = nullptr;
      }
    host_in_.reset();
    host_out_.reset();
    device_in_.reset();
    device_out_.reset();
  }

  Params params() const final {
    Params p{{"bytes", std::to_string(bytes())},
             {"copies_per_run", std::to_string(copies_)},
             {"host_memory", memory_name(spec_.memory)},
             {"engine", spec_.engine == Engine::Sm ? "SM" : "copy engine"},
             {"direction", direction_name(spec_.direction)},
             {"counting", directions() == 2 ? "payload bytes, both directions" : "payload bytes, one direction"},
             {"gpu_numa_node", gpu_node_},
             {"host_numa_node", host_node_}};
    if (spec_.engine == Engine::Sm) {
      p["grid"] = std::to_string(grid_);
      p["block"] = std::to_string(kSmCopyBlock);
      p["access"] = "16-byte vectors; host loads ld.global.cv, host stores st.global.wt";
      if (spec_.direction == Direction::Both) p["split"] = "one kernel: half the blocks per direction";
    } else {
      p["api"] = "cudaMemcpyAsync";
      if (spec_.direction == Direction::Both) p["streams"] = "host to device on the probe stream, device to host on a second";
    }
    return p;
  }

 private:
  bool to_device() const { return spec_.direction != Direction::ToHost; }
  bool to_host() const { return spec_.direction != Direction::ToDevice; }
  int directions() const { return spec_.direction == Direction::Both ? 2 : 1; }
  size_t bytes() const { return n_ * sizeof(float); }

  // Full occupancy (half per direction when both), but no block without a vector to copy.
  void size_grid() {
    if (spec_.direction == Direction::Both) {
      const int half = std::max(occupancy_grid(sm_copy_bidir_kernel(), kSmCopyBlock) / 2, 1);
      grid_ = 2 * std::min(half, sm_copy_blocks(bytes()));
    } else {
      const SmCopyKind kind = to_device() ? SmCopyKind::Pull : SmCopyKind::Push;
      grid_ = std::min(occupancy_grid(sm_copy_kernel(kind), kSmCopyBlock), sm_copy_blocks(bytes()));
    }
  }

  void run_sm() {
    const SmCopyJob pull{host_in_.device_pointer(), device_out_.get(), bytes()};
    const SmCopyJob push{device_in_.get(), host_out_.device_pointer(), bytes()};
    for (int c = 0; c < copies_; ++c) {
      switch (spec_.direction) {
        case Direction::ToDevice:
          launch_sm_copy(SmCopyKind::Pull, pull, grid_, cuda_stream());
          break;
        case Direction::ToHost:
          launch_sm_copy(SmCopyKind::Push, push, grid_, cuda_stream());
          break;
        case Direction::Both:
          launch_sm_copy_bidir(pull, push, grid_, cuda_stream());
          break;
      }
    }
  }

  HostTransferSpec spec_;
  size_t n_ = 0;
  int copies_ = 1;
  int grid_ = 0;
  std::string gpu_node_ = "unknown";
  std::string host_node_ = "unknown";
  HostBuffer host_in_;
  HostBuffer host_out_;
  DeviceBuffer<float> device_in_;
  DeviceBuffer<float> device_out_;
  cudaStream_t second_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_ = nullptr;
};

template <Direction kDirection, HostMemory kMemory, Engine kEngine>
constexpr const char* host_transfer_name() {
  if constexpr (kEngine == Engine::Sm) {
    if constexpr (kDirection == Direction::ToDevice) return "transfer.h2d.pinned.sm";
    else if constexpr (kDirection == Direction::ToHost) return "transfer.d2h.pinned.sm";
    else return "transfer.bidir.pinned.sm";
  } else if constexpr (kMemory == HostMemory::Pageable) {
    if constexpr (kDirection == Direction::ToDevice) return "transfer.h2d.pageable";
    else return "transfer.d2h.pageable";
  } else {
    if constexpr (kDirection == Direction::ToDevice) return "transfer.h2d.pinned";
    else if constexpr (kDirection == Direction::ToHost) return "transfer.d2h.pinned";
    else return "transfer.bidir.pinned";
  }
}

template <Direction kDirection, HostMemory kMemory, Engine kEngine>
class HostTransfer final : public HostTransferProbe {
 public:
  HostTransfer()
      : HostTransferProbe({host_transfer_name<kDirection, kMemory, kEngine>(), kDirection, kMemory, kEngine}) {}
};

constexpr auto kCE = Engine::CopyEngine;
PGP_REGISTER_PROBE(HostTransfer<Direction::ToDevice, HostMemory::Pinned, kCE>);
PGP_REGISTER_PROBE(HostTransfer<Direction::ToHost, HostMemory::Pinned, kCE>);
PGP_REGISTER_PROBE(HostTransfer<Direction::ToDevice, HostMemory::Pageable, kCE>);
PGP_REGISTER_PROBE(HostTransfer<Direction::ToHost, HostMemory::Pageable, kCE>);
PGP_REGISTER_PROBE(HostTransfer<Direction::Both, HostMemory::Pinned, kCE>);
PGP_REGISTER_PROBE(HostTransfer<Direction::ToDevice, HostMemory::Mapped, Engine::Sm>);
PGP_REGISTER_PROBE(HostTransfer<Direction::ToHost, HostMemory::Mapped, Engine::Sm>);
PGP_REGISTER_PROBE(HostTransfer<Direction::Both, HostMemory::Mapped, Engine::Sm>);

// ---- latency -----------------------------------------------------------------------------

constexpr uint32_t kRoundTrips = 2000;
// The host gives up first, with a message; the kernel's longer limit only stops a GPU whose
// host has vanished or whose abort flag never arrived.
constexpr auto kHostTimeout = std::chrono::seconds(10);
constexpr uint64_t kKernelTimeoutNs = 15'000'000'000ull;
// The flags sit on separate 128-byte lines, so neither side's writes disturb the other's polls.
constexpr size_t kFlagStrideWords = 128 / sizeof(uint32_t);
// Host polls between clock reads.
constexpr uint32_t kSpinsPerClockRead = 4096;

class H2dLatencyProbe final : public CudaProbe {
 public:
  std::string name() const override { return "latency.h2d"; }
  std::string description() const override {
    return "Host <-> GPU round-trip latency: one GPU thread and the host thread ping-pong 4-byte sequence "
           "numbers through two flags in mapped pinned host memory, " +
           std::to_string(kRoundTrips) + " round trips per run";
  }

  std::optional<std::string> waiver(const Device& dev) const override {
    return host_link_waiver(dev, true, {pingpong_kernel()});
  }

  void setup(const Device& dev, const RunConfig& cfg) override {
    begin_setup(dev);
    flags_ = HostBuffer(HostMemory::Mapped, 2 * kFlagStrideWords * sizeof(uint32_t));
    result_ = DeviceBuffer<PingPongResult>(1);
    next_ = 1;  // the flags start at 0
    host_completed_ = 0;
    gpu_node_ = gpu_numa_node(dev.index);
    host_node_ = host_numa_node(flags_.get());
    synchronize();
  }

  Work work() const override {
    Work w;
    w.operations = kRoundTrips;  // latency = run time / round trips
    return w;
  }

  void poison() override {
    poison_bytes(result_.get(), result_.bytes(), cuda_stream());
    host_completed_ = 0;
  }

  void run() override {
    // Sequence numbers grow across runs, so no flag left by an earlier run matches.
    PGP_CHECK(next_ < kPingPongAbort - kRoundTrips, "latency.h2d ran out of sequence numbers");
    const uint32_t first = next_;
    auto* to_device = reinterpret_cast<volatile uint32_t*>(flags_.get());
    auto* to_host = reinterpret_cast<const volatile uint32_t*>(flags_.get()) + kFlagStrideWords;
    auto* device_flags = reinterpret_cast<uint32_t*>(flags_.device_pointer());
    launch_pingpong(device_flags, device_flags + kFlagStrideWords, first, kRoundTrips, kKernelTimeoutNs,
                    result_.get(), cuda_stream());
    next_ = first + kRoundTrips;
    host_completed_ = 0;
    const auto deadline = std::chrono::steady_clock::now() + kHostTimeout;
    for (uint32_t k = 0; k < kRoundTrips; ++k) {
      const uint32_t want = first + k;
      *to_device = want;
      std::atomic_thread_fence(std::memory_order_seq_cst);  // the store leaves before the polls
      for (uint32_t spins = 1; *to_host != want; ++spins) {
        if (spins % kSpinsPerClockRead == 0 && std::chrono::steady_clock::now() > deadline) {
          const uint32_t seen = *to_host;
          *to_device = kPingPongAbort;  // the kernel stops at its next poll
          std::atomic_thread_fence(std::memory_order_seq_cst);
          throw_error("latency.h2d: the GPU acknowledged " + std::to_string(k) + " of " +
                          std::to_string(kRoundTrips) + " round trips and then nothing for " +
                          std::to_string(kHostTimeout.count()) + " s (waiting for " + std::to_string(want) +
                          ", the to-host flag holds " + std::to_string(seen) + "); the kernel was told to stop",
                      __FILE__, __LINE__);
        }
      }
      host_completed_ = k + 1;
    }
  }

  Verification verify() override {
    synchronize();
    PingPongResult r{};
    PGP_CUDA_CHECK(cudaMemcpy(&r, result_.get(), sizeof r, cudaMemcpyDeviceToHost));
    const uint32_t last = next_ - 1;
    const bool passed = r.outcome == kPingPongDone && r.completed == kRoundTrips && r.last_seen == last &&
                        host_completed_ == kRoundTrips;
    const std::string outcome = r.outcome == kPingPongDone       ? "done"
                                : r.outcome == kPingPongTimedOut ? "timed out"
                                : r.outcome == kPingPongAborted  ? "aborted by the host"
                                                                 : "never written (" + std::to_string(r.outcome) + ")";
    return {passed, "GPU acknowledged " + std::to_string(r.completed) + " of " + std::to_string(kRoundTrips) +
                        " round trips, last sequence " + std::to_string(r.last_seen) + " (want " +
                        std::to_string(last) + "), outcome " + outcome + "; host saw " +
                        std::to_string(host_completed_) + " acknowledgements"};
  }

  void teardown() override {
    // A kernel still waiting (after a failed run) stops at the abort flag.
    if (flags_.get()) {
      *reinterpret_cast<volatile uint32_t*>(flags_.get()) = kPingPongAbort;
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    CudaProbe::teardown();  // waits for the kernel before its flags go
    flags_.reset();
    result_.reset();
  }

  Params params() const override {
    return {{"round_trips", std::to_string(kRoundTrips)},
            {"message_bytes", std::to_string(sizeof(uint32_t))},
            {"mechanism",
             "one GPU thread polls a to-device flag and writes a to-host flag (volatile, __threadfence_system); "
             "the host thread writes the one and polls the other"},
            {"host_memory", memory_name(HostMemory::Mapped)},
            {"counting", "round trips; latency = run time / round trips"},
            {"gpu_numa_node", gpu_node_},
            {"host_numa_node", host_node_}};
  }

 private:
  HostBuffer flags_;
  DeviceBuffer<PingPongResult> result_;
  uint32_t next_ = 1;
  uint32_t host_completed_ = 0;
  std::string gpu_node_ = "unknown";
  std::string host_node_ = "unknown";
};

PGP_REGISTER_PROBE(H2dLatencyProbe);

}  // namespace
}  // namespace pgp::cuda
