// Every GEMM variant against a CPU fp64 reference on fresh random inputs: all layouts (SGEMM),
// edge shapes (M, N, K not multiples of the tiles), padded leading dimensions, alpha/beta, C
// poisoned with NaN (and its padding checked untouched), every config, every output type.
#include "core/half.h"
#include "gpu_test_util.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "format/quant_decode.h"
#include "kernels/autotune/autotune.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>

using namespace lamina;
using namespace lamina::kernels;

namespace {

struct Shape {
  int64_t m, n, k;
};

// Values as the device sees them, stored in the operand's type.
struct HostMatrix {
  GgmlType type;
  std::vector<uint8_t> bytes;   // device image
  std::vector<double> value;    // logical values, [rows][cols] row-major (rows = m or k, cols = k or n)
};

uint16_t to16(GgmlType t, float f) { return t == GgmlType::BF16 ? f32_to_bf16(f) : f32_to_f16(f); }
double from16(GgmlType t, uint16_t h) { return t == GgmlType::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
double round_to(GgmlType t, float f) { return t == GgmlType::F32 ? f : from16(t, to16(t, f)); }

// Element idx of C's device image in its type.
double c_value(const std::vector<uint8_t>& c, size_t idx, GgmlType t) {
  if (t == GgmlType::F32) {
    float f;
    std::memcpy(&f, &c[idx * 4], 4);
    return f;
  }
  uint16_t u;
  std::memcpy(&u, &c[idx * 2], 2);
  return from16(t, u);
}

// Runs config cfg of v on p and reads C's device image (c: p.c's buffer) back into got.
void launch_and_read(const GemmVariant& v, const GemmProblem& p, const GemmConfig& cfg, const DeviceBuf& c,
                     std::vector<uint8_t>& got) {
  const Status st = v.launch(p, cfg, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  CUDA_OK(cudaDeviceSynchronize());
  got.resize(c.n);
  CUDA_OK(cudaMemcpy(got.data(), c.p, c.n, cudaMemcpyDeviceToHost));
}

// A dense [rows][cols] logical matrix stored column- or row-major with leading dimension ld.
HostMatrix dense(GgmlType t, int64_t rows, int64_t cols, bool col_major, int64_t ld, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  HostMatrix h{t, {}, std::vector<double>(size_t(rows * cols))};
  const size_t elt = t == GgmlType::F32 ? 4 : 2, count = size_t((col_major ? cols : rows) * ld);
  h.bytes.resize(count * elt);
  for (size_t i = 0; i < count; ++i) {  // padding gets random values too
    const float f = nd(rng);
    if (elt == 4) std::memcpy(&h.bytes[i * 4], &f, 4);
    else { const uint16_t v = to16(t, f); std::memcpy(&h.bytes[i * 2], &v, 2); }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t idx = size_t(col_major ? c * ld + r : r * ld + c);
      double v;
      if (elt == 4) { float f; std::memcpy(&f, &h.bytes[idx * 4], 4); v = f; }
      else { uint16_t u; std::memcpy(&u, &h.bytes[idx * 2], 2); v = from16(t, u); }
      h.value[size_t(r * cols + c)] = v;
    }
  return h;
}

struct GemmRun {
  const GemmVariant* v;
  GgmlType a_type, b_type, c_type;
  bool a_col = false, b_col = true;
  int64_t pad = 0;  // extra leading-dimension elements
  float alpha = 1.f, beta = 0.f;
};

// b_values: logical B [k][n]; b_image: its device bytes (already in the variant's layout).
void check(const GemmRun& r, const Shape& s, const HostMatrix& a, const std::vector<double>& b_values,
           const std::vector<uint8_t>& b_image, int64_t ldb, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << r.v->name << " A " << type_name(r.a_type) << (r.a_col ? "c" : "r") << " B "
                                  << type_name(r.b_type) << (r.b_col ? "c" : "r") << " C " << type_name(r.c_type)
                                  << " m=" << s.m << " n=" << s.n << " k=" << s.k << " pad=" << r.pad
                                  << " alpha=" << r.alpha << " beta=" << r.beta);
  const int64_t ldc = s.n + r.pad;
  const size_t c_elt = r.c_type == GgmlType::F32 ? 4 : 2, c_bytes = size_t(s.m * ldc) * c_elt;
  // Initial C: random where beta != 0, NaN poison otherwise (it must not be read).
  std::vector<uint8_t> c0(c_bytes, 0xFF);
  std::vector<double> c0v(size_t(s.m * s.n), 0.0);
  if (r.beta != 0.f) {
    const HostMatrix cm = dense(r.c_type, s.m, s.n, false, ldc, rng);
    c0 = cm.bytes;
    c0v = cm.value;
  }
  std::vector<double> ref(size_t(s.m * s.n)), mag(size_t(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0, m = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double t = a.value[size_t(i * s.k + p)] * b_values[size_t(p * s.n + j)];
        acc += t;
        m += std::fabs(t);
      }
      const double cv = c0v[size_t(i * s.n + j)];
      ref[size_t(i * s.n + j)] = r.alpha * acc + r.beta * cv;
      mag[size_t(i * s.n + j)] = std::fabs(r.alpha) * m + std::fabs(r.beta * cv);
    }
  DeviceBuf da(a.bytes.size()), db(b_image.size()), dc(c_bytes);
  CUDA_OK(cudaMemcpy(da.p, a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, b_image.data(), b_image.size(), cudaMemcpyHostToDevice));
  GemmProblem p;
  p.a_type = r.a_type, p.b_type = r.b_type, p.c_type = r.c_type;
  p.b_layout = repacked_layout_preferred(r.b_type) ? WeightLayout::Repacked : WeightLayout::Gguf;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = da.p, p.lda = (r.a_col ? s.m : s.k) + r.pad, p.a_col_major = r.a_col;
  p.b = db.p, p.ldb = ldb, p.b_col_major = r.b_col;
  p.c = dc.p, p.ldc = ldc, p.alpha = r.alpha, p.beta = r.beta;
  Status st = gemm_validate(p, *r.v);
  ASSERT_TRUE(st.ok) << st.message;
  const bool tc = r.a_type != GgmlType::F32;
  const double tol = tc ? 1e-4 : 2e-5;
  const double out_ulp = r.c_type == GgmlType::F32 ? 0 : r.c_type == GgmlType::F16 ? 1.0 / 1024 : 1.0 / 128;
  for (const GemmConfig& cfg : r.v->configs) {
    if (!gemm_config_takes(*r.v, p, cfg)) continue;
    SCOPED_TRACE(cfg.str());
    DeviceBuf ws(std::max<size_t>(gemm_workspace_bytes(p, cfg), 1));
    CUDA_OK(cudaMemset(ws.p, 0xFF, ws.n));  // split-K partials: poisoned, every one must be written
    p.workspace = ws.p, p.workspace_bytes = gemm_workspace_bytes(p, cfg);
    CUDA_OK(cudaMemcpy(dc.p, c0.data(), c_bytes, cudaMemcpyHostToDevice));
    std::vector<uint8_t> got;
    launch_and_read(*r.v, p, cfg, dc, got);
    if (testing::Test::HasFatalFailure()) return;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const double g = c_value(got, size_t(i * ldc + j), r.c_type);
        const double want = ref[size_t(i * s.n + j)];
        ASSERT_NEAR(g, want, tol * mag[size_t(i * s.n + j)] + out_ulp * std::fabs(want) + 1e-6)
            << "config " << cfg.str() << " at (" << i << ", " << j << ")";
      }
      for (int64_t j = s.n; j < ldc; ++j)  // padding of C is never written
        ASSERT_EQ(std::memcmp(&got[size_t(i * ldc + j) * c_elt], &c0[size_t(i * ldc + j) * c_elt], c_elt), 0)
            << "config " << cfg.str() << " wrote padding at (" << i << ", " << j << ")";
    }
  }
}

