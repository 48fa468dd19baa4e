// SPDX-License-Identifier: MIT
// The pipelines a Context has built, memoised by PipelineKey under a lock
// (kernels of one configuration share them), the driver's pipeline cache
// behind them (the Context's own or an engine's), how many were created and
// how long that took, and the driver's statistics for diagnostics.
#pragma once

#include <atomic>
#include <chrono>
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
  // not recognise is ignored by Vulkan). `external`: an engine's cache to
  // create every pipeline through (then no cache of its own, and `seed` is
  // not used). `statistics`, `unchecked`: see Pipeline.
  PipelineMemo(vk::Device device, const DeviceDispatch& d, const vk::AllocationCallbacks* allocator,
               const std::vector<std::uint8_t>& seed, vk::PipelineCache external, bool statistics, bool unchecked)
      : device_(device), dispatch_(&d), allocator_(allocator), statistics_(statistics), unchecked_(unchecked),
        cache_(external) {
    if (!external) {
      own_cache_ = Owned<vk::PipelineCache>(
          device, device.createPipelineCache(vk::PipelineCacheCreateInfo({}, seed.size(), seed.data()), allocator, d),
          d.vkDestroyPipelineCache, allocator);
      cache_ = *own_cache_;
    }
  }
  ~PipelineMemo() {
    pipelines_.clear();
    own_cache_.reset();
  }
  PipelineMemo(const PipelineMemo&) = delete;
  PipelineMemo& operator=(const PipelineMemo&) = delete;

  // The pipeline for `key`, built on first use; the reference stays valid
  // for the memo's lifetime.
  const Pipeline& get(const PipelineKey& key) {
    std::lock_guard lock(mutex_);
    auto it = pipelines_.find(key);
    if (it == pipelines_.end()) {
      const auto start = std::chrono::steady_clock::now();
      it = pipelines_
               .emplace(key, std::make_unique<Pipeline>(device_, *dispatch_, allocator_, cache_, key, statistics_,
                                                        unchecked_))
               .first;
      seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      created_.fetch_add(1);
    }
    return *it->second;
  }

  std::uint64_t created() const noexcept { return created_.load(); }
  double seconds() const {
    std::lock_guard lock(mutex_);
    return seconds_;
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
    return vk_call("reading the pipeline cache", [&] { return device_.getPipelineCacheData(cache_, *dispatch_); });
  }

 private:
  vk::Device device_;
  const DeviceDispatch* dispatch_;
  const vk::AllocationCallbacks* allocator_;
  bool statistics_, unchecked_;
  Owned<vk::PipelineCache> own_cache_;
  vk::PipelineCache cache_;
  mutable std::mutex mutex_;
  std::map<PipelineKey, std::unique_ptr<Pipeline>> pipelines_;
  std::atomic<std::uint64_t> created_{0};
  double seconds_ = 0;
};

}  // namespace tilekernels::detail
