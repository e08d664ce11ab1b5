// A loopback port for a rendezvous store that starts listening later (docs/runtime.md,
// "Rendezvous ports"). Torch-free, like fsdp_opt/runtime/runtime.h.
#pragma once

namespace fsdp_opt {
namespace runtime {

/// A launcher picks rank 0's store port before the ranks start, and rank 0 listens on it only
/// once it has loaded torch: seconds later. A port found by binding port 0 and closing the
/// socket is free for that whole window, and the kernel hands it out again: to another bind of
/// port 0, or as the local port of any outgoing connection (Gloo's pairs, a store's clients), and
/// rank 0 then fails with "address already in use". A ReservedPort keeps a socket bound to the
/// port, with SO_REUSEADDR and never listening, until it is destroyed. The kernel gives a bound
/// port to nobody else, while a socket that sets SO_REUSEADDR itself (c10d's TCPStore does) may
/// still bind it and listen. Keep it until the ranks are done. Its socket is close-on-exec.
class ReservedPort {
 public:
  /// Binds a port on 127.0.0.1; raises std::runtime_error with the system's reason if it cannot.
  ReservedPort();
  ~ReservedPort();
  ReservedPort(ReservedPort&& other) noexcept;
  ReservedPort& operator=(ReservedPort&& other) noexcept;
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace runtime
}  // namespace fsdp_opt
