// Workload JSONL built from the input as typed JSON, so that the fuzzer spends its time on what
// a byte-level mutator rarely writes: every field given values of the wrong type, arrays and
// objects nested past the 64-level bound (or right at it), integers past 64 bits and floats past
// a double, NaN-like strings and bare NaN, control characters and long keys. Beyond not
// crashing, what parse_workload accepts must be a request the engine can run, and what it
// refuses a short line naming the line.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/workload.h"

namespace {

constexpr int32_t kVocab = 512, kContext = 512;

const char* const kFields[] = {"id",          "arrival_step", "prompt", "prompt_ids", "max_tokens",
                               "temperature", "top_p",        "seed",   "n",          "colour"};
const char* const kOddNumbers[] = {"NaN",
                                   "-NaN",
                                   "Infinity",
                                   "-Infinity",
                                   "nan",
                                   "1e999",
                                   "-1e999",
                                   "1e-999",
                                   "-0",
                                   "0.0",
                                   "18446744073709551615",
                                   "18446744073709551616",
                                   "-9223372036854775809",
                                   "9223372036854775807",
                                   "2147483648",
                                   "1e308",
                                   "4.9e-324",
                                   "1.5",
                                   "-1",
                                   "0",
                                   "1",
                                   "511",
                                   "512"};
const char* const kOddStrings[] = {"NaN",      "nan",  "inf",     "Infinity",   "1",
                                   "-1",       "",     "\\u0000", "\\u001b[2J", "\\ud800",
                                   "\xff\xfe", "\\\"", "[[[",     "{"};

void append_value(FuzzedDataProvider& in, std::string& out, int depth);

void append_array(FuzzedDataProvider& in, std::string& out, int depth) {
    out += '[';
    const int n = in.ConsumeIntegralInRange(0, 6);
    for (int i = 0; i < n && in.remaining_bytes() > 0; ++i) {
        if (i) out += ',';
        append_value(in, out, depth + 1);
    }
    out += ']';
}

// One JSON value (or, now and then, text that is not quite one), chosen by the input.
void append_value(FuzzedDataProvider& in, std::string& out, int depth) {
    switch (in.ConsumeIntegralInRange(0, 11)) {
        case 0:
            out += std::to_string(in.ConsumeIntegralInRange<int64_t>(-3, kVocab + 3));
            break;
        case 1:
            out += std::to_string(in.ConsumeIntegral<int64_t>());
            break;
        case 2:
            out += in.PickValueInArray(kOddNumbers);
            break;
        case 3: {
            char buf[40];
            std::snprintf(buf, sizeof buf, "%.17g", in.ConsumeFloatingPoint<double>());
            out += buf;  // "nan" and "inf" when the double is one: not JSON, to be refused
            break;
        }
        case 4:
            out += "\"" + std::string(in.PickValueInArray(kOddStrings)) + "\"";
            break;
        case 5:
            out += "\"" + in.ConsumeRandomLengthString(64) + "\"";
            break;
        case 6:
            out += in.PickValueInArray({"true", "false", "null"});
            break;
        case 7:
            if (depth < 80) append_array(in, out, depth);
            break;
        case 8:
            if (depth < 80) {
                out += "{\"";
                out += in.PickValueInArray(kFields);
                out += "\":";
                append_value(in, out, depth + 1);
                out += '}';
            }
            break;
        case 9: {  // nesting around the bound, or past it (a million deep is the tests' to try:
                   // the bound is the same logic at 5000, and the fuzzer keeps its speed)
            const size_t levels = in.PickValueInArray<size_t>({62, 63, 64, 65, 1000, 5000});
            out += std::string(levels, '[') + "1" + std::string(levels, ']');
            break;
        }
        case 10:  // a long run of the same character: a key, id or string past what is quoted
            out += "\"" + std::string(in.ConsumeIntegralInRange<size_t>(0, 4000), 'k') + "\"";
            break;
        default:
            append_array(in, out, depth);
            break;
    }
}

// One request line: some fields, each with a value of any type.
std::string request_line(FuzzedDataProvider& in) {
    std::string line = "{";
    const int fields = in.ConsumeIntegralInRange(0, 10);
    for (int f = 0; f < fields && in.remaining_bytes() > 0; ++f) {
        if (f) line += ',';
        line += '"';
        line += in.ConsumeBool() ? std::string(in.PickValueInArray(kFields))
                                 : in.ConsumeRandomLengthString(16);
        line += "\":";
        append_value(in, line, 1);
    }
    return line + "}";
}

void check(bool ok) {
    if (!ok) std::abort();  // libFuzzer keeps the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    std::string text;
    const int lines = in.ConsumeIntegralInRange(1, 4);
    for (int i = 0; i < lines && in.remaining_bytes() > 0; ++i) {
        if (in.ConsumeBool())
            text += request_line(in);
        else
            append_value(in, text, 0);  // a line that is not an object
        text += '\n';
    }
    auto requests = kvscope::parse_workload(text, "fuzz.jsonl", nullptr, kVocab, kContext);
    if (!requests) {
        const std::string& m = requests.error().message;
        check(m.rfind("fuzz.jsonl:", 0) == 0);
        check(m.find('\n') == std::string::npos);
        check(m.size() < 600);  // values and keys are quoted cut, never whole
        return 0;
    }
    for (const kvscope::Request& r : *requests) {
        check(!r.prompt.empty());
        for (int32_t id : r.prompt)
            check(id >= 0 && id < kVocab);
        check(r.max_tokens >= 0 && r.n >= 1 && r.arrival_step >= 0);
        check(std::isfinite(r.sampling.temperature) && r.sampling.temperature >= 0);
        check(std::isfinite(r.sampling.top_p) && r.sampling.top_p >= 0 && r.sampling.top_p <= 1);
    }
    return 0;
}
