// A mixture of experts' routing of one token, on the host: the reference of the CUDA router
// (kernels/ops/ops.h moe_route) and the route of every backend that reads the router's logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace lamina {

// From the router's logits [n_expert]: the softmax (float exponentials, their sum in f64), the k
// most probable experts (the lower index first among equal ones) and their probabilities,
// divided by the picks' sum (summed in order of probability) when renorm. ids [k] receives the
// picks in ascending order (the order their outputs are added in), weights [k] their weights.
// (Header-only: the model and every backend use it.)
inline void route_top_k(const float* logits, int64_t n_expert, int64_t k, bool renorm, int32_t* ids, float* weights) {
  std::vector<float> p(logits, logits + n_expert);
  const float mx = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (float& v : p) sum += v = std::exp(v - mx);
  for (float& v : p) v = float(v / sum);
  // The k first in (probability descending, index ascending), a strict order: a NaN probability
  // (from NaN logits) ranks as -1, below every other. (A partial sort: a prompt routes each of its
  // tokens here, and sorting all the experts had cost more than the experts' GEMMs.)
  std::vector<float> key(p);
  for (float& v : key)
    if (std::isnan(v)) v = -1.f;
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return key[size_t(a)] > key[size_t(b)] || (key[size_t(a)] == key[size_t(b)] && a < b);
  });
  float chosen = 0;
  for (int64_t j = 0; j < k; ++j) chosen += p[size_t(order[size_t(j)])];
  if (!renorm) chosen = 1.f;
  std::sort(order.begin(), order.begin() + k);
  for (int64_t j = 0; j < k; ++j) ids[j] = order[size_t(j)], weights[j] = p[size_t(order[size_t(j)])] / chosen;
}

}  // namespace lamina
