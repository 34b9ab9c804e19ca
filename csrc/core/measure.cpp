#include <algorithm>
#include <chrono>

#include "core/errors.h"
#include "core/registry.h"
#include "core/timer.h"

namespace pgp {
namespace {

class CpuTimer final : public SampleTimer {
 public:
  explicit CpuTimer(int samples) : begin_(samples), seconds_(samples) {}
  void start(int i) override { begin_[i] = std::chrono::steady_clock::now(); }
  void stop(int i) override {
    seconds_[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_[i]).count();
  }
  std::vector<double> seconds() override { return seconds_; }

 private:
  std::vector<std::chrono::steady_clock::time_point> begin_;
  std::vector<double> seconds_;
};

// Tears the probe down on every exit path, so an exception leaks no device memory.
struct TeardownGuard {
  Probe& probe;
  ~TeardownGuard() {
    try {
      probe.teardown();
    } catch (...) {
    }
  }
};

}  // namespace

std::unique_ptr<SampleTimer> make_cpu_timer(int samples) { return std::make_unique<CpuTimer>(samples); }

MeasureResult measure(Probe& probe, const Device& dev, const RunConfig& cfg) {
  PGP_CHECK(cfg.samples >= 1, "samples must be at least 1, got " + std::to_string(cfg.samples));
  PGP_CHECK(cfg.warmup >= 0, "warmup must be non-negative, got " + std::to_string(cfg.warmup));
  PGP_CHECK(cfg.size_bytes >= 0, "size_bytes must be non-negative");
  if (auto reason = probe.waiver(dev)) throw Error("probe '" + probe.name() + "' is waived: " + *reason);
  if (!cfg.variant.empty()) {
    const auto all = probe.variants(dev, false);
    PGP_CHECK(std::find(all.begin(), all.end(), cfg.variant) != all.end(),
              "probe '" + probe.name() + "' has no variant '" + cfg.variant + "'");
  }

  TeardownGuard guard{probe};  // also when setup() throws halfway
  probe.setup(dev, cfg);
  if (!cfg.poison_after_runs) probe.poison();
  for (int i = 0; i < cfg.warmup; ++i) probe.run();

  auto timer = dev.kind == DeviceKind::CUDA ? make_cuda_timer(cfg.samples, probe.stream(), dev.index)
                                             : make_cpu_timer(cfg.samples);
  for (int i = 0; i < cfg.samples; ++i) {
    timer->start(i);
    probe.run();
    timer->stop(i);
  }
  MeasureResult result;
  result.sample_seconds = timer->seconds();  // synchronizes the device
  if (cfg.poison_after_runs) probe.poison();
  result.verification = probe.verify();
  result.work = probe.work();
  result.params = probe.params();
  return result;
}

}  // namespace pgp
