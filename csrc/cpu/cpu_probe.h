// Shared helpers for CPU probes: a counter-based RNG, cache and memory facts,
// aligned buffers, and the OpenMP work split every CPU kernel uses.
#pragma once
#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pgp::cpu {

// ---- Counter-based RNG: value i of stream `seed` needs no state, so any thread
// can regenerate any element (for first-touch init and for independent references).
inline uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t hash64(uint64_t seed, uint64_t index) {
  return mix64(mix64(seed) + (index + 1) * 0x9E3779B97F4A7C15ull);
}

// Integer in [lo, hi]; callers pass lo >= 1 so the value is never zero.
inline int64_t random_int(uint64_t seed, uint64_t index, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(hash64(seed, index) % static_cast<uint64_t>(hi - lo + 1));
}

// Double in [1, 2), never zero.
inline double random_in_1_2(uint64_t seed, uint64_t index) {
  return 1.0 + static_cast<double>(hash64(seed, index) >> 11) * 0x1.0p-53;
}

// ---- Machine facts.
// Total last-level (L3) cache of the machine in bytes: the distinct L3 instances of
// sysfs summed, else sysconf(_SC_LEVEL3_CACHE_SIZE), else 32 MiB.
int64_t l3_cache_bytes();
int64_t physical_memory_bytes();
// OpenMP threads a probe uses (OMP_NUM_THREADS or the online cores).
inline int cpu_threads() { return omp_get_max_threads(); }

// "12", "nan", "0.10000000000000001": shortest form that round-trips a double.
std::string format_double(double v);
// "128 MiB" / "1.5 GiB" / "4096 B".
std::string format_bytes(int64_t bytes);

// ---- Memory owned for one measurement: 64-byte aligned (a cache line), and for large
// buffers 2 MiB aligned with transparent huge pages requested, so the TLB does not
// cap DRAM bandwidth. Throws pgp::Error when the allocation fails.
void* aligned_allocate(size_t bytes);
void aligned_free(void* ptr);

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count)
      : ptr_(static_cast<T*>(aligned_allocate(count * sizeof(T)))), count_(count) {}
  ~AlignedBuffer() { aligned_free(ptr_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      aligned_free(ptr_);
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  void reset() { *this = AlignedBuffer(); }
  T* data() const { return ptr_; }
  T& operator[](size_t i) const { return ptr_[i]; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// ---- Work split. Part p of `parts` covers [begin, end) of n elements, in whole
// granules, so every kernel, initialiser and checker touches the same elements from
// the same thread (first-touch placement) and parts start on cache-line boundaries.
struct Range {
  size_t begin;
  size_t end;
};

inline Range part_of(size_t n, size_t granule, int part, int parts) {
  const size_t granules = n / granule;
  return {granules * part / parts * granule,
          part + 1 == parts ? n : granules * (part + 1) / parts * granule};
}

// Calls fn(part) for part in [0, parts), part p on OpenMP thread p. If the runtime
// grants a smaller team, threads take several parts, so no part is ever skipped.
// fn must not throw: an exception cannot leave an OpenMP region.
template <typename Fn>
void for_each_part(int parts, Fn&& fn) {
#pragma omp parallel num_threads(parts)
  for (int p = omp_get_thread_num(); p < parts; p += omp_get_num_threads()) fn(p);
}

}  // namespace pgp::cpu
