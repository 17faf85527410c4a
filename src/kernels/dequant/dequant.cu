// v0 dequantisation kernel: one thread per output element, decoding its block with the same
// per-element formula as the CPU reference (format/quant_decode.h). Writes are coalesced;
// block headers are re-read per element and served by L1. A baseline, not yet tuned.
// With x8 (the decode step's embedding lookup) each warp, which holds 32 consecutive columns of
// one row, also writes their int8 block of v * gain and the block's sum of squares: the input of
// the first layer's Q/K/V GEMV with its RMSNorm applied there (no norm kernel of its own).
// With StagedInputs (the decode step) the lookup reads its token from the pinned staging itself,
// so that the step starts with this kernel instead of a one-block upload kernel before it
// (lookup_staged_kernel: the row the last step sampled decoded while the staging is read).
#include "format/quant_decode.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/dequant/dequant.h"

#include <cuda_runtime.h>
#include <string>

namespace lamina::kernels {
namespace {

template <class Block, int N, float (*Decode)(const Block&, int)>
__global__ void dequantize_rows_kernel(const uint8_t* __restrict__ src, size_t row_stride,
                                       int64_t n_cols, const int32_t* __restrict__ rows,
                                       int64_t n_rows, float* __restrict__ dst, RowsX8 x8) {
  pdl_enter();  // rows may come from the kernel before
  const int64_t total = n_cols * n_rows;  // with x8.q: a multiple of 32, so every warp stays whole
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = idx / n_cols, c = idx % n_cols;
    const Block* blocks = reinterpret_cast<const Block*>(src + size_t(rows ? rows[r] : r) * row_stride);
    const float v = Decode(blocks[c / N], int(c % N));
    dst[idx] = v;
    if (x8.q)
      quantize_block32_ss(v, x8.gain[c], n_cols, c / 32, x8.q + size_t(r) * x8_bytes(n_cols),
                          x8.ss + r * (n_cols / 32) + c / 32);
  }
}

// The decode step's one-row lookup with its token from the staged inputs (one block of
// kStagedThreads; n_cols <= kStagedThreads * kStagedPerThread). Thread 0 reads the staging over
// the bus while every thread already decodes its columns of the row the last step sampled
// (*in.sampled, device memory), the row the staging names whenever it holds -1; only a token
// the host staged itself (a prompt's first step) decodes again after the barrier. So the bus
// read and the row's loads overlap instead of following each other, and each thread issues the
// loads of all its columns before it uses any (the grid-strided loop above waits on one column's
// loads at a time).
constexpr int kStagedThreads = 1024, kStagedPerThread = 8;

template <class Block, int N, float (*Decode)(const Block&, int)>
__global__ void __launch_bounds__(kStagedThreads) lookup_staged_kernel(const uint8_t* __restrict__ src, size_t row_stride,
                                                                      int64_t n_cols, float* __restrict__ dst, RowsX8 x8,
                                                                      StagedInputs in) {
  pdl_enter();  // *in.sampled comes from the step before
  __shared__ int32_t token;
  const int32_t guess = *in.sampled;
  int32_t t = 0, p = 0, stamp = 0;
  if (threadIdx.x == 0) t = in.src[0], p = in.src[in.half], stamp = in.src[2 * in.half];  // one bus round trip
  float v[kStagedPerThread];
  auto decode_row = [&](int64_t row) {
    const Block* blocks = reinterpret_cast<const Block*>(src + size_t(row) * row_stride);
#pragma unroll
    for (int e = 0; e < kStagedPerThread; ++e) {
      const int64_t c = threadIdx.x + int64_t(e) * kStagedThreads;
      v[e] = c < n_cols ? Decode(blocks[c / N], int(c % N)) : 0.f;
    }
  };
  const bool guessed = guess >= 0 && guess < in.table_rows;
  if (guessed) decode_row(guess);
  float gain[kStagedPerThread];  // the norm's weight, loaded with the row
#pragma unroll
  for (int e = 0; e < kStagedPerThread; ++e) {
    const int64_t c = threadIdx.x + int64_t(e) * kStagedThreads;
    gain[e] = x8.q && c < n_cols ? x8.gain[c] : 0.f;
  }
  if (threadIdx.x == 0) {
    token = t < 0 ? guess : t;
    in.dst[0] = token, in.dst[in.half] = p;
    // Issued once the loads above have returned (their values are stored first): the staging
    // has been read, the host may stage the next pass.
    *reinterpret_cast<volatile int32_t*>(in.seen) = stamp;
  }
  __syncthreads();
  if (!guessed || token != guess) decode_row(token);
#pragma unroll
  for (int e = 0; e < kStagedPerThread; ++e) {
    const int64_t c = threadIdx.x + int64_t(e) * kStagedThreads;  // whole warps: n_cols % 32 == 0 with x8
    if (c >= n_cols) break;
    dst[c] = v[e];
    if (x8.q) quantize_block32_ss(v[e], gain[e], n_cols, c / 32, x8.q, x8.ss + c / 32);
  }
}

__device__ float decode_f32(const float& v, int) { return v; }
__device__ float decode_f16(const uint16_t& v, int) { return f16_to_f32(v); }
__device__ float decode_bf16(const uint16_t& v, int) { return bf16_to_f32(v); }

template <class Block, int N, float (*Decode)(const Block&, int)>
void launch(const void* src, size_t row_stride, int64_t n_cols, const int32_t* rows,
            int64_t n_rows, float* dst, const RowsX8& x8, const StagedInputs& in, cudaStream_t stream) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  // Staged inputs: one block, so that one thread reads the staging over the bus (16 blocks that
  // each read it and counted their reads before the stamp measured no faster than the upload
  // kernel and the lookup apart, docs/benchmarks.md).
  if (in.src) return launch_pdl(lookup_staged_kernel<Block, N, Decode>, 1u, unsigned(kStagedThreads), 0, stream, bytes,
                                row_stride, n_cols, dst, x8, in);
  const int threads = 256;
  const int64_t total = n_cols * n_rows;
  const unsigned grid = unsigned(std::min<int64_t>((total + threads - 1) / threads, 65535));
  launch_pdl(dequantize_rows_kernel<Block, N, Decode>, grid, threads, 0, stream, bytes, row_stride, n_cols, rows, n_rows,
             dst, x8);
}

}  // namespace