void run_dense(const GemmRun& r, const Shape& s, std::mt19937& rng) {
  const HostMatrix a = dense(r.a_type, s.m, s.k, r.a_col, (r.a_col ? s.m : s.k) + r.pad, rng);
  const int64_t ldb = (r.b_col ? s.k : s.n) + r.pad;
  // B logical [k][n]: column-major storage is W[n][k].
  const HostMatrix b = dense(r.b_type, s.k, s.n, r.b_col, ldb, rng);
  check(r, s, a, b.value, b.bytes, ldb, rng);
}

TEST(GemmGpu, SgemmEveryRungEveryLayout) {
  std::mt19937 rng(1);
  int checked = 0;
  for (const auto& v : gemm_variants()) {
    if (v.name[0] != 's') continue;
    for (bool a_col : {false, true})
      for (bool b_col : {false, true})
        for (const Shape s : {Shape{67, 45, 37}, Shape{130, 257, 64}, Shape{1, 9, 5}, Shape{256, 128, 24}})
          for (int64_t pad : {0, 3}) {
            GemmRun r{&v, GgmlType::F32, GgmlType::F32, GgmlType::F32, a_col, b_col, pad};
            if (pad) r.alpha = 0.75f, r.beta = -1.5f;
            run_dense(r, s, rng);
            ++checked;
          }
  }
  EXPECT_EQ(checked, 7 * 4 * 4 * 2);  // seven rungs s0..s6
}

void run_hgemm(const GemmVariant* v, std::mt19937& rng) {
  ASSERT_NE(v, nullptr);
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16})
    for (GgmlType ct : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
      for (const Shape s : {Shape{131, 75, 40}, Shape{64, 128, 256}, Shape{257, 190, 328}, Shape{1, 8, 8}})
        for (int64_t pad : {0, 8}) {
          GemmRun r{v, t, t, ct, false, true, pad};
          if (pad) r.alpha = 0.5f, r.beta = 2.f;
          run_dense(r, s, rng);
        }
}

TEST(GemmGpu, HgemmMmaSync) {
  std::mt19937 rng(2);
  run_hgemm(find_gemm_variant("h1_mma"), rng);
}

