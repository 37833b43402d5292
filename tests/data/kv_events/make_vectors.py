#!/usr/bin/python3
"""Writes the KV-event test vectors: msgpack payloads in each variant vLLM and SGLang publish,
written from the wire format (attach/kv_events.h) with Python's msgpack (python3-msgpack), a
second implementation, so kvscope's decoder is not checked against its own encoder. Each
vector is NAME.msgpack; expected.json says what decoding must give. Run from this folder;
refuses to replace files unless --force."""
import json, os, sys
import msgpack

H = lambda i: 0x1000 + i                      # integer hashes
D = lambda i: bytes(range(30)) + bytes([0xAB, i])  # 32-byte digests
def d64(b):  # kvscope's key for a digest: vLLM's int form, its last 8 bytes big endian
    return int.from_bytes(b, "big") & (2**64 - 1)
T = list(range(100, 132))                      # 32 token ids: two blocks of 16

vectors, expected = {}, {}

def add(name, payload, exp):
    vectors[name] = msgpack.packb(payload, use_bin_type=True)
    expected[name] = exp

def stored(hashes, parent, tokens, bs=16, medium="GPU", lora=-1, group=-1, width=1):
    return {"type": "BlockStored", "hashes": hashes, "parent": parent, "tokens": tokens,
            "block_size": bs, "medium": medium, "lora_id": lora, "group": group,
            "token_width": width}
def removed(hashes, medium="GPU", group=-1):
    return {"type": "BlockRemoved", "hashes": hashes, "medium": medium, "group": group}
CLEARED = {"type": "AllBlocksCleared"}
def batch(events, rank=-1, unknown_events=0, unknown_fields=0, malformed_events=0, ts=1.5):
    return {"ts": ts, "rank": rank, "events": events, "unknown_events": unknown_events,
            "unknown_fields": unknown_fields, "malformed_events": malformed_events}

# vLLM, tagged arrays (before mid-2026), every field of the first releases present.
add("vllm_array_int", [1.5, [
        ["BlockStored", [H(1), H(2)], None, T, 16, None, "GPU"],
        ["BlockRemoved", [H(1)], "GPU"],
        ["AllBlocksCleared"]], 0],
    batch([stored([H(1), H(2)], None, T), removed([H(1)]), CLEARED], rank=0))
# Trailing defaults omitted (msgspec omit_defaults): no lora_id, no medium; no rank either.
add("vllm_array_omitted", [2.0, [
        ["BlockStored", [H(3)], H(2), T[:16], 16],
        ["BlockRemoved", [H(3)]]]],
    batch([stored([H(3)], H(2), T[:16]), removed([H(3)])], ts=2.0))
# Tagged maps (since mid-2026): defaults omitted, a field from a newer release, CPU offload.
add("vllm_map_int", [3.0, [
        {"type": "BlockStored", "block_hashes": [H(4), H(5)], "parent_block_hash": H(3),
         "token_ids": T, "block_size": 16, "medium": "CPU", "lora_id": 7,
         "kv_cache_spec_kind": "full_attention", "group_idx": 1, "a_field_from_2027": [1, 2]},
        {"type": "BlockRemoved", "block_hashes": [H(4)], "medium": "CPU", "locality": "local"},
        {"type": "AllBlocksCleared"}], 1],
    batch([stored([H(4), H(5)], H(3), T, medium="CPU", lora=7, group=1), removed([H(4)], "CPU"),
           CLEARED],
          rank=1, unknown_fields=1, ts=3.0))
# Digest hashes (SHA-256 bytes), array form, STORAGE tier.
add("vllm_array_bytes", [4.0, [
        ["BlockStored", [D(1), D(2)], D(0), T, 16, None, "STORAGE"],
        ["BlockRemoved", [D(2)], "STORAGE"]], 2],
    batch([stored([d64(D(1)), d64(D(2))], d64(D(0)), T, medium="STORAGE"),
           removed([d64(D(2))], "STORAGE")], rank=2, ts=4.0))
