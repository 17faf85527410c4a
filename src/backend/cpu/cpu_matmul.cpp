// CpuBackend's matmuls: activations quantised once per call (outliers split off first), then
// the weight rows shared out between the threads. Prompts of the int8 and k-quant types go
// through 16 x 16 tiles (gemm_amx.h: AMX, AVX-512 VNNI, AVX-VNNI or AVX2 products), everything
// else through the row dot kernels (vec_dot.h); all give each output the same bits (vec_dot.h's
// order), so a token's results never depend on its batch.
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/vec_dot.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <utility>

namespace lamina {

// Activation outliers (LLM.int8()'s decomposition): elements above kOutlierRms x the row's rms
// (at most kMaxOutliers, the largest) are taken out before the row is quantised to 8 bits and added back in f32 against their
// decoded weights. One outlier in a block of 32 otherwise makes that block's step ~7x coarser.
static constexpr float kOutlierRms = 3.f;
static constexpr int kMaxOutliers = 8;
static constexpr size_t kPrefetchRows = 8;
// Prompts of at least this many tokens take the AMX tiles where the CPU has them (a tile of 16
// tokens, padded, beats the four-token row kernels from 6 tokens on: docs/benchmarks.md).
static constexpr int64_t kAmxMinTokens = 6;
// And the AVX-512 VNNI tiles from this many (measured: 5 tokens break even with the four-token
// row kernels, 6 gain 18 %: docs/benchmarks.md).
static constexpr int64_t kVnniMinTokens = 6;
// And the AVX2 / AVX-VNNI tiles from this many (measured against the four-token row kernels: even
// at 10-12 / 8 tokens, ahead from 14 / 10: docs/benchmarks.md).
static constexpr int64_t kAvx2TileMinTokens = 12, kAvxVnniTileMinTokens = 10;
// A prompt's tokens go in tiles of kTokenTile: a tile's activations stay in L1 while the thread's
// rows pass over them (the AMX tiles' 16 tokens too).
static constexpr int64_t kTokenTile = kAmxTokens;
static constexpr int kOutlierSlots = kTokenTile * kMaxOutliers;

// A token tile's outliers: the distinct outlier columns (activation outliers sit in the same few
// channels from token to token, so their weights are decoded once per row for the tile, not once
// per token), and slot[t][i], token t's outlier i among them.
struct TileOutliers {
  int n_cols = 0;
  int32_t cols[kOutlierSlots];
  uint8_t slot[kTokenTile][kMaxOutliers];
  template <class Outliers>
  void build(const std::vector<Outliers>& o, int64_t t0, int64_t t1) {
    n_cols = 0;
    for (int64_t t = t0; t < t1; ++t)
      for (int i = 0; i < o[size_t(t)].n; ++i) {
        int c = 0;
        while (c < n_cols && cols[c] != o[size_t(t)].index[i]) ++c;
        if (c == n_cols) cols[n_cols++] = o[size_t(t)].index[i];
        slot[t - t0][i] = uint8_t(c);
      }
  }
};

static inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

void CpuBackend::matmul(const Weight& w, Tensor x, Tensor out) {
  const Weight* ws[] = {&w};
  const Tensor outs[] = {out};
  matmul_multi(ws, x, outs);
}

void CpuBackend::matmul_multi(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> outs) {
  const int64_t K = x.cols, T = x.rows;
  const VecDot vd = vec_dot_for(ws[0]->type, isa_);
  bool same = true;
  for (const Weight* w : ws) same = same && w->type == ws[0]->type;
  constexpr size_t kMaxFused = 8;
  if (ws.size() > kMaxFused) {  // fuse in groups of at most kMaxFused weights
    for (size_t i = 0; i < ws.size(); i += kMaxFused) {
      const size_t m = std::min(kMaxFused, ws.size() - i);
      matmul_multi(ws.subspan(i, m), x, outs.subspan(i, m));
    }
    return;
  }
  if (!same) {  // different weight types convert the input differently: one pass each
    for (size_t i = 0; i < ws.size(); ++i) matmul_multi(std::span(&ws[i], 1), x, outs.subspan(i, 1));
    return;
  }
  // The weights' rows are numbered as one concatenated matrix of N rows.
  int64_t N = 0;
  int64_t first[kMaxFused];
  for (size_t i = 0; i < ws.size(); ++i) first[i] = N, N += ws[i]->rows;
  auto locate = [&](int64_t r, size_t& wi) {
    wi = 0;
    while (wi + 1 < ws.size() && r >= first[wi + 1]) ++wi;
    return r - first[wi];
  };
  const GgmlType type = ws[0]->type;
  const size_t w_rb = row_bytes(type, K);
  if (!vd.fn || (exact_ && vd.act != ActType::F32)) {  // dequantise each weight row, then an f32 dot
    const VecDot f32 = vec_dot_for(GgmlType::F32, isa_);
    pool_.parallel_for(N, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t r = b; r < e; ++r) {
        size_t wi;
        const int64_t rr = locate(r, wi);
        dequantize_row(type, static_cast<const uint8_t*>(ws[wi]->data) + size_t(rr) * w_rb, row.data(), K);
        for (int64_t t = 0; t < T; ++t) outs[wi].data[t * outs[wi].cols + rr] = f32.fn(K, row.data(), x.data + t * x.cols);
      }
    }, 16);
    return;
  }
  // Activations in the kernel's format, once per call (outliers split off first).
  const void* xq = x.data;
  size_t x_rb = size_t(K) * 4;
  outliers_.assign(size_t(T), {});
  const bool tokens4 = vd.fn4c && T >= 4;  // a weight row against four tokens per pass (prompts)
  const bool rows4 = vd.rows4c && T < 4;    // four (or eight) weight rows against a token per pass (decode)
  // Decode: eight weight rows per pass down eight streams (decode_rows below), for the types
  // with an eight-row kernel and for those with neither a tile nor a four-row kernel.
  const bool decode8 = T < 4 && vd.act != ActType::F32 && (vd.rows8c || !vd.rows4c);
  // Prompts: AMX tiles; without AMX, AVX-512 VNNI runs the same tiles by dpbusd (gemm_vnni.cpp);
  // without AVX-512, in 8-lane vectors (gemm_ymm.cpp).
  const bool tile_type = !decode8 && tiles_support(type);
  const bool amx = tile_type && isa_ >= CpuIsa::Amx && T >= kAmxMinTokens;
  const bool vnni_tiles = tile_type && isa_ == CpuIsa::Avx512 && T >= kVnniMinTokens;
  const bool ymm_tiles = tile_type && (isa_ == CpuIsa::Avx2 || isa_ == CpuIsa::AvxVnni) &&
                         T >= (isa_ == CpuIsa::AvxVnni ? kAvxVnniTileMinTokens : kAvx2TileMinTokens);
  const bool tiles = amx || vnni_tiles || ymm_tiles;
  const auto tile_fn = amx ? amx_tile : vnni_tiles ? vnni_tile : isa_ == CpuIsa::AvxVnni ? avxvnni_tile : avx2_tile;
  const auto decode_columns = ymm_tiles ? tile_decode_columns : amx_decode_columns;
  const auto add_terms = ymm_tiles ? tile_add_terms : amx_add_terms;
  bool row_kernels = !tiles;  // with tiles, only the rows past a weight's last whole stripe take them
  for (const Weight* w : ws) row_kernels = row_kernels || w->rows % kAmxRows != 0;
  const bool corrections = row_kernels && (tokens4 || rows4) && vd.corr_bias != 0;  // their offset weights
  const int64_t nb = K / QK;  // corrections per activation row
  if (vd.act != ActType::F32) {
    x_rb = act_row_bytes(vd.act, K);
    act_q_.resize(x_rb * size_t(T));
    if (corrections) act_corr_.resize(size_t(T) * size_t(nb));
    pool_.parallel_for(T, [&](int64_t b, int64_t e) {
      std::vector<float> tmp;
      for (int64_t t = b; t < e; ++t) {
        const float* xr = x.data + t * x.cols;
        split_outliers(xr, K, tmp, outliers_[size_t(t)]);
        quantize_activations(vd.act, outliers_[size_t(t)].n ? tmp.data() : xr, act_q_.data() + size_t(t) * x_rb, K);
        if (corrections)
          act_corrections(act_q_.data() + size_t(t) * x_rb, K, vd.corr_bias, act_corr_.data() + size_t(t) * size_t(nb));
      }
    });
    xq = act_q_.data();
  }
  const uint8_t* xb = static_cast<const uint8_t*>(xq);
  auto corr_row = [&](int64_t t) { return corrections ? act_corr_.data() + size_t(t) * size_t(nb) : nullptr; };
  const ElementFn fast_elem = isa_ >= CpuIsa::Avx2 ? avx2_element(type) : nullptr;
  const ElementFn elem = fast_elem ? fast_elem : element_decoder(type);
  const Outliers8Fn outliers8 = isa_ >= CpuIsa::Avx2 ? avx2_outliers8(type) : nullptr;
  // Threads split the output rows; each weight row is read once for all tokens. Rows are
  // prefetched kPrefetchRows ahead: on the development VM the hardware prefetcher does not keep
  // up with this access pattern (measured 2.5 -> 9.8 GB/s per core streaming Q4_1 rows).
  const size_t ahead = std::max<size_t>(kPrefetchRows * w_rb, 2048);
  // Rows [b, e) of the concatenated weights with the row dot kernels: four tokens per weight-row
  // pass for prompts, four weight rows per pass for a few tokens.
  auto dot_rows = [&](int64_t b, int64_t e) {
    float v[4], dec[kOutlierSlots];
    TileOutliers to;
    for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
      const int64_t t1 = std::min(T, t0 + kTokenTile);
      to.build(outliers_, t0, t1);
      size_t wi;
      int64_t r = locate(b, wi);
      for (int64_t g = b; g < e; ++g, ++r) {
        if (r == ws[wi]->rows) r = 0, ++wi;
        const uint8_t* wr = static_cast<const uint8_t*>(ws[wi]->data) + size_t(r) * w_rb;
        const Tensor& out = outs[wi];
        // Float weights with a register tile: kTileRows weight rows x up to kTileTokens tokens
        // per pass (f32 activations, so no outlier terms).
        if (vd.tile && g + kTileRows <= e && r + kTileRows <= ws[wi]->rows) {
          if (t0 == 0)
            for (size_t o = 0; o < size_t(kTileRows) * w_rb; o += 64) prefetch(wr + ahead + o);
          for (int64_t t = t0; t < t1; t += kTileTokens)
            vd.tile(K, wr, w_rb, xb + size_t(t) * x_rb, x_rb, int(std::min<int64_t>(kTileTokens, t1 - t)),
                    out.data + t * out.cols + r, size_t(out.cols));
          g += kTileRows - 1, r += kTileRows - 1;  // (and the loop's ++)
          continue;
        }
        // A few tokens: four weight rows per pass (eight go through decode_rows below).
        const int width = rows4 && g + 4 <= e && r + 4 <= ws[wi]->rows ? 4 : 1;
        if (width > 1) {
          for (size_t o = 0; o < size_t(width) * w_rb; o += 64) prefetch(wr + ahead + o);
          for (int64_t t = t0; t < t1; ++t) {
            vd.rows4c(K, wr, w_rb, xb + size_t(t) * x_rb, corr_row(t), v);
            const Outliers& o = outliers_[size_t(t)];
            for (int j = 0; j < width; ++j) {
              for (int i = 0; i < o.n; ++i) v[j] += o.value[i] * elem(wr + size_t(j) * w_rb, o.index[i]);
              out.data[t * out.cols + r + j] = v[j];
            }
          }
          g += width - 1, r += width - 1;  // (and the loop's ++)
          continue;
        }
        if (t0 == 0)
          for (size_t o = 0; o < w_rb; o += 64) prefetch(wr + ahead + o);
        for (int c = 0; c < to.n_cols; ++c) dec[c] = elem(wr, to.cols[c]);
        for (int64_t t = t0; t < t1;) {
          const int n = tokens4 && t + 4 <= t1 ? 4 : 1;
          if (n == 4) vd.fn4c(K, wr, xb + size_t(t) * x_rb, x_rb, corr_row(t), size_t(nb), v);
          else v[0] = vd.fn(K, wr, xb + size_t(t) * x_rb);
          for (int j = 0; j < n; ++j, ++t) {
            const Outliers& o = outliers_[size_t(t)];
            for (int i = 0; i < o.n; ++i) v[j] += o.value[i] * dec[to.slot[t - t0][i]];
            out.data[t * out.cols + r] = v[j];
          }
        }
      }
    }
  };
  // Decode with an eight-row kernel: a chunk's rows of one weight as eight runs of S rows, row k
  // of each run in one pass (rows r0 + k + j S). Each of the eight streams then reads
  // consecutive rows, long enough for the hardware prefetcher to ramp up; eight consecutive rows
  // made eight streams of one short row each.
  auto decode_rows = [&](int64_t b, int64_t e) {
    float v[8];
    while (b < e) {
      size_t wi;
      const int64_t r0 = locate(b, wi), L = std::min(e - b, ws[wi]->rows - r0);
      int64_t S = L / 8;
      const uint8_t* w0 = static_cast<const uint8_t*>(ws[wi]->data) + size_t(r0) * w_rb;
      if (size_t(S) * w_rb * 7 > size_t(INT32_MAX)) S = 0;  // the kernel's gather offsets are 32-bit
      const size_t stride = size_t(S) * w_rb;
      const Tensor& out = outs[wi];
      for (int64_t k = 0; k < S; ++k) {
        const uint8_t* wr = w0 + size_t(k) * w_rb;  // no software prefetch: measured slower here
        for (int64_t t = 0; t < T; ++t) {
          if (vd.rows8c) {
            vd.rows8c(K, wr, stride, xb + size_t(t) * x_rb, corr_row(t), v);
          } else {  // the one-row kernel down the eight streams
            for (int j = 0; j < 8; ++j) v[j] = vd.fn(K, wr + size_t(j) * stride, xb + size_t(t) * x_rb);
          }
          const Outliers& o = outliers_[size_t(t)];
          if (outliers8 && o.n) {
            outliers8(wr, stride, o.n, o.index, o.value, v);
          } else {
            for (int j = 0; j < 8; ++j)
              for (int i = 0; i < o.n; ++i) v[j] += o.value[i] * elem(wr + size_t(j) * stride, o.index[i]);
          }
          for (int j = 0; j < 8; ++j) out.data[t * out.cols + r0 + k + j * S] = v[j];
        }
      }
      if (8 * S < L) dot_rows(b + 8 * S, b + L);
      b += L;
    }
  };
  if (decode8) {
    pool_.parallel_for(N, decode_rows, 16);
    return;
  }
  if (!tiles) {
    pool_.parallel_for(N, dot_rows, 16);
    return;
  }

  // Tiles (AMX, AVX-512 VNNI, AVX-VNNI or AVX2): the tokens packed once into tiles of 16, then
  // each thread takes stripes of 16 weight rows, unpacks a stripe once and runs it against every
  // token tile. Rows past a weight's last whole stripe take the row kernels (the same bits).
  const int64_t n_tiles = (T + kAmxTokens - 1) / kAmxTokens;
  const GgmlType lt = tile_layout_type(type);  // (q5_K's stripes are q4_K's; q3_K's and iq4_xs's q6_K's)
  const size_t tile_bytes = amx_tokens_bytes(lt, K), stripe_bytes = amx_rows_bytes(lt, K);
  uint8_t* packed = amx_tokens_.get(size_t(n_tiles) * tile_bytes);
  pool_.parallel_for(n_tiles, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) amx_pack_tokens(lt, xb, x_rb, T, i * kAmxTokens, K, packed + size_t(i) * tile_bytes);
  });
  std::vector<std::pair<size_t, int64_t>> stripes;  // (weight, first row)
  for (size_t wi = 0; wi < ws.size(); ++wi)
    for (int64_t r = 0; r + kAmxRows <= ws[wi]->rows; r += kAmxRows) stripes.emplace_back(wi, r);
  // The outlier columns of all tokens, each once (the same few channels from token to token):
  // a stripe decodes their weights once for every token.
  std::vector<int32_t>& slot_of = amx_col_slot_;  // column -> its index in cols, or -1
  slot_of.assign(size_t(K), -1);
  std::vector<int32_t> cols;
  for (const Outliers& o : outliers_)
    for (int i = 0; i < o.n; ++i)
      if (slot_of[size_t(o.index[i])] < 0) slot_of[size_t(o.index[i])] = int32_t(cols.size()), cols.push_back(o.index[i]);
  pool_.parallel_for(int64_t(stripes.size()), [&](int64_t b, int64_t e) {
    thread_local AmxBuffer unpacked, decoded;
    uint8_t* rows = unpacked.get(stripe_bytes);
    float* dec = reinterpret_cast<float*>(decoded.get(cols.size() * kAmxRows * sizeof(float) + 64));
    for (int64_t s = b; s < e; ++s) {
      const auto [wi, r] = stripes[size_t(s)];
      const uint8_t* wr = static_cast<const uint8_t*>(ws[wi]->data) + size_t(r) * w_rb;
      const Tensor& out = outs[wi];
      amx_unpack_rows(type, wr, w_rb, K, rows);
      for (int64_t t0 = 0; t0 < T; t0 += kAmxTokens)
        tile_fn(type, rows, packed + size_t(t0 / kAmxTokens) * tile_bytes, K, out.data + t0 * out.cols + r,
                size_t(out.cols), int(std::min<int64_t>(kAmxTokens, T - t0)));
      decode_columns(lt, rows, cols.data(), int(cols.size()), dec);
      for (int64_t t = 0; t < T; ++t) {  // the outliers' terms, in each token's order
        const Outliers& o = outliers_[size_t(t)];
        if (o.n == 0) continue;
        const float* d[kMaxOutliers];
        for (int k = 0; k < o.n; ++k) d[k] = dec + size_t(slot_of[size_t(o.index[k])]) * kAmxRows;
        add_terms(out.data + t * out.cols + r, o.n, o.value, d);
      }
    }
    if (amx) amx_release_tiles();
  });
  for (size_t wi = 0; wi < ws.size(); ++wi) {  // the rows past the whole stripes
    const int64_t tail = ws[wi]->rows % kAmxRows, at = first[wi] + ws[wi]->rows - tail;
    if (tail) pool_.parallel_for(tail, [&](int64_t b, int64_t e) { dot_rows(at + b, at + e); });
  }
}