Status dequantize_rows(GgmlType type, const void* src, int64_t n_cols, const int32_t* rows,
                       int64_t n_rows, float* dst, cudaStream_t stream, const RowsX8& x8, const StagedInputs& in) {
  const TypeTraits& tr = traits(type);
  if (!src || !dst) return Status::error("dequantize_rows: null pointer");
  if (x8.q && (!x8.gain || !x8.ss || n_cols % 32))
    return Status::error("dequantize_rows: int8 blocks need a gain, sums of squares and a multiple of 32 columns");
  if (n_cols <= 0 || n_rows < 0) return Status::error("dequantize_rows: bad shape " + std::to_string(n_rows) + " x " + std::to_string(n_cols));
  if (n_cols % tr.block_elems)
    return Status::error("dequantize_rows: " + std::to_string(n_cols) + " columns is not a multiple of the " +
                         std::string(tr.name) + " block size " + std::to_string(tr.block_elems));
  if (in.src && (rows || n_rows != 1 || !in.dst || !in.sampled || !in.seen || in.half < 1))
    return Status::error("dequantize_rows: staged inputs are for one row, without a row list");
  if (in.src && n_cols > int64_t(kStagedThreads) * kStagedPerThread)
    return Status::error("dequantize_rows: staged inputs are for rows of up to " +
                         std::to_string(kStagedThreads * kStagedPerThread) + " columns, not " + std::to_string(n_cols));
  if (n_rows == 0) return Status::success();
  const size_t stride = row_bytes(type, n_cols);
  switch (type) {
    case GgmlType::F32: launch<float, 1, decode_f32>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::F16: launch<uint16_t, 1, decode_f16>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::BF16: launch<uint16_t, 1, decode_bf16>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q4_0: launch<block_q4_0, QK, decode_q4_0>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q4_1: launch<block_q4_1, QK, decode_q4_1>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q5_0: launch<block_q5_0, QK, decode_q5_0>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q5_1: launch<block_q5_1, QK, decode_q5_1>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q8_0: launch<block_q8_0, QK, decode_q8_0>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q8_1: launch<block_q8_1, QK, decode_q8_1>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q2_K: launch<block_q2_K, QK_K, decode_q2_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q3_K: launch<block_q3_K, QK_K, decode_q3_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q4_K: launch<block_q4_K, QK_K, decode_q4_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q5_K: launch<block_q5_K, QK_K, decode_q5_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q6_K: launch<block_q6_K, QK_K, decode_q6_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::Q8_K: launch<block_q8_K, QK_K, decode_q8_K>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::IQ4_NL: launch<block_iq4_nl, QK, decode_iq4_nl>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
    case GgmlType::IQ4_XS: launch<block_iq4_xs, QK_K, decode_iq4_xs>(src, stride, n_cols, rows, n_rows, dst, x8, in, stream); break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Status::error(std::string("dequantize_rows: launch failed: ") + cudaGetErrorString(err));
  return Status::success();
}

}  // namespace lamina::kernels
