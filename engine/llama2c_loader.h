#pragma once
// llama2.c checkpoints (`.bin`, the legacy format run.c reads): a header of 7 int32 (dim,
// hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means
// the classifier has its own weights), then fp32 tensors in run.c's order: token_embedding
// [vocab][dim], rms_att [L][dim], wq [L][dim][dim], wk [L][kv_dim][dim], wv [L][kv_dim][dim],
// wo [L][dim][dim], rms_ffn [L][dim], w1 (gate) [L][hidden][dim], w2 (down) [L][dim][hidden],
// w3 (up) [L][hidden][dim], rms_final [dim], two legacy RoPE tables [seq_len][head_size/2]
// (skipped), then wcls [vocab][dim] when not shared.
//
// The file size must equal exactly what the header implies: run.c never checks, but a short
// file is truncated and a longer one is not what the header describes (another export version,
// or not a checkpoint at all), and either would make us serve garbage.
// The weights point straight into the mapping (zero copy). The file carries no tokenizer and no
// EOS token: run.c ends a sequence when it samples BOS (1), so the config's eos_token is 1 too,
// which makes the scheduler stop exactly where run.c stops.

#include <memory>
#include <span>
#include <string>

#include "engine/model_loader.h"

namespace kvscope {

// Header limits: far above any llama2.c model, low enough that sizes cannot overflow.
inline constexpr int32_t kLlama2cMaxDim = 65536, kLlama2cMaxHidden = 16 * 65536,
                         kLlama2cMaxLayers = 1024, kLlama2cMaxVocab = 10'000'000,
                         kLlama2cMaxSeqLen = 10'000'000;

Result<LoadedModel> load_llama2c(const std::string& path);

// Checks the 28-byte header alone. The message names the bad field and value without a path
// ("n_heads 7 does not divide dim 64"), so that callers can say what they were trying.
Status validate_llama2c_header(std::span<const uint8_t> bytes);

// The same from an image in memory; `owner` keeps `bytes` alive and goes into weights.owners.
// Tensors are used in place when 4-byte aligned, else copied. `name` prefixes error messages.
Result<LoadedModel> llama2c_from_bytes(std::span<const uint8_t> bytes,
                                       std::shared_ptr<const void> owner, const std::string& name);

}  // namespace kvscope