void CpuBackend::split_outliers(const float* x, int64_t n, std::vector<float>& rest, Outliers& o) {
  const bool avx2 = detect_isa() >= CpuIsa::Avx2;  // the same results either way
  double ss = 0;
  if (avx2) {
    ss = avx2_sum_squares4(x, n);
  } else {
    double ss4[4] = {0, 0, 0, 0};  // four running sums (independent adds), then paired
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j) ss4[j] += double(x[i + j]) * x[i + j];
    for (; i < n; ++i) ss4[0] += double(x[i]) * x[i];
    ss = (ss4[0] + ss4[1]) + (ss4[2] + ss4[3]);
  }
  const float limit = kOutlierRms * float(std::sqrt(ss / double(n)));
  o.n = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (avx2 && (i = avx2_next_above(x, i, n, limit)) == n) break;
    const float a = std::fabs(x[i]);
    if (a <= limit || a == 0.f) continue;
    if (o.n < kMaxOutliers) {
      o.index[o.n] = int32_t(i);
      o.value[o.n++] = x[i];
      continue;
    }
    int smallest = 0;  // keep the kMaxOutliers largest
    for (int j = 1; j < o.n; ++j)
      if (std::fabs(o.value[j]) < std::fabs(o.value[smallest])) smallest = j;
    if (a > std::fabs(o.value[smallest])) {
      o.index[smallest] = int32_t(i);
      o.value[smallest] = x[i];
    }
  }
  if (o.n == 0) return;
  // Ascending columns: the order their terms are added in, whichever kernel computed the rest.
  for (int k = 1; k < o.n; ++k)
    for (int j = k; j > 0 && o.index[j - 1] > o.index[j]; --j) std::swap(o.index[j - 1], o.index[j]), std::swap(o.value[j - 1], o.value[j]);
  rest.assign(x, x + n);
  for (int j = 0; j < o.n; ++j) rest[size_t(o.index[j])] = 0.f;
}

}  // namespace lamina
