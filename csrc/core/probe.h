// The one probe interface (BabelStream-style): every native measurement is a Probe.
//
// The framework (measure.cpp) owns the sequence, so no probe can skip a step:
//   setup -> poison -> warm-up runs -> timed runs -> verify -> teardown.
// A probe declares the bytes and FLOPs of one run; throughput is derived in one
// place (Python: pygpuperf.results.throughput) from those and the sample times.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pgp {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;
};

// What one timed run moves and computes. 1 GB = 1e9 B; an FMA counts as 2 FLOPs.
struct Work {
  double bytes_read = 0;
  double bytes_written = 0;
  double flops = 0;
  // Dependent operations of one run (latency probes: loads in the pointer chase).
  double operations = 0;
};

struct RunConfig {
  int warmup = 3;
  int samples = 20;
  // Requested working-set size in bytes; 0 lets the probe size itself from the device.
  int64_t size_bytes = 0;
  // Test hook: poison outputs *after* the timed runs, so verify() must report failure.
  bool poison_after_runs = false;
  // One of Probe::variants() (vector width, unroll, cache hints, window size, ...); "" = the first.
  std::string variant;
};

struct Verification {
  bool passed = false;
  std::string detail;
};

using Params = std::map<std::string, std::string>;

class Probe {
 public:
  virtual ~Probe() = default;
  // Stable measurement name, e.g. "memory.hbm.copy".
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual DeviceKind device_kind() const = 0;
  // Empty when the probe can run on `dev`, otherwise why it is waived.
  virtual std::optional<std::string> waiver(const Device& dev) const { return std::nullopt; }
  // Implementation variants measured under this one name; the best one sets the ceiling.
  // `quick` asks for the few that matter most (the --quick suite).
  virtual std::vector<std::string> variants(const Device& dev, bool quick) const { return {""}; }

  // Allocate and fill inputs with random non-zero data. Called once per measurement.
  virtual void setup(const Device& dev, const RunConfig& cfg) = 0;
  // Bytes and FLOPs of one run; valid after setup().
  virtual Work work() const = 0;
  // Overwrite every output with a value no correct run produces.
  virtual void poison() = 0;
  // One timed unit of work. On a GPU it is enqueued on stream(), not awaited.
  virtual void run() = 0;
  // Check the outputs of the last run against an independent reference.
  virtual Verification verify() = 0;
  virtual void teardown() {}
  // Parameters worth reporting (vector width, grid, buffer size, instruction, ...).
  virtual Params params() const { return {}; }
  // The CUDA stream runs are enqueued on (cudaStream_t); nullptr for CPU probes.
  virtual void* stream() const { return nullptr; }
};

using ProbeFactory = std::unique_ptr<Probe> (*)();

struct MeasureResult {
  std::vector<double> sample_seconds;
  Work work;
  Verification verification;
  Params params;
};

}  // namespace pgp
