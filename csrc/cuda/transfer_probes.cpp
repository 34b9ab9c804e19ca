// Host <-> device copy-engine bandwidth over pinned host memory: one cudaMemcpyAsync
// per run on the probe's stream. The payload is counted once, as nvbandwidth and
// bandwidthTest report it. Every element is checked on the host afterwards.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/registry.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

constexpr size_t kDefaultBytes = size_t{256} << 20;
constexpr uint64_t kH2DSeed = 0x5452414E53483201ull;
constexpr uint64_t kD2HSeed = 0x5452414E53443202ull;

// Compares host data with the RNG stream element by element (bits, so NaN never passes).
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

class PinnedTransferProbe : public CudaProbe {
 public:
  std::string name() const final { return to_device_ ? "transfer.h2d.pinned" : "transfer.d2h.pinned"; }
  std::string description() const final {
    return std::string(to_device_ ? "Host-to-device" : "Device-to-host") +
           " copy bandwidth, pinned host memory, cudaMemcpyAsync on the copy engine";
  }

  std::optional<std::string> waiver(const Device& dev) const final {
    if (auto reason = device_unavailable_reason(dev.index); !reason.empty()) return reason;
    // The device side is filled by a kernel for D2H and checked on the host either way.
    if (!to_device_)
      if (auto reason = missing_kernel_image_reason(fill_kernel(), dev.index); !reason.empty()) return reason;
    return std::nullopt;
  }

  void setup(const Device& dev, const RunConfig& cfg) final {
    begin_setup(dev);
    const size_t requested = cfg.size_bytes > 0 ? static_cast<size_t>(cfg.size_bytes) : kDefaultBytes;
    n_ = std::max<size_t>(requested / sizeof(float), 1);
    host_ = PinnedBuffer<float>(n_);
    device_ = DeviceBuffer<float>(n_);
    if (to_device_) {
      const auto count = static_cast<int64_t>(n_);
      float* host = host_.get();
      const ExpectedValues values = expected();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) host[i] = values.at(i);
    } else {
      fill_expected(device_.get(), n_, expected(), cuda_stream());
    }
    synchronize();
  }

  Work work() const final {
    Work w;
    w.bytes_read = static_cast<double>(bytes());  // payload once: GB/s = payload / time
    return w;
  }

  void poison() final {
    if (to_device_) {
      poison_bytes(device_.get(), bytes(), cuda_stream());
    } else {
      synchronize();  // no copy may still be writing the host buffer
      std::memset(host_.get(), 0xFF, bytes());
    }
  }

  void run() final {
    if (to_device_) {
      PGP_CUDA_CHECK(cudaMemcpyAsync(device_.get(), host_.get(), bytes(), cudaMemcpyHostToDevice, cuda_stream()));
    } else {
      PGP_CUDA_CHECK(cudaMemcpyAsync(host_.get(), device_.get(), bytes(), cudaMemcpyDeviceToHost, cuda_stream()));
    }
  }

  Verification verify() final {
    synchronize();
    if (!to_device_) return verify_on_host(host_.get(), n_, expected());
    // Read back through a separate, plain copy into pageable memory, so the check does
    // not reuse the path under test.
    std::vector<float> readback(n_);
    PGP_CUDA_CHECK(cudaMemcpy(readback.data(), device_.get(), bytes(), cudaMemcpyDeviceToHost));
    return verify_on_host(readback.data(), n_, expected());
  }

  void teardown() final {
    CudaProbe::teardown();
    host_.reset();
    device_.reset();
  }

  Params params() const final {
    return {{"bytes", std::to_string(bytes())},
            {"host_memory", "pinned"},
            {"engine", "copy engine (cudaMemcpyAsync)"},
            {"counting", "payload bytes once"}};
  }

 protected:
  explicit PinnedTransferProbe(bool to_device) : to_device_(to_device) {}

 private:
  size_t bytes() const { return n_ * sizeof(float); }
  ExpectedValues expected() const { return ExpectedValues::unit_floats(to_device_ ? kH2DSeed : kD2HSeed); }

  bool to_device_;
  size_t n_ = 0;
  PinnedBuffer<float> host_;
  DeviceBuffer<float> device_;
};

class H2DPinnedProbe final : public PinnedTransferProbe {
 public:
  H2DPinnedProbe() : PinnedTransferProbe(true) {}
};

class D2HPinnedProbe final : public PinnedTransferProbe {
 public:
  D2HPinnedProbe() : PinnedTransferProbe(false) {}
};

PGP_REGISTER_PROBE(H2DPinnedProbe);
PGP_REGISTER_PROBE(D2HPinnedProbe);

}  // namespace
}  // namespace pgp::cuda
