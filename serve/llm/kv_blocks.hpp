// kv_blocks.hpp — the KV cache's block manager: which blocks of the pool are free, which a
// sequence holds (its block table), and the prefix cache — full blocks named by the chain of
// tokens that filled them, shared between sequences with a reference count and kept after their
// last user leaves until the pool needs them (least recently used first), as vLLM's.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace loom::serve::llm {

class BlockManager {
 public:
  BlockManager(int blocks, int block_tokens, bool prefix_caching);
  int block_tokens() const { return bt_; }
  int total() const { return static_cast<int>(meta_.size()); }
  int available() const { return static_cast<int>(free_.size() + lru_.size()); }  // free or cached, unused
  int used() const { return total() - available(); }
  // The cached blocks holding tokens' first full blocks, at most max_blocks, each now held by
  // the caller (one more reference). Counts hits and misses per block looked up.
  std::vector<int32_t> match_prefix(const std::vector<int32_t>& tokens, int max_blocks);
  // A block for the caller's own use, or -1 when none is free (the least recently used cached
  // block is taken first when the free list is empty).
  int allocate();
  // Drops the caller's references to table's blocks and empties it.
  void release(std::vector<int32_t>& table);
  // The blocks of table that tokens now fill, from block `from` on, enter the prefix cache.
  void seal(const std::vector<int32_t>& tokens, const std::vector<int32_t>& table, int from);
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Meta {
    int refs = 0;
    bool cached = false;
    uint64_t hash = 0, parent = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;
  };
  uint64_t chain(uint64_t parent, const int32_t* tokens) const;
  void uncache(int32_t b);
  int bt_;
  bool prefix_;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks nobody holds, least recently used first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace loom::serve::llm
