// GPU <-> GPU transfers between the measured device (the initiator, i) and a peer j: copy
// engine copies (cudaMemcpyPeerAsync) and SM copies through peer access, one way or both at
// once. The variant "<j>/<size>" names the peer and the bytes of one copy; Python reports the
// result as transfer.p2p.<i>.<j>.<mode> (pygpuperf/pairs.py). Small copies repeat back to
// back within a run; the payload is counted once per direction. Every destination is read
// back to the host after the timed runs and checked element by element.
#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "cuda/transfer_kernels.h"

namespace pgp::cuda {
namespace {

constexpr uint64_t kForwardSeed = 0x5032504657524401ull;   // initiator -> peer
constexpr uint64_t kBackwardSeed = 0x5032504257524B02ull;  // peer -> initiator

enum class PairEngine { CopyEngine, Sm };
enum class PairMode { Write, Read, Both };

int visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so no later launch check reports it
    return 0;
  }
  return count;
}

bool can_access_peer(int from, int to) {
  int ok = 0;
  if (cudaDeviceCanAccessPeer(&ok, from, to) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return ok != 0;
}

// Lets `from` address `to`'s memory. It stays on for the process, as after any other caller.
void enable_peer_access(int from, int to) {
  CurrentDevice on(from);
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // an earlier measurement (or torch) enabled it: fine
    return;
  }
  PGP_CUDA_CHECK(err);
}

// One direction of a measurement: src on src_device copied into dst on dst_device by the
// copy engine behind `stream`, or by a kernel on the SMs of `runner` (the stream's device).
struct Leg {
  int src_device = 0;
  int dst_device = 0;
  int runner = 0;
  cudaStream_t stream = nullptr;
  SmCopyKind kind = SmCopyKind::Push;  // SM: which end is remote to the runner
  int grid = 0;
  uint64_t seed = 0;
  DeviceBuffer<float> src;
  DeviceBuffer<float> dst;
};

class PairTransferProbe : public CudaProbe {
 public:
  PairTransferProbe(PairEngine engine, PairMode mode) : engine_(engine), mode_(mode) {}

  std::string name() const final {
    const char* mode = mode_ == PairMode::Write ? "write" : (mode_ == PairMode::Read ? "read" : "bidir");
    return std::string("transfer.p2p.") + (engine_ == PairEngine::Sm ? "sm." : "ce.") + mode;
  }

  std::string description() const final {
    std::string what;
    if (engine_ == PairEngine::CopyEngine) {
      switch (mode_) {
        case PairMode::Write:
          what = "GPU-to-GPU write bandwidth: the initiator's copy engine pushes its buffer into the peer's";
          break;
        case PairMode::Read:
          what = "GPU-to-GPU read bandwidth: the initiator's copy engine pulls the peer's buffer into its own";
          break;
        case PairMode::Both:
          what = "GPU-to-GPU bidirectional bandwidth: initiator to peer on the initiator's copy engine and peer "
                 "to initiator on the peer's, at once; both directions counted";
          break;
      }
      what += " (cudaMemcpyPeerAsync; without peer access the driver stages through host memory)";
    } else {
      switch (mode_) {
        case PairMode::Write:
          what = "GPU-to-GPU write bandwidth: a kernel on the initiator's SMs stores into the peer's memory";
          break;
        case PairMode::Read:
          what = "GPU-to-GPU read bandwidth: a kernel on the initiator's SMs loads from the peer's memory";
          break;
        case PairMode::Both:
          what = "GPU-to-GPU bidirectional bandwidth: a kernel on each GPU stores into the other's memory at "
                 "once; both directions counted";
          break;
      }
      what += " (peer access, 16-byte vectors)";
    }
    return what + "; variant = <peer>/<bytes of one copy>, e.g. 1/256MiB";
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    const int count = visible_devices();
    if (count < 2) return "needs two GPUs (" + std::to_string(count) + " visible)";
    {
      CurrentDevice keep(dev.index);  // the image checks switch devices
      for (int d = 0; d < count; ++d)
        for (const void* kernel : kernels())
          if (auto reason = missing_kernel_image_reason(kernel, d); !reason.empty())
            return "GPU " + std::to_string(d) + ": " + reason;
    }
    if (peers(dev.index).empty())
      return "no other GPU is reachable through peer access from GPU " + std::to_string(dev.index) +
             (mode_ == PairMode::Both ? " and back" : "") + " (cudaDeviceCanAccessPeer = 0)";
    return std::nullopt;
  }

