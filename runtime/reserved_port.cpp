// fsdp_opt::runtime::ReservedPort (include/fsdp_opt/runtime/reserved_port.h). Assumes Linux's
// rule for SO_REUSEADDR: two sockets may bind one address and port when both set it and neither
// listens at bind time, and a listen() is refused only by another socket already listening.
#include "fsdp_opt/runtime/reserved_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace fsdp_opt {
namespace runtime {

namespace {

[[noreturn]] void fail(const char* step, int fd) {
  const std::string reason = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  throw std::runtime_error(std::string("cannot reserve a loopback port for the rendezvous (") +
                           step + "): " + reason);
}

}  // namespace

ReservedPort::ReservedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("socket", -1);
  const int on = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0) fail("SO_REUSEADDR", fd_);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fail("bind", fd_);
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) fail("getsockname", fd_);
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) ::close(fd_);
}

ReservedPort::ReservedPort(ReservedPort&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

ReservedPort& ReservedPort::operator=(ReservedPort&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = std::exchange(other.port_, 0);
  }
  return *this;
}

}  // namespace runtime
}  // namespace fsdp_opt
