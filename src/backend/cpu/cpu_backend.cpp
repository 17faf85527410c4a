#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/vec_dot.h"
#include "backend/cpu/vec_math.h"
#include "backend/moe_route.h"
#include "core/error.h"
#include "core/half.h"
#include "core/units.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

namespace lamina {

// A tier this CPU does not run is lowered to one it does (the CLI refuses such a request with a
// message first).
CpuBackend::CpuBackend(int n_threads, bool exact_matmul, CpuIsa isa)
    : pool_(n_threads), exact_(exact_matmul), isa_(runnable_isa(isa)) {}

std::string CpuBackend::name() const {
  return fmt::format("cpu ({} threads, {}{})", pool_.size(), isa_name(isa_), exact_ ? ", exact matmul" : "");
}

CpuBackend::~CpuBackend() {
  for (auto& a : arenas_) munmap(a.base, a.size);
}

uint8_t* CpuBackend::arena_alloc(size_t bytes) {
  constexpr size_t kChunk = size_t(256) << 20, kHuge = size_t(2) << 20;
  bytes = (bytes + 63) & ~size_t(63);
  if (arenas_.empty() || arenas_.back().used + bytes > arenas_.back().size) {
    const size_t size = (std::max(bytes, kChunk) + kHuge - 1) / kHuge * kHuge;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot allocate {:.1f} MiB for the model's weights", double(size) / (1 << 20));
    madvise(p, size, MADV_HUGEPAGE);
    arenas_.push_back({static_cast<uint8_t*>(p), size, 0});
  }
  Arena& a = arenas_.back();
  uint8_t* out = a.base + a.used;
  a.used += bytes;
  return out;
}

// Weights are copied out of the file mapping into memory advised for huge pages: decode streams
// every weight once per token, and with 4 KiB file pages it ran ~1.3x slower (benchmarks.md).
// Q5_0 and IQ4_NL weights are held as Q8_0 (format/quant.h: the same values), which the four-row
// AVX-VNNI and AVX2 kernels multiply; 34 instead of 22 or 18 bytes per 32.
Weight CpuBackend::load_weight(const GgufTensor& t, WeightUse) {
  const bool as_q8 = held_as_q8_0(t.type);
  const size_t bytes = as_q8 ? row_bytes(GgmlType::Q8_0, t.ne[0]) * size_t(t.nrows()) : t.nbytes;
  auto [it, fresh] = loaded_.try_emplace(t.data, nullptr);
  if (fresh) {  // a tied matrix is bound twice (embedding and output) but copied once
    it->second = arena_alloc(bytes);
    if (as_q8) to_q8_0(t.type, t.data, it->second, t.nelements() / QK);
    else std::memcpy(it->second, t.data, t.nbytes);
  }
  return Weight{as_q8 ? GgmlType::Q8_0 : t.type, t.ne[0], t.nrows(), it->second};
}

size_t CpuBackend::memory_available() const {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return size_t(8) << 30;
}

size_t CpuBackend::memory_used() const {
  size_t bytes = kv_resident_bytes();
  for (const Arena& a : arenas_) bytes += a.used;
  for (const auto& c : scratch_) bytes += c.capacity() * sizeof(float);
  return bytes;
}

Tensor CpuBackend::alloc(int64_t rows, int64_t cols) {
  const size_t n = (size_t(rows * cols) + 15) & ~size_t(15);  // 64-byte aligned sub-blocks
  if (scratch_.empty() || scratch_used_ + n > scratch_.back().size()) {
    scratch_.emplace_back(std::max(n, size_t(1) << 20));
    scratch_used_ = 0;
  }
  float* p = scratch_.back().data() + scratch_used_;
  scratch_used_ += n;
  return Tensor{p, rows, cols};
}

void CpuBackend::reset_scratch() {
  if (scratch_.size() > 1) {  // grew during the last pass: one chunk large enough for all of it
    size_t total = 0;
    for (const auto& c : scratch_) total += c.size();
    scratch_.clear();
    scratch_.emplace_back(total);
  }
  scratch_used_ = 0;
}

void CpuBackend::init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) {
  if (type != GgmlType::F16 && type != GgmlType::F32) fail("KV cache type must be f16 or f32");
  kv_type_ = type;
  kv_layers_ = n_layer;
  kv_ctx_ = n_ctx;
  kv_dim_ = kv_dim;
  const size_t bytes = size_t(n_layer) * size_t(n_ctx) * size_t(kv_dim) * (type == GgmlType::F16 ? 2 : 4);
  if (!k_cache_.reset(bytes) || !v_cache_.reset(bytes))
    fail("cannot allocate the KV cache: {:.1f} MiB for {} positions", 2.0 * double(bytes) / (1 << 20), n_ctx);
  window_keep_.assign(size_t(n_layer), WindowKeep{});
}

