#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
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

namespace {

constexpr int kMaxPenalty = 4096;        // distinct ids the repetition penalty can cover
constexpr size_t kGemmWorkBytes = size_t(64) << 20;  // split-K partials
constexpr size_t kMinScratch = size_t(64) << 20;

bool float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// The GEMV that keeps x in f32 (--exact-matmul): per-element decode for quantised blocks.
kn::Status gemv_exact(const kn::GemvProblem& p, cudaStream_t s) {
  const bool flt = float_type(p.wtype);
  const kn::GemvVariant* v = kn::find_gemv_variant(flt ? "v5_stream" : "q_generic");
  if (!v) return kn::Status::error("no exact GEMV variant");
  if (kn::Status st = kn::gemv_validate(p, *v); !st) return st;
  return v->launch(p, v->configs.front(), s);
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

CudaBackend::CudaBackend(int device, bool exact, const CudaOptions& o)
    : device_(device),
      exact_(exact),
      single_pass_attention_(o.single_pass_attention),
      defer_norm_(o.defer_norm),
      lookup_upload_(o.staged_lookup),
      fused_argmax_(o.fused_argmax) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  gpu_name_ = prop.name;
  sm_count_ = prop.multiProcessorCount;
  bool known = false;
  for (auto r : {kn::PrefillAttention::V1Mma, kn::PrefillAttention::V2Pipelined})
    if (o.prefill_attention == kn::prefill_attention_name(r)) prefill_attention_ = r, known = true;
  check("init", known, fmt::format("prefill attention '{}' names no prompt-attention kernel", o.prefill_attention));
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaEventCreateWithFlags(&sampled_, cudaEventDisableTiming), "cudaEventCreate");
  // Pinned words the kernels write for the host: the sampled id, the inputs' stamp.
  for (int32_t** p : {&host_id_, &seen_}) {
    cuda_check(cudaMallocHost(p, 2 * sizeof(int32_t)), "cudaMallocHost");
    (*p)[0] = (*p)[1] = 0;
  }
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_id_dev_), host_id_, 0), "cudaHostGetDevicePointer");
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&seen_dev_), seen_, 0), "cudaHostGetDevicePointer");
  dev_sampled_ = static_cast<int32_t*>(dev_alloc(sizeof(int32_t), "sampling"));
  owned_.push_back(dev_sampled_);
  cuda_check(cudaMemset(dev_sampled_, 0, sizeof(int32_t)), "cudaMemset");
  // The logits GEMV's argmax key and count (device words, zero between launches).
  argmax_words_ = static_cast<unsigned long long*>(dev_alloc(2 * sizeof(unsigned long long), "sampling"));
  owned_.push_back(argmax_words_);
  cuda_check(cudaMemset(argmax_words_, 0, 2 * sizeof(unsigned long long)), "cudaMemset");
  if (o.graph_timing) graph_timing_ = std::make_unique<GraphTiming>();
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  if (graph_timing_) std::fputs(graph_timing_->report().c_str(), stderr);
  for (auto& [k, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  for (void* p : owned_) cudaFree(p);
  for (auto& e : event_pool_) cudaEventDestroy(e);
  for (auto& c : scratch_) cudaFree(c.base);
  for (auto& [h, d] : freq_factors_) cudaFree(d);
  cudaFree(dev_in_);
  cudaFreeHost(host_in_);
  cudaFreeHost(host_id_);
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

Weight CudaBackend::load_weight(const GgufTensor& t, WeightUse use) {
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
std::vector<Weight> CudaBackend::load_stacked(std::span<const GgufTensor* const> ts) {
  bool same = !ts.empty();
  for (const GgufTensor* t : ts) same = same && t->type == ts[0]->type && t->ne[0] == ts[0]->ne[0];
  if (!same) return Backend::load_stacked(ts);
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

void CudaBackend::reset_scratch() {
  if (scratch_.size() > 1) {  // grew during the last pass: one chunk large enough for all of it
    size_t total = 0;
    cuda_check(cudaStreamSynchronize(stream_), "scratch reset");
    for (auto& c : scratch_) total += c.size, cudaFree(c.base);
    scratch_.clear();
    scratch_.push_back({dev_alloc(total, "activations"), total});
    ++generation_;
  }
  scratch_used_ = 0;
  shadow_ = {};
  pending_norm_ = {};  // its tensors are dead with the scratch
}

void CudaBackend::init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) {
  if (type != GgmlType::F16 && type != GgmlType::F32) fail("KV cache type must be f16 or f32");
  kv_type_ = type, kv_layers_ = n_layer, kv_ctx_ = n_ctx, kv_dim_ = kv_dim;
  const size_t half = kv_cache_bytes() / 2;
  k_cache_ = dev_alloc(half, "the K cache");
  owned_.push_back(k_cache_);
  v_cache_ = dev_alloc(half, "the V cache");
  owned_.push_back(v_cache_);
  gemm_work_bytes_ = kGemmWorkBytes;
  gemm_work_ = dev_alloc(gemm_work_bytes_, "GEMM split-K workspace");
  owned_.push_back(gemm_work_);
  y8_count_ = static_cast<unsigned*>(dev_alloc(kY8Counters * sizeof(unsigned), "GEMV counters"));
  owned_.push_back(y8_count_);
  cuda_check(cudaMemset(y8_count_, 0, kY8Counters * sizeof(unsigned)), "cudaMemset");
  graphs_.clear();
}

size_t CudaBackend::kv_cache_bytes() const {
  return 2 * size_t(kv_layers_) * size_t(kv_ctx_) * size_t(kv_dim_) * (kv_type_ == GgmlType::F16 ? 2 : 4);
}

// ---- ops -----------------------------------------------------------------------------------

// One kernel-library call as a named op: timed under --profile (bytes and FLOPs give its GB/s and
// TFLOP/s), its Status returned (try_op) or turned into a lamina::Error (run_op).
template <class F>
kn::Status CudaBackend::try_op(const std::string& name, double bytes, double flops, F&& launch) {
  op_begin();
  const kn::Status st = launch();
  if (st.ok) op_end(name, bytes, flops);
  return st;
}

template <class F>
void CudaBackend::run_op(const std::string& name, double bytes, double flops, F&& launch) {
  const kn::Status st = try_op(name, bytes, flops, std::forward<F>(launch));
  check(name.c_str(), st.ok, st.message);
}

// An op wrote `t`: its 16-bit and int8-block copies, if any, are stale.
void CudaBackend::wrote(Tensor t) {
  if (shadow_.src == t.data) shadow_ = {};
  if (shadow8_.src == t.data) shadow8_ = {};
}

// Rows a GEMV will take (<= 8, the fast path, whole int8 blocks) get an int8 copy made by the
// op that writes them; the copy becomes the shadow once that op has run.
bool CudaBackend::wants_x8(Tensor out) const {
  return int8_x_ && !exact_ && out.rows <= kn::kGemvMaxBatch && out.cols % 32 == 0;
}

void* CudaBackend::make_x8(Tensor out) {
  return wants_x8(out) ? scratch_bytes(size_t(out.rows) * kn::x8_bytes(out.cols)) : nullptr;
}

const void* CudaBackend::x8(Tensor x) const {
  const bool same = shadow8_.src == x.data && shadow8_.rows == x.rows && shadow8_.cols == x.cols;
  return same ? shadow8_.data : nullptr;
}

static bool overlaps(const Tensor& a, const Tensor& b) {
  return a.data && b.data && a.data < b.data + b.rows * b.cols && b.data < a.data + a.rows * a.cols;
}

void CudaBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  settle(out);
  check("embed", int64_t(tokens.size()) == n_in_, "token ids differ from begin_forward's");
  check("embed", !info(table).repacked, "the embedding table must stay in GGUF blocks");
  run_op("embed", double(out.rows) * (double(row_bytes(table.type, table.cols)) + out.cols * 4.0), 0, [&] {
    return kn::dequantize_rows(table.type, table.data, table.cols, dev_tokens(), out.rows, out.data, stream_);
  });
  wrote(out);
}

// One decode row: the lookup also writes the int8 blocks of out * norm and their sums of squares
// (kernels' RowsX8), and the norm stays pending as after matmul_add_norm: the first layer's
// Q/K/V GEMV applies it (x8_ss), with no norm kernel between. Otherwise embed, then rmsnorm.
void CudaBackend::embed_norm(const Weight& table, std::span<const int32_t> tokens, Tensor out, const Weight& norm,
                             float eps, Tensor h) {
  const bool fits = out.rows == 1 && h.rows == 1 && out.cols == h.cols && out.cols <= kn::kX8SsMaxK &&
                    wants_x8(h) && !info(table).repacked && !overlaps(out, h);
  if (!fits) return Backend::embed_norm(table, tokens, out, norm, eps, h);
  drop_overwritten_norm(h, out);
  settle(out, h);
  check("embed", int64_t(tokens.size()) == n_in_, "token ids differ from begin_forward's");
  kn::RowsX8 x8;
  x8.q = static_cast<uint8_t*>(make_x8(h));
  x8.gain = static_cast<const float*>(norm.data);
  x8.ss = static_cast<double*>(scratch_bytes(size_t(out.cols / 32) * sizeof(double)));
  const double bytes = double(row_bytes(table.type, table.cols)) + out.cols * 4.0 + double(kn::x8_bytes(out.cols));
  // The step's inputs not yet uploaded: the lookup reads its token from the staging itself.
  kn::StagedInputs in;
  if (lookup_upload_ && inputs_staged_ && n_in_ == 1) {
    in = {host_in_dev_, dev_in_, int64_t(in_capacity_), dev_sampled_, seen_dev_, table.rows};
    inputs_staged_ = false;
    upload_enqueued_ = true;
  }
  run_op("embed+norm", bytes, 0, [&] {
    return kn::dequantize_rows(table.type, table.data, table.cols, in.src ? nullptr : dev_tokens(), 1, out.data,
                               stream_, x8, in);
  });
  wrote(out);
  wrote(h);
  pending_norm_ = {out, h, x8.gain, eps, x8.q, x8.ss};
}

void CudaBackend::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  drop_overwritten_norm(out, x);
  settle(x, out);
  wrote(out);
  const auto* wf = static_cast<const float*>(w.data);
  const bool apart = x.data + x.rows * x.cols <= out.data || out.data + out.rows * out.cols <= x.data;
  if (defer_norm_ && apart && wants_x8(out)) {  // rows for a dp4a GEMV: the norm goes into it
    pending_norm_ = {x, out, wf, eps};
    return;
  }
  run_rmsnorm(x, wf, eps, out);
}

void CudaBackend::run_rmsnorm(Tensor x, const float* w, float eps, Tensor out) {
  // Rows that will feed a GEMM get a 16-bit copy made in the same pass.
  // Rows that will feed a GEMV get an int8-block copy.
  void* h = nullptr;
  if (out.rows > kn::kGemvMaxBatch && !exact_) h = scratch_bytes(size_t(out.rows * out.cols) * 2);
  void* q8 = make_x8(out);
  run_op("rmsnorm", double(x.rows * x.cols) * (h ? 10.0 : 8.0), 0, [&] {
    return kn::rmsnorm(x.data, w, x.rows, x.cols, eps, out.data, h, act16_, stream_, q8);
  });
  shadow_ = h ? Shadow{out.data, out.rows * out.cols, h, act16_} : Shadow{};
  if (q8) shadow8_ = {out.data, out.rows, out.cols, q8};
}

void CudaBackend::settle_one(const Tensor& t) {
  if (pending_norm_.w && (overlaps(t, pending_norm_.x) || overlaps(t, pending_norm_.out))) settle_all();
}

void CudaBackend::settle_all() {
  if (!pending_norm_.w) return;
  const PendingNorm n = pending_norm_;
  pending_norm_ = {};
  run_rmsnorm(n.x, n.w, n.eps, n.out);
}

// A pending norm whose output is about to be overwritten (and is not read by the op) is dead.
void CudaBackend::drop_overwritten_norm(Tensor out, Tensor reads) {
  const PendingNorm& n = pending_norm_;
  if (n.w && out.data == n.out.data && out.rows == n.out.rows && out.cols == n.out.cols && !overlaps(reads, n.out))
    pending_norm_ = {};
}

void CudaBackend::take_norm(Tensor x, kn::GemvProblem& p) {
  const PendingNorm& n = pending_norm_;
  if (!n.w || x.data != n.out.data || x.rows != n.out.rows || x.cols != n.out.cols) return;
  p.x = n.x.data, p.x8 = nullptr;
  p.norm_w = n.w, p.norm_eps = n.eps, p.norm_out = n.out.data;
  if (n.ss) {  // made by the GEMV that wrote x: out stays unwritten, the norm pending for others
    p.x8 = n.x8, p.x8_ss = n.ss, p.norm_out8 = nullptr;
    return;
  }
  p.norm_out8 = make_x8(n.out);
  if (p.norm_out8) shadow8_ = {n.out.data, n.out.rows, n.out.cols, p.norm_out8};
  pending_norm_ = {};
}

void CudaBackend::gemv_x(Tensor x, kn::GemvProblem& p) {
  if (x.rows <= kn::kGemvMaxBatch) {
    p.x8 = x8(x);
    take_norm(x, p);
  }
  if (!p.norm_w) settle(x);  // x is the pending norm's output, taken as its parts
}

const void* CudaBackend::x16(Tensor x, GgmlType type) {
  if (shadow_.src == x.data && shadow_.n == x.rows * x.cols && shadow_.type == type) return shadow_.data;
  void* h = scratch_bytes(size_t(x.rows * x.cols) * 2);
  run_op("convert", double(x.rows * x.cols) * 6.0, 0, [&] { return kn::convert_f32(x.data, x.rows * x.cols, type, h, stream_); });
  return h;
}

// out = x . w^T (+ out when accumulate).
void CudaBackend::run_matmul(const Weight& w, const DevWeight& d, Tensor x, Tensor out, bool accumulate,
                             const kn::GemvProblem* norm_y, const kn::GemvArgmax* argmax) {
  check("matmul", !d.stack || !d.repacked, "a part of a repacked stack is only multiplied together with the other parts");
  const kn::WeightLayout layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  const double flops = 2.0 * double(x.rows) * double(w.rows) * double(w.cols);
  // The GEMV fields every 8-row slice shares: weight, decode rows' int8 x or the pending RMSNorm
  // of x, and matmul_add_norm's y8 fields (norm_y).
  kn::GemvProblem base = norm_y ? *norm_y : kn::GemvProblem{};
  base.wtype = w.type, base.layout = layout, base.w = w.data, base.n = w.rows, base.k = w.cols;
  if (argmax) base.argmax = *argmax;
  gemv_x(x, base);
  settle(out);
  wrote(out);
  if (x.rows > kn::kGemvMaxBatch && !exact_) {
    kn::GemmProblem p;
    p.b_type = w.type;
    p.b_layout = layout;
    p.a_type = w.type == GgmlType::F32 ? GgmlType::F32 : w.type == GgmlType::BF16 ? GgmlType::BF16 : GgmlType::F16;
    p.c_type = GgmlType::F32;
    p.m = x.rows, p.n = w.rows, p.k = w.cols;
    p.a = p.a_type == GgmlType::F32 ? static_cast<const void*>(x.data) : x16(x, p.a_type);
    p.lda = x.cols;
    p.b = w.data;
    p.ldb = w.cols;
    p.c = out.data;
    p.ldc = out.cols;
    p.beta = accumulate ? 1.f : 0.f;
    p.workspace = gemm_work_, p.workspace_bytes = gemm_work_bytes_;
    const double bytes = double(d.bytes) + double(x.rows * (x.cols * 2 + out.cols * 4));
    if (try_op(op_name(accumulate ? "gemm+res" : "gemm", w), bytes, flops, [&] { return kn::gemm(p, stream_); }).ok) return;
    // no GEMM variant for this type: GEMVs over 8-row slices below
  }
  const double bytes = double(d.bytes) * double((x.rows + 7) / 8) + double(x.rows * x.cols) * 4.0;
  const char* kind = norm_y          ? "gemv+res+norm"
                     : base.norm_w   ? (accumulate ? "gemv+norm+res" : "gemv+norm")
                     : accumulate    ? "gemv+res"
                                     : "gemv";
  run_op(op_name(kind, w), bytes, flops, [&] {
    for (int64_t r0 = 0; r0 < x.rows; r0 += kn::kGemvMaxBatch) {
      kn::GemvProblem p = base;
      if (!base.norm_w) p.x = x.data + r0 * x.cols;  // (a pending norm's x: decode rows, one slice)
      p.batch = int(std::min<int64_t>(kn::kGemvMaxBatch, x.rows - r0));
      p.y = out.data + r0 * out.cols;
      p.residual = accumulate ? p.y : nullptr;
      if (kn::Status st = exact_ ? gemv_exact(p, stream_) : kn::gemv(p, stream_); !st) return st;
    }
    return kn::Status::success();
  });
}

void CudaBackend::matmul(const Weight& w, Tensor x, Tensor out) { run_matmul(w, info(w), x, out, false); }

// One logits row: the GEMV also leaves its greedy id where the sampling kernel would.
void CudaBackend::matmul_logits(const Weight& w, Tensor x, Tensor out) {
  argmax_of_ = nullptr;
  if (!fused_argmax_ || exact_ || x.rows != 1 || out.rows != 1) return matmul(w, x, out);
  kn::GemvArgmax a;
  a.key = argmax_words_;
  a.count = reinterpret_cast<unsigned*>(argmax_words_ + 1);
  a.id = host_id_dev_;
  a.id2 = dev_sampled_;
  a.parity = dev_pos() + (n_in_ - 1);  // the logits row's position: host_id_[position & 1]
  run_matmul(w, info(w), x, out, false, nullptr, &a);
  argmax_of_ = out.data;
}

// Parts of one stack, in order and complete: one matmul over the stack. Its output is written
// in place when the outputs lie back to back (one row: q, k, v allocated one after the other),
// else into scratch and split by columns.
// The parts w of one stack (load_stacked), in order and complete: the stack as one weight.
bool CudaBackend::whole_stack(std::span<const Weight* const> w, Weight& stacked, DevWeight& ds) {
  const DevWeight& d0 = info(*w[0]);
  bool whole = d0.stack != nullptr;
  int64_t rows = 0;
  for (size_t i = 0; i < w.size() && whole; ++i) {
    const DevWeight& d = info(*w[i]);
    whole = d.stack == d0.stack && d.part == int(i) && d.row0 == rows;
    rows += w[i]->rows;
  }
  if (!whole || rows != d0.stack_rows) return false;
  stacked = Weight{w[0]->type, w[0]->cols, rows, d0.stack};
  ds = DevWeight{d0.repacked, d0.bytes * size_t(rows) / size_t(w[0]->rows)};
  return true;
}

void CudaBackend::matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
  for (const Tensor& o : out) settle(o);
  Weight stacked;
  DevWeight ds;
  if (!whole_stack(w, stacked, ds)) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, out[i]);
    return;
  }
  // Prompt rows of a plain (not repacked) stack: one GEMM per part straight into its output.
  // Measured at pp512 on the 7B f16 model: three 4096-wide GEMMs cost less than the stacked
  // GEMM plus the three column copies (see docs/benchmarks.md).
  if (x.rows > kn::kGemvMaxBatch && !ds.repacked) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, out[i]);
    return;
  }
  const int64_t rows = stacked.rows;
  bool adjacent = x.rows == 1;
  for (size_t i = 1; i < out.size() && adjacent; ++i) adjacent = out[i].data == out[i - 1].data + out[i - 1].cols;
  if (adjacent) return run_matmul(stacked, ds, x, Tensor{out[0].data, 1, rows}, false);
  Tensor all = alloc(x.rows, rows);
  run_matmul(stacked, ds, x, all, false);
  int64_t c0 = 0;
  for (const Tensor& o : out) {
    run_op("split columns", double(o.rows * o.cols) * 8.0, 0,
           [&] { return kn::copy_columns(all.data, all.rows, all.cols, c0, o.cols, o.data, stream_); });
    wrote(o);
    c0 += o.cols;
  }
}

