// Gradient reduction: a unit's full gradients to this rank's rows of their mean, and a
// replicated parameter's gradient to its mean, both with additions in an order one process can
// repeat bit for bit (SPEC section 10; docs/design.md "Training", "Reduction order"). Every
// collective here is one of backward: a rank that skipped backward() is the usual cause of a
// timeout, and the messages say so.
#include "gradient_reduction.h"

#include <c10/util/accumulate.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "collective.h"
#include "data_path.h"
#include "fingerprint.h"
#include "process_group.h"
#include "shard_layout.h"
#include "stats.h"

namespace fsdp_opt {
namespace runtime {
namespace detail {
namespace {

// a + b + c ... of `parts` in that order: the sum over ranks in rank order.
at::Tensor sumInRankOrder(const std::vector<at::Tensor>& parts) {
  at::Tensor sum = parts.front().clone();
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

// A gradient collective of backward: every rank that runs this backward issues it, so a rank that
// skipped backward() (or ran another program) is the usual cause of a timeout. `what`: "the
// gradients of 3 parameters (...)".
CollectiveSpec reductionSpec(const fingerprint::Identity& identity, CollectiveGroup scope,
                             std::shared_ptr<CollectiveBackend> backend, const c10::Device& device,
                             const std::string& ctx, const std::string& what) {
  CollectiveSpec spec;
  spec.identity = identity;
  spec.scope = scope;
  spec.device = device;
  spec.backend = std::move(backend);
  spec.context = ctx;
  spec.failed = c10::str(ctx, ": reducing ", what, " over ", groupOf(scope).world, " ranks");
  spec.blame = Blame::kBackward;
  return spec;
}

fingerprint::Identity gradientIdentity(const std::string& what, const std::vector<at::Tensor>& grads,
                                       int64_t payloadBytes) {
  fingerprint::Identity id;
  id.kind = fingerprint::Kind::kGradients;
  id.unit = what;
  id.payloadBytes = payloadBytes;
  id.numTensors = static_cast<int64_t>(grads.size());
  fingerprint::LayoutHash hash;
  hash.add("gradients");
  std::vector<at::ScalarType> dtypes;
  for (const at::Tensor& g : grads) {
    for (int64_t d : g.sizes()) hash.add(d);
    hash.add(dtypeName(g.scalar_type()));
    dtypes.push_back(g.scalar_type());
  }
  id.layoutHash = hash.value();
  id.dtypes = joinedDtypeNames(dtypes);
  return id;
}

// Every rank of `scope`'s `mine` (contiguous, the same size on each), in group-rank order: ONE
// all-gather behind its fingerprint; [group size, mine.numel()]. How gradients that every rank
// needs whole are reduced: the additions are then done in that order on every rank alike.
at::Tensor allGatherInGroupOrder(const at::Tensor& mine, CollectiveGroup scope, const fingerprint::Identity& identity,
                                 const std::string& ctx, const std::string& what) {
  const RankInfo group = groupOf(scope);
  at::Tensor all = at::empty({group.world, mine.numel()}, mine.options());
  auto backend = backendFor(mine.device(), ctx, scope);
  at::Tensor in = mine.view({-1}).view(at::kByte);
  at::Tensor out = all.view({-1}).view(at::kByte);
  runCollective(reductionSpec(identity, scope, backend, mine.device(), ctx, what),
                [&] { return backend->allGatherBytesAsync(in, out); });
  return all;
}

// Adds up, in replica order, every shard group's sum of this rank's rows (`partials`, in the
// batch's order): one all-gather over the replica group (HSDP: the R ranks holding the same
// shard), then the same additions on each of them, so the replicas' shards stay bitwise equal.
std::vector<at::Tensor> sumOverReplicas(const std::string& unit, const std::vector<at::Tensor>& partials,
                                        const std::string& ctx) {
  const RankInfo replicas = groupOf(CollectiveGroup::kReplicaGroup);
  if (replicas.world == 1) return partials;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& p : partials) flat.push_back(p.reshape({-1}));
  at::Tensor mine = at::cat(flat).contiguous();
  const at::Tensor all = allGatherInGroupOrder(
      mine, CollectiveGroup::kReplicaGroup,
      gradientIdentity("unit '" + unit + "' across shard groups", partials, static_cast<int64_t>(mine.nbytes())),
      ctx,
      c10::str("the gradients of ", partials.size(), " parameters across ", replicas.world, " shard groups (",
               mine.numel(), " elements per rank)"));
  std::vector<at::Tensor> sums;
  int64_t offset = 0;
  for (const at::Tensor& p : partials) {
    std::vector<at::Tensor> parts;
    for (int64_t g = 0; g < replicas.world; ++g) {
      parts.push_back(all[g].narrow(0, offset, p.numel()).view(p.sizes()));
    }
    sums.push_back(sumInRankOrder(parts));
    offset += p.numel();
  }
  return sums;
}

}  // namespace

// Reduces a unit's full gradients to this rank's rows of their mean over the ranks, in ONE
// collective per group: each gradient is padded to S shards of rows (SPEC section 2, S the
// shard group size: the world size unless the file is HSDP), all of them are packed so that
// chunk p holds every gradient's shard p, and an all-to-all within the shard group brings each
// rank every group rank's chunk of its own rows; the rank adds them in group-rank order. Under
// HSDP the shard groups' sums are then added in group order (sumOverReplicas), which is
// FSDP2's reduce-scatter within the group and all-reduce across groups. Last, the division by
// W. A reduction whose additions one process can repeat bit for bit at any mesh (a backend's
// reduce-scatter or all-reduce adds in its own order): ((g0 + g1) + ...) within a group,
// then (group 0 + group 1) + ... across. Returns the rows, in order.
std::vector<at::Tensor> reduceToShardRows(const std::string& unit, const std::vector<FullGradient>& grads) {
  const int64_t world = ensureGroup().world;
  const RankInfo group = groupOf(CollectiveGroup::kShardGroup);
  std::vector<at::Tensor> rows;
  if (world == 1) {
    for (const FullGradient& g : grads) rows.push_back(g.full.div(1));
    return rows;
  }
  const std::string ctx = "backward of unit '" + unit + "'";
  const int64_t w = group.world;
  std::vector<at::Tensor> sums;  // this rank's rows summed over its shard group, per gradient
  if (w == 1) {
    for (const FullGradient& g : grads) sums.push_back(g.full);
  } else {
    std::vector<at::Tensor> chunks;  // per gradient: [S, shard elements]
    std::vector<int64_t> shardRows;
    for (const FullGradient& g : grads) {
      const int64_t r = layout::shardRows(g.fullRows, w);
      std::vector<int64_t> padded = g.full.sizes().vec();
      padded[0] = r * w;
      at::Tensor p = at::zeros(padded, g.full.options());
      p.narrow(0, 0, g.fullRows).copy_(g.full);
      chunks.push_back(p.view({w, -1}));
      shardRows.push_back(r);
    }
    at::Tensor send = at::cat(chunks, 1).contiguous();
    chunks.clear();
    at::Tensor received = at::empty_like(send);
    auto backend = backendFor(send.device(), ctx, CollectiveGroup::kShardGroup);
    std::vector<at::Tensor> fulls;
    for (const FullGradient& g : grads) fulls.push_back(g.full);
    const fingerprint::Identity identity =
        gradientIdentity("unit '" + unit + "'", fulls, static_cast<int64_t>(send.nbytes()));
    at::Tensor in = send.view({-1}).view(at::kByte);
    at::Tensor out = received.view({-1}).view(at::kByte);
    runCollective(reductionSpec(identity, CollectiveGroup::kShardGroup, backend, send.device(), ctx,
                                c10::str("the gradients of ", grads.size(), " parameters (", send.numel() / w,
                                         " elements per rank)")),
                  [&] { return backend->allToAllBytesAsync(in, out); });
    int64_t offset = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      const FullGradient& g = grads[i];
      std::vector<int64_t> shape = g.full.sizes().vec();
      shape[0] = shardRows[i];
      const int64_t n = c10::multiply_integers(shape);
      std::vector<at::Tensor> parts;
      for (int64_t p = 0; p < w; ++p) parts.push_back(received[p].narrow(0, offset, n));
      sums.push_back(sumInRankOrder(parts).view(shape));
      offset += n;
    }
  }
  sums = sumOverReplicas(unit, sums, ctx);
  updateStats([](Stats& s) { s.grad_reductions += 1; });
  // Divided last, so that .grad is a tensor of its own, not a view (torch::optim's zero_grad
  // detaches .grad in place, which a view refuses).
  for (const at::Tensor& sum : sums) rows.push_back(sum.div(world));
  return rows;
}

at::Tensor averageOverWorld(const at::Tensor& grad) {
  at::Tensor mine = grad.contiguous();
  const at::Tensor all = allGatherInGroupOrder(
      mine, CollectiveGroup::kWorld,
      gradientIdentity("a replicated parameter", {mine}, static_cast<int64_t>(mine.nbytes())),
      "backward of a replicated parameter", c10::str("a gradient of ", grad.sizes()));
  updateStats([](Stats& s) { s.grad_reductions += 1; });
  std::vector<at::Tensor> parts;
  for (int64_t r = 0; r < all.size(0); ++r) parts.push_back(all[r].view(mine.sizes()));
  return sumInRankOrder(parts).div(all.size(0));
}

}  // namespace detail
}  // namespace runtime
}  // namespace fsdp_opt
