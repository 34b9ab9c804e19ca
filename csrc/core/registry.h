// nvbandwidth-style registry of named probes, selectable by exact name or prefix.
#pragma once
#include <string>
#include <vector>

#include "core/probe.h"

namespace pgp {

class Registry {
 public:
  static Registry& instance();
  void add(ProbeFactory factory);
  // Names for one device kind, in registration order.
  std::vector<std::string> names(DeviceKind kind) const;
  // Names equal to `pattern` or starting with `pattern` + "."; "" selects all.
  std::vector<std::string> filter(DeviceKind kind, const std::string& pattern) const;
  // Throws pgp::Error naming the probe when it does not exist for this device kind.
  std::unique_ptr<Probe> create(DeviceKind kind, const std::string& name) const;

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