void CudaBackend::matmul_add(const Weight& w, Tensor x, Tensor inout) { run_matmul(w, info(w), x, inout, true); }

// One decode row: the GEMV that adds to inout also writes the int8 blocks of inout * norm and
// their sums of squares (GemvProblem::y8_gain, y8_ss); the norm stays pending, and the GEMVs
// that read out take those (x8_ss) and scale by the RMS. Otherwise matmul_add, then rmsnorm.
void CudaBackend::matmul_add_norm(const Weight& w, Tensor x, Tensor inout, const Weight& norm, float eps, Tensor out) {
  drop_overwritten_norm(out, x);
  const DevWeight& d = info(w);
  kn::GemvProblem p;
  p.wtype = w.type, p.layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  p.n = w.rows, p.k = w.cols, p.batch = 1, p.x8 = x8(x);
  p.y8_count = y8_count_;
  const bool fits = x.rows == 1 && wants_x8(out) && !d.stack && inout.rows == 1 && out.rows == 1 &&
                    inout.cols == out.cols && w.rows == out.cols && out.cols <= kn::kX8SsMaxK &&
                    out.cols / 32 <= int64_t(kY8Counters) && !overlaps(out, inout) && !overlaps(out, x);
  if (!fits || !kn::gemv_makes_y8(p)) {
    matmul_add(w, x, inout);
    rmsnorm(inout, norm, eps, out);
    return;
  }
  settle(out);
  p.y8 = make_x8(out);
  p.y8_gain = static_cast<const float*>(norm.data);
  p.y8_ss = static_cast<double*>(scratch_bytes(size_t(out.cols / 32) * sizeof(double)));
  run_matmul(w, d, x, inout, true, &p);
  wrote(out);
  pending_norm_ = {inout, out, p.y8_gain, eps, p.y8, p.y8_ss};
}