TEST(GemmGpu, HgemmHopperWgmma) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) GTEST_SKIP() << "h2_wgmma needs an sm_90 GPU (this is sm_" << prop.major << prop.minor << ")";
  std::mt19937 rng(4);
  run_hgemm(find_gemm_variant("h2_wgmma"), rng);
  // A shape with several tiles per block of the persistent grid and a K tail.
  GemmRun r{find_gemm_variant("h2_wgmma"), GgmlType::F16, GgmlType::F16, GgmlType::F32};
  run_dense(r, Shape{1100, 2100, 200}, rng);
  // Whole tiles with beta (the residual the GEMM adds: f32 C, beta 1), which take the pair stores.
  r.beta = 1.f;
  run_dense(r, Shape{512, 512, 256}, rng);
}

// W [n][k] quantised row by row: the device image (the repacked planes of its type, made by
// gemv_repack) and the logical B [k][n], the dequantised values rounded to A's type (what the
// kernels feed the tensor cores).
struct QuantWeight {
  std::vector<uint8_t> image;
  std::vector<double> values;
};

// Q4_K and Q5_K as the Hopper GEMMs convert them (q4k_half_scales): q * f16(d sc) - f16(dmin m),
// rounded to f16 once (the product and difference are exact in double).
template <class Block>
float kquant_half_scaled(const uint8_t* row, int64_t e) {
  const Block& b = reinterpret_cast<const Block*>(row)[e / 256];
  const int i = int(e % 256);
  uint8_t sc, m;
  q4k_scale_min(i / 32, b.scales, &sc, &m);
  const uint8_t byte = b.qs[32 * (i / 64) + i % 32];
  int q = i % 64 < 32 ? byte & 15 : byte >> 4;
  if constexpr (std::is_same_v<Block, block_q5_K>) q += 16 * ((b.qh[i % 32] >> (i / 32)) & 1);
  const double ds = f16_to_f32(f32_to_f16(f16_to_f32(b.d) * float(sc)));
  const double dm = f16_to_f32(f32_to_f16(f16_to_f32(b.dmin) * float(m)));
  return float(double(q) * ds - dm);
}

// Q6_K as q3_wgmma_rs converts it: (q - 32) * f16(d sc), rounded to f16 once (exact in double).
float q6k_half_scaled(const uint8_t* row, int64_t e) {
  const block_q6_K& b = reinterpret_cast<const block_q6_K*>(row)[e / 256];
  const int i = int(e % 256);
  const double ds = f16_to_f32(f32_to_f16(f16_to_f32(b.d) * float(b.scales[i / 16])));
  return float(double(q6k_quant(b, i) - 32) * ds);
}

// IQ4_XS as q3_wgmma_rs converts it: v * f16(d (ls - 32)), rounded to f16 once (exact in double).
float iq4xs_half_scaled(const uint8_t* row, int64_t e) {
  const block_iq4_xs& b = reinterpret_cast<const block_iq4_xs*>(row)[e / 256];
  const int i = int(e % 256), ib = i / 32, j = i % 32;
  const uint8_t byte = b.qs[16 * ib + j % 16];  // element j: the low nibble of byte j, j - 16 the high
  const int v = iq4_value(j < 16 ? byte & 15 : byte >> 4);
  const double ds = f16_to_f32(f32_to_f16(f16_to_f32(b.d) * float(iq4xs_scale(b, ib))));
  return float(double(v) * ds);
}

// Q3_K as q3_wgmma_rs converts it: (q - 4) * f16(d sc), and Q2_K: q * f16(d sc) - f16(dmin m), each
// rounded to f16 once (exact in double).
float q3k_half_scaled(const uint8_t* row, int64_t e) {
  const block_q3_K& b = reinterpret_cast<const block_q3_K*>(row)[e / 256];
  const int i = int(e % 256), q = k23_low2(b.qs, i) | q3k_high(b.hmask, i) << 2;
  const double ds = f16_to_f32(f32_to_f16(f16_to_f32(b.d) * float(q3k_scale(b.scales, i / 16))));
  return float(double(q - 4) * ds);
}
float q2k_half_scaled(const uint8_t* row, int64_t e) {
  const block_q2_K& b = reinterpret_cast<const block_q2_K*>(row)[e / 256];
  const int i = int(e % 256);
  const uint8_t s = b.scales[i / 16];
  const double ds = f16_to_f32(f32_to_f16(f16_to_f32(b.d) * float(s & 15)));
  const double dm = f16_to_f32(f32_to_f16(f16_to_f32(b.dmin) * float(s >> 4)));
  return float(double(k23_low2(b.qs, i)) * ds - dm);
}

