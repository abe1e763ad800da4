// kv_blocks.cpp — free list, reference counts, and the prefix cache's hash chain (each full
// block's hash covers its parent's hash and its own tokens; a hit is checked token by token).
#include "kv_blocks.hpp"

#include <algorithm>

namespace loom::serve::llm {

BlockManager::BlockManager(int blocks, int block_tokens, bool prefix_caching)
    : bt_(block_tokens), prefix_(prefix_caching), meta_(static_cast<size_t>(blocks)) {
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t BlockManager::chain(uint64_t parent, const int32_t* tokens) const {
  uint64_t h = parent ^ 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < bt_; ++i) {  // FNV-1a over the tokens' bytes, seeded by the parent
    uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int k = 0; k < 4; ++k, t >>= 8) h = (h ^ (t & 0xFF)) * 0x100000001B3ull;
  }
  return h ? h : 1;
}

std::vector<int32_t> BlockManager::match_prefix(const std::vector<int32_t>& tokens, int max_blocks) {
  std::vector<int32_t> got;
  if (!prefix_) return got;
  uint64_t parent = 0;
  const int full = std::min(max_blocks, static_cast<int>(tokens.size()) / bt_);
  for (int i = 0; i < full; ++i) {
    const int32_t* t = tokens.data() + static_cast<size_t>(i) * static_cast<size_t>(bt_);
    const uint64_t h = chain(parent, t);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) {
      misses_ += static_cast<uint64_t>(full - i);
      break;
    }
    Meta& m = meta_[static_cast<size_t>(it->second)];
    if (m.parent != parent || !std::equal(m.tokens.begin(), m.tokens.end(), t)) {
      misses_ += static_cast<uint64_t>(full - i);
      break;
    }
    if (m.refs++ == 0) lru_.erase(m.lru);
    got.push_back(it->second);
    ++hits_;
    parent = h;
  }
  return got;
}

void BlockManager::uncache(int32_t b) {
  Meta& m = meta_[static_cast<size_t>(b)];
  if (!m.cached) return;
  by_hash_.erase(m.hash);
  m.cached = false;
  m.tokens.clear();
}

int BlockManager::allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    uncache(b);
  } else {
    return -1;
  }
  meta_[static_cast<size_t>(b)].refs = 1;
  return b;
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {  // the last blocks first: they are evicted first
    Meta& m = meta_[static_cast<size_t>(*it)];
    if (--m.refs > 0) continue;
    if (m.cached) {
      m.lru = lru_.insert(lru_.end(), *it);
    } else {
      free_.push_back(*it);
    }
  }
  table.clear();
}

void BlockManager::seal(const std::vector<int32_t>& tokens, const std::vector<int32_t>& table, int from) {
  if (!prefix_) return;
  const int full = std::min(static_cast<int>(tokens.size()) / bt_, static_cast<int>(table.size()));
  uint64_t parent = 0;
  for (int i = 0; i < full; ++i) {
    const int32_t* t = tokens.data() + static_cast<size_t>(i) * static_cast<size_t>(bt_);
    Meta& m = meta_[static_cast<size_t>(table[static_cast<size_t>(i)])];
    if (i < from && m.cached) {
      parent = m.hash;
      continue;
    }
    const uint64_t h = chain(parent, t);
    if (!m.cached && !by_hash_.count(h)) {  // a block another sequence filled the same stays private
      m.cached = true;
      m.hash = h;
      m.parent = parent;
      m.tokens.assign(t, t + bt_);
      by_hash_[h] = table[static_cast<size_t>(i)];
    }
    parent = h;
  }
}

}  // namespace loom::serve::llm