void CudaBackend::ffn_gate_up(const Weight& gate, const Weight& up, Tensor x, Tensor out) {
  const DevWeight& dg = info(gate);
  if (x.rows <= kn::kGemvMaxBatch && gate.type == up.type && dg.repacked == info(up).repacked && !exact_) {
    kn::GemvProblem p;
    p.wtype = gate.type;
    p.layout = dg.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
    p.w = gate.data, p.w_up = up.data;
    p.n = gate.rows, p.k = gate.cols;
    p.x = x.data, p.batch = int(x.rows), p.y = out.data;
    gemv_x(x, p);
    settle(out);
    // The down projection multiplies out next: its int8 copy is made in the same kernel, by the
    // warps that complete each 32-row block (counters in y8_count_).
    wrote(out);
    p.y8 = make_x8(out);
    p.y8_count = out.cols / 32 <= int64_t(kY8Counters) ? y8_count_ : nullptr;
    run_op(op_name(p.norm_w ? "gemv+norm gate/up" : "gemv gate/up", gate), 2.0 * double(dg.bytes), 4.0 * double(x.rows * gate.rows * gate.cols),
           [&] { return kn::gemv(p, stream_); });
    if (p.y8) shadow8_ = {out.data, out.rows, out.cols, p.y8};
    return;
  }
  Tensor u = alloc(x.rows, up.rows);
  matmul(gate, x, out);
  matmul(up, x, u);
  swiglu(out, u);
}

