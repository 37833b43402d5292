#include "attach/endpoint.h"

#include <charconv>

#include "base/terminal_text.h"

namespace kvscope::attach {

namespace {
constexpr std::string_view kTcp = "tcp://";

struct Port {
    size_t at = 0;        // where the port's text begins in the endpoint
    int64_t number = -1;  // -1: "*", any free port
};

// The port of a tcp:// endpoint, or why it has none ZeroMQ would take as written.
Result<Port> tcp_port(const std::string& endpoint) {
    const auto colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon < kTcp.size())
        return Error{"endpoint " + quote_for_message(endpoint) + " has no port (tcp://HOST:PORT)"};
    Port port{colon + 1, -1};
    const std::string_view text = std::string_view(endpoint).substr(port.at);
    if (text == "*") return port;
    const char* end = text.data() + text.size();
    auto [stop, error] = std::from_chars(text.data(), end, port.number);
    if (text.empty() || error != std::errc() || stop != end || port.number < 0 ||
        port.number > kMaxPort)
        return Error{"endpoint " + quote_for_message(endpoint) + ": the port must be 0.." +
                     std::to_string(kMaxPort) + " (or * to bind any), not " +
                     quote_for_message(text)};
    return port;
}
}  // namespace

Status check_endpoint(const std::string& endpoint) {
    if (!endpoint.starts_with(kTcp)) return {};
    if (auto port = tcp_port(endpoint); !port) return port.error();
    return {};
}

Result<std::string> endpoint_for_rank(const std::string& endpoint, int32_t rank) {
    if (rank == 0) {
        if (Status s = check_endpoint(endpoint); !s) return s.error();
        return endpoint;
    }
    auto port = endpoint.starts_with(kTcp) ? tcp_port(endpoint) : Result<Port>(Port{});
    if (!port) return port.error();
    if (port->number < 0)
        return Error{"rank r is on port + r: endpoint " + quote_for_message(endpoint) +
                     " needs a tcp:// port number"};
    const int64_t rank_port = port->number + rank;
    if (rank_port > kMaxPort)
        return Error{"rank " + std::to_string(rank) + " would be on port " +
                     std::to_string(rank_port) + " (rank r is on port + r from " +
                     quote_for_message(endpoint) + "), past " + std::to_string(kMaxPort)};
    return endpoint.substr(0, port->at) + std::to_string(rank_port);
}

}  // namespace kvscope::attach
