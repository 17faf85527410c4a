// The autotuner shared by the kernel families: times every (variant, config) of a family on a
// problem with CUDA events over rotated buffers and keeps the winner per
// (family, dtype, layout, shape, batch, device name, compute capability) in a JSON cache,
// <dir>/tune-<family>.json: the CLI names the directory (LAMINA_TUNE_CACHE_DIR, else
// ~/.cache/lamina); without one the cache lives in memory only.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace lamina::kernels {

struct TuneEntry {
  std::string variant, config;
  double us = 0;
};

std::string device_key();  // "NVIDIA H100 80GB HBM3|sm_90"
// The cache directory, set before the first TuneCache::get (empty: in memory only).
void set_tune_cache_dir(std::string dir);
std::string tune_cache_path(const std::string& family);  // empty without a directory

class TuneCache {
 public:
  static TuneCache& get(const std::string& family);  // loaded once per process
  std::optional<TuneEntry> find(const std::string& key) const;
  void put(const std::string& key, const TuneEntry& e);
  void save() const;  // writes atomically; errors are reported on stderr, not thrown

 private:
  explicit TuneCache(std::string path);
  std::string path_;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace lamina::kernels