// half_scales: Q4_K's, Q5_K's, Q6_K's, IQ4_XS's, Q3_K's and Q2_K's values as q2_wgmma and
// q3_wgmma_rs make them (kquant_half_scaled, q6k_half_scaled, iq4xs_half_scaled, q3k_half_scaled,
// q2k_half_scaled).
void quant_weight(GgmlType wt, GgmlType at, const Shape& s, std::mt19937& rng, QuantWeight& q, bool half_scales = false) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t rb = row_bytes(wt, s.k);
  std::vector<uint8_t> w(rb * size_t(s.n));
  std::vector<float> row(size_t(s.k)), deq(size_t(s.k));
  q.values.assign(size_t(s.k * s.n), 0.0);
  for (int64_t j = 0; j < s.n; ++j) {
    for (auto& f : row) f = nd(rng);
    quantize_row(wt, row.data(), w.data() + size_t(j) * rb, s.k);
    dequantize_row(wt, w.data() + size_t(j) * rb, deq.data(), s.k);
    if (half_scales && wt == GgmlType::Q4_K)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = kquant_half_scaled<block_q4_K>(w.data() + size_t(j) * rb, p);
    if (half_scales && wt == GgmlType::Q5_K)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = kquant_half_scaled<block_q5_K>(w.data() + size_t(j) * rb, p);
    if (half_scales && wt == GgmlType::Q6_K)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = q6k_half_scaled(w.data() + size_t(j) * rb, p);
    if (half_scales && wt == GgmlType::IQ4_XS)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = iq4xs_half_scaled(w.data() + size_t(j) * rb, p);
    if (half_scales && wt == GgmlType::Q3_K)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = q3k_half_scaled(w.data() + size_t(j) * rb, p);
    if (half_scales && wt == GgmlType::Q2_K)
      for (int64_t p = 0; p < s.k; ++p) deq[size_t(p)] = q2k_half_scaled(w.data() + size_t(j) * rb, p);
    for (int64_t p = 0; p < s.k; ++p) q.values[size_t(p * s.n + j)] = round_to(at, deq[size_t(p)]);
  }
  DeviceBuf raw(w.size()), out(gemv_repacked_bytes(wt, s.n, s.k));
  CUDA_OK(cudaMemcpy(raw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
  const Status st = gemv_repack(wt, raw.p, s.n, s.k, out.p, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  q.image.resize(gemv_repacked_bytes(wt, s.n, s.k));
  CUDA_OK(cudaMemcpy(q.image.data(), out.p, q.image.size(), cudaMemcpyDeviceToHost));
}

// C f32, alpha 1, beta 0 unless `c` says otherwise (its variant and A/B types are set here).
void run_quant(const GemmVariant* v, GgmlType wt, GgmlType at, const Shape& s, std::mt19937& rng, GemmRun c = {}) {
  QuantWeight w;
  quant_weight(wt, at, s, rng, w, std::string(v->name) != "q1_mma");
  if (testing::Test::HasFatalFailure()) return;
  const HostMatrix a = dense(at, s.m, s.k, false, s.k + c.pad, rng);  // (check() reads A with lda k + pad)
  c.v = v, c.a_type = at, c.b_type = wt;  // (c_type: F32 when value-initialised)
  check(c, s, a, w.values, w.image, 0, rng);
}

TEST(GemmGpu, QuantisedWeightsOnTensorCores) {
  std::mt19937 rng(3);
  const GemmVariant* v = find_gemm_variant("q1_mma");
  ASSERT_NE(v, nullptr);
  for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K})
    for (GgmlType at : {GgmlType::F16, GgmlType::BF16})
      for (const Shape s : {Shape{77, 67, wt == GgmlType::Q4_K ? 512 : 96}, Shape{130, 129, 256}, Shape{3, 200, 256}})
        run_quant(v, wt, at, s, rng);
}

TEST(GemmGpu, QuantisedWeightsHopperWgmma) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) GTEST_SKIP() << "q2_wgmma needs an sm_90 GPU (this is sm_" << prop.major << prop.minor << ")";
  std::mt19937 rng(5);
  // Edges: M and N not multiples of the tile (rows beyond N arrive as zeros), few k-steps
  // (split-K units left empty, or starting inside a group of 4 k-steps), several tiles per
  // block of the persistent grid. K is a multiple of 256 (the TMA row-stride rule).
  for (const char* name : {"q2_wgmma", "q3_wgmma_rs"}) {
    const GemmVariant* v = find_gemm_variant(name);
    ASSERT_NE(v, nullptr) << name;
    // (the planes of Q5_0, Q5_1, Q6_K, IQ4_NL, IQ4_XS, Q3_K, Q2_K and Q4_1: q3_wgmma_rs only)
    for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q5_0, GgmlType::Q5_1,
                        GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::Q4_1}) {
      GemmProblem t;
      t.a_type = GgmlType::F16, t.b_type = wt, t.b_layout = WeightLayout::Repacked, t.b_col_major = true, t.k = 256;
      const bool rs_only = wt == GgmlType::Q5_0 || wt == GgmlType::Q5_1 || wt == GgmlType::Q6_K || wt == GgmlType::IQ4_NL ||
                           wt == GgmlType::IQ4_XS || wt == GgmlType::Q3_K || wt == GgmlType::Q2_K || wt == GgmlType::Q4_1;
      const bool takes = !rs_only || std::string(name) == "q3_wgmma_rs";
      EXPECT_EQ(v->supports(t), takes) << name << " " << type_name(wt);
      if (!takes) continue;
      for (const Shape s : {Shape{77, 67, 256}, Shape{130, 300, 512}, Shape{3, 200, 768}, Shape{700, 1500, 256},
                            Shape{300, 260, 1536}})
        run_quant(v, wt, GgmlType::F16, s, rng);
      // With beta: the residual added by the GEMM (f32 C, beta 1), and f16 C padded with both scales.
      GemmRun residual{}, scaled{};
      residual.beta = 1.f;
      scaled.c_type = GgmlType::F16, scaled.pad = 8, scaled.alpha = 0.75f, scaled.beta = -0.5f;
      run_quant(v, wt, GgmlType::F16, Shape{300, 260, 1536}, rng, residual);
      run_quant(v, wt, GgmlType::F16, Shape{130, 300, 512}, rng, scaled);
    }
  }
}

