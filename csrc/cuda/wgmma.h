// Hopper warpgroup MMA (wgmma.mma_async, sm_90a) throughput kernels: the layouts the
// kernels, the host image builder and the host reference share, and the host entry
// points of wgmma.cu. Plain C++ and nvcc alike; no torch.
//
// Shared-memory operand layout (PTX ISA, "Asynchronous Warpgroup Level Matrix Shared
// Memory Layout" and "Matrix Descriptor Format"; CUTLASS cute GMMA::Layout_K_INTER_Atom):
// A (64 x K) and B (K x N, stored as N rows of K) are both K-major, without swizzle
// (descriptor layout type 0). Every wgmma reads 32 bytes of K per row, whatever the
// type (16 f16/bf16, 8 tf32, 32 e4m3/s8), i.e. two "core matrices" of 8 rows x 16 bytes
// side by side along K. A core matrix is 128 contiguous bytes, row r at 16 * (r % 8).
//   leading-dimension byte offset (LBO): between the two core matrices along K  = 128
//   stride-dimension byte offset  (SBO): between row groups of 8 along M or N   = 256
// so byte b of row r lives at (r / 8) * 256 + (b / 16) * 128 + (r % 8) * 16 + b % 16.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define PGP_WGMMA_HD __host__ __device__
#else
#define PGP_WGMMA_HD
#endif

namespace pgp::cuda {

// Input x input -> accumulator combinations of the probes.
enum class WgmmaType : uint8_t { F16F32, F16F16, BF16F32, TF32F32, E4M3F32, E4M3F16, S8S32 };
// A from shared memory through a descriptor (".ss") or from registers (".rs").
enum class WgmmaASource : uint8_t { Shared, Registers };

constexpr int kWgmmaM = 64;
constexpr int kWgmmaRowBytes = 32;  // bytes of K per operand row and instruction, every type
constexpr int kWgmmaWarpgroupThreads = 128;
constexpr int kWgmmaWarpgroupsPerBlock = 2;
constexpr int kWgmmaBlock = kWgmmaWarpgroupThreads * kWgmmaWarpgroupsPerBlock;
// wgmma per commit group: two (+B, -B) pairs, so the accumulator is back at C after each.
constexpr int kWgmmaPerGroup = 4;
constexpr int kWgmmaNs[] = {256, 128, 64};

// Descriptor strides of the layout above (bytes).
constexpr int kWgmmaCoreRows = 8;
constexpr int kWgmmaCoreBytes = 16 * kWgmmaCoreRows;                    // one core matrix: 8 rows x 16 bytes
constexpr int kWgmmaLeadingByteOffset = kWgmmaCoreBytes;                // next 16 bytes of K
constexpr int kWgmmaStrideByteOffset = kWgmmaCoreBytes * (kWgmmaRowBytes / 16);  // next 8 rows

// The one element -> shared-memory mapping: byte `byte_in_row` (0..31) of operand row
// `row` (A: m, B: n) sits this many bytes from the operand's start. Used by the host
// to build the images the kernel copies verbatim, by the kernel to read register
// fragments of A, and by the host reference to read A and B back.
PGP_WGMMA_HD constexpr int wgmma_operand_offset(int row, int byte_in_row) {
  return (row / kWgmmaCoreRows) * kWgmmaStrideByteOffset + (byte_in_row / 16) * kWgmmaLeadingByteOffset +
         (row % kWgmmaCoreRows) * 16 + byte_in_row % 16;
}
PGP_WGMMA_HD constexpr int wgmma_operand_bytes(int rows) { return rows * kWgmmaRowBytes; }

// Accumulator fragment (PTX ISA "Register Fragments and Shared Memory Matrix Layouts",
// wgmma D for .m64nN; CUTLASS GMMA::CLayout_64xN): thread t of the warpgroup holds N/2
// values; value v is at row 16 * (t / 32) + (t % 32) / 4 + 8 * ((v / 2) % 2) and column
// 8 * (v / 4) + 2 * (t % 4) + v % 2. 32-bit accumulators (f32, s32) hold value v in
// register v; f16 accumulators pack values 2r (low half) and 2r + 1 (high half) into r.
PGP_WGMMA_HD constexpr int wgmma_d_row(int thread, int value) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * ((value / 2) % 2);
}
PGP_WGMMA_HD constexpr int wgmma_d_col(int thread, int value) { return 8 * (value / 4) + 2 * (thread % 4) + value % 2; }

// A register fragment (".rs"; same PTX section, wgmma A for .m64nNk16 / k8 / k32, all
// four .b32 registers; CUTLASS ALayout_64x16 / 64x8 / 64x32): register i of thread t
// holds the 4 bytes of A row wgmma_a_row(t, i) starting at byte wgmma_a_byte(t, i).
PGP_WGMMA_HD constexpr int wgmma_a_row(int thread, int reg) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * (reg % 2);
}
PGP_WGMMA_HD constexpr int wgmma_a_byte(int thread, int reg) { return 16 * (reg / 2) + 4 * (thread % 4); }
constexpr int kWgmmaARegisters = 4;

