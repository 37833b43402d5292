// Block pool invariants under thousands of random allocate / append / fork / free operations.
#include <gtest/gtest.h>

#include <random>

#include "engine/block_manager.h"

namespace kvscope {
namespace {

std::vector<const BlockTable*> live(const std::vector<BlockTable>& tables) {
    std::vector<const BlockTable*> out;
    for (const auto& t : tables)
        out.push_back(&t);
    return out;
}

TEST(BlockPool, AllocatesOldestReleasedFirst) {
    BlockPool pool(4);
    auto a = *pool.allocate(), b = *pool.allocate();
    EXPECT_EQ(a, 0);
    EXPECT_EQ(b, 1);
    pool.release(b);
    pool.release(a);
    // 2 and 3 were never used, then 1 and 0 came back in that order.
    EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{2, 3, 1, 0}));
}

TEST(BlockPool, CachedFreeBlockIsRevivedOrEvictedLru) {
    BlockPool pool(2);
    BlockId a = *pool.allocate();
    pool.set_hash(a, 42);
    pool.release(a);
    EXPECT_EQ(pool.num_cached_free(), 1);
    ASSERT_EQ(pool.lookup(42), a);
    pool.retain(a);  // a prefix hit revives it
    EXPECT_EQ(pool.num_free(), 1);
    EXPECT_EQ(pool.num_cached_free(), 0);
    pool.release(a);
    std::optional<BlockHash> evicted;
    BlockId first = *pool.allocate(&evicted);  // block 1 is older in the queue
    EXPECT_EQ(first, 1);
    EXPECT_FALSE(evicted);
    BlockId second = *pool.allocate(&evicted);  // now the cached one must go
    EXPECT_EQ(second, a);
    EXPECT_EQ(evicted, std::optional<BlockHash>(42));
    EXPECT_FALSE(pool.lookup(42));
    EXPECT_FALSE(pool.allocate());
}

TEST(BlockManager, GrowIsAllOrNothing) {
    BlockManager m(3, 4, nullptr);
    BlockTable t;
    ASSERT_TRUE(m.grow(t, 12).ok());
    BlockTable u;
    Status s = m.grow(u, 1);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("KV cache full"), std::string::npos);
    EXPECT_TRUE(u.blocks.empty());
    EXPECT_EQ(m.check_invariants({&t, &u}), "");
}

TEST(BlockManager, CopyOnWriteWhenSharedPartialBlockIsWritten) {
    BlockManager m(8, 4, nullptr);
    BlockTable parent, child;
    ASSERT_TRUE(m.grow(parent, 6).ok());  // blocks: [full][2 of 4]
    m.fork(parent, child);
    EXPECT_EQ(m.pool().refcount(parent.blocks[1]), 2);
    ASSERT_TRUE(m.grow(child, 7).ok());
    EXPECT_EQ(m.cow_copies(), 1);
    EXPECT_EQ(child.blocks[0], parent.blocks[0]);  // full block stays shared
    EXPECT_NE(child.blocks[1], parent.blocks[1]);
    EXPECT_EQ(m.pool().refcount(parent.blocks[1]), 1);
    EXPECT_EQ(m.check_invariants({&parent, &child}), "");
    // A full shared block needs no copy: the next token opens a new block.
    BlockTable a, b;
    ASSERT_TRUE(m.grow(a, 4).ok());
    m.fork(a, b);
    ASSERT_TRUE(m.grow(b, 5).ok());
    EXPECT_EQ(m.cow_copies(), 1);
    EXPECT_EQ(m.check_invariants({&parent, &child, &a, &b}), "");
}

TEST(BlockManager, RandomizedOperationsKeepInvariants) {
    for (int block_size : {1, 3, 16}) {
        std::mt19937 rng(1234 + block_size);
        BlockManager m(64, block_size, nullptr);
        std::vector<BlockTable> tables;
        int ops = 0, failures = 0;
        for (int i = 0; i < 20000; ++i, ++ops) {
            int op = static_cast<int>(rng() % 4);
            if (op == 0 || tables.empty()) {  // allocate a new sequence
                BlockTable t;
                if (m.grow(t, 1 + static_cast<int>(rng() % 40)).ok())
                    tables.push_back(t);
                else
                    ++failures;
            } else {
                size_t k = rng() % tables.size();
                if (op == 1) {  // append tokens
                    if (!m.grow(tables[k], tables[k].num_tokens + 1 + static_cast<int>(rng() % 5))
                             .ok())
                        ++failures;
                } else if (op == 2) {  // fork
                    BlockTable child;
                    m.fork(tables[k], child);
                    tables.push_back(child);
                } else {  // free
                    m.free(tables[k]);
                    tables.erase(tables.begin() + static_cast<long>(k));
                }
            }
            std::string err = m.check_invariants(live(tables));
            ASSERT_EQ(err, "") << "after op " << i << " (" << op << ")";
        }
        for (auto& t : tables)
            m.free(t);
        EXPECT_EQ(m.pool().num_free(), 64) << "blocks leaked";
        EXPECT_GT(failures, 0) << "the pool never ran full: the test would miss that path";
        if (block_size > 1) {
            EXPECT_GT(m.cow_copies(), 0) << "no copy-on-write happened";
        }
    }
}

}  // namespace
}  // namespace kvscope
