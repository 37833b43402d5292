// Where the time and the bytes go: the op spans a real recording carries, checked against the
// model file itself (bytes), against the steps they belong to (time), and through inspect and
// export, which show them.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/gguf_file.h"
#include "sessions/bandwidth_json.h"
#include "sessions/event_codec.h"
#include "sessions/session_reader.h"
#include "sessions/step_ops.h"
#include "test_support.h"

namespace kvscope {
namespace {

test::CommandResult kvscope(std::vector<std::string> args) {
    return test::run_kvscope(std::move(args), 300);
}

// What the model file says a decode step must read, worked out from its tensors alone: every
// weight once (fp32 in memory), except the token embedding, of which a step reads one row per
// token, unless the classifier is tied to it and reads it all.
struct ModelBytes {
    int64_t weights_but_embedding = 0;  // the LM head included
    int64_t embedding_row = 0;
    int64_t kv_token = 0;  // K and V of one token, all layers
};

ModelBytes model_bytes(const std::string& path) {
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.ok());
    ModelBytes m;
    const GgufFile& g = f.value();
    const std::string arch = g.get_string("general.architecture").value();
    const auto layers = static_cast<int64_t>(g.get_uint(arch + ".block_count").value());
    const auto heads = static_cast<int64_t>(g.get_uint(arch + ".attention.head_count").value());
    const auto kv_heads =
        static_cast<int64_t>(g.get_uint(arch + ".attention.head_count_kv").value());
    const auto dim = static_cast<int64_t>(g.get_uint(arch + ".embedding_length").value());
    m.kv_token = layers * 2 * kv_heads * (dim / heads) * 4;
    bool tied = g.find_tensor("output.weight") == nullptr;
    for (const GgufTensorInfo& t : g.tensors()) {
        const auto bytes = static_cast<int64_t>(t.num_elements()) * 4;
        if (t.name == "token_embd.weight") {
            m.embedding_row = static_cast<int64_t>(t.dims[0]) * 4;
            if (tied) m.weights_but_embedding += bytes;
        } else {
            m.weights_but_embedding += bytes;
        }
    }
    return m;
}

std::unique_ptr<SessionReader> record_generate(const std::string& path, int max_tokens) {
    auto r = kvscope({"generate", "--prompt", "Once upon a time", "--max-tokens",
                      std::to_string(max_tokens), "--threads", "1", "--record", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto reader = SessionReader::open(path);
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
    return reader.ok() ? std::move(reader).value() : nullptr;
}

TEST(OpTimeline, ADecodeStepMovesTheWeightsAndItsSequencesKv) {
    const ModelBytes m = model_bytes(test::bundled_model());
    auto reader = record_generate(test::temp_dir() + "/decode.kvs", 12);
    ASSERT_TRUE(reader);
    const auto& steps = reader->steps();
    ASSERT_GE(steps.size(), 10u);
    const int64_t prompt = steps[0].prefill_tokens;
    ASSERT_GT(prompt, 0);
    int decode_steps = 0;
    for (const StepSummary& s : steps) {
        if (s.step == 0) continue;
        ASSERT_EQ(s.decode_tokens, 1);
        // Step k decodes position prompt + k - 1: attention reads every token up to it.
        const int64_t tokens = prompt + s.step;
        EXPECT_EQ(s.weight_bytes, m.weights_but_embedding + m.embedding_row) << "step " << s.step;
        EXPECT_EQ(s.kv_read_bytes, tokens * m.kv_token) << "step " << s.step;
        EXPECT_EQ(s.kv_written_bytes, m.kv_token) << "step " << s.step;
        const double expected =
            static_cast<double>(m.weights_but_embedding + tokens * m.kv_token + m.kv_token);
        EXPECT_LT(std::fabs(static_cast<double>(s.bytes_moved()) - expected) / expected, 0.02)
            << "step " << s.step << ": " << s.bytes_moved() << " bytes, expected " << expected;
        ++decode_steps;
    }
    EXPECT_GE(decode_steps, 10);
}

TEST(OpTimeline, ABatchedStepReadsTheWeightsOnce) {
    const ModelBytes m = model_bytes(test::bundled_model());
    const std::string dir = test::temp_dir();
    auto w = kvscope({"workload", "--kind", "chat", "--requests", "6", "--seed", "3", "--out",
                      dir + "/w.jsonl"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    auto r = kvscope({"run", "--workload", dir + "/w.jsonl", "--record", dir + "/batch.kvs"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto reader = SessionReader::open(dir + "/batch.kvs");
    ASSERT_TRUE(reader.ok());
    int batched = 0;
    for (const StepSummary& s : (*reader)->steps()) {
        const int64_t tokens = s.prefill_tokens + s.decode_tokens;
        if (tokens == 0) continue;
        // One embedding row per token, every other weight once, however many sequences ran.
        EXPECT_EQ(s.weight_bytes, m.weights_but_embedding + tokens * m.embedding_row)
            << "step " << s.step << " with " << tokens << " tokens";
        EXPECT_EQ(s.kv_written_bytes, tokens * m.kv_token) << "step " << s.step;
        batched += s.running > 1;
    }
    EXPECT_GT(batched, 5) << "the workload should have run sequences together";
}

TEST(OpTimeline, TheOpsOfAStepCoverItsTime) {
    auto reader = record_generate(test::temp_dir() + "/cover.kvs", 40);
    ASSERT_TRUE(reader);
    double step_s = 0, ops_s = 0;
    for (const StepSummary& s : reader->steps()) {
        step_s += s.step_seconds;
        ops_s += static_cast<double>(s.ops_ns) * 1e-9;
        EXPECT_LE(static_cast<double>(s.ops_ns) * 1e-9, s.step_seconds * 1.001 + 1e-6)
            << "ops of step " << s.step << " outlast it";
    }
    ASSERT_GT(step_s, 0);
    EXPECT_GE(ops_s / step_s, 0.9) << "ops cover " << 100 * ops_s / step_s << "% of step time";

    // Every op of every layer, in order, inside its step.
    auto events = reader->events(5, 5);
    ASSERT_TRUE(events.ok());
    std::vector<OpRecord> ops = ops_of(*events);
    const RunInfo& info = reader->info();
    const std::vector<std::string> per_layer = {"attn_norm", "qkv",      "rope",     "kv_write",
                                                "attention", "attn_out", "ffn_norm", "ffn_gate_up",
                                                "swiglu",    "ffn_down"};
    ASSERT_EQ(ops.size(), 1 + 1 + per_layer.size() * static_cast<size_t>(info.n_layers) + 3);
    EXPECT_EQ(ops.front().name, "schedule");
    EXPECT_EQ(ops[1].name, "embed");
    for (int l = 0; l < info.n_layers; ++l)
        for (size_t k = 0; k < per_layer.size(); ++k) {
            const OpRecord& op = ops[2 + static_cast<size_t>(l) * per_layer.size() + k];
            EXPECT_EQ(op.name, per_layer[k]);
            EXPECT_EQ(op.layer, l);
            EXPECT_TRUE(op.cost_known);
            EXPECT_EQ(op.threads, 1);
        }
    EXPECT_EQ(ops[ops.size() - 3].name, "output_norm");
    EXPECT_EQ(ops[ops.size() - 2].name, "lm_head");
    EXPECT_EQ(ops.back().name, "sample");
    for (size_t i = 1; i < ops.size(); ++i)
        EXPECT_GE(ops[i].start_ns, ops[i - 1].end_ns) << ops[i].name << " overlaps the op before";
}

TEST(OpTimeline, InspectAndExportShowTheOpsAndTheBandwidth) {
    const std::string dir = test::temp_dir();
    auto reader = record_generate(dir + "/show.kvs", 8);
    ASSERT_TRUE(reader);
    EXPECT_GT(reader->info().bandwidth_limit_gbps(), 0) << "the recording machine's limit";
    EXPECT_EQ(reader->info().threads, 1);

    auto r = kvscope({"inspect", dir + "/show.kvs", "--step", "3", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j["ops"].is_array());
    ASSERT_FALSE(j["ops"].empty());
    int64_t sum = 0;
    for (const auto& op : j["ops"]) {
        for (const char* k : {"name", "layer", "start_ns", "end_ns", "bytes"})
            EXPECT_TRUE(op.contains(k)) << k;
        EXPECT_LE(op["start_ns"].get<int64_t>(), op["end_ns"].get<int64_t>());
        sum += op["bytes"].get<int64_t>();
    }
    EXPECT_EQ(j["bytes_moved"].get<int64_t>(), sum);
    const double step_s = j["step_seconds"].get<double>();
    EXPECT_NEAR(j["bandwidth_gbps"].get<double>(), static_cast<double>(sum) / step_s / 1e9, 1e-6);
    EXPECT_EQ(j["bandwidth_limit_gbps"].get<double>(), reader->info().bandwidth_limit_gbps());
    EXPECT_FALSE(j["roofline"].empty());

    auto text = kvscope({"inspect", dir + "/show.kvs", "--step", "3"});
    EXPECT_NE(text.out.find("GB/s"), std::string::npos) << text.out;

    // Perfetto: each op nests inside its step's slice on the steps track; bandwidth is a counter.
    ASSERT_EQ(
        kvscope({"export", dir + "/show.kvs", "--format", "perfetto", "--out", dir + "/show.json"})
            .exit_code,
        0);
    auto trace = nlohmann::json::parse(test::read_file(dir + "/show.json"))["traceEvents"];
    std::vector<std::pair<double, double>> steps;
    int ops = 0, counters = 0;
    // Counters and metadata lack some keys: read every key with a default.
    auto is_slice_on_steps = [](const nlohmann::json& e) {
        return e.value("ph", "") == "X" && e.value("tid", -1) == 1;
    };
    for (const auto& e : trace)
        if (is_slice_on_steps(e) && e.value("name", "").rfind("step ", 0) == 0)
            steps.emplace_back(e["ts"].get<double>(),
                               e["ts"].get<double>() + e["dur"].get<double>());
    for (const auto& e : trace) {
        if (e.value("ph", "") == "C" && e.value("name", "") == "bandwidth_GBps") ++counters;
        if (!is_slice_on_steps(e) || !e.contains("args") || !e["args"].contains("bytes")) continue;
        ++ops;
        const double a = e["ts"].get<double>(), b = a + e["dur"].get<double>();
        bool inside = std::any_of(steps.begin(), steps.end(), [&](const auto& s) {
            return a >= s.first - 1e-3 && b <= s.second + 1e-3;
        });
        EXPECT_TRUE(inside) << e.dump();
    }
    EXPECT_GT(ops, 8 * 60);
    EXPECT_EQ(counters, 8);

    ASSERT_EQ(kvscope({"export", dir + "/show.kvs", "--format", "csv", "--out", dir + "/show.csv"})
                  .exit_code,
              0);
    std::string csv = test::read_file(dir + "/show.csv");
    EXPECT_NE(csv.find("weight_bytes,kv_read_bytes,kv_written_bytes,activation_bytes,bytes_moved,"
                       "bandwidth_gbps,bandwidth_fraction"),
              std::string::npos);
}

TEST(OpTimeline, KernelCostPayloadsThatAreDamagedReadAsUnknown) {
    KernelCost c{.weight_bytes = 1 << 20,
                 .kv_read_bytes = 3072,
                 .kv_written_bytes = 96,
                 .activation_bytes = 4096,
                 .flops = 1 << 21};
    uint8_t buf[kKernelCostMaxBytes];
    std::vector<uint8_t> p(buf, buf + encode_kernel_cost(c, buf));
    KernelCost back;
    ASSERT_TRUE(decode_kernel_cost(p, back));
    EXPECT_EQ(back.bytes(), c.bytes());
    EXPECT_EQ(back.flops, c.flops);
    for (size_t n = 0; n < p.size(); ++n) {  // every truncation
        std::vector<uint8_t> cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
        EXPECT_FALSE(decode_kernel_cost(cut, back)) << n << " bytes";
    }
    std::vector<uint8_t> huge(10, 0xff);  // a varint past 2^62
    huge.push_back(0x01);
    EXPECT_FALSE(decode_kernel_cost(huge, back));
    EXPECT_EQ(back.flops, c.flops) << "a failed decode leaves its output alone";
    // Through a step's blob: a kernel event's cost is stored and read back exactly, and a
    // damaged one reads as unknown rather than as zeros.
    Event k;
    k.kind = EventKind::kKernel;
    k.seq_no = 1;
    k.cost = c;
    std::vector<std::string> strings = {""};
    EventEncoder enc([](const std::string&) { return 1u; });
    enc.add(k);
    std::vector<Event> out;
    std::string error;
    ASSERT_TRUE(decode_events(enc.bytes().data(), enc.bytes().size(), 0, 0, strings, out, error))
        << error;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].payload.empty());
    EXPECT_EQ(out[0].cost.bytes(), c.bytes());
    EXPECT_EQ(out[0].cost.flops, c.flops);
    // A kernel event with a damaged payload still lists as an op, its bytes unknown.
    Event e;
    e.kind = EventKind::kKernel;
    e.text = "qkv";
    e.t_ns = 100;
    e.wide = 50;
    e.payload = {0x80};
    auto ops = ops_of({e});
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_FALSE(ops[0].cost_known);
    EXPECT_EQ(ops[0].cost.bytes(), 0);
    EXPECT_EQ(ops[0].end_ns, 150);
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// A session written before op spans (schema 1: no byte columns in the step table) still opens,
// checks and replays; its steps simply have no bytes.
TEST(OpTimeline, SessionsFromBeforeOpSpansStillOpen) {
    const std::string dir = test::temp_dir(), path = dir + "/v1.kvs";
    ASSERT_TRUE(record_generate(path, 6));
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    for (const char* col :
         {"weight_bytes", "kv_read_bytes", "kv_written_bytes", "activation_bytes", "ops_ns"})
        ASSERT_EQ(sqlite3_exec(db, (std::string("ALTER TABLE step DROP COLUMN ") + col).c_str(),
                               nullptr, nullptr, nullptr),
                  SQLITE_OK)
            << sqlite3_errmsg(db);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=1", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto reader = SessionReader::open(path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    EXPECT_EQ((*reader)->schema_version(), 1);
    ASSERT_FALSE((*reader)->steps().empty());
    for (const StepSummary& s : (*reader)->steps())
        EXPECT_EQ(s.bytes_moved(), 0);
    EXPECT_EQ(kvscope({"check", path}).exit_code, 0);
    auto inspect = kvscope({"inspect", path, "--step", "2", "--json"});
    EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// A recording machine's bandwidth as a session carries it: figures that cannot be real are
// unknown (0), so no absurd limit line is drawn; the rest round-trips.
TEST(OpTimeline, BandwidthFiguresThatCannotBeRealReadAsUnknown) {
    MemoryBandwidth bw;
    bw.read_1_gbps = 26.1;
    bw.copy_1_gbps = 36.9;
    bw.read_all_gbps = 46.4;
    bw.copy_all_gbps = 69.5;
    bw.threads_all = 2;
    bw.buffer_bytes = 128 << 20;
    bw.cpu = "AMD EPYC";
    MemoryBandwidth back = bandwidth_from_json(bandwidth_to_json(bw));
    EXPECT_EQ(back.read_all_gbps, bw.read_all_gbps);
    EXPECT_EQ(back.cpu, bw.cpu);
    EXPECT_EQ(back.limit_gbps(1), 26.1);
    EXPECT_EQ(back.limit_gbps(2), 46.4);
    auto absurd = nlohmann::json::parse(R"({"read_1_gbps": 1e300, "copy_1_gbps": -3,
        "read_all_gbps": "fast", "copy_all_gbps": null, "threads_all": -7,
        "buffer_bytes": 1e30, "cpu": 5})");
    MemoryBandwidth bad = bandwidth_from_json(absurd);
    EXPECT_FALSE(bad.known());
    EXPECT_EQ(bad.limit_gbps(4), 0.0);
    EXPECT_EQ(bad.threads_all, 0);
    EXPECT_LE(bad.buffer_bytes, int64_t{1000000000000000});
    EXPECT_TRUE(bad.cpu.empty());
    EXPECT_FALSE(bandwidth_from_json(nlohmann::json::array({1, 2})).known());
}

}  // namespace
}  // namespace kvscope
