// The one op-registration layer: every schema of the pygpuperf namespace is here.
// Typed Python wrappers live in pygpuperf/native.py.
#include <Python.h>
#include <torch/library.h>

#include "core/errors.h"
#include "core/registry.h"

namespace {

pgp::DeviceKind kind_of(const std::string& device_type) {
  if (device_type == "cpu") return pgp::DeviceKind::CPU;
  if (device_type == "cuda") return pgp::DeviceKind::CUDA;
  TORCH_CHECK(false, "pygpuperf native probes run on 'cpu' or 'cuda', not '", device_type, "'");
}

pgp::Device to_native(const c10::Device& device) {
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "pygpuperf native probes run on cpu or cuda, not ",
              device.str());
  return {device.is_cuda() ? pgp::DeviceKind::CUDA : pgp::DeviceKind::CPU,
          device.has_index() ? device.index() : 0};
}

c10::Dict<std::string, std::string> build_info() {
  c10::Dict<std::string, std::string> info;
#ifdef PGP_WITH_CUDA
  info.insert("cuda", "1");
  info.insert("cuda_archs", PGP_CUDA_ARCHS);
  info.insert("cuda_compiler_version", PGP_CUDA_COMPILER_VERSION);
#else
  info.insert("cuda", "0");
#endif
  info.insert("cxx_compiler", PGP_CXX_COMPILER);
  info.insert("torch", PGP_TORCH_VERSION);
  return info;
}

std::vector<std::string> list_probes(const std::string& device_type, const std::string& pattern) {
  return pgp::Registry::instance().filter(kind_of(device_type), pattern);
}

std::string describe_probe(const std::string& device_type, const std::string& name) {
  std::string text;
  for (const auto& probe : pgp::Registry::instance().implementations(kind_of(device_type), name))
    text += (text.empty() ? "" : " | ") + probe->description();
  return text;
}

std::string probe_waiver(const std::string& name, const c10::Device& device) {
  return pgp::Registry::instance().waiver(to_native(device), name).value_or("");
}

std::vector<std::string> probe_variants(const std::string& name, const c10::Device& device, bool quick) {
  return pgp::Registry::instance().variants(to_native(device), name, quick);
}

std::tuple<std::vector<double>, double, double, double, double, bool, std::string,
           c10::Dict<std::string, std::string>>
run_probe(const std::string& name, const c10::Device& device, const std::string& variant, int64_t warmup,
          int64_t samples, int64_t size_bytes, bool poison_after_runs) {
  const auto dev = to_native(device);
  auto probe = pgp::Registry::instance().create(dev, name, variant);
  pgp::RunConfig cfg;
  cfg.warmup = static_cast<int>(warmup);
  cfg.samples = static_cast<int>(samples);
  cfg.size_bytes = size_bytes;
  cfg.poison_after_runs = poison_after_runs;
  cfg.variant = variant;
  const auto r = pgp::measure(*probe, dev, cfg);
  c10::Dict<std::string, std::string> params;
  for (const auto& [k, v] : r.params) params.insert(k, v);
  if (!variant.empty()) params.insert("variant", variant);
  return {r.sample_seconds,         r.work.bytes_read,   r.work.bytes_written, r.work.flops, r.work.operations,
          r.verification.passed, r.verification.detail, params};
}

}  // namespace

TORCH_LIBRARY(pygpuperf, m) {
  m.def("build_info() -> Dict(str, str)", &build_info);
  m.def("list_probes(str device_type, str pattern) -> str[]", &list_probes);
  m.def("describe_probe(str device_type, str name) -> str", &describe_probe);
  m.def("probe_waiver(str name, Device device) -> str", &probe_waiver);
  m.def("probe_variants(str name, Device device, bool quick) -> str[]", &probe_variants);
  m.def(
      "run_probe(str name, Device device, str variant, int warmup, int samples, int size_bytes, "
      "bool poison_after_runs) -> (float[] sample_seconds, float bytes_read, float bytes_written, float flops, "
      "float operations, bool verified, str verify_detail, Dict(str, str) params)",
      &run_probe);
}

// `import pygpuperf._C` loads this library, which registers the ops above.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "pygpuperf native probes (ops in torch.ops.pygpuperf)",
                                   -1, nullptr, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&module_def);
}
