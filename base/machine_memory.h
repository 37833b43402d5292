#pragma once
// Whether something fits this machine's memory. kvscope refuses, up front and saying how big it
// is, anything it would have to hold that the machine cannot: random weights of a synthetic model,
// a KV cache pool, swap space, a benchmark's buffers. Allocating first and finding out later
// meant minutes of swapping, or the kernel's OOM killer, instead of a one-line answer.

#include <cstdint>
#include <string>

#include "base/result.h"

namespace kvscope {

// This machine's physical memory in bytes; 0 when the system does not say.
uint64_t physical_memory_bytes();

// What one kvscope may take: three quarters of physical memory (the rest is the system's and
// other programs'); 0 when unknown (then nothing is refused).
uint64_t memory_to_spare();

// "12.9 GB": bytes in decimal gigabytes, one decimal, as the messages below print them.
std::string gigabytes_text(uint64_t bytes);

// Ok when `bytes` fit in `limit` (0: memory_to_spare()). Otherwise an error naming `what`, how
// big it is against what the machine can spare, and `advice` (may be empty): "a KV cache of
// 16777216 blocks of 1 token: 51.5 GB, more than the 17.6 GB this machine can spare (fewer
// --num-blocks, or --kv-dtype int8)".
Status check_fits_in_memory(uint64_t bytes, const std::string& what, const std::string& advice,
                            uint64_t limit = 0);

}  // namespace kvscope
