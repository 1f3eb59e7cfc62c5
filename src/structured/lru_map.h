// LruMap: values by string key, the most recently used kept up to a capacity. The
// bookkeeping of the structured-output caches (GrammarCache on the engine's thread,
// AutomatonCache under its lock); not thread-safe itself.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <string>
#include <utility>

namespace quiver::structured {

template <typename V>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {}

  // The value under `key`, which becomes the most recently used; null when absent.
  V* find(const std::string& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.second);
    return &it->second.first;
  }
  // Adds `key` (absent) as the most recently used; past the capacity the least recently
  // used goes.
  void insert(const std::string& key, V value) {
    order_.push_front(key);
    entries_.emplace(key, std::make_pair(std::move(value), order_.begin()));
    if (entries_.size() > capacity_) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
  }
  size_t size() const { return entries_.size(); }

 private:
  size_t capacity_;
  std::list<std::string> order_;  // most recently used first
  std::map<std::string, std::pair<V, std::list<std::string>::iterator>> entries_;
};

}  // namespace quiver::structured
