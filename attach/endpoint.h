#pragma once
// ZeroMQ endpoints as users give them: tcp://HOST:PORT (PORT may be * for a socket that binds),
// or ipc://, inproc://... without ports. ZeroMQ keeps a port in 16 bits and took 70000 as 4464
// without a word; attach and publish check every tcp:// endpoint here first.

#include <cstdint>
#include <string>

#include "base/result.h"

namespace kvscope::attach {

inline constexpr int64_t kMaxPort = 65535;

// A tcp:// endpoint must end in ":PORT" with PORT 0..65535 or "*"; other transports pass.
// The message quotes the endpoint (cut).
Status check_endpoint(const std::string& endpoint);

// The endpoint of rank `rank` when rank 0 is at `endpoint`: its port + rank, as vLLM numbers
// data-parallel ranks' ports. Refused for a port that is not a number (*, ipc://) and for a
// rank whose port would be past 65535, naming that rank and port.
Result<std::string> endpoint_for_rank(const std::string& endpoint, int32_t rank);

}  // namespace kvscope::attach
