#pragma once
// A Llama-family model (llama, mistral, qwen2) from a parsed GGUF file: config from the
// {arch}.* metadata keys, fp32 weight views (zero copy for 4-byte-aligned F32 tensors,
// dequantized copies otherwise), every tensor's shape checked against the config, and the
// tokenizer when the file has tokenizer.ggml.model.
//
// Keys read ({arch} = general.architecture): embedding_length, feed_forward_length,
// block_count, attention.head_count, context_length (required); attention.head_count_kv
// (default head_count), attention.key_length (default embedding_length / head_count),
// attention.value_length and rope.dimension_count (must equal the head size when present),
// attention.layer_norm_rms_epsilon (default 1e-5), rope.freq_base (default 10000), vocab_size
// (must match token_embd.weight when present); tokenizer.ggml.bos_token_id / eos_token_id
// (default: the tokenizer's, else BOS 1 and no EOS).
// Tensors: token_embd.weight, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_up, ffn_down}.weight, blk.N.attn_{q,k,v}.bias (qwen2), output_norm.weight,
// output.weight (absent: tied to token_embd.weight). Other tensors are ignored.

#include <memory>

#include "engine/gguf_file.h"
#include "engine/model_loader.h"

namespace kvscope {

// Works on any GgufFile, mapped (GgufFile::open) or in memory (GgufFile::parse, as the fuzzer
// does). `file` is kept alive by the returned weights. Never throws.
Result<LoadedModel> model_from_gguf(std::shared_ptr<const GgufFile> file);

}  // namespace kvscope
