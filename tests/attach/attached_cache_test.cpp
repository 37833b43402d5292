// One publisher's cache as attach keeps it: churn, hashes stored again after being dropped, and
// the hashes it begins and stops holding on any medium; and the flat table under them, against
// std::unordered_map.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "attach/attached_cache.h"
#include "attach/flat_u64.h"

namespace kvscope::attach {
namespace {

KvEvent stored(uint64_t hash, KvMedium medium = KvMedium::kGpu) {
    KvEvent e;
    e.type = KvEventType::kBlockStored;
    e.block_hashes = {hash};
    e.medium = medium;
    return e;
}

KvEvent removed(uint64_t hash, KvMedium medium = KvMedium::kGpu) {
    KvEvent e;
    e.type = KvEventType::kBlockRemoved;
    e.block_hashes = {hash};
    e.medium = medium;
    return e;
}

KvEventBatch batch_of(std::vector<KvEvent> events) {
    KvEventBatch b;
    b.events = std::move(events);
    return b;
}

TEST(AttachedCache, CountsChurnAndHashesStoredAgainPerMedium) {
    AttachedCache cache(0, 0, 16);
    std::vector<HeldChange> changes;
    cache.report_held_changes(&changes);
    std::vector<Event> out;
    // 7 on the GPU, offloaded to the CPU (a second medium: still one hash held), stored twice
    // on the CPU (a second reference), then dropped from both, and computed again.
    cache.apply(batch_of({stored(7), stored(7, KvMedium::kCpu), stored(7, KvMedium::kCpu)}), out);
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_TRUE(changes[0].held);
    cache.apply(batch_of({removed(7)}), out);  // the CPU still holds it
    EXPECT_EQ(changes.size(), 1u);
    EXPECT_EQ(cache.counts().churn, 1);
    cache.apply(batch_of({removed(7, KvMedium::kCpu)}), out);  // one CPU reference left
    EXPECT_EQ(cache.counts().churn, 1);
    cache.apply(batch_of({removed(7, KvMedium::kCpu)}), out);
    ASSERT_EQ(changes.size(), 2u);
    EXPECT_FALSE(changes[1].held);
    EXPECT_EQ(cache.counts().churn, 2);
    EXPECT_EQ(cache.counts().stored_again, 0);
    // Back on the GPU (it had been there): stored again; on the disk (never there): not.
    cache.apply(batch_of({stored(7), stored(7, KvMedium::kDisk), stored(8)}), out);
    EXPECT_EQ(cache.counts().stored_again, 1);
    ASSERT_EQ(changes.size(), 4u);  // 7 and 8 held again; the disk copy adds nothing
    // AllBlocksCleared drops all three (churn); a restart's clear is no churn.
    KvEvent cleared;
    cleared.type = KvEventType::kAllBlocksCleared;
    cache.apply(batch_of({cleared}), out);
    EXPECT_EQ(cache.counts().churn, 5);
    EXPECT_EQ(changes.size(), 6u);
    EXPECT_EQ(cache.held(), 0);
    cache.apply(batch_of({stored(8), stored(9)}), out);
    EXPECT_EQ(cache.counts().stored_again, 2);
    cache.clear(out, /*evicted=*/false);
    EXPECT_EQ(cache.counts().churn, 5);
    EXPECT_EQ(changes.size(), 10u);
    EXPECT_EQ(cache.counts().blocks_stored, 8);
}

TEST(FlatU64Map, AgreesWithUnorderedMapUnderRandomInsertsAndErases) {
    FlatU64Map<int64_t> flat;
    std::unordered_map<uint64_t, int64_t> ref;
    std::mt19937_64 rng(3);
    // Few distinct keys, so erases hit and probe runs collide; 0 is a key like any other.
    for (int i = 0; i < 200000; ++i) {
        const uint64_t key = rng() % 3000 * (i % 7 == 0 ? 1 : 0x10000000001ull);
        switch (rng() % 3) {
            case 0:
            case 1: {
                bool added = false;
                int64_t& v = flat.get(key, added);
                EXPECT_EQ(added, ref.count(key) == 0);
                v += i;
                ref[key] += i;
                break;
            }
            default:
                EXPECT_EQ(flat.erase(key), ref.erase(key) == 1);
        }
        if (i % 997 == 0) {
            ASSERT_EQ(flat.size(), ref.size());
            for (const auto& [k, v] : ref) {
                const int64_t* got = flat.find(k);
                ASSERT_NE(got, nullptr) << k;
                EXPECT_EQ(*got, v);
            }
        }
    }
    size_t seen = 0;
    flat.for_each([&](uint64_t k, int64_t v) {
        ++seen;
        EXPECT_EQ(ref.at(k), v);
    });
    EXPECT_EQ(seen, ref.size());
}

}  // namespace
}  // namespace kvscope::attach
