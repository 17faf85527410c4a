// Quality of a model's next-token predictions over a text: perplexity, and against a base run
// of the same text (another device, path or quantisation) the KL divergence of the two
// distributions and how often their top tokens agree (llama.cpp's `perplexity` and
// `--kl-divergence` report the same quantities).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lamina {

// log softmax(logits)[i] for every i, in double.
void log_softmax(std::span<const float> logits, std::vector<double>& out);

class PredictionStats {
 public:
  // One scored position: the logits that predict `target`.
  void add(std::span<const float> logits, int32_t target);
  // The same with a base run's logits of that position: also KL(base || this) and top-token agreement.
  void add(std::span<const float> logits, std::span<const float> base_logits, int32_t target);

  int64_t count() const { return n_; }
  double ppl() const;          // exp(mean negative log-likelihood)
  double ppl_error() const;    // one standard error (llama.cpp's estimate)
  bool has_base() const { return n_base_ > 0; }
  double base_ppl() const;
  double base_ppl_error() const;
  double mean_kld() const;
  double mean_kld_error() const;
  double kld_percentile(double p) const;  // p in [0, 100]
  double same_top() const;                // fraction of positions whose top tokens agree
  double same_top_error() const;

 private:
  struct Moments {
    double sum = 0, sum2 = 0;
    void add(double x) { sum += x, sum2 += x * x; }
  };
  static double ppl_of(const Moments& m, int64_t n);
  static double ppl_error_of(const Moments& m, int64_t n);
  int64_t n_ = 0, n_base_ = 0, same_ = 0;
  Moments nll_, base_nll_, kld_;
  std::vector<float> klds_;
  std::vector<double> lp_, base_lp_;  // scratch
};

}  // namespace lamina
