// fsdp_opt::runtime::ReservedPort (docs/runtime.md, "Rendezvous ports"): while it is held, a
// socket that does not opt into sharing cannot bind the port, a c10d TCPStore can still listen
// on it and serve a client, and the port is free again once the reservation (or the object it
// was moved to) is gone.
#include <fsdp_opt/runtime/reserved_port.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace rt = fsdp_opt::runtime;

// What binding 127.0.0.1:port without SO_REUSEADDR gives: 0 or the errno.
int plainBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int result = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
  ::close(fd);
  return result;
}

TEST(ReservedPort, OtherBindsAreRefusedWhileHeld) {
  const rt::ReservedPort reserved;
  ASSERT_GT(reserved.port(), 0);
  EXPECT_EQ(plainBind(reserved.port()), EADDRINUSE);
}

TEST(ReservedPort, TcpStoreListensOnTheHeldPort) {
  const rt::ReservedPort reserved;
  c10d::TCPStoreOptions server;
  server.port = static_cast<std::uint16_t>(reserved.port());
  server.isServer = true;
  server.waitWorkers = false;
  server.timeout = std::chrono::seconds(10);
  c10d::TCPStore store("127.0.0.1", server);
  c10d::TCPStoreOptions client = server;
  client.isServer = false;
  c10d::TCPStore peer("127.0.0.1", client);
  peer.set("key", std::vector<uint8_t>{'o', 'k'});
  EXPECT_EQ(store.get("key"), (std::vector<uint8_t>{'o', 'k'}));
}

TEST(ReservedPort, ReleasedWithTheObjectHoldingIt) {
  int port = 0;
  {
    rt::ReservedPort first;
    port = first.port();
    rt::ReservedPort second(std::move(first));
    EXPECT_EQ(first.port(), 0);
    EXPECT_EQ(second.port(), port);
    { rt::ReservedPort discarded(std::move(first)); }  // releasing the moved-from one frees nothing
    EXPECT_EQ(plainBind(port), EADDRINUSE);
  }
  EXPECT_EQ(plainBind(port), 0);
}

}  // namespace