// The gated GEMM (q3_wgmma_rs, or h2_wgmma for f16 W, with b_up): C = act(A Wg^T) * (A Wu^T) against the fp64 GLU of
// the two fp64 products, for every gated config, SiLU and GELU, f32 and f16 C (padded, poisoned
// with NaN and its padding checked), edge shapes as above. The tolerance carries each product's
// error bound through the GLU (|act'| <= 1.13 for both activations).
void run_gated(const GemmVariant& v, GgmlType wt, GgmlType ct, bool gelu, const Shape& s, std::mt19937& rng, int64_t pad = 3) {
  SCOPED_TRACE(testing::Message() << type_name(wt) << " C " << type_name(ct) << (gelu ? " gelu" : " silu") << " m=" << s.m
                                  << " n=" << s.n << " k=" << s.k);
  QuantWeight g, u;
  for (QuantWeight* w : {&g, &u}) {
    if (wt == GgmlType::F16) {  // W [n][k] as a GGUF file holds it: values [k][n]
      HostMatrix h = dense(GgmlType::F16, s.k, s.n, true, s.k, rng);
      w->image = std::move(h.bytes), w->values = std::move(h.value);
    } else {
      quant_weight(wt, GgmlType::F16, s, rng, *w, true);
    }
  }
  if (testing::Test::HasFatalFailure()) return;
  const HostMatrix a = dense(GgmlType::F16, s.m, s.k, false, s.k, rng);
  const int64_t ldc = s.n + pad;  // odd: element stores; even: column pairs where the tile is whole
  const size_t c_elt = ct == GgmlType::F32 ? 4 : 2, c_bytes = size_t(s.m * ldc) * c_elt;
  DeviceBuf da(a.bytes.size()), dg(g.image.size()), du(u.image.size()), dc(c_bytes);
  CUDA_OK(cudaMemcpy(da.p, a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dg.p, g.image.data(), g.image.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(du.p, u.image.data(), u.image.size(), cudaMemcpyHostToDevice));
  GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = wt, p.c_type = ct;
  p.b_layout = wt == GgmlType::F16 ? WeightLayout::Gguf : WeightLayout::Repacked;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = da.p, p.lda = s.k, p.b = dg.p, p.ldb = s.k, p.b_up = du.p, p.gelu = gelu, p.c = dc.p, p.ldc = ldc;
  Status st = gemm_validate(p, v);
  ASSERT_TRUE(st.ok) << st.message;
  auto act = [&](double x) { return gelu ? 0.5 * x * (1 + std::tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x)))
                                         : x / (1 + std::exp(-x)); };
  std::vector<double> want(size_t(s.m * s.n)), bound(size_t(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double gs = 0, us = 0, gm = 0, um = 0;
      for (int64_t q = 0; q < s.k; ++q) {
        const double x = a.value[size_t(i * s.k + q)], tg = x * g.values[size_t(q * s.n + j)], tu = x * u.values[size_t(q * s.n + j)];
        gs += tg, us += tu, gm += std::fabs(tg), um += std::fabs(tu);
      }
      const double w = act(gs) * us;
      want[size_t(i * s.n + j)] = w;
      bound[size_t(i * s.n + j)] = 1e-4 * (1.13 * std::fabs(us) * gm + std::fabs(act(gs)) * um + 1e-4 * gm * um) +
                                   (ct == GgmlType::F16 ? std::fabs(w) / 1024 : 0) + 1e-6;
    }
  int runs = 0;
  for (const GemmConfig& cfg : v.configs) {
    if (!gemm_config_takes(v, p, cfg)) continue;
    SCOPED_TRACE(cfg.str());
    ++runs;
    CUDA_OK(cudaMemset(dc.p, 0xFF, c_bytes));
    std::vector<uint8_t> got;
    launch_and_read(v, p, cfg, dc, got);
    if (testing::Test::HasFatalFailure()) return;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        const double x = c_value(got, size_t(i * ldc + j), ct);
        ASSERT_NEAR(x, want[size_t(i * s.n + j)], bound[size_t(i * s.n + j)]) << "at (" << i << ", " << j << ")";
      }
      for (int64_t j = s.n; j < ldc; ++j)
        for (size_t b = 0; b < c_elt; ++b) ASSERT_EQ(got[size_t(i * ldc + j) * c_elt + b], 0xFF) << "padding written at " << j;
    }
  }
  EXPECT_EQ(runs, 2) << "the gated configs: q3_wgmma_rs's 64 and 128 rows, h2_wgmma's 128- and 256-row W stages";
}

