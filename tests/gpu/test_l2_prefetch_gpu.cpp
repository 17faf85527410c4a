// The L2 prefetch a decode GEMV issues for the matrix after it (GemvProblem::l2_next,
// gemv_l2_lead): the spans must name only bytes of that matrix, 16-byte aligned, about the
// budget, the lead of every first-pass row; and a GEMV that issues them computes the same bits.
#include "gpu_test_util.h"
#include "format/quant.h"
#include "kernels/common/l2_prefetch.h"
#include "kernels/gemv/gemv.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace lamina;
using namespace lamina::kernels;

namespace {

struct Item {
  uintptr_t at;
  uint32_t size;
};

// The items the device issues (l2_prefetch.cuh): item i of a span at base + i * stride, take
// bytes, the last clipped to the span's extent.
std::vector<Item> items_of(const L2Prefetch& p) {
  std::vector<Item> out;
  for (int s = 0; s < p.count; ++s) {
    const L2Span& sp = p.span[s];
    for (int64_t i = 0; i < sp.rows; ++i) {
      const int64_t off = i * sp.stride;
      out.push_back({reinterpret_cast<uintptr_t>(sp.base) + uintptr_t(off),
                     uint32_t(std::min<int64_t>(sp.take, sp.extent - off))});
    }
  }
  return out;
}

bool covered(const std::vector<Item>& items, uintptr_t a) {
  for (const Item& it : items)
    if (a >= it.at && a < it.at + it.size) return true;
  return false;
}

struct LeadCase {
  GgmlType type;
  int64_t n, k;
  bool gate_up;
};

}  // namespace

TEST(GemvL2Lead, SpansNameTheLeadOfEachFirstPassRow) {
  const uintptr_t base = 0x7f0000000000, up_base = 0x7f4000000000;  // never dereferenced
  const LeadCase cases[] = {{GgmlType::Q4_0, 4096, 4096, false},  {GgmlType::Q4_0, 11008, 4096, true},
                            {GgmlType::Q8_0, 4096, 11008, false}, {GgmlType::Q4_1, 12288, 4096, false},
                            {GgmlType::Q8_0, 14336, 4096, true},  {GgmlType::Q4_0, 64, 96, false}};
  for (const LeadCase& c : cases) {
    GemvProblem p;
    p.wtype = c.type, p.layout = WeightLayout::Repacked, p.n = c.n, p.k = c.k;
    p.w = reinterpret_cast<const void*>(base);
    if (c.gate_up) p.w_up = reinterpret_cast<const void*>(up_base);
    const int64_t one = int64_t(gemv_repacked_bytes(c.type, c.n, c.k));
    const int64_t qrow = c.type == GgmlType::Q8_0 ? c.k : c.k / 2;
    const int mats = c.gate_up ? 2 : 1;
    for (int64_t budget : {int64_t(16), int64_t(1) << 20, int64_t(4) << 20, int64_t(1) << 40}) {
      const int64_t rows = std::min<int64_t>(c.n, 4224);
      SCOPED_TRACE(testing::Message() << type_name(c.type) << " " << c.n << "x" << c.k << (c.gate_up ? " gate/up" : "")
                                      << " budget " << budget);
      const L2Prefetch l = gemv_l2_lead(p, budget, rows);
      ASSERT_GT(l.count, 0);
      const std::vector<Item> items = items_of(l);
      int64_t total = 0;
      for (const Item& it : items) {
        ASSERT_EQ(it.at % 16, 0u);
        ASSERT_GT(it.size, 0u);
        ASSERT_EQ(it.size % 16, 0u);
        const bool in_w = it.at >= base && it.at + it.size <= base + uintptr_t(one);
        const bool in_up = c.gate_up && it.at >= up_base && it.at + it.size <= up_base + uintptr_t(one);
        ASSERT_TRUE(in_w || in_up) << "item at +" << (it.at - base) << " size " << it.size << " outside the weights";
        total += it.size;
      }
      EXPECT_EQ(total, l.bytes());
      if (budget >= one * mats) {
        EXPECT_EQ(total, mats * (one - one % 16)) << "the whole matrices";
        continue;
      }
      EXPECT_LE(total, budget + 32 * rows * mats);  // at least 16 bytes of quants and of scales per row
      for (int m = 0; m < mats; ++m) {
        const uintptr_t b = m ? up_base : base;
        for (int64_t r = 0; r < rows; r += 97) {
          ASSERT_TRUE(covered(items, b + uintptr_t(r * qrow))) << "quants of row " << r;
          ASSERT_TRUE(covered(items, b + uintptr_t(c.n * qrow + r * (c.k / 32) * (c.type == GgmlType::Q4_1 ? 4 : 2))))
              << "scales of row " << r;
        }
        if (rows < c.n) {
          EXPECT_FALSE(covered(items, b + uintptr_t(rows * qrow))) << "a row past the first pass";
        }
      }
    }
  }
  GemvProblem f16;  // other layouts: nothing
  f16.wtype = GgmlType::F16, f16.w = reinterpret_cast<const void*>(base), f16.n = 64, f16.k = 64;
  EXPECT_TRUE(gemv_l2_lead(f16, 1 << 20, 64).empty());
}

// q_dp4a with l2_next (the lead of another matrix, and the whole of it) gives the bits it gives
// without, for every config; the prefetch of a real device matrix must not fault.
TEST(GemvL2Lead, GemvResultsUnchanged) {
  const GemvVariant* v = find_gemv_variant("q_dp4a");
  ASSERT_NE(v, nullptr);
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t n = 1024, k = 2048, n2 = 4096, k2 = 1024;
  const GgmlType t = GgmlType::Q4_0;
  std::vector<float> wf(static_cast<size_t>(n * k)), x(static_cast<size_t>(k));
  for (auto& f : wf) f = nd(rng);
  for (auto& f : x) f = nd(rng);
  std::vector<uint8_t> w(row_bytes(t, k) * size_t(n));
  for (int64_t r = 0; r < n; ++r) quantize_row(t, wf.data() + r * k, w.data() + size_t(r) * row_bytes(t, k), k);
  DeviceBuf raw(w.size()), dw(gemv_repacked_bytes(t, n, k)), other(gemv_repacked_bytes(t, n2, k2)), dx(x.size() * 4),
      dy(size_t(n) * 4);
  CUDA_OK(cudaMemcpy(raw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
  ASSERT_TRUE(gemv_repack(t, raw.p, n, k, dw.p, nullptr).ok);
  CUDA_OK(cudaMemset(other.p, 0x11, other.n));
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  GemvProblem next;
  next.wtype = t, next.layout = WeightLayout::Repacked, next.w = other.p, next.n = n2, next.k = k2;
  for (const GemvConfig& cfg : v->configs) {
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    for (int pass = 0; pass < 3; ++pass) {
      GemvProblem p;
      p.wtype = t, p.layout = WeightLayout::Repacked, p.w = dw.p, p.n = n, p.k = k, p.x = dx.as<float>(), p.y = dy.as<float>();
      if (pass == 1) p.l2_next = gemv_l2_lead(next, 256 << 10, 4224);
      if (pass == 2) p.l2_next = gemv_l2_lead(next, int64_t(1) << 40, 4224);
      CUDA_OK(cudaMemset(dy.p, 0xFF, size_t(n) * 4));
      const Status st = v->launch(p, cfg, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy((pass ? got : want).data(), dy.p, size_t(n) * 4, cudaMemcpyDeviceToHost));
      if (pass) ASSERT_EQ(0, std::memcmp(got.data(), want.data(), size_t(n) * 4)) << "config " << cfg.str() << " pass " << pass;
    }
  }
}