size_t CpuBackend::kv_cache_bytes() const { return k_cache_.size() + v_cache_.size(); }

size_t CpuBackend::kv_bytes_for(int n_ctx, int kv_dim, GgmlType type, std::span<const int> window, int pass_rows) const {
  const size_t row = row_bytes(type, kv_dim);
  size_t rows = 0;
  for (const int w : window)
    rows += w > 0 ? std::min<size_t>(size_t(n_ctx), size_t(w) + size_t(window_slack_ + kGiveBackStep + std::max(pass_rows, 1)))
                  : size_t(n_ctx);
  return 2 * rows * row;
}

void CpuBackend::give_back_before_window(int layer, int32_t last, int window, size_t row_bytes) {
  WindowKeep& w = window_keep_[size_t(layer)];
  w.window = window;
  // The next query (position last + 1) sees the positions from last + 2 - window on.
  const int64_t keep = int64_t(last) + 2 - window - window_slack_;
  if (keep - w.kept_from < kGiveBackStep) return;
  // From the layer's first row each time: a page that straddled the last boundary goes now.
  const size_t base = size_t(layer) * size_t(kv_ctx_) * row_bytes;
  k_cache_.discard(base, size_t(keep) * row_bytes);
  v_cache_.discard(base, size_t(keep) * row_bytes);
  w.kept_from = int32_t(keep);
}

// Cut back to n tokens, the next query (position n) sees the positions from n + 1 - window on.
int CpuBackend::kv_rewind_floor() const {
  int floor = 0;
  for (const WindowKeep& w : window_keep_)
    if (w.kept_from > 0) floor = std::max(floor, w.kept_from + w.window - 1);
  return floor;
}

// The engine's pages take every row of the global layers, and the window layers' first
// window_rows, as sequences fill them: they must fit beside what is held. (The rows past those
// of a window layer are never touched: their pages are never made.)
void CpuBackend::kv_keep_rows(int window_rows) {
  size_t rows = 0;
  for (int l = 0; l < kv_layers_; ++l) {
    const bool window = size_t(l) < kv_windows_.size() && kv_windows_[size_t(l)] > 0;
    rows += size_t(window ? std::clamp(window_rows, 0, kv_ctx_) : kv_ctx_);
  }
  const size_t whole = 2 * rows * row_bytes(kv_type_, kv_dim_), held = kv_resident_bytes(), avail = memory_available();
  if (whole > held + avail)
    fail("several sequences at once keep every row of the global layers' KV cache and {} of the window layers' ({} "
         "for {} positions), more than the {} available (lower --ctx)", std::min(window_rows, kv_ctx_), format_bytes(whole),
         kv_ctx_, format_bytes(held + avail));
}

void CpuBackend::kv_restart() {
  for (WindowKeep& w : window_keep_) w.kept_from = 0;
}

void CpuBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  const size_t rb = row_bytes(table.type, table.cols);
  pool_.parallel_for(int64_t(tokens.size()), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      dequantize_row(table.type, static_cast<const uint8_t*>(table.data) + size_t(tokens[size_t(t)]) * rb,
                     out.data + t * out.cols, table.cols);
  });
}

void CpuBackend::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  const float* g = static_cast<const float*>(w.data);
  pool_.parallel_for(x.rows, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* xr = x.data + t * x.cols;
      float* o = out.data + t * out.cols;
      double ss = 0;  // llama.cpp sums the squares in double
      for (int64_t i = 0; i < x.cols; ++i) ss += double(xr[i]) * xr[i];
      const float scale = float(1.0 / std::sqrt(ss / double(x.cols) + double(eps)));
      for (int64_t i = 0; i < x.cols; ++i) o[i] = xr[i] * scale * g[i];
    }
  }, 4);
}

void CpuBackend::add_bias(Tensor x, const Weight& b) {
  const float* bd = static_cast<const float*>(b.data);
  for (int64_t t = 0; t < x.rows; ++t)
    for (int64_t i = 0; i < x.cols; ++i) x.data[t * x.cols + i] += bd[i];
}

void CpuBackend::add(Tensor x, Tensor y) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) x.data[i] += y.data[i];
}