TEST(GemmGpu, GatedGemmGivesTheGluOfBothProducts) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) GTEST_SKIP() << "q3_wgmma_rs needs an sm_90 GPU (this is sm_" << prop.major << prop.minor << ")";
  const GemmVariant* v = find_gemm_variant("q3_wgmma_rs");
  ASSERT_NE(v, nullptr);
  std::mt19937 rng(9);
  for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q5_0, GgmlType::Q5_1,
                      GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::Q4_1})
    for (const Shape s : {Shape{77, 300, 256}, Shape{3, 200, 768}, Shape{200, 1100, 512}})
      for (GgmlType ct : {GgmlType::F32, GgmlType::F16}) run_gated(*v, wt, ct, ct == GgmlType::F16, s, rng);
  // No variant but the gated one takes it; a gated problem with beta is refused.
  GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = GgmlType::Q4_K, p.b_layout = WeightLayout::Repacked, p.m = 8, p.n = 128, p.k = 256;
  DeviceBuf a(8 * 256 * 2), b(128 * 144), c(8 * 128 * 4);
  p.a = a.p, p.lda = 256, p.b = p.b_up = b.p, p.c = c.p, p.ldc = 128;
  EXPECT_TRUE(gemm_validate(p, *v).ok);
  EXPECT_FALSE(gemm_validate(p, *find_gemm_variant("q2_wgmma")).ok);
  EXPECT_STREQ(gemm_choice(p).variant->name, "q3_wgmma_rs");
  p.beta = 1.f;
  EXPECT_FALSE(gemm_validate(p, *v).ok);
}

// h2_wgmma's gated instances (f16 W: gate and up halves in each W stage), the same checks; C's
// columns end inside a tile (300, 200, 1100 against 64- and 128-column tiles) or with whole tiles
// (512 x 256 rows, C's rows 8 apart: the pair stores); bf16 gated problems are taken by no variant.
TEST(GemmGpu, GatedF16GemmGivesTheGluOfBothProducts) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) GTEST_SKIP() << "h2_wgmma needs an sm_90 GPU (this is sm_" << prop.major << prop.minor << ")";
  const GemmVariant* v = find_gemm_variant("h2_wgmma");
  ASSERT_NE(v, nullptr);
  std::mt19937 rng(10);
  for (const Shape s : {Shape{77, 300, 256}, Shape{3, 200, 768}, Shape{200, 1100, 512}, Shape{256, 512, 320}})
    for (GgmlType ct : {GgmlType::F32, GgmlType::F16}) {
      const int64_t pad = s.n == 512 ? 8 : 3;
      run_gated(*v, GgmlType::F16, ct, ct == GgmlType::F16, s, rng, pad);
      run_gated(*v, GgmlType::F16, ct, ct != GgmlType::F16, s, rng, pad);
    }
  GemmProblem p;
  p.a_type = p.b_type = GgmlType::F16, p.m = 8, p.n = 128, p.k = 256;
  DeviceBuf a(8 * 256 * 2), b(128 * 256 * 2), c(8 * 128 * 4);
  p.a = a.p, p.lda = 256, p.b = p.b_up = b.p, p.ldb = 256, p.c = c.p, p.ldc = 128;
  EXPECT_TRUE(gemm_validate(p, *v).ok);
  const GemmVariant* chosen = gemm_choice(p).variant;
  ASSERT_NE(chosen, nullptr);
  EXPECT_STREQ(chosen->name, "h2_wgmma");
  p.a_type = p.b_type = GgmlType::BF16;
  EXPECT_EQ(gemm_choice(p).variant, nullptr);
}

