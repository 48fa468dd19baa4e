// The pipelines a Context has built, memoised by PipelineKey under a lock
// (so that kernels may record from several threads), the driver's pipeline
// cache behind them, and their statistics for diagnostics.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tilekernels/core/pipeline.hpp"
#include "tilekernels/core/vulkan.hpp"

namespace tilekernels::detail {

class PipelineMemo {
 public:
  // `seed`: serialized cache data from an earlier run (data the driver does
  // not recognise is ignored by Vulkan). `statistics`, `unchecked`: see
  // Pipeline.
  PipelineMemo(const vk::raii::Device& device, const std::vector<std::uint8_t>& seed, bool statistics, bool unchecked)
      : device_(&device), statistics_(statistics), unchecked_(unchecked) {
    cache_.emplace(device, vk::PipelineCacheCreateInfo({}, seed.size(), seed.data()));
  }
  ~PipelineMemo() {
    pipelines_.clear();
    cache_.reset();
  }
  PipelineMemo(const PipelineMemo&) = delete;
  PipelineMemo& operator=(const PipelineMemo&) = delete;

  // The pipeline for `key`, built on first use; the reference stays valid
  // for the memo's lifetime.
  const Pipeline& get(const PipelineKey& key) {
    std::lock_guard lock(mutex_);
    auto it = pipelines_.find(key);
    if (it == pipelines_.end())
      it = pipelines_.emplace(key, std::make_unique<Pipeline>(*device_, &*cache_, key, statistics_, unchecked_)).first;
    return *it->second;
  }

  // One line per pipeline built so far: its module size and specialization
  // constants (which identify the kernel and its configuration), then the
  // driver's statistics for it. Empty unless statistics are on.
  std::string report() {
    std::lock_guard lock(mutex_);
    std::string out;
    if (!statistics_) return out;
    for (const auto& [key, p] : pipelines_) {
      out += "spirv " + std::to_string(key.spirv_words) + " words, spec [";
      for (std::size_t i = 0; i < key.spec.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(key.spec[i]);
      }
      out += "]";
      for (const auto& [name, value] : p->statistics()) out += " | " + name + " " + value;
      out += "\n";
    }
    return out;
  }

  std::vector<std::uint8_t> cache_data() const {
    return vk_call("reading the pipeline cache", [&] { return cache_->getData(); });
  }

 private:
  const vk::raii::Device* device_;
  bool statistics_, unchecked_;
  std::optional<vk::raii::PipelineCache> cache_;
  std::mutex mutex_;
  std::map<PipelineKey, std::unique_ptr<Pipeline>> pipelines_;
};

}  // namespace tilekernels::detail
