#pragma once
// Q4_0 weights re-laid for fast mode's multiply (cpu_matmul.h): sixteen weight rows side by
// side, so that one 512-bit register holds four values of each of the sixteen rows and a byte
// dot product sums each row's block in its own lane. No horizontal folding is left to do, and a
// block's sixteen scales convert in one instruction. llama.cpp repacks Q4_0 the same way on x86
// (eight rows, `q4_0_8x8`); its numerics are the ones fast mode follows for Q4_0 (see
// cpu_matmul.h), whatever the layout.
//
// Layout of an interleaved matrix of R rows and K columns (K a multiple of 32), G = ceil(R / 16)
// groups of sixteen rows (the last padded with rows of zero scale), B = K / 32 blocks per row:
// - codes: [G][B][4][16][4] bytes. Run m (0..3) of block b of group g holds, for each row l of
//   the group, bytes 4m .. 4m+3 of that row's stored Q4_0 block b (low nibbles: values 4m ..
//   4m+3; high nibbles: values 16+4m .. 16+4m+3; each value stored as q + 8, as in the file).
//   Every run is 64 bytes, so with the buffer 64-byte aligned every run is one aligned load.
// - scales: then [G][B][16] fp16, row l's scale of block b at [g][b][l].
// The total is the file's size (18 bytes per block), plus the padding rows.

#include <cstdint>
#include <memory>

#include "engine/model_weights.h"

namespace kvscope {

constexpr int kInterleavedRows = 16;
constexpr int64_t kInterleavedCodeBytes = 256;  // one block of a group
constexpr int64_t kInterleavedScaleBytes = 32;

struct InterleavedQ4_0View {
    const uint8_t* codes = nullptr;
    const uint8_t* scales = nullptr;
    int groups = 0, blocks = 0;
    const uint8_t* group_codes(int64_t g) const {
        return codes + g * blocks * kInterleavedCodeBytes;
    }
    const uint8_t* group_scales(int64_t g) const {
        return scales + g * blocks * kInterleavedScaleBytes;
    }
};

// Bytes an interleaved copy of a Q4_0 matrix of this shape takes.
int64_t interleaved_q4_0_bytes(int rows, int cols);
// Writes the interleaved copy of `w` (Q4_0) into `out` (interleaved_q4_0_bytes, 64-byte
// aligned) and returns the view of it.
InterleavedQ4_0View interleave_q4_0(const Matrix& w, uint8_t* out);
// The view of an interleaved copy made by interleave_q4_0 at `data`.
InterleavedQ4_0View interleaved_q4_0_view(const uint8_t* data, int rows, int cols);

// The same views, with an interleaved copy of every Q4_0 projection (and the classifier) held
// in buffers the result owns; other matrices are shared untouched. The token embedding is only
// ever read a row at a time, so it keeps the file's layout.
ModelWeights with_interleaved_q4_0(const ModelWeights& weights);

}  // namespace kvscope
