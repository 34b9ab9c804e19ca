// nvbandwidth-style registry of named probes, selectable by exact name or prefix.
// Several implementations may share one stable name (mma.sync and wgmma both measure
// compute.tensor.fp16.acc32): each contributes its variants, and the suite keeps the best.
#pragma once
#include <string>
#include <vector>

#include "core/probe.h"

namespace pgp {

class Registry {
 public:
  static Registry& instance();
  void add(ProbeFactory factory);
  // Distinct names for one device kind, sorted.
  std::vector<std::string> names(DeviceKind kind) const;
  // Names equal to `pattern` or starting with `pattern` + "."; "" selects all.
  std::vector<std::string> filter(DeviceKind kind, const std::string& pattern) const;
  // Every implementation registered under `name`; throws pgp::Error naming the probe if none.
  std::vector<std::unique_ptr<Probe>> implementations(DeviceKind kind, const std::string& name) const;
  // The implementation that runs `variant` on `dev` ("" = the first one not waived there).
  std::unique_ptr<Probe> create(const Device& dev, const std::string& name, const std::string& variant) const;
  // Empty when some implementation of `name` runs on `dev`, else every implementation's reason.
  std::optional<std::string> waiver(const Device& dev, const std::string& name) const;
  // The variants of every implementation of `name` that is not waived on `dev`.
  std::vector<std::string> variants(const Device& dev, const std::string& name, bool quick) const;

 private:
  struct Entry {
    std::string name;
    DeviceKind kind;
    ProbeFactory factory;
  };
  std::vector<Entry> entries_;
};

// Registers a probe type at load time: PGP_REGISTER_PROBE(MyProbe).
template <typename P>
struct ProbeRegistration {
  ProbeRegistration() {
    Registry::instance().add([]() -> std::unique_ptr<Probe> { return std::make_unique<P>(); });
  }
};

#define PGP_CONCAT_INNER(a, b) a##b
#define PGP_CONCAT(a, b) PGP_CONCAT_INNER(a, b)
#define PGP_REGISTER_PROBE(...) \
  static ::pgp::ProbeRegistration<__VA_ARGS__> PGP_CONCAT(pgp_probe_registration_, __COUNTER__)

// Runs the fixed sequence of probe.h and returns per-sample times.
MeasureResult measure(Probe& probe, const Device& dev, const RunConfig& cfg);

}  // namespace pgp