void CpuBackend::rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) {
  const int half = p.n_rot / 2;
  const float theta_scale = std::pow(p.base, -2.0f / float(p.n_rot));
  std::vector<float> cs(size_t(half) * 2);
  for (int64_t t = 0; t < x.rows; ++t) {
    float theta = float(pos[size_t(t)]);  // running product in float, as ggml's CPU rope
    for (int i = 0; i < half; ++i) {
      float th = theta;
      if (p.freq_factors) th /= p.freq_factors[i];
      th *= p.freq_scale;
      cs[2 * size_t(i)] = std::cos(th) * p.attn_factor;
      cs[2 * size_t(i) + 1] = std::sin(th) * p.attn_factor;
      theta *= theta_scale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x.data + t * x.cols + int64_t(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int i0 = p.neox ? i : 2 * i, i1 = p.neox ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1], c = cs[2 * size_t(i)], s = cs[2 * size_t(i) + 1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
  }
}

void CpuBackend::attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                           const AttentionParams& p, Tensor out) {
  const int kv_dim = p.n_head_kv * p.head_dim;
  const bool f16 = kv_type_ == GgmlType::F16;
  const size_t esz = f16 ? 2 : 4;
  const size_t layer_off = size_t(layer) * size_t(kv_ctx_) * size_t(kv_dim);
  uint8_t* kc = k_cache_.data() + layer_off * esz;
  uint8_t* vc = v_cache_.data() + layer_off * esz;
  const int w = p.window;  // (a window layer's rows sit in the window pool's blocks, where there is one)
  for (int64_t t = 0; t < k.rows; ++t) kv_slot(t, pos[size_t(t)], w);  // checked here, on the caller's thread
  pool_.parallel_for(k.rows, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const size_t at = size_t(kv_slot(t, pos[size_t(t)], w)) * size_t(kv_dim);
      if (f16) {
        f32_to_f16_row(k.data + t * k.cols, reinterpret_cast<uint16_t*>(kc) + at, kv_dim, isa_);
        f32_to_f16_row(v.data + t * v.cols, reinterpret_cast<uint16_t*>(vc) + at, kv_dim, isa_);
      } else {
        std::memcpy(reinterpret_cast<float*>(kc) + at, k.data + t * k.cols, size_t(kv_dim) * 4);
        std::memcpy(reinterpret_cast<float*>(vc) + at, v.data + t * v.cols, size_t(kv_dim) * 4);
      }
    }
  }, 8);
  // positions j0 .. pos[t] of row t: every earlier one, or the last p.window of them
  auto first_pos = [&](int64_t t) { return p.window > 0 ? std::max<int64_t>(0, pos[size_t(t)] + 1 - p.window) : 0; };
  // Paged layout: the cache slots of each sequence's positions from its rows' first window on
  // (seq_first), found here once (and checked on this thread) for all its rows and heads; one
  // sequence's position j is slot j.
  std::vector<std::vector<int64_t>> seq_slots;
  std::vector<int64_t> seq_first;
  if (layout_) {
    seq_slots.resize(layout_->tables.size());
    seq_first.assign(layout_->tables.size(), std::numeric_limits<int64_t>::max());
    for (int64_t t = 0; t < q.rows; ++t) {  // the store above checked every row's sequence
      int64_t& f = seq_first[size_t(layout_->row_seq[size_t(t)])];
      f = std::min(f, first_pos(t));
    }
    for (int64_t t = 0; t < q.rows; ++t) {
      const size_t s = size_t(layout_->row_seq[size_t(t)]);
      std::vector<int64_t>& sl = seq_slots[s];
      for (int64_t j = seq_first[s] + int64_t(sl.size()); j <= pos[size_t(t)]; ++j) sl.push_back(kv_slot(t, int32_t(j), w));
    }
  }
  const size_t row = size_t(kv_dim) * esz, head = size_t(p.head_dim) * esz;
  const int group = p.n_head / p.n_head_kv;
  const int hd = p.head_dim;
  // Row t's sequence's slots, the first of position j0 (first_pos(t)).
  auto slots_of = [&](int64_t t, int64_t j0) {
    const size_t s = layout_ ? size_t(layout_->row_seq[size_t(t)]) : 0;
    return layout_ ? seq_slots[s].data() + (j0 - seq_first[s]) : nullptr;
  };
  const AttendFn attend = attend_for(kv_type_, isa_, hd);
  if (!attend) fail("attention: the KV cache must be f16 or f32");
  // A job is a row's query heads that share a KV head (up to kAttendMaxQueries), each K/V row
  // converted once for them; one head per job when that leaves too few jobs for the threads
  // (decode). A head's result is the same either way (attention_cpu.h).
  const int per = q.rows * p.n_head_kv >= 4 * pool_.size() ? std::min(group, kAttendMaxQueries) : 1;
  const int chunks = (group + per - 1) / per;
  pool_.parallel_for(q.rows * p.n_head_kv * chunks, [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    std::vector<size_t> offs;
    for (int64_t job = b; job < e; ++job) {
      const int64_t t = job / (p.n_head_kv * chunks);
      const int g = int(job / chunks % p.n_head_kv), h0 = g * group + int(job % chunks) * per;
      const int nq = std::min(per, (g + 1) * group - h0);
      const int64_t j0 = first_pos(t), n_pos = pos[size_t(t)] + 1 - j0;
      const int64_t* sl = slots_of(t, j0);
      offs.resize(size_t(n_pos));
      for (int64_t j = 0; j < n_pos; ++j) offs[size_t(j)] = size_t(sl ? sl[j] : j0 + j) * row + size_t(g) * head;
      scores.resize(size_t(nq) * size_t(n_pos));
      attend(hd, nq, q.data + t * q.cols + int64_t(h0) * hd, size_t(hd), kc, vc, offs.data(), n_pos, p.scale,
             scores.data(), out.data + t * out.cols + int64_t(h0) * hd, size_t(hd));
    }
  });
  if (!layout_ && p.window > 0 && !pos.empty()) give_back_before_window(layer, *std::max_element(pos.begin(), pos.end()), p.window, row);
}