void CudaBackend::add_bias(Tensor x, const Weight& b) {
  settle(x);
  run_op("add_bias", double(x.rows * x.cols) * 8.0, 0,
         [&] { return kn::add_bias(x.data, static_cast<const float*>(b.data), x.rows, x.cols, stream_); });
  wrote(x);
}

void CudaBackend::add(Tensor x, Tensor y) {
  settle(x, y);
  run_op("add", double(x.rows * x.cols) * 12.0, 0, [&] { return kn::add(x.data, y.data, x.rows * x.cols, stream_); });
  wrote(x);
}

void CudaBackend::swiglu(Tensor gate, Tensor up) {
  settle(gate, up);
  // Rows that will feed a GEMM (the down projection) get their 16-bit copy in the same pass.
  const int64_t n = gate.rows * gate.cols;
  void* h = gate.rows > kn::kGemvMaxBatch && !exact_ && n % 4 == 0 ? scratch_bytes(size_t(n) * 2) : nullptr;
  wrote(gate);
  run_op("swiglu", double(n) * (h ? 14.0 : 12.0), 0,
         [&] { return kn::swiglu(gate.data, up.data, n, stream_, h, act16_); });
  if (h) shadow_ = Shadow{gate.data, n, h, act16_};
}

kn::RopeArgs CudaBackend::rope_args(int n_heads, int head_dim, const RopeParams& p) {
  kn::RopeArgs a;
  a.n_heads = n_heads, a.head_dim = head_dim, a.n_rot = p.n_rot;
  a.base = p.base, a.freq_scale = p.freq_scale, a.neox = p.neox;
  if (p.freq_factors) {
    auto [it, fresh] = freq_factors_.try_emplace(p.freq_factors, nullptr);
    if (fresh) {
      const size_t bytes = size_t(p.n_rot / 2) * sizeof(float);
      it->second = static_cast<float*>(dev_alloc(bytes, "rope factors"));
      upload(it->second, p.freq_factors, bytes);
    }
    a.freq_factors = it->second;
  }
  return a;
}

