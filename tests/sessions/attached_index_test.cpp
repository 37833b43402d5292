// An attached deployment's blocks as prefix trees, and the search the Deployment panel runs:
// states built with TimelineState::apply() from kv_stored events, as a replay builds them.
#include <gtest/gtest.h>

#include "sessions/attached_index.h"

namespace kvscope {
namespace {

// Two publishers with 16 slots each. Blocks are stored with a hash, a parent and 4 token ids.
class Attached : public ::testing::Test {
  protected:
    Attached() {
        RunInfo info;
        info.num_blocks = 32;
        info.block_size = 4;
        info.publishers = {"tcp://a:1", "tcp://b:2"};
        state_ = TimelineState(info);
    }
    void store(int32_t slot, uint64_t hash, std::optional<uint64_t> parent,
               std::vector<int32_t> tokens, KvMedium medium = KvMedium::kGpu) {
        StoredBlock sb;
        sb.has_parent = parent.has_value();
        sb.parent = parent.value_or(0);
        sb.tokens = std::move(tokens);
        Event e;
        e.kind = EventKind::kKvStored;
        e.step = 3;
        e.seq_no = ++seq_;
        e.block = slot;
        e.a = state_.info.publisher_of(slot);
        e.b = static_cast<int32_t>(medium);
        e.c = static_cast<int32_t>(sb.tokens.size());
        e.wide = static_cast<int64_t>(hash);
        encode_stored_block(sb, e.payload);
        state_.apply(e);
    }
    void remove(int32_t slot, uint64_t hash) {
        Event e;
        e.kind = EventKind::kKvRemoved;
        e.seq_no = ++seq_;
        e.block = slot;
        e.a = state_.info.publisher_of(slot);
        e.wide = static_cast<int64_t>(hash);
        e.c = 0;
        state_.apply(e);
    }
    // A system prompt (ids 1..8, hashes 0xa1, 0xa2) then three requests branching off it;
    // publisher 0 holds two of them, publisher 1 the prompt's first block and the third.
    void deployment() {
        store(0, 0xa1, std::nullopt, {1, 2, 3, 4});
        store(1, 0xa2, 0xa1, {5, 6, 7, 8});
        store(2, 0xb1, 0xa2, {10, 11, 12, 13});
        store(3, 0xb2, 0xa2, {20, 21, 22, 23});
        store(4, 0xb3, 0xb2, {24, 25, 26, 27}, KvMedium::kCpu);
        store(16, 0xa1, std::nullopt, {1, 2, 3, 4});
        store(17, 0xc1, 0xa1, {30, 31, 32, 33});
        store(20, 0xff00000000000001ULL, std::nullopt, {7, 7, 7, 7});  // a lone block
    }
    AttachedIndex x() const { return AttachedIndex::build(state_); }
    AttachedMatch search(std::string_view text) {
        AttachedIndex index = AttachedIndex::build(state_);
        return search_attached(index, state_, parse_attached_query(text));
    }
    TimelineState state_;
    uint64_t seq_ = 0;
};

TEST_F(Attached, ChainsFormTreesAcrossPublishers) {
    deployment();
    AttachedIndex x = AttachedIndex::build(state_);
    ASSERT_EQ(x.nodes.size(), 7u);  // 0xa1 is held twice: one node, two slots
    ASSERT_EQ(x.trees.size(), 2u);
    const PrefixTree& big = x.trees[0];
    EXPECT_EQ(x.nodes[static_cast<size_t>(big.root)].hash, 0xa1u);
    EXPECT_EQ(big.nodes, 6);
    EXPECT_EQ(big.blocks, 7);
    EXPECT_EQ(big.depth, 4);   // a1 a2 b2 b3
    EXPECT_EQ(big.chains, 3);  // ending in b1, b3, c1
    EXPECT_EQ(big.publishers, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(x.trees[1].publishers, (std::vector<int32_t>{1}));
    const PrefixNode& a2 = x.nodes[static_cast<size_t>(x.find(0xa2))];
    EXPECT_EQ(a2.depth, 1);
    EXPECT_EQ(a2.chains, 2);
    EXPECT_EQ(a2.path_tokens, 8);
    EXPECT_EQ(x.nodes[static_cast<size_t>(x.find(0xb3))].path_tokens, 16);
    // Where chains branch: a1 (to a2 and c1, 3 chains) before a2 (2 chains).
    EXPECT_EQ(x.hot_prefixes(10), (std::vector<int32_t>{x.find(0xa1), x.find(0xa2)}));
    EXPECT_EQ(x.hot_prefixes(1).size(), 1u);
    // Per publisher: what it holds per medium, and its slots with each chain together (a
    // parent before its children, the big tree first).
    EXPECT_EQ(x.publishers[0].held, 5);
    EXPECT_EQ(x.publishers[0].by_medium[static_cast<size_t>(KvMedium::kGpu)], 4);
    EXPECT_EQ(x.publishers[0].by_medium[static_cast<size_t>(KvMedium::kCpu)], 1);
    EXPECT_EQ(x.publishers[0].order, (std::vector<int32_t>{0, 1, 3, 4, 2}));
    EXPECT_EQ(x.publishers[1].order, (std::vector<int32_t>{16, 17, 20}));
    EXPECT_EQ(x.node_of_block[5], -1);
    EXPECT_EQ(x.node_of_block[16], x.find(0xa1));
}

TEST_F(Attached, ARemovedParentMakesItsChildrenRoots) {
    deployment();
    remove(1, 0xa2);
    AttachedIndex x = AttachedIndex::build(state_);
    EXPECT_EQ(x.find(0xa2), -1);
    EXPECT_EQ(x.nodes[static_cast<size_t>(x.find(0xb1))].parent, -1);
    EXPECT_EQ(x.trees.size(), 4u);  // a1+c1, b2+b3, b1, the lone block
}

TEST_F(Attached, LoopingParentsAreCutNotFollowedForever) {
    store(0, 0x1, 0x2, {1});
    store(1, 0x2, 0x1, {2});
    store(2, 0x3, 0x3, {3});  // its own parent
    AttachedIndex x = AttachedIndex::build(state_);
    ASSERT_EQ(x.nodes.size(), 3u);
    EXPECT_EQ(x.walk.size(), 3u);
    EXPECT_EQ(x.trees.size(), 2u);
    for (const PrefixNode& n : x.nodes)
        EXPECT_GE(n.tree, 0);
}

// A block's cache group, digest and token pairs come through the kv_stored payload and a
// keyframe alike; a payload with a flag no writer sets is refused.
TEST_F(Attached, GroupsDigestsAndTokenPairsSurviveAKeyframe) {
    StoredBlock sb;
    sb.has_parent = true;
    sb.parent = 0xa1;
    sb.tokens = {1, 2, 2, 3};
    sb.token_pairs = true;
    sb.group = 1;
    sb.group_kind = "sliding_window";
    sb.sliding_window = 128;
    sb.digest.assign(32, 0x5a);
    Event e;
    e.kind = EventKind::kKvStored;
    e.seq_no = ++seq_;
    e.block = 5;
    e.c = 2;
    e.wide = 0x77;
    encode_stored_block(sb, e.payload);
    state_.apply(e);
    const AttachedBlock& a = state_.attached[5];
    EXPECT_EQ(static_cast<const StoredBlock&>(a), sb);
    std::string error;
    auto back = TimelineState::deserialize(state_.serialize(), state_.info, error);
    ASSERT_TRUE(back.has_value()) << error;
    EXPECT_TRUE(*back == state_);
    EXPECT_EQ(static_cast<const StoredBlock&>(back->attached[5]), sb);
    std::vector<uint8_t> bad = e.payload;
    bad[0] |= 0x10;
    StoredBlock out;
    EXPECT_FALSE(decode_stored_block(bad, out));
    bad = e.payload;
    bad.pop_back();  // the digest cut short
    EXPECT_FALSE(decode_stored_block(bad, out));
}

TEST_F(Attached, EngineSessionsHaveNoIndex) {
    RunInfo info;
    info.num_blocks = 8;
    TimelineState engine(info);
    AttachedIndex x = AttachedIndex::build(engine);
    EXPECT_TRUE(x.nodes.empty());
    EXPECT_TRUE(x.publishers.empty());
}

TEST_F(Attached, QueriesAreHashesOrTokenIds) {
    using K = AttachedQuery::Kind;
    EXPECT_EQ(parse_attached_query("  ").kind, K::kEmpty);
    AttachedQuery h = parse_attached_query(" 0xFF00 ");
    EXPECT_EQ(h.kind, K::kHash);
    EXPECT_EQ(h.hex, "ff00");
    EXPECT_EQ(parse_attached_query("12").kind, K::kHash);  // one word: a hash
    AttachedQuery t = parse_attached_query("1 345, 22");
    EXPECT_EQ(t.kind, K::kTokens);
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{1, 345, 22}));
    EXPECT_EQ(parse_attached_query("tokens: 12").tokens, (std::vector<int32_t>{12}));
    EXPECT_EQ(parse_attached_query("[12]").tokens, (std::vector<int32_t>{12}));
    EXPECT_EQ(parse_attached_query("xyz").kind, K::kInvalid);
    EXPECT_EQ(parse_attached_query("0x12345678901234567").kind, K::kInvalid);  // 17 digits
    EXPECT_EQ(parse_attached_query("1 2 x").kind, K::kInvalid);
    EXPECT_EQ(parse_attached_query("1 99999999999").kind, K::kInvalid);
    EXPECT_EQ(parse_attached_query("1 -2").kind, K::kInvalid);
}

TEST_F(Attached, HashSearchNamesThePublishersHoldingIt) {
    deployment();
    AttachedMatch a1 = search("00000000000000a1");
    EXPECT_EQ(a1.blocks, (std::vector<int32_t>{0, 16}));
    EXPECT_EQ(a1.blocks_per_publisher, (std::vector<int32_t>{1, 1}));
    AttachedMatch b3 = search("0x00000000000000b3");
    EXPECT_EQ(b3.blocks, (std::vector<int32_t>{4}));
    EXPECT_EQ(b3.blocks_per_publisher, (std::vector<int32_t>{1, 0}));
    AttachedMatch ff = search("ff");  // a prefix
    EXPECT_EQ(ff.blocks, (std::vector<int32_t>{20}));
    EXPECT_EQ(ff.blocks_per_publisher, (std::vector<int32_t>{0, 1}));
    EXPECT_NE(ff.summary.find("rank 1"), std::string::npos) << ff.summary;
    EXPECT_TRUE(search("abc").blocks.empty());
}

TEST_F(Attached, TokenSearchFollowsChainsFromTheirRoots) {
    deployment();
    // The whole system prompt: only publisher 0 holds both its blocks; publisher 1 holds the
    // first block only.
    AttachedMatch prompt = search("1 2 3 4 5 6 7 8");
    EXPECT_EQ(prompt.prefix_nodes, 1);
    EXPECT_EQ(prompt.contained_nodes, 0);
    EXPECT_EQ(prompt.blocks, (std::vector<int32_t>{0, 1, 16}));
    EXPECT_EQ(prompt.leading_tokens_per_publisher, (std::vector<int32_t>{8, 4}));
    // Across a block boundary, starting at the root.
    AttachedMatch across = search("1 2 3 4 5 6");
    EXPECT_EQ(across.prefix_nodes, 1);
    EXPECT_EQ(across.blocks, (std::vector<int32_t>{0, 1, 16}));
    // Ids later in a chain: 8 then 20 21 runs from a2 into b2; b3 below is not marked.
    AttachedMatch later = search("8 20 21");
    EXPECT_EQ(later.prefix_nodes, 0);
    EXPECT_EQ(later.contained_nodes, 1);
    EXPECT_EQ(later.nodes, (std::vector<int32_t>{x().find(0xb2)}));
    EXPECT_EQ(later.blocks, (std::vector<int32_t>{1, 3}));
    // The prompt then a request's first ids: three blocks deep.
    AttachedMatch deep = search("1 2 3 4 5 6 7 8 20 21 22 23 24");
    EXPECT_EQ(deep.prefix_nodes, 1);
    EXPECT_EQ(deep.blocks, (std::vector<int32_t>{0, 1, 3, 4, 16}));
    // Ids nobody holds in that order.
    AttachedMatch none = search("1 2 3 4 9");
    EXPECT_TRUE(none.blocks.empty());
    EXPECT_EQ(none.leading_tokens_per_publisher, (std::vector<int32_t>{4, 4}));
    EXPECT_NE(none.summary.find("only part"), std::string::npos) << none.summary;
    // Ids found several times along one chain count once, where they first complete.
    AttachedMatch sevens = search("7 7");
    EXPECT_EQ(sevens.prefix_nodes, 1);
    EXPECT_EQ(sevens.contained_nodes, 0);
    EXPECT_EQ(sevens.nodes, (std::vector<int32_t>{x().find(0xff00000000000001ULL)}));
}

}  // namespace
}  // namespace kvscope
