// The CUDA backend's weights: upload, repacking into the GEMV layouts, Q/K/V stacks.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "kernels/gemv/gemv.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace lamina {

namespace kn = kernels;

namespace {

// Q5_0 and IQ4_NL matmul weights are loaded as Q8_0 (format/quant.h: the same values; 34 instead
// of 22 or 18 bytes per 32 weights) where their own planes (gemv_block32_planes.cu) would lose:
//   - in exact mode, as the CPU holds them, for the exact Q8_0 kernels (alone these types would
//     have only the generic GEMV, at 2-8 % of bandwidth);
//   - where k is not a multiple of 256: q3_wgmma_rs cannot read their planes then (TMA's 16-byte
//     row strides), and prompts would go through f16, where Q8_0 keeps q1_mma. These are the
//     matrices Q4_K_M files hold in Q5_0 because no K-quant fits (Gemma 3 270M's: k = 640).
// Elsewhere q_dp4a reads their planes (7B shapes: decode 1.17-1.25x against Q8_0, docs/benchmarks.md).
// `store` keeps the converted bytes until the upload; the tensor returned points at them.
const GgufTensor& q8_0_held(const GgufTensor& t, bool exact, std::vector<uint8_t>& store, GgufTensor& converted) {
  if (!held_as_q8_0(t.type) || (!exact && t.ne[0] % 256 == 0)) return t;
  const int64_t n = t.nelements() / QK;
  store.resize(size_t(n) * sizeof(block_q8_0));
  to_q8_0(t.type, t.data, store.data(), n);
  converted = t;
  converted.type = GgmlType::Q8_0, converted.data = store.data(), converted.nbytes = store.size();
  return converted;
}

}  // namespace

// rows x t.ne[0] weights of t's type from host bytes into dst (repacked on the device if asked).
void CudaBackend::upload_matrix(const GgufTensor& t, const void* host, int64_t rows, bool repack, void* dst) {
  const size_t bytes = row_bytes(t.type, t.ne[0]) * size_t(rows);
  if (!repack) return upload(dst, host, bytes);
  void* tmp = dev_alloc(bytes, "a weight upload");
  upload(tmp, host, bytes);
  const kn::Status st = kn::gemv_repack(t.type, tmp, rows, t.ne[0], dst, stream_);
  cuda_check(cudaStreamSynchronize(stream_), "weight repack");
  cudaFree(tmp);
  check("load", st.ok, st.message);
}

Weight CudaBackend::load_weight(const GgufTensor& file_tensor, WeightUse use) {
  std::vector<uint8_t> store;
  GgufTensor converted;
  const GgufTensor& t = use == WeightUse::Matmul ? q8_0_held(file_tensor, exact_, store, converted) : file_tensor;
  const bool repack = use == WeightUse::Matmul && kn::repacked_layout_preferred(t.type) && !exact_;
  const size_t bytes = repack ? kn::gemv_repacked_bytes(t.type, t.nrows(), t.ne[0]) : t.nbytes;
  void* dst = dev_alloc(bytes, t.name.c_str());
  owned_.push_back(dst);
  upload_matrix(t, t.data, t.nrows(), repack, dst);
  if (use == WeightUse::Matmul && t.type == GgmlType::BF16) act16_ = GgmlType::BF16;
  if (use == WeightUse::Matmul && !float_type(t.type)) int8_x_ = true;
  weight_bytes_ += bytes;
  weights_[dst] = DevWeight{repack, bytes};
  return Weight{t.type, t.ne[0], t.nrows(), dst};
}

// Q/K/V of one type and width become one matrix, so a decode step runs one GEMV over all of
// their rows (three 4096-row GEMVs of a 7B model take ~1.7x the time of one 12288-row GEMV).
std::vector<Weight> CudaBackend::load_stacked(std::span<const GgufTensor* const> file_tensors) {
  std::vector<std::vector<uint8_t>> stores(file_tensors.size());
  std::vector<GgufTensor> converted(file_tensors.size());
  std::vector<const GgufTensor*> ts;
  const auto hold = [&](bool as_q8_0) {
    ts.clear();
    for (size_t i = 0; i < file_tensors.size(); ++i) ts.push_back(&q8_0_held(*file_tensors[i], as_q8_0, stores[i], converted[i]));
    bool same = !ts.empty();
    for (const GgufTensor* t : ts) same = same && t->type == ts[0]->type && t->ne[0] == ts[0]->ne[0];
    return same;
  };
  // Parts of Q5_0 or IQ4_NL beside Q8_0 ones (a Q4_K_M file's Q and K in q5_0, V in q8_0) stack
  // as Q8_0, the one GEMV being worth more than their fewer bytes.
  if (!hold(exact_) && (exact_ || !hold(true))) return Backend::load_stacked(file_tensors);
  const GgufTensor& t0 = *ts[0];
  int64_t rows = 0;
  for (const GgufTensor* t : ts) rows += t->nrows();
  std::vector<uint8_t> host;  // GGUF rows are contiguous: stacking matrices is concatenating bytes
  host.reserve(row_bytes(t0.type, t0.ne[0]) * size_t(rows));
  for (const GgufTensor* t : ts) host.insert(host.end(), t->data, t->data + t->nbytes);
  const bool repack = kn::repacked_layout_preferred(t0.type) && !exact_;
  const size_t bytes = repack ? kn::gemv_repacked_bytes(t0.type, rows, t0.ne[0]) : host.size();
  void* dst = dev_alloc(bytes, t0.name.c_str());
  owned_.push_back(dst);
  upload_matrix(t0, host.data(), rows, repack, dst);
  if (t0.type == GgmlType::BF16) act16_ = GgmlType::BF16;
  if (!float_type(t0.type)) int8_x_ = true;
  weight_bytes_ += bytes;
  std::vector<Weight> out;
  int64_t row0 = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    // GGUF layout: the part's rows are a matrix of their own. Repacked: the planes interleave
    // the parts, so a part is only a key (dst + i) and is multiplied with the whole stack.
    const void* part = static_cast<const char*>(dst) + (repack ? i : size_t(row0) * row_bytes(t0.type, t0.ne[0]));
    DevWeight d{repack, bytes * size_t(ts[i]->nrows()) / size_t(rows), dst, rows, row0, int(i)};
    weights_[part] = d;
    out.push_back(Weight{t0.type, t0.ne[0], ts[i]->nrows(), part});
    row0 += ts[i]->nrows();
  }
  return out;
}

// Host to device on the backend's stream, complete on return (a pageable cudaMemcpy may still
// be in flight when it returns, and the non-blocking stream does not wait for it).
void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
  cuda_check(cudaStreamSynchronize(stream_), "upload");
}

const CudaBackend::DevWeight& CudaBackend::info(const Weight& w) const {
  auto it = weights_.find(w.data);
  if (it == weights_.end()) fail("CUDA backend: a weight that was not loaded by it");
  return it->second;
}

}  // namespace lamina