// C in column parts that lie apart (GemmProblem::parts, the stacked Q/K/V projection written
// into q, k and v): every variant that takes them, every config (split-K included), gives in each
// part, at its own row stride, the bits of the same config's whole C; the parts' padding (poisoned)
// is never written. Part boundaries cut through tiles (n = 640: 256, 384 of 128- and 256-wide tiles).
// Odd row strides turn the epilogues' column-pair stores off (tc_gemm::pair_stores); even ones
// (even_ld) keep them on.
void run_parts(const GemmVariant& v, GgmlType wt, const Shape& s, std::mt19937& rng, bool even_ld = false) {
  SCOPED_TRACE(testing::Message() << v.name << " " << type_name(wt) << " m=" << s.m << " n=" << s.n << " k=" << s.k
                                  << (even_ld ? " even ld" : " odd ld"));
  QuantWeight w;
  if (wt != GgmlType::F16) quant_weight(wt, GgmlType::F16, s, rng, w);
  else w.image = dense(GgmlType::F16, s.k, s.n, true, s.k, rng).bytes;
  if (testing::Test::HasFatalFailure()) return;
  const HostMatrix a = dense(GgmlType::F16, s.m, s.k, false, s.k, rng);
  DeviceBuf da(a.bytes), db(w.image), whole(size_t(s.m * s.n) * 4);
  const int64_t pad0 = even_ld ? 8 : 5, pad2 = even_ld ? 0 : 3;
  const int64_t col[3] = {0, 256, 384}, width[3] = {256, 128, s.n - 384}, ld[3] = {256 + pad0, 128, s.n - 384 + pad2};
  DeviceBuf p0(size_t(s.m * ld[0]) * 4), p1(size_t(s.m * ld[1]) * 4), p2(size_t(s.m * ld[2]) * 4);
  const DeviceBuf* part[3] = {&p0, &p1, &p2};
  GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = wt, p.c_type = GgmlType::F32;
  p.b_layout = wt == GgmlType::Q4_0 ? WeightLayout::Repacked : WeightLayout::Gguf;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = da.p, p.lda = s.k, p.b = db.p, p.ldb = s.k;
  GemmProblem q = p;
  q.c = p0.p, q.ldc = ld[0];
  q.parts[0] = {col[1], p1.p, ld[1]};
  q.parts[1] = {col[2], p2.p, ld[2]};
  p.c = whole.p, p.ldc = s.n;
  ASSERT_TRUE(gemm_validate(q, v).ok) << gemm_validate(q, v).message;
  int runs = 0;
  for (const GemmConfig& cfg : v.configs) {
    if (!gemm_config_takes(v, p, cfg)) continue;
    SCOPED_TRACE(cfg.str());
    ++runs;
    DeviceBuf ws(std::max<size_t>(gemm_workspace_bytes(p, cfg), 1));
    p.workspace = q.workspace = ws.p, p.workspace_bytes = q.workspace_bytes = gemm_workspace_bytes(p, cfg);
    std::vector<uint8_t> want, got[3];
    launch_and_read(v, p, cfg, whole, want);
    for (const DeviceBuf* b : part) CUDA_OK(cudaMemset(b->p, 0xFF, b->n));
    ASSERT_TRUE(v.launch(q, cfg, nullptr).ok);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 3; ++i) {
      got[i].resize(part[i]->n);
      CUDA_OK(cudaMemcpy(got[i].data(), part[i]->p, part[i]->n, cudaMemcpyDeviceToHost));
    }
    for (int i = 0; i < 3; ++i)
      for (int64_t r = 0; r < s.m; ++r) {
        ASSERT_EQ(std::memcmp(&got[i][size_t(r * ld[i]) * 4], &want[size_t(r * s.n + col[i]) * 4], size_t(width[i]) * 4), 0)
            << "part " << i << " row " << r;
        for (int64_t j = width[i]; j < ld[i]; ++j) ASSERT_EQ(got[i][size_t(r * ld[i] + j) * 4], 0xFF) << "padding written";
      }
  }
  EXPECT_GT(runs, 0);
}

TEST(GemmGpu, ColumnPartsLandWhereTheyLie) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::mt19937 rng(12);
  int variants = 0;
  for (const GemmVariant& v : gemm_variants()) {
    if (!v.column_parts) continue;
    const bool hopper = std::string(v.name).find("wgmma") != std::string::npos;
    if (hopper && prop.major != 9) continue;
    ++variants;
    for (GgmlType wt : {GgmlType::F16, GgmlType::Q4_0}) {
      GemmProblem t;
      t.a_type = GgmlType::F16, t.b_type = wt, t.b_layout = wt == GgmlType::Q4_0 ? WeightLayout::Repacked : WeightLayout::Gguf;
      if (v.supports(t)) run_parts(v, wt, Shape{77, 640, 512}, rng), run_parts(v, wt, Shape{200, 640, 512}, rng, true);
    }
  }
  EXPECT_GE(variants, prop.major == 9 ? 5 : 2);
  // Refused: a variant that writes C itself (the SGEMM ladder), beta, parts out of order or off 8.
  GemmProblem p;
  DeviceBuf a(64 * 64 * 4), b(64 * 64 * 4), c(64 * 64 * 4);
  p.a_type = p.b_type = GgmlType::F16, p.m = 8, p.n = 64, p.k = 64;
  p.a = a.p, p.lda = 64, p.b = b.p, p.ldb = 64, p.c = c.p, p.ldc = 32;
  p.parts[0] = {32, c.p, 32};
  const GemmVariant* h = find_gemm_variant("h1_mma");
  EXPECT_TRUE(gemm_validate(p, *h).ok);
  p.parts[0].col0 = 36;
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  p.parts[0].col0 = 32, p.beta = 1.f;
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  p.beta = 0.f, p.ldc = 16;
  EXPECT_FALSE(gemm_validate(p, *h).ok) << "part 0 is 32 columns wide";
  GemmProblem f = p;
  f.a_type = f.b_type = GgmlType::F32, f.ldc = 64, f.parts[0] = {};
  const GemmVariant* s6 = find_gemm_variant("s6_cp_async");
  EXPECT_TRUE(gemm_validate(f, *s6).ok);
  f.ldc = 32, f.parts[0] = {32, c.p, 32};
  EXPECT_FALSE(gemm_validate(f, *s6).ok);
}

