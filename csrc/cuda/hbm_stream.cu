// HBM stream kernels: one template for read, write, copy, scale and triad, over float,
// float2 or float4 accesses, with a compile-time unroll and cache hints, plus a bulk-copy
// kernel for sm_90. The tables below are the variants the probes list; each entry names
// its kernel by its fields, so a kernel is built only when some variant uses it.
//
// Work is cut into tiles of block x unroll vectors; thread t of a block touches vectors
// t, t + block, ... of its tile, so every warp access is one coalesced run. A block walks
// tiles blockIdx.x, blockIdx.x + gridDim.x, ...: a persistent grid loops, a grid that
// covers the array (BlockTiles) takes one tile per block, like torch's elementwise kernels.
// Plain accesses use no __restrict__, which would let the compiler pick ld.global.nc.
#include <array>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace pgp::cuda {
namespace {

// ---- variant tables ------------------------------------------------------------------

constexpr HbmLoad LD = HbmLoad::Plain;
constexpr HbmLoad CG = HbmLoad::Cg;
constexpr HbmLoad LDCS = HbmLoad::Cs;
constexpr HbmStore ST = HbmStore::Plain;
constexpr HbmStore CS = HbmStore::Cs;
constexpr bool QUICK = true;

constexpr HbmVariant occ(int vec, int unroll, HbmLoad load, HbmStore store, bool quick = false) {
  return {HbmShape::Occupancy, vec, unroll, load, store, 256, 0, 0, quick};
}
constexpr HbmVariant persistent(int blocks_per_sm, int block, int vec, int unroll, HbmLoad load, HbmStore store,
                                bool quick = false) {
  return {HbmShape::Persistent, vec, unroll, load, store, block, blocks_per_sm, 0, quick};
}
constexpr HbmVariant tiles(int block, int vec, int unroll, HbmLoad load, HbmStore store, bool quick = false) {
  return {HbmShape::BlockTiles, vec, unroll, load, store, block, 0, 0, quick};
}
// One thread per block drives the copy engine; `stages` chunks of `chunk_kib` in shared memory.
constexpr HbmVariant bulk(int chunk_kib, int stages, int blocks_per_sm, bool quick = false) {
  return {HbmShape::Bulk, 16, stages, LD, ST, 32, blocks_per_sm, chunk_kib * 1024, quick};
}

// On an H200 (1 GiB arrays) one tile per block beat every persistent grid: by ~1 % on read,
// 7-12 % on write, copy and triad. Blocks start in order, so the addresses in flight stay in
// one narrow window. A block must move >= 4 KiB, or the block launch rate limits (write
// v16.u1.t128: 2 KiB, -27 %). Each list keeps the width, unroll, hint and shape neighbours
// of its winners for comparison; the first entry is the default variant.
constexpr HbmVariant kReadVariants[] = {
    tiles(512, 16, 8, LD, ST, QUICK), tiles(256, 16, 8, LD, ST, QUICK), tiles(1024, 16, 4, LD, ST),
    tiles(512, 16, 4, LD, ST),        tiles(512, 16, 2, LD, ST),        tiles(512, 16, 8, CG, ST),
    tiles(256, 16, 8, LDCS, ST),      tiles(256, 16, 16, LD, ST),       tiles(256, 8, 8, LD, ST),
    tiles(256, 8, 16, LD, ST),        tiles(256, 4, 16, LD, ST),        occ(16, 4, LD, ST),
    occ(16, 8, LD, ST),               occ(16, 4, CG, ST),               persistent(1, 1024, 16, 8, LD, ST),
    persistent(2, 512, 16, 8, LD, ST),
};

constexpr HbmVariant kWriteVariants[] = {
    tiles(256, 16, 1, LD, ST, QUICK), tiles(256, 8, 2, LD, ST, QUICK), tiles(1024, 16, 1, LD, ST),
    tiles(512, 16, 1, LD, ST),        tiles(128, 16, 1, LD, ST),        tiles(128, 16, 2, LD, ST),
    tiles(256, 16, 2, LD, ST),        tiles(512, 16, 2, LD, ST),        tiles(256, 16, 1, LD, CS),
    tiles(256, 16, 4, LD, CS),        tiles(256, 8, 4, LD, ST),         tiles(256, 4, 4, LD, ST),
    tiles(256, 4, 8, LD, ST),         occ(16, 4, LD, ST),               occ(16, 1, LD, ST),
    persistent(2, 512, 16, 4, LD, ST),
};

constexpr HbmVariant kCopyVariants[] = {
    tiles(128, 16, 1, LD, ST, QUICK), tiles(128, 8, 2, LD, ST, QUICK), tiles(128, 16, 1, CG, CS),
    tiles(256, 16, 1, LD, ST),        tiles(256, 8, 2, LD, ST),         tiles(128, 16, 2, LD, ST),
    tiles(256, 16, 2, LD, ST),        tiles(512, 16, 1, LD, ST),        tiles(256, 16, 1, LD, CS),
    tiles(256, 16, 1, CG, ST),        tiles(256, 4, 4, LD, ST),         occ(16, 4, LD, ST),
    occ(16, 1, LD, ST),               persistent(2, 512, 16, 8, LD, ST), bulk(4, 16, 3),
    bulk(32, 3, 2),
};

constexpr HbmVariant kScaleVariants[] = {
    tiles(128, 16, 1, LD, ST, QUICK), tiles(128, 8, 2, LD, ST, QUICK), tiles(128, 16, 1, CG, CS),
    tiles(256, 16, 1, LD, ST),        tiles(256, 8, 2, LD, ST),         tiles(128, 16, 2, LD, ST),
    tiles(256, 16, 2, LD, ST),        tiles(512, 16, 1, LD, ST),        tiles(256, 16, 1, CG, CS),
    tiles(256, 16, 1, LD, CS),        tiles(256, 8, 4, LD, ST),         tiles(256, 4, 4, LD, ST),
    tiles(256, 16, 4, LD, ST),        occ(16, 4, LD, ST),               occ(16, 1, LD, ST),
    persistent(2, 512, 16, 8, LD, ST),
};

constexpr HbmVariant kTriadVariants[] = {
    tiles(1024, 16, 1, LD, ST, QUICK), tiles(128, 16, 1, CG, CS, QUICK), tiles(128, 16, 1, LD, ST),
    tiles(256, 16, 1, LD, ST),         tiles(256, 16, 1, CG, CS),         tiles(1024, 16, 1, CG, CS),
    tiles(512, 16, 1, LD, ST),         tiles(128, 8, 2, LD, ST),          tiles(256, 8, 2, LD, ST),
    tiles(128, 16, 2, LD, ST),         tiles(256, 16, 2, LD, ST),         tiles(256, 8, 4, LD, ST),
    tiles(256, 4, 4, LD, ST),          occ(16, 4, LD, ST),                occ(16, 1, LD, ST),
    persistent(2, 512, 16, 8, LD, ST),
};

// ---- vectors and cache hints -----------------------------------------------------------

template <int Bytes>
struct VectorOf;
template <>
struct VectorOf<4> {
  using type = float;
};
template <>
struct VectorOf<8> {
  using type = float2;
};
template <>
struct VectorOf<16> {
  using type = float4;
};

template <class F>
__device__ float lanewise(F f, float a, float b) {
  return f(a, b);
}
template <class F>
__device__ float2 lanewise(F f, float2 a, float2 b) {
  return make_float2(f(a.x, b.x), f(a.y, b.y));
}
template <class F>
__device__ float4 lanewise(F f, float4 a, float4 b) {
  return make_float4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
}

// Exact: the elements are integers 1..15 and a thread's total stays below 2^24.
__device__ float lane_sum(float v) { return v; }
__device__ float lane_sum(float2 v) { return v.x + v.y; }
__device__ float lane_sum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

template <class Vec>
__device__ Vec splat(float value) {
  const Vec v{};
  return lanewise([value](float, float) { return value; }, v, v);
}

template <HbmLoad Load, class Vec>
__device__ Vec load_vector(const Vec* p) {
  if constexpr (Load == HbmLoad::Cg) return __ldcg(p);
  else if constexpr (Load == HbmLoad::Cs) return __ldcs(p);
  else return *p;
}

template <HbmStore Store, class Vec>
__device__ void store_vector(Vec* p, Vec v) {
  if constexpr (Store == HbmStore::Cs) __stcs(p, v);
  else *p = v;
}

// ---- the stream kernel -------------------------------------------------------------------

// What one access of `Op` loads (load) and then does with it (use).
template <HbmOp Op, class Vec, HbmLoad Load, HbmStore Store>
struct StreamAccess {
  struct Loaded {
    Vec a;
    Vec b;  // triad only
  };
  const Vec* in0;
  const Vec* in1;
  Vec* out;
  float s;

