#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"

#include "format/gguf.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/common/timing.h"
#include "kernels/dequant/dequant.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"
#include "core/units.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lamina {

namespace kn = kernels;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

CudaBackend::CudaBackend(int device, bool exact, const CudaOptions& o)
    : device_(device),
      exact_(exact),
      single_pass_attention_(o.single_pass_attention),
      lookup_upload_(o.staged_lookup),
      fused_argmax_(o.fused_argmax),
      graphs_enabled_(o.graphs),
      run_ahead_(o.run_ahead),
      plan_parts_(o.prompt_plan_parts),
      paged_prefill_(o.paged_prefill),
      gated_gemm_(o.gated_gemm),
      moe_pairs_per_expert_(o.moe_pairs_per_expert),
      moe_down_launch_(o.moe_down_launch),
      gemv_max_rows_(o.gemv_max_rows),
      window_ring_(o.window_ring) {
  nccl_ = o.nccl, all_reduce_ = o.all_reduce;
  peer_ = all_reduce_ == CudaOptions::AllReduce::Nccl ? nullptr : o.peer;
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  gpu_name_ = prop.name;
  sm_count_ = prop.multiProcessorCount;
  bool known = false;
  for (auto r : kn::kPrefillAttentionRungs)
    if (o.prefill_attention == kn::prefill_attention_name(r)) prefill_attention_ = r, known = true;
  check("init", known, fmt::format("prefill attention '{}' names no prompt-attention kernel", o.prefill_attention));
  known = false;
  for (auto r : {kn::DecodeAttention::Split, kn::DecodeAttention::Mma})
    if (o.decode_attention == kn::decode_attention_name(r)) decode_attention_ = r, known = true;
  check("init", known, fmt::format("decode attention '{}' names no decode-attention kernel", o.decode_attention));
  check("init", o.gemv_max_rows >= 1 && o.gemv_max_rows <= kn::kGemvMaxBatch,
        fmt::format("--gemv-max-rows {}: 1 to {}", o.gemv_max_rows, kn::kGemvMaxBatch));
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreateWithFlags(&sampled_, cudaEventDisableTiming), "cudaEventCreate");
  // Pinned words the kernels write for the host: the sampled id, the inputs' stamp.
  for (int32_t** p : {&host_id_, &seen_}) {
    cuda_check(cudaMallocHost(p, 2 * sizeof(int32_t)), "cudaMallocHost");
    (*p)[0] = (*p)[1] = 0;
  }
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_id_dev_), host_id_, 0), "cudaHostGetDevicePointer");
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&seen_dev_), seen_, 0), "cudaHostGetDevicePointer");
  // The last sampled id, or argmax_rows' ids (the tokens of a step running ahead).
  dev_sampled_ = static_cast<int32_t*>(dev_alloc(kSampledRows * sizeof(int32_t), "sampling"));
  owned_.push_back(dev_sampled_);
  cuda_check(cudaMemset(dev_sampled_, 0, kSampledRows * sizeof(int32_t)), "cudaMemset");
  cuda_check(cudaMallocHost(&host_ids_, kSampledRows * sizeof(int32_t)), "cudaMallocHost");
  // The logits GEMV's argmax key and count (device words, zero between launches).
  argmax_words_ = static_cast<unsigned long long*>(dev_alloc(2 * sizeof(unsigned long long), "sampling"));
  owned_.push_back(argmax_words_);
  cuda_check(cudaMemset(argmax_words_, 0, 2 * sizeof(unsigned long long)), "cudaMemset");
  if (o.graph_timing) graph_timing_ = std::make_unique<GraphTiming>();
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  if (graph_timing_) {
    std::fputs(graph_timing_->report().c_str(), stderr);
    std::fprintf(stderr, "graphs: %ld recorded, %ld dropped because buffers moved\n", graphs_recorded_, graphs_dropped_);
    if (ahead_rows_launched_)
      std::fprintf(stderr, "engine steps run ahead: %ld, taken by the next step: %ld\n", ahead_rows_launched_, ahead_rows_taken_);
  }
  for (auto& [k, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  for (void* p : owned_) cudaFree(p);
  for (auto& e : event_pool_) cudaEventDestroy(e);
  for (auto& c : scratch_) cudaFree(c.base);
  for (auto& [h, d] : freq_factors_) cudaFree(d);
  cudaFree(dev_in_);
  cudaFreeHost(host_in_);
  cudaFree(dev_paged_);
  cudaFreeHost(host_paged_);
  cudaFreeHost(host_id_);
  cudaFreeHost(host_ids_);
  cudaFreeHost(seen_);
  cudaEventDestroy(sampled_);
  cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return "CUDA " + gpu_name_; }

void* CudaBackend::dev_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
    cudaGetLastError();
    fail("out of GPU memory allocating {} for {} ({} available, {} in use by lamina)", format_bytes(bytes), what,
         format_bytes(memory_available()), format_bytes(memory_used()));
  }
  return p;
}

