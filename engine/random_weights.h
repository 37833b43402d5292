#pragma once
// Random weights of any type kvscope multiplies, made from a seed: synthetic models (real
// shapes, nothing downloaded) and the kernel tests draw from here. Values are roughly uniform
// on [-a, a]; block-quantized types get random codes under a scale that spans that range, so
// every code and every scale path of a type is exercised.

#include <cstdint>
#include <memory>

#include "engine/gguf_tensor_type.h"

namespace kvscope {

// xorshift64*: fast enough to fill a few GB at load.
struct WeightRng {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1DULL;
    }
    float uniform() {  // in [-1, 1)
        return static_cast<float>(static_cast<double>(next() >> 40) / 8388608.0 - 1.0);
    }
};

// rows x cols values of `type` (which must can_dequantize, cols a whole number of its blocks),
// null when out of memory.
std::shared_ptr<uint8_t[]> random_weights(GgmlType type, int64_t rows, int64_t cols, float a,
                                          WeightRng& rng);

}  // namespace kvscope