TEST(GemmGpu, BadArgumentsAreRejectedBeforeLaunch) {
  const GemmVariant* h = find_gemm_variant("h1_mma");
  ASSERT_NE(h, nullptr);
  DeviceBuf a(4096), b(4096), c(4096);
  GemmProblem p;
  p.a_type = p.b_type = GgmlType::F16;
  p.m = p.n = 8, p.k = 12;  // k not a multiple of 8
  p.a = a.p, p.b = b.p, p.c = c.p, p.lda = p.ldb = 12, p.ldc = 8;
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  p.k = 16, p.lda = p.ldb = 16;
  EXPECT_TRUE(gemm_validate(p, *h).ok);
  p.lda = 8;  // smaller than k
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  p.lda = 16, p.b = nullptr;
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  p.b = b.p, p.b_col_major = false;  // h1_mma takes W[n][k] only
  EXPECT_FALSE(gemm_validate(p, *h).ok);
  GemmProblem q = p;
  q.b_col_major = true, q.b_type = GgmlType::Q4_K, q.k = 32, q.lda = 32;  // Q4_K needs k % 256
  EXPECT_FALSE(gemm_validate(q, *find_gemm_variant("q1_mma")).ok);
}

// Rows with no tuned entry of their own take the entry tuned for the next power of two of rows
// at or above them, or the one after (the engine's decode passes: any number of rows); beyond
// those two buckets, past kGemmBucketMaxM rows, or for a variant that does not take the problem,
// the untuned rule. The shape (f16, N = K = 4160) is one no other test tunes.
TEST(GemmGpu, UntunedRowsTakeTheNextTunedBucket) {
  GemmProblem p;
  p.a_type = p.b_type = GgmlType::F16, p.c_type = GgmlType::F32;
  p.n = p.k = 4160, p.lda = p.ldb = p.k, p.ldc = p.n;
  auto key = [&](int64_t m) {
    return "gemm|f16r|f16c|f32|" + std::to_string(m) + "x4160x4160|" + device_key();
  };
  TuneCache::get("gemm").put(key(64), {"h1_mma", "bm=64,bn=64,bk=32,stages=4,splits=1", 1.0});
  TuneCache::get("gemm").put(key(512), {"h1_mma", "bm=128,bn=128,bk=32,stages=4,splits=1", 1.0});
  auto choice = [&](int64_t m) { p.m = m; return gemm_choice(p); };
  for (int64_t m : {64, 50, 33, 17}) {  // exact; next power of two 64; 64; next 32 (none), then 64
    const GemmChoice c = choice(m);
    ASSERT_TRUE(c.variant) << m;
    EXPECT_TRUE(c.tuned) << m;
    EXPECT_STREQ(c.variant->name, "h1_mma") << m;
    EXPECT_EQ(c.config.bm, 64) << m;
  }
  for (int64_t m : {16, 65, 300}) {  // 16: 16 and 32 untuned; 65: 128 and 256 untuned; 300: past the buckets
    const GemmChoice c = choice(m);
    ASSERT_TRUE(c.variant) << m;
    EXPECT_FALSE(c.tuned) << m;
  }
  EXPECT_TRUE(choice(512).tuned);
  EXPECT_EQ(choice(512).config.bm, 128);
  // an entry naming a variant that does not take the problem (an f32 SGEMM rung for f16 A) is passed over
  TuneCache::get("gemm").put(key(128), {"s0_naive", "bm=128,bn=128,bk=8,stages=1,splits=1", 1.0});
  EXPECT_FALSE(choice(100).tuned);
  // A larger bucket's 256-row tiles are not borrowed for half as many rows or fewer: the untuned
  // rule picks the config then (taken for the engine's 16-128-row steps, they ran 8-17 % slower).
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) return;  // (q3_wgmma_rs runs on Hopper only)
  GemmProblem q = p;
  q.b_type = GgmlType::Q4_0, q.b_layout = WeightLayout::Repacked, q.b_col_major = true;
  q.n = q.k = 4352, q.lda = q.ldb = q.k, q.ldc = q.n, q.workspace_bytes = size_t(1) << 30;
  TuneCache::get("gemm").put("gemm|f16r|q4_0cp|f32|256x4352x4352|" + device_key(),
                             {"q3_wgmma_rs", "bm=256,bn=128,bk=64,stages=4,splits=4", 1.0});
  for (int64_t m : {256, 200, 128, 100, 16}) {  // exact; borrowed at more than half; at half or less (twice); untuned
    q.m = m;
    const GemmChoice c = gemm_choice(q);
    ASSERT_TRUE(c.variant) << m;
    EXPECT_STREQ(c.variant->name, "q3_wgmma_rs") << m;
    if (m > 128) EXPECT_EQ(c.config.bm, 256) << m;
    else EXPECT_LE(c.config.bm, 128) << m;
  }
}

}  // namespace