# SGLang: one event per page, attn_dp_rank, its own tiers.
add("sglang_pages", [5.0, [
        ["BlockStored", [H(10)], None, T[:16], 16, None, "GPU"],
        ["BlockStored", [H(11)], H(10), T[16:], 16, None, "CPU_PINNED"],
        ["BlockStored", [H(12)], H(11), T[:16], 16, None, "DISK"],
        ["BlockRemoved", [H(12)], "EXTERNAL"]], 3],
    batch([stored([H(10)], None, T[:16]), stored([H(11)], H(10), T[16:], medium="CPU_PINNED"),
           stored([H(12)], H(11), T[:16], medium="DISK"), removed([H(12)], "EXTERNAL")],
          rank=3, ts=5.0))
# Offloading placeholders: one hash, no tokens, block size 0, repeated.
add("offload_placeholders", [6.0, [
        ["BlockStored", [H(20)], None, [], 0, None, "CPU"],
        ["BlockStored", [H(20)], None, [], 0, None, "CPU"],
        {"type": "BlockStored", "block_hashes": [H(21)], "token_ids": [], "block_size": 0}]],
    batch([stored([H(20)], None, [], bs=0, medium="CPU"), stored([H(20)], None, [], bs=0, medium="CPU"),
           stored([H(21)], None, [], bs=0)], ts=6.0))
# Unknown event types and unknown fields are skipped and counted; the rest is kept.
add("unknown_types_and_fields", [7.0, [
        ["BlockPinned", [H(30)]],
        {"type": "CacheResized", "blocks": 100},
        ["BlockStored", [H(31)], None, T[:16], 16, None, "GPU", None, None, 0, None, None, None,
         None, "extra 1", "extra 2"],
        ["BlockRemoved", [H(31)], "GPU", 0, None, None, "extra"]], 0],
    batch([stored([H(31)], None, T[:16], group=0), removed([H(31)], group=0)], rank=0,
          unknown_events=2,
          unknown_fields=3, ts=7.0))
# Events whose known fields have the wrong shape are dropped and counted, not the batch.
add("malformed_events", [8.0, [
        ["BlockStored", "not a list", None, T, 16],
        {"type": "BlockRemoved", "block_hashes": [1.5]},
        42,
        ["BlockStored", [H(40)], None, T[:16], 16]]],
    batch([stored([H(40)], None, T[:16])], malformed_events=3, ts=8.0))
# Hashes as signed 64-bit integers (Python's hash() is signed) and an integer timestamp.
add("signed_hashes", [9, [["BlockStored", [-2, -3], -1, T, 16]]],
    batch([stored([2**64 - 2, 2**64 - 3], 2**64 - 1, T)], ts=9.0))
# A batch as a map (some releases' EventBatch) with SGLang's rank name.
add("batch_as_map", {"ts": 10.0, "events": [["AllBlocksCleared"]], "attn_dp_rank": 4},
    batch([CLEARED], rank=4, ts=10.0))

# vLLM's maps of today: every field without a default written (nil when unset), the hybrid
# cache's group and kind, an offload tier's locality, event_version, typed extra_keys.
add("vllm_main_map", [11.0, [
        {"type": "BlockStored", "block_hashes": [H(50)], "parent_block_hash": None,
         "token_ids": T[:16], "block_size": 16, "lora_id": None, "medium": "GPU",
         "lora_name": None, "event_version": 2, "extra_keys": [[{"type": "cache_salt", "salt": "s"}]],
         "group_idx": 1, "kv_cache_spec_kind": "sliding_window",
         "kv_cache_spec_sliding_window": 128, "locality": "LOCAL", "ownership": "tier-a"},
        {"type": "BlockRemoved", "block_hashes": [H(50)], "medium": "GPU", "group_idx": 1}], 0],
    batch([stored([H(50)], None, T[:16], group=1), removed([H(50)], group=1)], rank=0, ts=11.0))