  __device__ explicit StreamAccess(const HbmArrays& arrays)
      : in0(reinterpret_cast<const Vec*>(arrays.in0)),
        in1(reinterpret_cast<const Vec*>(arrays.in1)),
        out(reinterpret_cast<Vec*>(arrays.out)),
        s(arrays.scalar) {}

  __device__ Loaded load(size_t i) const {
    Loaded v{};
    if constexpr (Op != HbmOp::Write) v.a = load_vector<Load>(in0 + i);
    if constexpr (Op == HbmOp::Triad) v.b = load_vector<Load>(in1 + i);
    return v;
  }

  __device__ void use(size_t i, const Loaded& v, float& sum) const {
    const float s = this->s;
    if constexpr (Op == HbmOp::Read) sum += lane_sum(v.a);
    else if constexpr (Op == HbmOp::Write) store_vector<Store>(out + i, splat<Vec>(s));
    else if constexpr (Op == HbmOp::Copy) store_vector<Store>(out + i, v.a);
    else if constexpr (Op == HbmOp::Scale)
      store_vector<Store>(out + i, lanewise([s](float x, float) { return s * x; }, v.a, v.a));
    else
      store_vector<Store>(out + i, lanewise([s](float x, float y) { return x + s * y; }, v.a, v.b));
  }
};

__device__ unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// Integer reduction of the threads' exact fp32 sums: the block total is exact in any order.
__device__ void write_block_sum(float thread_sum, unsigned long long* block_sums) {
  __shared__ unsigned long long warp_totals[32];
  const unsigned lane = threadIdx.x & 31;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned long long total = warp_sum(static_cast<unsigned long long>(thread_sum));
  if (lane == 0) warp_totals[warp] = total;
  __syncthreads();
  if (warp == 0) {
    const unsigned long long block_total = warp_sum(lane < (blockDim.x >> 5) ? warp_totals[lane] : 0ull);
    if (lane == 0) block_sums[blockIdx.x] = block_total;
  }
}

__host__ __device__ constexpr int log2_of(int power_of_two) {
  return power_of_two > 1 ? 1 + log2_of(power_of_two / 2) : 0;
}

template <HbmOp Op, class Vec, int Unroll, HbmLoad Load, HbmStore Store>
__global__ void stream_kernel(HbmArrays arrays) {
  using Access = StreamAccess<Op, Vec, Load, Store>;
  const Access access(arrays);
  const size_t n = arrays.floats / (sizeof(Vec) / sizeof(float));
  const unsigned block = blockDim.x;
  // Shifts, not 64-bit divisions (block and unroll are powers of two): a block that takes a
  // single tile runs only a few dozen instructions, so setup cost would show.
  const int tile_shift = (__ffs(block) - 1) + log2_of(Unroll);
  const size_t full_tiles = n >> tile_shift;
  float sum = 0.0f;
  size_t t = blockIdx.x;
  for (; t < full_tiles; t += gridDim.x) {
    const size_t first = (t << tile_shift) + threadIdx.x;
    // All loads first, then their uses: up to Unroll independent loads in flight per array.
    // Uses run last-loaded first, so ptxas has no early use to hoist between the loads; it
    // still interleaves when it holds a kernel to 32 registers (full occupancy).
    typename Access::Loaded v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) v[u] = access.load(first + u * block);
#pragma unroll
    for (int u = Unroll - 1; u >= 0; --u) access.use(first + u * block, v[u], sum);
  }
  // The partial last tile, guarded, falls to the one block whose turn it is.
  if (t == full_tiles)
    for (size_t i = (full_tiles << tile_shift) + threadIdx.x; i < n; i += block) access.use(i, access.load(i), sum);
  if constexpr (Op == HbmOp::Read) write_block_sum(sum, arrays.block_sums);
}

