#include "kernels/autotune/autotune.h"

#include "core/error.h"
#include "core/files.h"

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

namespace lamina::kernels {

struct TuneCache::Impl {
  nlohmann::json doc = nlohmann::json::object();
  mutable std::mutex mu;
};

std::string device_key() {
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  return std::string(p.name) + "|sm_" + std::to_string(p.major) + std::to_string(p.minor);
}

namespace {
std::string& tune_dir() {
  static std::string dir;
  return dir;
}
}  // namespace

void set_tune_cache_dir(std::string dir) { tune_dir() = std::move(dir); }

std::string tune_cache_path(const std::string& family) {
  return tune_dir().empty() ? std::string() : tune_dir() + "/tune-" + family + ".json";
}

TuneCache::TuneCache(std::string path) : path_(std::move(path)), impl_(std::make_shared<Impl>()) {
  if (path_.empty()) return;  // no directory: in memory only
  std::ifstream in(path_);
  if (!in) return;
  try {
    impl_->doc = nlohmann::json::parse(in);
    if (!impl_->doc.is_object()) impl_->doc = nlohmann::json::object();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lamina: ignoring unreadable tune cache %s: %s\n", path_.c_str(), e.what());
  }
}

TuneCache& TuneCache::get(const std::string& family) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TuneCache>> caches;
  std::lock_guard<std::mutex> lk(mu);
  auto& c = caches[family];
  if (!c) c.reset(new TuneCache(tune_cache_path(family)));
  return *c;
}

std::optional<TuneEntry> TuneCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->doc.find(key);
  if (it == impl_->doc.end() || !it->is_object()) return std::nullopt;
  try {
    return TuneEntry{it->at("variant").get<std::string>(), it->at("config").get<std::string>(), it->value("us", 0.0)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void TuneCache::put(const std::string& key, const TuneEntry& e) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->doc[key] = {{"variant", e.variant}, {"config", e.config}, {"us", e.us}};
}

void TuneCache::save() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (path_.empty()) {
    std::fprintf(stderr, "lamina: the tune cache was not saved: no cache directory was set\n");
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  // Replaced whole or not at all (core/files.h): a failed save leaves the previous cache.
  try {
    OutputFile out(path_);
    const std::string text = impl_->doc.dump(1) + "\n";
    out.write(text.data(), text.size());
    out.commit();
  } catch (const Error& e) {
    std::fprintf(stderr, "lamina: the tune cache was not saved: %s\n", e.what());
  }
}

}  // namespace lamina::kernels