int64_t CpuBackend::kv_slot(int64_t t, int32_t p, int window) const {
  if (p < 0) fail("negative position {}", p);
  int64_t slot = p;
  if (layout_) {
    const int bt = layout_->block_tokens;
    const size_t s = size_t(layout_->row_seq[size_t(t)]);
    const auto& tables = layout_->tables_for(window);
    if (s >= tables.size() || size_t(p / bt) >= tables[s].size()) fail("position {} of row {} has no KV block", p, t);
    slot = int64_t(tables[s][size_t(p / bt)]) * bt + p % bt;
  }
  if (slot >= kv_ctx_) fail("position {} is outside the context of {} tokens", p, kv_ctx_);
  return slot;
}

void CpuBackend::copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= src.rows) fail("copy_rows: row {} of {}", rows[i], src.rows);
    std::memcpy(dst.data + int64_t(i) * dst.cols, src.data + int64_t(rows[i]) * src.cols, size_t(src.cols) * sizeof(float));
  }
}

void CpuBackend::add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= dst.rows) fail("add_rows_scaled: row {} of {}", rows[i], dst.rows);
    float* d = dst.data + int64_t(rows[i]) * dst.cols;
    const float* s = src.data + int64_t(i) * src.cols;
    for (int64_t c = 0; c < dst.cols; ++c) d[c] += scale[i] * s[c];
  }
}

void CpuBackend::route_experts(Tensor logits, int k, bool renorm, Tensor route) {
  if (route.rows != logits.rows || route.cols != 2 * int64_t(k) || k < 1 || k > logits.cols)
    fail("route_experts: {} picks of {} experts into {} x {}", k, logits.cols, route.rows, route.cols);
  std::vector<int32_t> ids(static_cast<size_t>(k));
  for (int64_t t = 0; t < logits.rows; ++t) {
    float* r = route.data + t * route.cols;
    route_top_k(logits.data + t * logits.cols, logits.cols, k, renorm, ids.data(), r + k);
    std::memcpy(r, ids.data(), ids.size() * sizeof(int32_t));
  }
}

// Elementwise ops run on the pool when a prompt makes them long enough to pay.
static constexpr int64_t kElementGrain = 16384;

void CpuBackend::swiglu(Tensor gate, Tensor up) {
  pool_.parallel_for(gate.rows * gate.cols, [&](int64_t b, int64_t e) {
    silu_mul(gate.data + b, up.data + b, e - b, isa_);
  }, kElementGrain);
}

void CpuBackend::geglu(Tensor gate, Tensor up) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;
  pool_.parallel_for(gate.rows * gate.cols, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate.data[i];
      gate.data[i] = 0.5f * g * (1.f + std::tanh(kSqrt2OverPi * g * (1.f + kCubic * g * g))) * up.data[i];
    }
  }, kElementGrain);
}

void CpuBackend::scale(Tensor x, float s) {
  for (int64_t i = 0; i < x.rows * x.cols; ++i) x.data[i] *= s;
}

void CpuBackend::read(Tensor t, float* host) {
  std::memcpy(host, t.data, size_t(t.rows * t.cols) * sizeof(float));
}

}  // namespace lamina
