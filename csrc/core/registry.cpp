#include "core/registry.h"

#include "core/errors.h"

namespace pgp {

Registry& Registry::instance() {
  static Registry registry;
  return registry;
}

void Registry::add(ProbeFactory factory) {
  auto probe = factory();
  entries_.push_back({probe->name(), probe->device_kind(), factory});
}

std::vector<std::string> Registry::names(DeviceKind kind) const { return filter(kind, ""); }

std::vector<std::string> Registry::filter(DeviceKind kind, const std::string& pattern) const {
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    if (e.kind != kind) continue;
    const bool match = pattern.empty() || e.name == pattern ||
                       (e.name.size() > pattern.size() && e.name.compare(0, pattern.size(), pattern) == 0 &&
                        e.name[pattern.size()] == '.');
    if (match) out.push_back(e.name);
  }
  return out;
}

std::unique_ptr<Probe> Registry::create(DeviceKind kind, const std::string& name) const {
  for (const auto& e : entries_)
    if (e.kind == kind && e.name == name) return e.factory();
  throw Error("unknown native probe '" + name + "' for device kind " +
              (kind == DeviceKind::CPU ? "cpu" : "cuda"));
}

}  // namespace pgp
