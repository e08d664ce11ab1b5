// fsdp_opt::runtime::UnshardedScope, the C++ unshard scope (docs/runtime.md, "Unshard scopes"),
// on 2 ranks: the test forks two processes that form a process group on 127.0.0.1, each shards a
// small model built here (the root and two submodules a, b, each a unit) for its rank in
// process, and checks that a scope gathers once, that calls inside issue no collective and are
// bitwise the unsharded model's, that leaving the scope (normally, by an exception, by close()
// or through a moved-to guard) reshards, that a subset scope leaves the other units to the calls,
// that a unit name the module lacks is refused before anything is gathered, and that a write into
// a gathered parameter makes close() raise.
#include <fsdp_opt/fsdp_opt.h>
#include <fsdp_opt/runtime/reserved_port.h>
#include <fsdp_opt/runtime/runtime.h>
#include <fsdp_opt/runtime/unsharded_scope.h>

#include <gtest/gtest.h>
#include <torch/script.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace rt = fsdp_opt::runtime;

torch::jit::Module makeModel() {
  torch::manual_seed(0);
  torch::jit::Module a("__torch__.ScopeTestA");
  a.register_parameter("w", torch::randn({5, 4}), false);
  a.define("def forward(self, x):\n    return torch.matmul(x, self.w.t())\n");
  torch::jit::Module b("__torch__.ScopeTestB");
  b.register_parameter("w", torch::randn({3, 5}), false);
  b.define("def forward(self, x):\n    return torch.tanh(torch.matmul(x, self.w.t()))\n");
  torch::jit::Module root("__torch__.ScopeTestRoot");
  root.register_parameter("scale", torch::randn({3}), false);
  root.register_module("a", a);
  root.register_module("b", b);
  root.define("def forward(self, x):\n    return self.b.forward(self.a.forward(x)) * self.scale\n");
  return root;
}