void CudaBackend::rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) {
  settle(x);
  check("rope", int64_t(pos.size()) == n_in_ && x.rows == n_in_, "positions differ from begin_forward's");
  const kn::RopeArgs a = rope_args(n_heads, head_dim, p);
  run_op("rope", double(x.rows * x.cols) * 8.0, 0, [&] { return kn::rope(x.data, x.rows, dev_pos(), a, stream_); });
  wrote(x);
}

CudaBackend::LayerCache CudaBackend::layer_cache(int layer, Tensor q, std::span<const int32_t> pos,
                                                 const AttentionParams& p) {
  check("attention", int64_t(pos.size()) == n_in_ && q.rows == n_in_, "positions differ from begin_forward's");
  check("attention", layer >= 0 && layer < kv_layers_, "layer outside the KV cache");
  if (pos.back() >= kv_ctx_) fail("position {} is outside the context of {} tokens", pos.back(), kv_ctx_);
  LayerCache c;
  c.a.n_head = p.n_head, c.a.n_head_kv = p.n_head_kv, c.a.head_dim = p.head_dim, c.a.scale = p.scale;
  c.a.kv_type = kv_type_, c.a.n_ctx = kv_ctx_;
  const size_t layer_off = size_t(layer) * size_t(kv_ctx_) * size_t(kv_dim_) * kv_elem_bytes();
  c.k = static_cast<char*>(k_cache_) + layer_off;
  c.v = static_cast<char*>(v_cache_) + layer_off;
  return c;
}

