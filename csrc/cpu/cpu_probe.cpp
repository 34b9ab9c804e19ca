#include "cpu/cpu_probe.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "core/errors.h"

namespace pgp::cpu {
namespace {

constexpr int64_t kFallbackL3Bytes = 32ll << 20;
constexpr size_t kHugePageBytes = 2u << 20;

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// sysfs sizes look like "32768K"; returns 0 when unreadable.
int64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || value <= 0) return 0;
  switch (*end) {
    case 'K': return value << 10;
    case 'M': return value << 20;
    case 'G': return value << 30;
    default: return value;
  }
}

// The kernel's view, one entry per L3 instance (keyed by the CPUs sharing it), so a
// multi-CCX or multi-socket machine reports its total. sysconf is only the fallback:
// under some hypervisors glibc derives a wrong L3 size from CPUID (320 MiB on a
// 32 MiB VM was seen).
int64_t l3_bytes_from_sysfs() {
  std::map<std::string, int64_t> instances;
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  for (long cpu = 0; cpu < cpus; ++cpu) {
    for (int index = 0; index < 16; ++index) {
      const std::string dir =
          "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
      const std::string level = read_line(dir + "level");
      if (level.empty()) break;  // no more cache levels for this CPU
      if (level != "3") continue;
      const int64_t size = parse_size(read_line(dir + "size"));
      if (size > 0) instances[read_line(dir + "shared_cpu_list")] = size;
    }
  }
  int64_t total = 0;
  for (const auto& [cpu_list, size] : instances) total += size;
  return total;
}

}  // namespace

int64_t l3_cache_bytes() {
  static const int64_t bytes = [] {
    if (const int64_t from_sysfs = l3_bytes_from_sysfs(); from_sysfs > 0) return from_sysfs;
    if (const long from_libc = sysconf(_SC_LEVEL3_CACHE_SIZE); from_libc > 0) return int64_t{from_libc};
    return kFallbackL3Bytes;
  }();
  return bytes;
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
}

std::string format_double(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  return buf;  // nan: never equal to itself; "%.17g" prints "nan"
}

std::string format_bytes(int64_t bytes) {
  const char* unit = "B";
  double value = static_cast<double>(bytes);
  if (bytes >= (1ll << 30)) {
    unit = "GiB";
    value /= 1ll << 30;
  } else if (bytes >= (1ll << 20)) {
    unit = "MiB";
    value /= 1ll << 20;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, value == static_cast<double>(static_cast<int64_t>(value)) ? "%.0f %s" : "%.1f %s",
                value, unit);
  return buf;
}

void* aligned_allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t alignment = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc needs a multiple
  void* ptr = std::aligned_alloc(alignment, rounded);
  if (ptr == nullptr)
    throw_error("could not allocate " + format_bytes(static_cast<int64_t>(bytes)) +
                    " of host memory; pass a smaller size_bytes",
                __FILE__, __LINE__);
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePageBytes) madvise(ptr, rounded, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
  return ptr;
}

void aligned_free(void* ptr) { std::free(ptr); }

}  // namespace pgp::cpu