size_t CudaBackend::memory_available() const {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  const size_t reserve = size_t(512) << 20;  // CUDA context, graphs, cuBLAS-free library workspaces
  return free_b > reserve ? free_b - reserve : 0;
}

size_t CudaBackend::memory_used() const {
  size_t s = 0;
  for (const auto& c : scratch_) s += c.size;
  return weight_bytes_ + kv_cache_bytes() + s + gemm_work_bytes_;
}

void CudaBackend::check(const char* op, bool ok, const std::string& msg) const {
  if (!ok) fail("CUDA backend, {}: {}", op, msg);
}

// ---- scratch -------------------------------------------------------------------------------

void* CudaBackend::scratch_bytes(size_t bytes) {
  bytes = (bytes + 255) & ~size_t(255);
  if (scratch_.empty() || scratch_used_ + bytes > scratch_.back().size) {
    check("alloc", capturing_ == 0, "scratch memory grew while a graph was being recorded");
    const size_t size = std::max({bytes, kMinScratch, scratch_.empty() ? size_t(0) : scratch_.back().size});
    scratch_.push_back({dev_alloc(size, "activations"), size});
    scratch_used_ = 0;
    ++generation_;
  }
  void* p = static_cast<char*>(scratch_.back().base) + scratch_used_;
  scratch_used_ += bytes;
  return p;
}

Tensor CudaBackend::alloc(int64_t rows, int64_t cols) {
  return Tensor{static_cast<float*>(scratch_bytes(size_t(rows * cols) * sizeof(float))), rows, cols};
}

// Scratch that grew during the last pass becomes one chunk large enough for all of it.
void CudaBackend::compact_scratch() {
  if (scratch_.size() < 2 || capturing_) return;
  size_t total = 0;
  cuda_check(cudaStreamSynchronize(stream_), "scratch reset");
  for (auto& c : scratch_) total += c.size, cudaFree(c.base);
  scratch_.clear();
  scratch_.push_back({dev_alloc(total, "activations"), total});
  ++generation_;
}

void CudaBackend::reset_scratch() {
  flush({}, true);  // (ops recorded before the reset ran on the old tensors)
  only16_.clear();
  compact_scratch();
  scratch_used_ = 0;
}

void CudaBackend::init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) {
  if (type != GgmlType::F16 && type != GgmlType::F32) fail("KV cache type must be f16 or f32");
  kv_type_ = type, kv_layers_ = n_layer, kv_ctx_ = n_ctx, kv_dim_ = kv_dim;
  cuda_check(cudaStreamSynchronize(stream_), "the KV cache");  // (a cache it replaces may be in use)
  kv_mem_.init(device_, n_layer, n_ctx, size_t(kv_dim) * kv_elem_bytes(),
               window_ring_ ? std::span<const int>(kv_windows_) : std::span<const int>(), kv_pass_rows_);
  gemm_work_bytes_ = kGemmWorkBytes;
  gemm_work_ = dev_alloc(gemm_work_bytes_, "GEMM split-K workspace");
  owned_.push_back(gemm_work_);
  y8_count_ = static_cast<unsigned*>(dev_alloc(kY8Counters * sizeof(unsigned), "GEMV counters"));
  owned_.push_back(y8_count_);
  cuda_check(cudaMemset(y8_count_, 0, kY8Counters * sizeof(unsigned)), "cudaMemset");
  graphs_.clear();
}

void CudaBackend::set_kv_windows(std::span<const int> window, int pass_rows) {
  kv_windows_.assign(window.begin(), window.end());
  kv_pass_rows_ = pass_rows;
}

size_t CudaBackend::kv_bytes_for(int n_ctx, int kv_dim, GgmlType type, std::span<const int> window, int pass_rows) const {
  return CudaKvMemory::bytes_for(device_, int(window.size()), n_ctx, row_bytes(type, kv_dim),
                                 window_ring_ ? window : std::span<const int>(), pass_rows);
}

size_t CudaBackend::kv_cache_bytes() const { return kv_mem_.bytes(); }

void CudaBackend::kv_keep_rows(int window_rows) { kv_mem_.keep_rows(window_rows, stream_); }

}  // namespace lamina