void CudaBackend::attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                            const AttentionParams& p, Tensor out) {
  settle(q, k, v, out);
  const LayerCache c = layer_cache(layer, q, pos, p);
  run_op("kv_store", double(k.rows * k.cols) * (8.0 + 2 * kv_elem_bytes()), 0,
         [&] { return kn::kv_store(k.data, v.data, k.rows, dev_pos(), c.k, c.v, c.a, stream_); });
  attend(c, q, pos, p, out);
}

// One decode token at short context (the smallest length bucket): RoPE, the cache store and the
// attention in one kernel. Otherwise RoPE and the cache store in one kernel, then the attention
// kernels.
void CudaBackend::rope_attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                                 const RopeParams& rope_p, const AttentionParams& p, Tensor out) {
  settle(q, k, v, out);
  const LayerCache c = layer_cache(layer, q, pos, p);
  const kn::RopeArgs r = rope_args(p.n_head, p.head_dim, rope_p);
  const double bytes = double(q.rows * q.cols) * 8.0 + double(k.rows * k.cols) * (8.0 + 2 * kv_elem_bytes());
  // (Without GQA only: see attention_decode_rope.cu.)
  if (kv_bucket_ == kMinBucket && single_pass_attention_ && kn::attention_decode_rope_supported(c.a, r, q.rows)) {
    const auto [kv_read, flops] = attention_cost(q, pos, p);
    wrote(q), wrote(k), wrote(out);
    void* q8 = make_x8(out);
    run_op("rope+attention (decode)", bytes + kv_read + double(out.cols) * 4.0, flops, [&] {
      return kn::attention_decode_rope(q.data, k.data, v.data, dev_pos(), r, c.k, c.v, c.a, out.data, stream_, q8);
    });
    if (q8) shadow8_ = {out.data, out.rows, out.cols, q8};
    return;
  }
  run_op("rope+kv_store", bytes, 0,
         [&] { return kn::rope_kv_store(q.data, k.data, v.data, q.rows, dev_pos(), r, c.k, c.v, c.a, stream_); });
  wrote(q);
  wrote(k);
  attend(c, q, pos, p, out);
}

// Attention reads K and V of every position up to the last one (the host knows the positions);
// flops: QK^T and PV over every (query, key) pair (the prompt path counts causal pairs only).
std::pair<double, double> CudaBackend::attention_cost(Tensor q, std::span<const int32_t> pos,
                                                      const AttentionParams& p) const {
  const double len = double(pos.back() + 1);
  return {2.0 * len * double(kv_dim_) * double(kv_elem_bytes()), 4.0 * double(q.rows) * len * double(p.n_head) * p.head_dim};
}