  std::vector<std::string> variants(const Device& dev, bool quick) const final {
    std::vector<std::string> names;
    const std::vector<std::string> sizes = transfer_sizes(quick);
    for (int peer : peers(dev.index))
      for (const std::string& size : sizes) names.push_back(std::to_string(peer) + "/" + size);
    return names;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    initiator_ = dev.index;
    begin_setup(dev);
    select(dev, cfg);
    copies_ = copies_per_run(bytes());
    access_ = can_access_peer(initiator_, peer_) && (mode_ != PairMode::Both || can_access_peer(peer_, initiator_));
    // SM copies need it; copy engines copy directly with it instead of staging through the host.
    if (engine_ == PairEngine::Sm || can_access_peer(initiator_, peer_)) enable_peer_access(initiator_, peer_);
    if ((engine_ == PairEngine::Sm && mode_ == PairMode::Both) ||
        (engine_ == PairEngine::CopyEngine && can_access_peer(peer_, initiator_)))
      enable_peer_access(peer_, initiator_);
    {
      CurrentDevice on(peer_);
      PGP_CUDA_CHECK(cudaStreamCreateWithFlags(&peer_stream_, cudaStreamNonBlocking));
      PGP_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    }
    PGP_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));

    const int i = initiator_, j = peer_;
    switch (mode_) {
      case PairMode::Write:
        add_leg(i, j, i, SmCopyKind::Push, kForwardSeed);
        break;
      case PairMode::Read:
        add_leg(j, i, i, SmCopyKind::Pull, kBackwardSeed);
        break;
      case PairMode::Both:
        add_leg(i, j, i, SmCopyKind::Push, kForwardSeed);
        add_leg(j, i, j, SmCopyKind::Push, kBackwardSeed);
        break;
    }
    synchronize_all();
  }

  Work work() const final {
    Work w;
    // Payload once per direction: GB/s = payload / time.
    w.bytes_read = static_cast<double>(bytes()) * copies_ * legs_count_;
    return w;
  }

  void poison() final {
    for (int l = 0; l < legs_count_; ++l) {
      Leg& leg = legs_[l];
      CurrentDevice on(leg.dst_device);
      poison_bytes(leg.dst.get(), bytes(), stream_of(leg.dst_device));
    }
    synchronize_all();  // the memset on the peer's stream is not ordered with the copies otherwise
  }

  void run() final {
    const bool both = legs_count_ == 2;
    if (both) {
      // Fork: the peer's stream starts after everything before on the probe stream.
      PGP_CUDA_CHECK(cudaEventRecord(fork_, cuda_stream()));
      PGP_CUDA_CHECK(cudaStreamWaitEvent(peer_stream_, fork_, 0));
    }
    // Interleaved, so both directions start together when copies are many.
    for (int c = 0; c < copies_; ++c)
      for (int l = 0; l < legs_count_; ++l) enqueue(legs_[l]);
    if (both) {
      // Join: the probe stream's stop event waits for the peer's direction too.
      {
        CurrentDevice on(peer_);
        PGP_CUDA_CHECK(cudaEventRecord(join_, peer_stream_));
      }
      PGP_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(), join_, 0));
    }
  }

  Verification verify() final {
    synchronize_all();
    Verification result{true, ""};
    std::vector<float> host(n_);
    for (int l = 0; l < legs_count_; ++l) {
      const Leg& leg = legs_[l];
      {
        CurrentDevice on(leg.dst_device);
        PGP_CUDA_CHECK(cudaMemcpy(host.data(), leg.dst.get(), bytes(), cudaMemcpyDeviceToHost));
      }
      const Verification v = verify_on_host(host.data(), n_, ExpectedValues::unit_floats(leg.seed));
      result.passed = result.passed && v.passed;
      if (!result.detail.empty()) result.detail += "; ";
      result.detail += "GPU " + std::to_string(leg.src_device) + " -> GPU " + std::to_string(leg.dst_device) +
                       ": " + v.detail;
    }
    return result;
  }

  void teardown() final {
    // Nothing here throws: runtime errors are ignored and cleared at the end.
    int current = 0;
    cudaGetDevice(&current);
    if (peer_stream_) {
      cudaSetDevice(peer_);
      cudaStreamSynchronize(peer_stream_);
    }
    cudaSetDevice(initiator_);
    cudaStreamSynchronize(cuda_stream());
    for (int l = 0; l < legs_count_; ++l) {
      cudaSetDevice(legs_[l].src_device);
      legs_[l].src.reset();
      cudaSetDevice(legs_[l].dst_device);
      legs_[l].dst.reset();
    }
    legs_count_ = 0;
    cudaSetDevice(peer_);
    if (join_) cudaEventDestroy(join_);
    if (peer_stream_) cudaStreamDestroy(peer_stream_);
    join_ = nullptr;
    peer_stream_ = nullptr;
    cudaSetDevice(initiator_);
    if (fork_) cudaEventDestroy(fork_);
    fork_ = nullptr;
    CudaProbe::teardown();
    cudaSetDevice(current);
    cudaGetLastError();
  }

  Params params() const final {
    const bool both = mode_ == PairMode::Both;
    const std::string i = std::to_string(initiator_), j = std::to_string(peer_);
    Params p{{"bytes", std::to_string(bytes())},
             {"copies_per_run", std::to_string(copies_)},
             {"engine", engine_ == PairEngine::Sm ? "SM" : "copy engine"},
             {"direction", mode_ == PairMode::Write ? "write: initiator to peer"
                                                     : (mode_ == PairMode::Read ? "read: peer to initiator"
                                                                                : "both ways at once")},
             {"counting", both ? "payload bytes, both directions" : "payload bytes, one direction"},
             {"src", both ? i + "," + j : (mode_ == PairMode::Write ? i : j)},
             {"dst", both ? j + "," + i : (mode_ == PairMode::Write ? j : i)},
             {"initiator", i},
             {"peer", j},
             {"p2p_access", access_ ? "on" : "off (cudaDeviceCanAccessPeer = 0)"}};
    if (engine_ == PairEngine::CopyEngine) {
      p["api"] = "cudaMemcpyPeerAsync";
      p["path"] = access_ ? "direct (peer access enabled)" : "staged through host memory by the driver";
      if (both) p["streams"] = "initiator to peer on the initiator's stream, peer to initiator on the peer's";
    } else {
      p["grid"] = std::to_string(legs_[0].grid);
      if (both) p["peer_grid"] = std::to_string(legs_[1].grid);
      p["block"] = std::to_string(kSmCopyBlock);
      p["access"] = "16-byte vectors; peer loads ld.global.cv, peer stores st.global.wt";
    }
    return p;
  }

 private:
  size_t bytes() const { return n_ * sizeof(float); }
  cudaStream_t stream_of(int device) const { return device == initiator_ ? cuda_stream() : peer_stream_; }

  std::vector<const void*> kernels() const {
    if (engine_ == PairEngine::CopyEngine) return {fill_kernel()};
    return {fill_kernel(), sm_copy_kernel(SmCopyKind::Push), sm_copy_kernel(SmCopyKind::Pull)};
  }

  // Other GPUs this probe runs against: all for copy engines, those with peer access (both
  // ways for bidir) for SM copies.
  std::vector<int> peers(int initiator) const {
    std::vector<int> out;
    const int count = visible_devices();
    for (int j = 0; j < count; ++j) {
      if (j == initiator) continue;
      if (engine_ == PairEngine::Sm &&
          !(can_access_peer(initiator, j) && (mode_ != PairMode::Both || can_access_peer(j, initiator))))
        continue;
      out.push_back(j);
    }
    return out;
  }

  // Peer and size from "<j>/<size>"; "" = the first peer and cfg.size_bytes (else 256 MiB).
  void select(const Device& dev, const RunConfig& cfg) {
    const std::vector<int> usable = peers(dev.index);
    size_t requested = cfg.size_bytes > 0 ? static_cast<size_t>(cfg.size_bytes) : kTransferDefaultBytes;
    if (cfg.variant.empty()) {
      PGP_CHECK(!usable.empty(), name() + " has no peer for GPU " + std::to_string(dev.index));
      peer_ = usable.front();
    } else {
      const auto slash = cfg.variant.find('/');
      const std::string peer = cfg.variant.substr(0, slash);
      PGP_CHECK(slash != std::string::npos && !peer.empty() && peer.size() <= 4 &&
                    std::all_of(peer.begin(), peer.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
                "pair variant '" + cfg.variant + "' is not <peer>/<size>, e.g. 1/256MiB");
      peer_ = std::stoi(peer);
      PGP_CHECK(std::find(usable.begin(), usable.end(), peer_) != usable.end(),
                "GPU " + peer + " is not a peer " + name() + " can use from GPU " + std::to_string(dev.index));
      requested = parse_transfer_size(cfg.variant.substr(slash + 1));
    }
    n_ = std::max<size_t>(requested / sizeof(float), 1);
  }

  // Allocates a direction's buffers on their devices, fills its source and sizes its grid.
  void add_leg(int src_device, int dst_device, int runner, SmCopyKind kind, uint64_t seed) {
    Leg& leg = legs_[legs_count_++];
    leg.src_device = src_device;
    leg.dst_device = dst_device;
    leg.runner = runner;
    leg.stream = stream_of(runner);
    leg.kind = kind;
    leg.seed = seed;
    {
      CurrentDevice on(src_device);
      leg.src = DeviceBuffer<float>(n_);
      fill_expected(leg.src.get(), n_, ExpectedValues::unit_floats(seed), stream_of(src_device));
    }
    {
      CurrentDevice on(dst_device);
      leg.dst = DeviceBuffer<float>(n_);
    }
    if (engine_ == PairEngine::Sm) {
      // Full occupancy on the runner, but no block without a vector to copy.
      CurrentDevice on(runner);
      int per_sm = 0, sms = 0;
      PGP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sm_copy_kernel(kind), kSmCopyBlock, 0));
      PGP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, runner));
      PGP_CHECK(per_sm > 0, "the SM copy kernel cannot be resident on GPU " + std::to_string(runner));
      leg.grid = std::min(per_sm * sms, sm_copy_blocks(bytes()));
    }
  }

  void enqueue(const Leg& leg) {
    CurrentDevice on(leg.runner);  // kernels launch only into streams of the current device
    if (engine_ == PairEngine::CopyEngine) {
      PGP_CUDA_CHECK(cudaMemcpyPeerAsync(leg.dst.get(), leg.dst_device, leg.src.get(), leg.src_device, bytes(),
                                         leg.stream));
    } else {
      launch_sm_copy(leg.kind, {leg.src.get(), leg.dst.get(), bytes()}, leg.grid, leg.stream);
    }
  }

  void synchronize_all() {
    synchronize();
    if (peer_stream_) PGP_CUDA_CHECK(cudaStreamSynchronize(peer_stream_));
  }

  PairEngine engine_;
  PairMode mode_;
  int initiator_ = 0;
  int peer_ = 0;
  bool access_ = false;
  size_t n_ = 0;
  int copies_ = 1;
  std::array<Leg, 2> legs_;
  int legs_count_ = 0;
  cudaStream_t peer_stream_ = nullptr;
  cudaEvent_t fork_ = nullptr;  // on the initiator
  cudaEvent_t join_ = nullptr;  // on the peer
};

template <PairEngine kEngine, PairMode kMode>
class PairTransfer final : public PairTransferProbe {
 public:
  PairTransfer() : PairTransferProbe(kEngine, kMode) {}
};

PGP_REGISTER_PROBE(PairTransfer<PairEngine::CopyEngine, PairMode::Write>);
PGP_REGISTER_PROBE(PairTransfer<PairEngine::CopyEngine, PairMode::Read>);
PGP_REGISTER_PROBE(PairTransfer<PairEngine::CopyEngine, PairMode::Both>);
PGP_REGISTER_PROBE(PairTransfer<PairEngine::Sm, PairMode::Write>);
PGP_REGISTER_PROBE(PairTransfer<PairEngine::Sm, PairMode::Read>);
PGP_REGISTER_PROBE(PairTransfer<PairEngine::Sm, PairMode::Both>);

}  // namespace
}  // namespace pgp::cuda