# SGLang's speculative (EAGLE) pages: token_ids as [token, next token] pairs, kept as pairs;
# its positional metadata map (cache_salt, session_id) after the medium.
PAIRS = [[T[i], T[i + 1]] for i in range(16)]
add("sglang_eagle_pages", [12.0, [
        ["BlockStored", [H(60)], None, PAIRS, 16, None, "GPU", {"cache_salt": "s", "session_id": "x"}],
        {"type": "BlockStored", "block_hashes": [H(61)], "parent_block_hash": H(60),
         "token_ids": PAIRS, "block_size": 16, "lora_id": None, "medium": "CPU_PINNED",
         "session_id": "x"}], 1],
    batch([stored([H(60)], None, [t for p in PAIRS for t in p], width=2),
           stored([H(61)], H(60), [t for p in PAIRS for t in p], medium="CPU_PINNED", width=2)],
          rank=1, ts=12.0))
# Values outside their domain: each event dropped and counted, the rest kept.
add("out_of_domain", [13.0, [
        ["BlockStored", [H(70)], None, [5, -1], 16],
        ["BlockStored", [H(71)], None, T[:16], -5],
        ["BlockStored", [b"\x01"], None, T[:16], 16],
        ["BlockRemoved", [H(72)], "GPU", -2],
        ["BlockStored", [H(73)], None, [[1, 2], 3], 16],
        ["BlockStored", [H(74)], None, T[:16], 16]]],
    batch([stored([H(74)], None, T[:16])], malformed_events=5, ts=13.0))

# One of each note attach says (tests/attach/attach_cli_test.cpp, tests/gui/gui_test.cpp): a
# medium and a field it does not know (the event kept), a negative token id (the event
# dropped), an event type it does not know.
add("mixed_notes", [14.0, [
        {"type": "BlockStored", "block_hashes": [H(80)], "parent_block_hash": None,
         "token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "FS",
         "lora_name": None, "new_field": 1},
        ["BlockStored", [H(81)], None, [-1], 1],
        ["BlockPinned", [H(80)]]], 0],
    batch([stored([H(80)], None, [1, 2], bs=2, medium="OTHER")], rank=0, unknown_events=1,
          unknown_fields=1, malformed_events=1, ts=14.0))

# Hostile payloads: each must be refused with an error, never crash or allocate for the claim.
bad = {
    "empty": b"",
    "truncated": msgpack.packb([1.5, [["BlockStored", [1], None, T, 16]]])[:-7],
    "trailing_bytes": msgpack.packb([1.5, []]) + b"\x00\x01",
    "not_msgpack": b"\xc1\xc1\xc1",
    "absurd_array": b"\x92\xcb" + b"\0" * 8 + b"\xdd\xff\xff\xff\xff",
    "absurd_map": b"\xdf\xff\xff\xff\xff",
    "absurd_string": b"\x92\xcb" + b"\0" * 8 + b"\xdb\xff\xff\xff\xf0abc",
    "deep_nesting": b"\x91" * 100 + b"\x90",
    "timestamp_not_a_number": msgpack.packb(["yesterday", []]),
    "events_not_a_list": msgpack.packb([1.0, {"a": 1}]),
    "rank_negative": msgpack.packb([1.0, [], -3]),
    "not_a_batch": msgpack.packb("hello"),
}
for name, payload in bad.items():
    vectors["bad_" + name] = payload
    expected["bad_" + name] = {"error": True}

force = "--force" in sys.argv
for name, payload in vectors.items():
    path = name + ".msgpack"
    if os.path.exists(path) and not force:
        sys.exit(f"{path} exists; pass --force to replace the vectors")
    with open(path, "wb") as f:
        f.write(payload)
with open("expected.json", "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"wrote {len(vectors)} vectors")