void CudaBackend::attend(const LayerCache& c, Tensor q, std::span<const int32_t> pos, const AttentionParams& p,
                         Tensor out) {
  wrote(out);
  const auto [kv_read, flops] = attention_cost(q, pos, p);
  if (q.rows > kn::kGemvMaxBatch && kn::attention_prefill_supported(c.a) && pos.back() - pos.front() + 1 == q.rows) {
    // causal: each query reads on average half of the new keys plus every earlier one
    const double causal = flops / 2 + flops * pos.front() / (2.0 * (pos.back() + 1));
    // The Wo GEMM reads the output in 16 bits: the kernel writes that copy too.
    void* h = exact_ ? nullptr : scratch_bytes(size_t(out.rows * out.cols) * 2);
    run_op("attention (prefill)", kv_read + double(q.rows * q.cols) * (h ? 10.0 : 8.0), causal, [&] {
      return kn::attention_prefill(q.data, q.rows, dev_pos(), c.k, c.v, c.a, out.data, stream_, h, act16_,
                                   prefill_attention_);
    });
    if (h) shadow_ = Shadow{out.data, out.rows * out.cols, h, act16_};
    return;
  }
  const int splits = decode_splits(p.n_head_kv, q.rows);
  float* work = static_cast<float*>(scratch_bytes(kn::attention_work_floats(c.a, q.rows, splits) * sizeof(float)));
  void* q8 = make_x8(out);
  run_op("attention (decode)", kv_read + double(q.rows * q.cols) * 8.0, flops, [&] {
    return kn::attention_decode(q.data, q.rows, dev_pos(), c.k, c.v, c.a, splits, work, out.data, stream_, q8);
  });
  if (q8) shadow8_ = {out.data, out.rows, out.cols, q8};
}

// Flash-decoding splits per (KV head, row): enough blocks for two waves over the SMs, at least
// 64 positions per split; past 1024 positions, one split per 128 positions of the length
// rounded up to a power of two (kv_bucket_), up to eight waves, so that a long context keeps
// enough rows in flight. A decode graph is recorded per bucket (graph_key), so it only changes
// at 256, 512, 1024, 2048, ... positions (below 1024 the split count is that of 1024).
int CudaBackend::decode_splits(int n_head_kv, int64_t rows) const {
  const int64_t blocks = int64_t(n_head_kv) * rows;
  const int64_t base = std::clamp<int64_t>((2 * sm_count_ + blocks - 1) / blocks, 1, std::max(1, kv_ctx_ / 64));
  const int64_t most = std::max<int64_t>(base, (8 * sm_count_ + blocks - 1) / blocks);
  return int(std::clamp<int64_t>(std::max<int64_t>(kv_bucket_, 1024) / 128, base, most));
}