// What one rank checks; the failures, one line each.
std::vector<std::string> runRank(int rank, int port) {
  std::vector<std::string> failures;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  };
  expect(!rt::isProcessGroupInitialized(), "no process group before initProcessGroup");
  rt::initProcessGroup(rank, 2, "127.0.0.1", port);
  expect(rt::isProcessGroupInitialized(), "the process group exists after initProcessGroup");
  torch::jit::Module original = makeModel();
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({2, 4});
  const at::Tensor want = original.forward({x}).toTensor();

  fsdp_opt::PipelineOptions options;
  options.unitPatterns = {".", "a", "b"};
  options.worldSize = 2;
  options.bucketBytes = 0;  // one collective per unit, so the counts below tell them apart
  fsdp_opt::TransformResult result = fsdp_opt::transform(original, options);
  if (!result.ok) return {"transform failed"};
  fsdp_opt::shardForRank(result, options, rank);
  torch::jit::Module m = result.module;
  auto call = [&] { return m.forward({x}).toTensor(); };
  auto gathers = [] { return rt::stats().all_gathers; };

  rt::resetStats();
  const at::Tensor first = call();
  const int64_t plainGathers = gathers();
  const int64_t plainBytes = rt::stats().bytes_gathered;
  expect(torch::equal(first, want), "a plain call is exact");
  expect(plainGathers == 3, "a plain call gathers the 3 units: " + std::to_string(plainGathers));

  rt::resetStats();
  {
    rt::UnshardedScope scope(m);
    expect(scope.units() == std::vector<std::string>{".", "a", "b"}, "the scope holds every unit");
    expect(scope.collectives() == 3 && gathers() == 3, "the scope gathers each unit once");
    expect(scope.bytes() == plainBytes && rt::stats().unsharded_bytes == plainBytes, "the scope holds their bytes");
    for (int i = 0; i < 3; ++i) expect(torch::equal(call(), want), "a call inside the scope is exact");
    expect(gathers() == 3, "calls inside the scope issue no collective: " + std::to_string(gathers()));
  }
  expect(rt::stats().unsharded_bytes == 0, "leaving the scope reshards");

  bool caught = false;
  try {
    rt::UnshardedScope scope(m);
    call();
    throw std::runtime_error("inside the scope");
  } catch (const std::runtime_error& e) {
    caught = std::string(e.what()) == "inside the scope" && rt::errorKindOf(e) == rt::ErrorKind::kNone;
  }
  expect(caught, "the exception leaves the scope, a model's own error (errorKindOf: none)");
  expect(rt::stats().unsharded_bytes == 0, "an exception out of the scope reshards");
  rt::resetStats();
  expect(torch::equal(call(), want) && gathers() == plainGathers, "the next call is a plain, exact call");

  rt::resetStats();
  {
    rt::UnshardedScope scope(m, {"a"});
    expect(scope.units() == std::vector<std::string>{"a"} && scope.collectives() == 1, "a subset scope gathers 'a'");
    const int64_t before = gathers();
    expect(torch::equal(call(), want), "a call inside the subset scope is exact");
    expect(gathers() - before == 2, "the call gathers the root and b only");
  }
  expect(rt::stats().unsharded_bytes == 0, "the subset scope reshards");

  rt::resetStats();
  bool refused = false;
  try {
    rt::UnshardedScope scope(m, {"a", "nope"});
  } catch (const std::exception& e) {
    refused = std::string(e.what()).find("'nope' is not a unit of the module (its units: '.', 'a', 'b')") !=
                  std::string::npos &&
              rt::errorKindOf(e) == rt::ErrorKind::kBadInput;
  }
  expect(refused && gathers() == 0, "an unknown unit is refused (errorKindOf: bad-input) before anything is gathered");

  {
    rt::UnshardedScope scope(m);
    rt::UnshardedScope moved(std::move(scope));
    expect(!scope.isOpen() && moved.isOpen(), "a moved scope is open in its new owner only");
    moved.close();
    expect(!moved.isOpen() && rt::stats().unsharded_bytes == 0, "close() reshards");
  }
  expect(rt::stats().unsharded_bytes == 0, "nothing is resharded twice");

  // A write into a gathered parameter would be dropped at the reshard: close() reshards all the
  // same and raises (bad-input), naming the unit; the shard keeps its values. What close() says
  // after `write` changed 'a.w' inside a scope of 'a' ("no error" when it does not raise):
  const auto closeMessage = [&](const std::function<void(const at::Tensor&)>& write) -> std::string {
    rt::UnshardedScope scope(m, {"a"});
    {
      torch::NoGradGuard noGrad;
      write(m.attr("a").toModule().attr("w").toTensor());
    }
    try {
      scope.close();
    } catch (const std::exception& e) {
      return rt::errorKindOf(e) == rt::ErrorKind::kBadInput ? e.what() : std::string("not bad-input: ") + e.what();
    }
    return "no error";
  };
  const std::string written = closeMessage([](const at::Tensor& w) { w.mul_(2.0); });
  expect(written.find("fsdp::reshard(unit 'a (unshard scope)'): a parameter ([5, 4] Float) was written in place "
                     "while gathered") != std::string::npos,
         "a write inside the scope makes close() raise (errorKindOf: bad-input), naming the unit: " + written);
  expect(rt::stats().unsharded_bytes == 0, "the written scope is resharded");
  rt::resetStats();
  expect(torch::equal(call(), want), "the next call computes with the unwritten shard");

  // Writes that move no version: through data() (Python's `.data`), and new storage given with
  // set_data (`p.data = t`). Each is seen at close() all the same.
  const std::string throughData = closeMessage([](const at::Tensor& w) { w.data().add_(1.0); });
  expect(throughData.find("fsdp::reshard(unit 'a (unshard scope)'): a parameter ([5, 4] Float) was written through "
                          "`.data` or `detach()` (this rank's rows differ from its shard) while gathered") !=
             std::string::npos,
         "a write through data() inside the scope makes close() raise, naming the unit: " + throughData);
  const std::string newStorage = closeMessage([](const at::Tensor& w) { w.set_data(torch::zeros_like(w)); });
  expect(newStorage.find("a parameter ([5, 4] Float) was given other storage (`p.data = t` or `set_`) while "
                         "gathered") != std::string::npos,
         "new storage given to a parameter inside the scope makes close() raise: " + newStorage);
  expect(rt::stats().unsharded_bytes == 0, "both scopes are resharded");
  rt::resetStats();
  expect(torch::equal(call(), want), "the next call still computes with the unwritten shard");
  // The same bits written back: nothing is lost.
  const std::string untouched = closeMessage([](const at::Tensor& w) { w.data().copy_(w.detach().clone()); });
  expect(untouched == "no error", "writing a gathered parameter's own values back is not refused: " + untouched);
  return failures;
}

TEST(UnshardedScope, TwoRanks) {
  const rt::ReservedPort reserved;  // held until both ranks are reaped
  const int port = reserved.port();
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(120);  // a hung collective ends the child, not the test run
      int code = 0;
      try {
        for (const std::string& f : runRank(rank, port)) {
          std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, f.c_str());
          code = 1;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: raised: %s\n", rank, e.what());
        code = 2;
      }
      std::fflush(stderr);
      _exit(code);
    }
    children.push_back(pid);
  }
  for (int rank = 0; rank < 2; ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(children[rank], &status, 0), children[rank]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " " << (WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                                        : "killed by signal " + std::to_string(WTERMSIG(status)));
  }
}

}  // namespace
