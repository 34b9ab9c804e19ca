// Host entry points of the transfer kernels (transfer_kernels.cu): SM-driven copies across a
// link (mapped host memory or a peer GPU) and the host <-> GPU flag ping-pong. Also the sizes
// and host-side checks the transfer probes share (defined in transfer_probes.cpp). Launches
// are enqueued on the given stream and checked; nothing here synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/probe.h"
#include "cuda/cuda_check.h"
#include "cuda/random_fill.h"

namespace pgp::cuda {

// ---- SM copies ---------------------------------------------------------------------------

constexpr int kSmCopyBlock = 256;
// Independent 16-byte loads per thread in flight before their stores.
constexpr int kSmCopyUnroll = 4;

// Which end of a copy lies across the link. Remote loads are ld.global.cv (fetched again,
// never a stale L2 line) and remote stores st.global.wt (written through L2), so repeated
// copies of a small buffer cross the link every time instead of hitting L2.
enum class SmCopyKind : uint8_t {
  Pull,  // remote source, local destination
  Push,  // local source, remote destination
};

struct SmCopyJob {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

// Blocks that give every thread at least one 16-byte vector of `bytes` (at least 1).
inline int sm_copy_blocks(size_t bytes) {
  const size_t vectors = (bytes + 15) / 16;
  const size_t blocks = (vectors + kSmCopyBlock - 1) / kSmCopyBlock;
  return blocks < 1 ? 1 : (blocks > (size_t{1} << 30) ? 1 << 30 : static_cast<int>(blocks));
}

const void* sm_copy_kernel(SmCopyKind kind);
// Grid-stride copy of job.bytes in 16-byte vectors, the last bytes % 16 bytes one by one.
// src and dst must be 16-byte aligned (throws otherwise).
void launch_sm_copy(SmCopyKind kind, const SmCopyJob& job, int grid, cudaStream_t stream);
const void* sm_copy_bidir_kernel();
// Both directions in one kernel: blocks [0, grid / 2) run `pull`, the rest `push`. grid >= 2.
void launch_sm_copy_bidir(const SmCopyJob& pull, const SmCopyJob& push, int grid, cudaStream_t stream);

// ---- host <-> GPU ping-pong --------------------------------------------------------------

// Written to the to-device flag by the host to stop a waiting kernel; never a sequence number.
constexpr uint32_t kPingPongAbort = 0xFFFFFFFFu;
enum PingPongOutcome : uint32_t { kPingPongDone = 1, kPingPongTimedOut = 2, kPingPongAborted = 3 };

// What the kernel reports when it ends (in device memory).
struct PingPongResult {
  uint32_t completed;  // round trips acknowledged
  uint32_t last_seen;  // the last sequence number acknowledged (0 if none)
  uint32_t outcome;    // PingPongOutcome
  uint32_t pad;
};

const void* pingpong_kernel();
// One thread, for k < round_trips: waits until *to_device == first + k, then writes first + k
// to *to_host. Both flags are device pointers to mapped pinned host memory. It gives up when
// the host writes kPingPongAbort or sends nothing new for timeout_ns (%globaltimer), so a
// host that stops answering never leaves the GPU spinning.
void launch_pingpong(const uint32_t* to_device, uint32_t* to_host, uint32_t first, uint32_t round_trips,
                     uint64_t timeout_ns, PingPongResult* result, cudaStream_t stream);

// ---- shared by transfer_probes.cpp and p2p_probes.cpp (defined in transfer_probes.cpp) ---

// Bytes of one copy when neither the variant nor RunConfig::size_bytes gives it.
constexpr size_t kTransferDefaultBytes = size_t{256} << 20;

// "4KiB", "8KiB", ..., "512MiB", "1GiB" (19 sizes); quick: "4KiB", "256KiB", "16MiB", "256MiB".
std::vector<std::string> transfer_sizes(bool quick);
// Bytes of a size name such as "16MiB"; throws pgp::Error on anything else.
size_t parse_transfer_size(const std::string& name);
// Back-to-back copies in one timed run: ceil(4 MiB / bytes) in [1, 256], so a run of small
// copies lasts long enough for event timing.
int copies_per_run(size_t bytes);
// Compares data with the RNG stream element by element (bits, so NaN never passes).
Verification verify_on_host(const float* data, size_t n, const ExpectedValues& expected);

// Makes `device` current while it lives, then restores the device that was current before
// (also when code in between switched devices itself).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    PGP_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) PGP_CUDA_CHECK(cudaSetDevice(device));
  }
  ~CurrentDevice() {
    int now = -1;
    const bool ok = cudaGetDevice(&now) == cudaSuccess && (now == previous_ || cudaSetDevice(previous_) == cudaSuccess);
    if (!ok) cudaGetLastError();  // not sticky; clear it so no later launch check reports it
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace pgp::cuda