void CudaBackend::read(Tensor t, float* host) {
  settle(t);
  cuda_check(cudaMemcpyAsync(host, t.data, size_t(t.rows * t.cols) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "read");
  cuda_check(cudaStreamSynchronize(stream_), "read");
  collect_profile();
}

int32_t CudaBackend::sample(Tensor logits, const SamplerParams& p, std::span<const int32_t> penalty_ids, double u,
                            bool more) {
  settle(logits);
  const Tensor row = logits.rows_view(logits.rows - 1, 1);
  if (!sample_ids_) {
    sample_ids_ = static_cast<int32_t*>(dev_alloc(kMaxPenalty * sizeof(int32_t), "sampling"));
    owned_.push_back(sample_ids_);
  }
  if (!sample_scratch_) {
    sample_scratch_ = static_cast<float*>(dev_alloc(kn::sample_scratch_floats(int(row.cols)) * sizeof(float), "sampling"));
    owned_.push_back(sample_scratch_);
  }
  kn::SampleArgs a;
  a.temperature = p.temperature, a.top_k = p.top_k, a.top_p = p.top_p, a.min_p = p.min_p;
  a.repeat_penalty = p.repeat_penalty, a.u = u;
  // At most kMaxPenalty distinct ids are penalised: with more (only possible with
  // --repeat-last-n above 4096 or -1) the sorted list is cut and the highest ids go unpenalised.
  const size_t n = std::min(penalty_ids.size(), size_t(kMaxPenalty));
  if (n && p.repeat_penalty != 1.f) {
    cuda_check(cudaMemcpyAsync(sample_ids_, penalty_ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
               "penalty ids");
    cuda_check(cudaStreamSynchronize(stream_), "penalty ids");  // the host span may not outlive this call
    a.penalty_ids = sample_ids_, a.n_penalty = int(n);
  }
  // The kernel writes the id to pinned host memory itself (no copy-engine transfer after it), and
  // to dev_sampled_ for a step that runs ahead (cuda_graphs.cpp).
  a.also = dev_sampled_;
  const int slot = last_pos_ & 1;  // this pass's host word (launch_ahead stages the next position)
  // Greedy without a penalty from the row matmul_logits made: its GEMV has written the id.
  const bool made = p.temperature <= 0.f && p.repeat_penalty == 1.f && logits.rows == 1 && argmax_of_ == logits.data;
  if (!made)
    run_op("sample", double(row.cols) * 8.0, 0,
           [&] { return kn::sample(row.data, int(row.cols), a, sample_scratch_, host_id_dev_ + slot, stream_); });
  if (more && launch_ahead()) cuda_check(cudaEventSynchronize(sampled_), "sample");
  else cuda_check(cudaStreamSynchronize(stream_), "sample");
  if (graph_timing_) graph_timing_->id_arrived();
  collect_profile();
  return host_id_[slot];
}

// ---- profile -------------------------------------------------------------------------------
// Events around every op, recorded back to back (no synchronisation between ops) and read
// after the pass. Profiling runs the pass eagerly (no graph), so where the GPU waits for the
// host's launches that gap is counted in the next op's time.

void CudaBackend::set_profiling(bool on) {
  profiling_ = on;
  if (!on || copy_gbps_ > 0) return;
  // Rooflines measured here, once: device copy bandwidth and an f16 GEMM at 4096^3.
  copy_gbps_ = kn::copy_bandwidth_gbs(size_t(1) << 30, stream_);
  const int64_t n = 4096;
  void* a = dev_alloc(size_t(n * n) * 2, "profile roofline");
  void* b = dev_alloc(size_t(n * n) * 2, "profile roofline");
  void* c = dev_alloc(size_t(n * n) * 4, "profile roofline");
  kn::fill_random_bytes(a, size_t(n * n) * 2, 1, stream_);
  kn::fill_random_bytes(b, size_t(n * n) * 2, 2, stream_);
  kn::GemmProblem p;
  p.a_type = p.b_type = GgmlType::F16, p.c_type = GgmlType::F32;
  p.m = p.n = p.k = n, p.a = a, p.lda = n, p.b = b, p.ldb = n, p.c = c, p.ldc = n;
  // random bytes as f16 include NaN/Inf patterns; the time does not depend on the values
  const double us = kn::median_time_us([&](int) { kn::gemm(p, stream_); }, 2, 10, stream_);
  gemm_tflops_ = 2.0 * double(n) * double(n) * double(n) / us * 1e-6;
  cudaFree(a), cudaFree(b), cudaFree(c);
}

void CudaBackend::op_begin() {
  if (!profiling_) return;
  while (event_pool_.size() < pending_.size() * 2 + 2) {
    cudaEvent_t e;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    event_pool_.push_back(e);
  }
  cuda_check(cudaEventRecord(event_pool_[pending_.size() * 2], stream_), "profile");
}

std::string CudaBackend::op_name(const char* kind, const Weight& w) const {
  if (!profiling_) return {};
  return fmt::format("{} {}x{} {}", kind, w.rows, w.cols, type_name(w.type));
}

void CudaBackend::op_end(const std::string& name, double bytes, double flops) {
  if (!profiling_) return;
  cuda_check(cudaEventRecord(event_pool_[pending_.size() * 2 + 1], stream_), "profile");
  pending_.push_back({name, bytes, flops});
}

void CudaBackend::collect_profile() {
  if (pending_.empty()) return;
  cuda_check(cudaStreamSynchronize(stream_), "profile");
  for (size_t i = 0; i < pending_.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, event_pool_[2 * i], event_pool_[2 * i + 1]);
    OpTimes& o = profile_[pending_[i].name];
    o.ms += ms, o.bytes += pending_[i].bytes, o.flops += pending_[i].flops, ++o.calls;
  }
  pending_.clear();
}

void CudaBackend::profile_reset() {
  collect_profile();
  profile_.clear();
}

std::string CudaBackend::profile_report() {
  collect_profile();
  double total = 0;
  for (const auto& [n, o] : profile_) total += o.ms;
  std::vector<std::pair<std::string, OpTimes>> rows(profile_.begin(), profile_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
  std::string r = fmt::format("per-op profile on {} (rooflines measured now: copy {:.0f} GB/s, f16 GEMM 4096^3 {:.0f} TFLOP/s)\n",
                              gpu_name_, copy_gbps_, gemm_tflops_);
  r += fmt::format("| {:<22} | {:>7} | {:>10} | {:>6} | {:>9} | {:>6} | {:>9} | {:>6} |\n", "op", "calls", "ms", "%",
                   "GB/s", "% BW", "TFLOP/s", "% MMA");
  r += fmt::format("|{:-<24}|{:->9}|{:->12}|{:->8}|{:->11}|{:->8}|{:->11}|{:->8}|\n", "", "", "", "", "", "", "", "");
  for (const auto& [n, o] : rows) {
    const double gbs = o.bytes / (o.ms * 1e-3) * 1e-9, tf = o.flops / (o.ms * 1e-3) * 1e-12;
    r += fmt::format("| {:<22} | {:>7} | {:>10.3f} | {:>5.1f}% | {:>9.0f} | {:>5.1f}% | {:>9.2f} | {:>5.1f}% |\n", n, o.calls,
                     o.ms, 100 * o.ms / total, gbs, 100 * gbs / copy_gbps_, tf, o.flops > 0 ? 100 * tf / gemm_tflops_ : 0.0);
  }
  r += fmt::format("| {:<22} | {:>7} | {:>10.3f} |\n", "total (GPU time)", "", total);
  return r;
}

}  // namespace lamina