// PTX type suffixes, "<d>.<a>.<b>", shared by the kernels' asm and the reported opcode.
#define PGP_WGMMA_TYPES_F16F32 "f32.f16.f16"
#define PGP_WGMMA_TYPES_F16F16 "f16.f16.f16"
#define PGP_WGMMA_TYPES_BF16F32 "f32.bf16.bf16"
#define PGP_WGMMA_TYPES_TF32F32 "f32.tf32.tf32"
#define PGP_WGMMA_TYPES_E4M3F32 "f32.e4m3.e4m3"
#define PGP_WGMMA_TYPES_E4M3F16 "f16.e4m3.e4m3"
#define PGP_WGMMA_TYPES_S8S32 "s32.s8.s8"

enum class WgmmaInput : uint8_t { F16, BF16, TF32, E4M3, S8 };
enum class WgmmaAccumulator : uint8_t { F32, F16, S32 };

struct WgmmaTypeInfo {
  WgmmaInput input;
  WgmmaAccumulator accumulator;
  int element_bytes;
  int k;  // kWgmmaRowBytes / element_bytes
  const char* ptx_types;
  // Dense tensor FLOP (or integer OP) per clock per SM on Hopper, sizes the runs.
  int ops_per_clock_per_sm;
};

PGP_WGMMA_HD constexpr WgmmaTypeInfo wgmma_type_info(WgmmaType t) {
  switch (t) {
    case WgmmaType::F16F32: return {WgmmaInput::F16, WgmmaAccumulator::F32, 2, 16, PGP_WGMMA_TYPES_F16F32, 4096};
    case WgmmaType::F16F16: return {WgmmaInput::F16, WgmmaAccumulator::F16, 2, 16, PGP_WGMMA_TYPES_F16F16, 4096};
    case WgmmaType::BF16F32: return {WgmmaInput::BF16, WgmmaAccumulator::F32, 2, 16, PGP_WGMMA_TYPES_BF16F32, 4096};
    case WgmmaType::TF32F32: return {WgmmaInput::TF32, WgmmaAccumulator::F32, 4, 8, PGP_WGMMA_TYPES_TF32F32, 2048};
    case WgmmaType::E4M3F32: return {WgmmaInput::E4M3, WgmmaAccumulator::F32, 1, 32, PGP_WGMMA_TYPES_E4M3F32, 8192};
    case WgmmaType::E4M3F16: return {WgmmaInput::E4M3, WgmmaAccumulator::F16, 1, 32, PGP_WGMMA_TYPES_E4M3F16, 8192};
    case WgmmaType::S8S32: return {WgmmaInput::S8, WgmmaAccumulator::S32, 1, 32, PGP_WGMMA_TYPES_S8S32, 8192};
  }
  return {WgmmaInput::F16, WgmmaAccumulator::F32, 2, 16, PGP_WGMMA_TYPES_F16F32, 4096};
}

// 32-bit accumulator registers per thread: N/2 values, two per register for f16.
PGP_WGMMA_HD constexpr int wgmma_accumulator_registers(WgmmaType t, int n) {
  return wgmma_type_info(t).accumulator == WgmmaAccumulator::F16 ? n / 4 : n / 2;
}

// "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
std::string wgmma_opcode(WgmmaType t, int n);

// The kernel of one variant; nullptr when n is not one of kWgmmaNs.
const void* wgmma_kernel(WgmmaType t, int n, WgmmaASource source);
// Once per measurement: cudaFuncGetAttributes of the kernel (registers, local memory).
cudaFuncAttributes wgmma_kernel_attributes(WgmmaType t, int n, WgmmaASource source);

// "" when the device's kernel image of this build carries the sm_90a wgmma code; else
// why not (the cc 9.0 image came from a plain sm_90 pass, whose kernel bodies are
// empty because wgmma needs the architecture-specific target). Launches a one-thread
// kernel on first use per device; the answer is cached.
std::string wgmma_missing_sm90a_reason(int device);

// One run. `image` (device) holds A, B and -B, each wgmma_operand_bytes(rows) in the
// layout above: A at 0 (64 rows), B at wgmma_operand_bytes(64) (n rows), -B right after
// B. `c` holds one warpgroup's accumulator registers, c[r * 128 + t] for register r of
// thread t. Each warpgroup loads c, runs `iters` commit groups of
// +B, -B, +B, -B and then one more +B, so D = C + A * B, and writes register r of
// thread t of global warpgroup w to out[(w * registers + r) * 128 + t].
void launch_wgmma(WgmmaType t, int n, WgmmaASource source, const uint8_t* image, const uint32_t* c, uint32_t* out,
                  int iters, int grid, cudaStream_t stream);

}  // namespace pgp::cuda
