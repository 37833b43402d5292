#pragma once
// An attached deployment's held blocks (TimelineState::attached) as prefix trees, and search
// over them by hash or by token ids. Built once per state the window shows (not per frame):
// O(blocks log blocks) and O(blocks) memory, so 100 000 held blocks stay responsive.
//
// A node is one hash, however many slots hold it (a publisher's GPU and CPU copies, or two
// ranks holding the same prefix: the hash stands for the whole prefix, so the copies are the
// same chain). A node's parent is the node of its parent hash when some slot holds that hash;
// otherwise it is a root. Parent links that loop (only a damaged file has them) are cut where
// the walk meets them, so every node is in exactly one tree.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sessions/timeline_state.h"

namespace kvscope {

struct PrefixNode {
    uint64_t hash = 0;
    int32_t parent = -1;            // node index; -1 for a root
    std::vector<int32_t> children;  // node indices, most chains first
    std::vector<int32_t> blocks;    // pool slots holding this hash (any publisher, any medium)
    int32_t depth = 0;              // blocks above it on its chain (a root: 0)
    int32_t tree = -1;              // index into AttachedIndex::trees
    int32_t chains = 0;             // chains (leaves) that run through it
    int64_t path_tokens = 0;        // token ids from its root through this block
    int32_t slot() const { return blocks.empty() ? -1 : blocks.front(); }
};

struct PrefixTree {
    int32_t root = -1;
    int32_t depth = 0;                // blocks on its longest chain
    int32_t nodes = 0;                // distinct hashes
    int32_t blocks = 0;               // slots holding them (a hash on two ranks counts twice)
    int32_t chains = 0;               // leaves
    std::vector<int32_t> publishers;  // publishers holding any of its blocks, ascending
};

struct PublisherHeld {
    std::array<int32_t, kNumKvMedia> by_medium{};
    int32_t held = 0;
    // Its held slots with each chain together: trees in AttachedIndex::trees order, each walked
    // depth-first (a parent before its children).
    std::vector<int32_t> order;
};

class AttachedIndex {
  public:
    // Empty (no publishers, no nodes) for a session of kvscope's own engine.
    static AttachedIndex build(const TimelineState& state);

    std::vector<PrefixNode> nodes;
    std::vector<PrefixTree> trees;          // most blocks first, then deepest, then by root hash
    std::vector<int32_t> node_of_block;     // per pool slot: its node, -1 when not held
    std::vector<PublisherHeld> publishers;  // per RunInfo::publishers entry
    std::vector<int32_t> walk;              // every node once: trees in order, depth-first
    std::vector<int32_t> hot;               // hot_prefixes(32), worked out once

    int32_t find(uint64_t hash) const;  // node index, or -1
    // Where chains branch (two or more children), the most chains through it first: the
    // prefixes many requests share (a system prompt).
    std::vector<int32_t> hot_prefixes(size_t limit) const;
    // Publishers holding a slot of `node`, ascending.
    std::vector<int32_t> publishers_of(int32_t node, const RunInfo& info) const;

  private:
    std::unordered_map<uint64_t, int32_t> by_hash_;
};

// What the search box holds. One word is a hash prefix in hex ("0x" optional); two or more
// numbers (spaces or commas between them), or any list after "tokens:" or in brackets, are
// token ids.
struct AttachedQuery {
    enum class Kind { kEmpty, kHash, kTokens, kInvalid };
    Kind kind = Kind::kEmpty;
    std::string error;            // kInvalid: why, in words
    std::string hex;              // kHash: lower-case hex digits, at most 16
    std::vector<int32_t> tokens;  // kTokens
};
AttachedQuery parse_attached_query(std::string_view text);

struct AttachedMatch {
    // Nodes that answer the query: kHash, the hashes starting with the digits; kTokens, where
    // the ids complete along a chain (starting at its root, or anywhere in it).
    std::vector<int32_t> nodes;
    // Slots to mark in the block maps, ascending: the answering nodes' slots and, for ids, the
    // slots of the blocks the ids run through on the way there.
    std::vector<int32_t> blocks;
    std::vector<int32_t> blocks_per_publisher;  // of `blocks`
    // kTokens: nodes whose chain starts with all the ids, and nodes where they occur later.
    int32_t prefix_nodes = 0, contained_nodes = 0;
    // kTokens: per publisher, the most leading ids it holds along one chain: the ids, in order
    // from the root, of the blocks up to one it holds (== tokens.size(): it holds a block whose
    // chain starts with all of them).
    std::vector<int32_t> leading_tokens_per_publisher;
    std::string summary;  // one line saying what was found
};
AttachedMatch search_attached(const AttachedIndex& index, const TimelineState& state,
                              const AttachedQuery& query);

// "00ab..." as the window and the search box show a hash: 16 lower-case hex digits.
std::string hash_hex(uint64_t hash);

}  // namespace kvscope
