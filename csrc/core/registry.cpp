#include "core/registry.h"

#include <algorithm>

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
  // Registration order follows link order; sorted names give a stable, family-grouped suite.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::unique_ptr<Probe>> Registry::implementations(DeviceKind kind, const std::string& name) const {
  std::vector<std::unique_ptr<Probe>> out;
  for (const auto& e : entries_)
    if (e.kind == kind && e.name == name) out.push_back(e.factory());
  if (out.empty())
    throw Error("unknown native probe '" + name + "' for device kind " + (kind == DeviceKind::CPU ? "cpu" : "cuda"));
  return out;
}

std::optional<std::string> Registry::waiver(const Device& dev, const std::string& name) const {
  std::string reasons;
  for (const auto& probe : implementations(dev.kind, name)) {
    auto reason = probe->waiver(dev);
    if (!reason) return std::nullopt;
    reasons += (reasons.empty() ? "" : "; ") + *reason;
  }
  return reasons;
}

std::vector<std::string> Registry::variants(const Device& dev, const std::string& name, bool quick) const {
  std::vector<std::string> out;
  for (const auto& probe : implementations(dev.kind, name)) {
    if (probe->waiver(dev)) continue;
    for (auto& v : probe->variants(dev, quick)) out.push_back(std::move(v));
  }
  return out.empty() ? std::vector<std::string>{""} : out;
}

std::unique_ptr<Probe> Registry::create(const Device& dev, const std::string& name, const std::string& variant) const {
  auto all = implementations(dev.kind, name);
  for (auto& probe : all) {
    if (probe->waiver(dev)) continue;
    const auto vs = probe->variants(dev, false);
    if (variant.empty() || std::find(vs.begin(), vs.end(), variant) != vs.end()) return std::move(probe);
  }
  // Nothing runs it: hand back the first so measure() reports its waiver or the unknown variant.
  return std::move(all.front());
}

}  // namespace pgp