// ---- bulk copy (sm_90): global -> shared -> global through the copy engine --------------

// Chunks blockIdx.x, blockIdx.x + gridDim.x, ... of the array, `Stages` loads in flight.
// Stage s is reloaded only after the store that read it has finished reading.
template <int ChunkBytes, int Stages>
__global__ void __launch_bounds__(32) bulk_copy_kernel(HbmArrays arrays) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto shared_address = [](const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); };
  static_assert(ChunkBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  extern __shared__ __align__(128) unsigned char stage_data[];
  __shared__ __align__(8) unsigned long long loaded[Stages];
  if (threadIdx.x != 0) return;

  const size_t bytes = arrays.floats * sizeof(float);
  const size_t chunks = (bytes + ChunkBytes - 1) / ChunkBytes;
  const size_t my_chunks = blockIdx.x < chunks ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const auto* src = reinterpret_cast<const unsigned char*>(arrays.in0);
  auto* dst = reinterpret_cast<unsigned char*>(arrays.out);
  const auto offset = [&](size_t k) { return (blockIdx.x + k * gridDim.x) * size_t{ChunkBytes}; };
  const auto size = [&](size_t k) {
    const size_t left = bytes - offset(k);
    return static_cast<uint32_t>(left < ChunkBytes ? left : ChunkBytes);
  };
  const auto issue_load = [&](size_t k) {
    const int s = static_cast<int>(k % Stages);
    const uint32_t barrier = shared_address(&loaded[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(size(k)) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     shared_address(stage_data + s * ChunkBytes)),
                 "l"(src + offset(k)), "r"(size(k)), "r"(barrier)
                 : "memory");
  };

  for (int s = 0; s < Stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&loaded[s])) : "memory");
  // Make the initialised barriers visible to the copy engine (async proxy).
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");

  for (size_t k = 0; k < my_chunks && k < Stages; ++k) issue_load(k);
  for (size_t k = 0; k < my_chunks; ++k) {
    const int s = static_cast<int>(k % Stages);
    const uint32_t parity = static_cast<uint32_t>((k / Stages) & 1);
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(shared_address(&loaded[s])), "r"(parity)
          : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + offset(k)),
                 "r"(shared_address(stage_data + s * ChunkBytes)), "r"(size(k))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Refill the stage of chunk k-1 once its store (all but the newest group) has read it.
    if (k >= 1 && k - 1 + Stages < my_chunks) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      issue_load(k - 1 + Stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

// ---- dispatch ----------------------------------------------------------------------------

using HbmKernel = void (*)(HbmArrays);

template <HbmOp Op, const auto& Table, size_t I>
HbmKernel kernel_of() {
  constexpr HbmVariant v = Table[I];
  if constexpr (v.shape == HbmShape::Bulk) {
    static_assert(Op == HbmOp::Copy, "bulk variants copy");
    return &bulk_copy_kernel<v.chunk_bytes, v.unroll>;
  } else {
    static_assert((v.block & (v.block - 1)) == 0 && (v.unroll & (v.unroll - 1)) == 0,
                  "stream tiles are indexed by shifts: block and unroll must be powers of two");
    return &stream_kernel<Op, typename VectorOf<v.vector_bytes>::type, v.unroll, v.load, v.store>;
  }
}

struct OpTable {
  std::vector<HbmVariant> variants;
  std::vector<HbmKernel> kernels;
};

template <HbmOp Op, const auto& Table, size_t... I>
OpTable make_table(std::index_sequence<I...>) {
  return {{Table[I]...}, {kernel_of<Op, Table, I>()...}};
}

template <HbmOp Op, const auto& Table>
const OpTable& table_for() {
  static const OpTable table = make_table<Op, Table>(std::make_index_sequence<std::size(Table)>());
  return table;
}

const OpTable& table_of(HbmOp op) {
  switch (op) {
    case HbmOp::Read:
      return table_for<HbmOp::Read, kReadVariants>();
    case HbmOp::Write:
      return table_for<HbmOp::Write, kWriteVariants>();
    case HbmOp::Copy:
      return table_for<HbmOp::Copy, kCopyVariants>();
    case HbmOp::Scale:
      return table_for<HbmOp::Scale, kScaleVariants>();
    case HbmOp::Triad:
      break;
  }
  return table_for<HbmOp::Triad, kTriadVariants>();
}

const OpTable& checked_table(HbmOp op, size_t variant) {
  const OpTable& table = table_of(op);
  PGP_CHECK(variant < table.kernels.size(), "HBM variant index " + std::to_string(variant) + " out of range");
  return table;
}

}  // namespace

const std::vector<HbmVariant>& hbm_variants(HbmOp op) { return table_of(op).variants; }

const void* hbm_kernel(HbmOp op, size_t variant) {
  return reinterpret_cast<const void*>(checked_table(op, variant).kernels[variant]);
}

void prepare_hbm_kernel(HbmOp op, size_t variant) {
  const OpTable& table = checked_table(op, variant);
  const size_t smem = hbm_dynamic_smem(table.variants[variant]);
  if (smem > 0)
    PGP_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(table.kernels[variant]),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

void launch_hbm(HbmOp op, size_t variant, const HbmArrays& arrays, int grid, cudaStream_t stream) {
  const OpTable& table = checked_table(op, variant);
  const HbmVariant& v = table.variants[variant];
  HbmArrays args = arrays;
  void* kernel_args[] = {&args};
  PGP_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(table.kernels[variant]), dim3(grid), dim3(v.block),
                                  kernel_args, hbm_dynamic_smem(v), stream));
}

}  // namespace pgp::cuda
