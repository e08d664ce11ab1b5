// Pass rank-uniform-control-flow: every rank issues the same collectives, whatever its data.
//
// A collective completes only when every rank issues it, and pairs with whatever the others
// issue at the same point. Ranks whose data differ take different paths through the program:
// a decoding loop that stops at a different step on each rank, a branch that calls unit `a` on
// one rank and unit `b` on another. This pass makes such control flow rank-uniform, innermost
// first, in every method graph:
//
// - A prim::If whose arms issue different collectives (after inlining the calls that reach
//   collectives into its arms) either gathers both arms' units in one bucket before the branch
//   ("merged": only when each arm's collectives are plain gathers of units, and the bucket fits
//   --max-unsharded-bytes and --bucket-bytes), or appends to each arm the collectives of the
//   other ("split"): the then arm runs its own and joins the else arm's after them, the else arm
//   joins the then arm's before its own, so both issue the same sequence and never hold more
//   than either did. --remarks says which.
// - A prim::Loop whose trip count or condition is not a constant and whose body (calls inlined)
//   still issues collectives becomes a loop that every rank runs while ANY rank continues: the
//   ranks agree before it whether any enters and after each iteration whether any goes on
//   (fsdp::rank_any: one tiny collective each). A rank that is done joins the body's
//   collectives but skips its computation and keeps its loop-carried values, so its result is
//   its own unsharded run's, bit for bit. Loops whose collectives were hoisted cost nothing.
//
// A body's "collectives only" copy (its skeleton) re-issues each gather, start, wait and
// reshard with the same operands, each agreement with a flag that does not continue, the
// skeleton of each uniform branch (either arm's), of each constant-trip loop and of each loop
// made uniform here; what has no skeleton (a method call that was not inlined) leaves the
// construct as it was, with a warning: ranks that diverge there stop with the runtime's
// collective-fingerprint error instead of mixing data.
// Gathers that the inlined calls bring in but that this graph already holds open (the units
// plan-gather-lifetimes holds for the whole call) are dropped first: they issue no collective,
// so a `break` loop whose units are held costs no agreement.
// Assumes: the schedule is final (hoisting, bucketing, prefetching ran). Guarantees: gathers and
// reshards stay paired in their blocks; per-rank results unchanged.
//
//   before: %r = prim::If(%c)  block0: <gather a; call a; reshard a>   block1: <gather b; call b; reshard b>
//   after:  %r = prim::If(%c)  block0: <gather a; call a; reshard a; gather b; reshard b>
//                              block1: <gather a; reshard a; gather b; call b; reshard b>
#include <fsdp_opt/passes/passes.h>
#include <fsdp_opt/passes/pattern.h>

#include "ir/fsdp_ops.h"
#include "ir/inline_calls.h"
#include "ir/module_tree.h"
#include "ir/module_writes.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

namespace fsdp_opt {
namespace {

constexpr const char* kPassName = "rank-uniform-control-flow";

using ValueMap = std::unordered_map<torch::jit::Value*, torch::jit::Value*>;

class Uniformer {
 public:
  Uniformer(PassContext& context, const FsdpPlan& plan, torch::jit::Graph& graph, std::string representative,
            std::string where)
      : context_(context), graph_(graph), gathers_(graph, std::move(representative), plan), where_(std::move(where)) {}

  int run() {
    process(graph_.block());
    if (changed_ > 0) removeRepeatedRankChecks(graph_);
    if (changed_ > 0) torch::jit::EliminateDeadCode(graph_.block());
    return changed_;
  }

 private:
  // Innermost first: a construct's skeleton needs its nested constructs uniform already.
  void process(torch::jit::Block* block) {
    std::vector<torch::jit::Node*> nodes(block->nodes().begin(), block->nodes().end());
    for (torch::jit::Node* node : nodes) {
      if (node->kind() == c10::prim::If) {
        prepare(node);
        for (torch::jit::Block* arm : node->blocks()) process(arm);
        uniformBranch(node);
      } else if (node->kind() == c10::prim::Loop) {
        bool divergent = !hasConstantTrips(node) && reach_.reaches(node);
        if (divergent) prepare(node);
        process(node->blocks()[0]);
        if (divergent) uniformLoop(node);
      } else {
        for (torch::jit::Block* nested : node->blocks()) process(nested);
      }
    }
  }

  // Brings into view the collectives of the calls in the construct's blocks: a call's
  // collectives must be in the skeleton, and only what is in this graph can be copied.
  void prepare(torch::jit::Node* construct) {
    if (!reach_.reaches(construct)) return;
    for (torch::jit::Block* block : construct->blocks()) {
      inlineCalls(block, [&](torch::jit::Node* call) { return reach_.reaches(calleeOf(call)); });
    }
    // What the inlined bodies gather may be held by this graph already (plan-gather-lifetimes
    // holds units for the whole entry call): such gathers issue nothing, and a loop or branch
    // left without collectives needs no agreement.
    if (assignments_.inBlock(graph_.block())) return;
    for (const GatherOp& gather : coveredGathers(graph_.block(), gathers_)) removeGather(gather);
  }

  // ---- what a block issues ------------------------------------------------------------------

  // The collectives a block issues, in order, as comparable text ("gather(a,b)", "any", ...);
  // nullopt when one has no skeleton.
  std::optional<std::vector<std::string>> signature(torch::jit::Block* block) {
    std::vector<std::string> out;
    for (torch::jit::Node* node : block->nodes()) {
      auto kind = node->kind();
      if (kind == ops::allGather() || kind == ops::gatherStart()) {
        std::string text = kind == ops::allGather() ? "gather(" : "start(";
        for (const Unit* unit : gathers_.units(*GatherOp::of(node))) text += displayPath(unit->path) + ",";
        out.push_back(text + ")");
      } else if (kind == ops::gatherWait()) {
        out.push_back("wait");
      } else if (kind == ops::rankAny()) {
        out.push_back("any");
      } else if (kind == c10::prim::CallMethod) {
        if (reach_.reaches(node)) return std::nullopt;  // not inlined
      } else if (kind == c10::prim::If) {
        auto arm = signature(node->blocks()[0]);
        if (!arm || arm != signature(node->blocks()[1])) return std::nullopt;
        out.insert(out.end(), arm->begin(), arm->end());
      } else if (kind == c10::prim::Loop) {
        if (!reach_.reaches(node)) continue;
        if (!hasConstantTrips(node) && !uniformLoops_.count(node)) return std::nullopt;
        auto body = signature(node->blocks()[0]);
        if (!body) return std::nullopt;
        out.push_back("loop{");
        out.insert(out.end(), body->begin(), body->end());
        out.push_back("}");
      } else if (!node->blocks().empty() && reach_.reaches(node)) {
        return std::nullopt;
      }
    }
    return out;
  }

  // ---- skeletons ----------------------------------------------------------------------------

  // The value `value` stands for at the skeleton's insertion point: itself when defined outside
  // the copied region, else a copy of the operand reads producing it.
  torch::jit::Value* operand(torch::jit::Value* value, ValueMap& copies, const std::set<torch::jit::Block*>& region) {
    auto copied = copies.find(value);
    if (copied != copies.end()) return copied->second;
    torch::jit::Node* producer = value->node();
    bool inside = false;
    for (torch::jit::Block* b = producer->owningBlock(); b; b = b->owningNode() ? b->owningNode()->owningBlock() : nullptr) {
      inside = inside || region.count(b);
    }
    if (!inside) return value;
    TORCH_INTERNAL_ASSERT(isOperandRead(producer), "a collective's operand is computed, not read");
    torch::jit::Node* copy = graph_.insertNode(graph_.createClone(
        producer, [&](torch::jit::Value* input) { return operand(input, copies, region); }));
    for (size_t i = 0; i < producer->outputs().size(); ++i) copies[producer->output(i)] = copy->output(i);
    return copies.at(value);
  }

  // Inserts at the insertion point the collectives of `block`, in order, without its computation.
  void insertSkeleton(torch::jit::Block* block, ValueMap& copies, const std::set<torch::jit::Block*>& region) {
    insertSkeleton(std::vector<torch::jit::Node*>(block->nodes().begin(), block->nodes().end()), copies, region);
  }

  void insertSkeleton(const std::vector<torch::jit::Node*>& nodes, ValueMap& copies,
                      const std::set<torch::jit::Block*>& region) {
    for (torch::jit::Node* node : nodes) {
      auto kind = node->kind();
      if (kind == ops::allGather() || kind == ops::gatherStart() || kind == ops::gatherWait() || kind == ops::reshard()) {
        torch::jit::Node* copy = graph_.insertNode(graph_.createClone(
            node, [&](torch::jit::Value* input) { return operand(input, copies, region); }));
        for (size_t i = 0; i < node->outputs().size(); ++i) copies[node->output(i)] = copy->output(i);
      } else if (kind == ops::rankAny()) {
        // A rank that does not run this code does not continue its loops.
        copies[node->output()] = agree(graph_.insertConstant(false), operand(node->input(1), copies, region));
      } else if (kind == c10::prim::If && reach_.reaches(node)) {
        insertSkeleton(node->blocks()[0], copies, region);  // uniform: either arm's
      } else if (kind == c10::prim::Loop && reach_.reaches(node)) {
        insertLoopSkeleton(node, copies, region);
      }
    }
  }

  // A loop that re-issues its body's collectives as many times as the loop itself would.
  void insertLoopSkeleton(torch::jit::Node* loop, ValueMap& copies, const std::set<torch::jit::Block*>& region) {
    torch::jit::Block* body = loop->blocks()[0];
    // A uniform loop's first condition is an agreement, joined (above) as a rank that has
    // nothing to do.
    torch::jit::Value* trips = operand(loop->input(0), copies, region);
    torch::jit::Value* enter = uniformLoops_.count(loop) ? copies.at(loop->input(1)) : graph_.insertConstant(true);
    auto* copy = graph_.insertNode(graph_.create(c10::prim::Loop, {trips, enter}, 0));
    if (uniformLoops_.count(loop)) uniformLoops_.insert(copy);
    torch::jit::Block* copyBody = copy->addBlock();
    copies[body->inputs()[0]] = copyBody->addInput()->setType(c10::IntType::get());
    {
      torch::jit::WithInsertPoint inBody(copyBody);
      std::set<torch::jit::Block*> inner = region;
      inner.insert(body);
      insertSkeleton(body, copies, inner);
      torch::jit::Value* next = uniformLoops_.count(loop) ? copies.at(body->outputs()[0]) : graph_.insertConstant(true);
      copyBody->registerOutput(next);
    }
  }

  // ---- branches -----------------------------------------------------------------------------

  void uniformBranch(torch::jit::Node* branch) {
    torch::jit::Block* thenArm = branch->blocks()[0];
    torch::jit::Block* elseArm = branch->blocks()[1];
    if (!reach_.reaches(branch)) return;
    auto thenIssues = signature(thenArm);
    auto elseIssues = signature(elseArm);
    if (thenIssues && elseIssues && *thenIssues == *elseIssues) return;
    if (!thenIssues || !elseIssues) {
      context_.diagnostics().warning(kPassName, "a branch in " + where_ +
                                                    " issues collectives this pass cannot copy; ranks that take different arms there stop with a collective mismatch error");
      return;
    }
    if (merge(branch)) return;
    // Both skeletons are of the arms as written, before either gets the other's.
    std::vector<torch::jit::Node*> thenNodes(thenArm->nodes().begin(), thenArm->nodes().end());
    std::vector<torch::jit::Node*> elseNodes(elseArm->nodes().begin(), elseArm->nodes().end());
    {
      torch::jit::WithInsertPoint atEnd(thenArm->return_node());
      ValueMap copies;
      insertSkeleton(elseNodes, copies, {elseArm});
    }
    {
      torch::jit::WithInsertPoint atStart(elseNodes.empty() ? elseArm->return_node() : elseNodes.front());
      ValueMap copies;
      insertSkeleton(thenNodes, copies, {thenArm});
    }
    ++changed_;
    auto issued = [](const std::vector<std::string>& issues) {  // a wait completes, it issues nothing
      return std::count_if(issues.begin(), issues.end(), [](const std::string& s) { return s != "wait"; });
    };
    context_.diagnostics().remark(kPassName, "branch in " + where_ + " split: each arm also joins the other arm's " +
                                                 "collectives (" + std::to_string(issued(*thenIssues) + issued(*elseIssues)) +
                                                 " per call on every rank)");
  }

  // Gathers both arms' units in one collective before the branch, when each arm's collectives
  // are gather/reshard pairs of units directly in the arm and the bucket fits both limits.
  bool merge(torch::jit::Node* branch) {
    std::vector<GatherOp> arms;
    std::vector<const Unit*> units;
    int64_t bytes = 0;
    for (torch::jit::Block* arm : branch->blocks()) {
      for (torch::jit::Node* node : arm->nodes()) {
        if (node->kind() == ops::allGather()) {
          GatherOp gather = *GatherOp::of(node);
          if (!gather.reshard() || gather.reshard()->owningBlock() != arm || gathers_.units(gather).empty()) return false;
          arms.push_back(gather);
          for (const Unit* unit : gathers_.units(gather)) {
            if (std::find(units.begin(), units.end(), unit) != units.end()) continue;
            units.push_back(unit);
            bytes += unit->bytes();
          }
        } else if (ops::isCollective(node) || (!node->blocks().empty() && reach_.reaches(node))) {
          return false;
        }
      }
    }
    int64_t budget = context_.options().maxUnshardedBytes.value_or(std::numeric_limits<int64_t>::max());
    for (const GatherOp& gather : arms) {
      if (gather.paramDtype() != nullptr) return false;  // one dtype per collective: keep it simple
    }
    if (bytes > context_.options().bucketBytes || gathers_.openBytesAt(branch) + bytes > budget) return false;
    // One gather before the branch whose operand reads are the arms' own, copied.
    GatherOp merged = [&] {
      torch::jit::WithInsertPoint before(branch);
      ValueMap copies;
      std::set<torch::jit::Block*> region(branch->blocks().begin(), branch->blocks().end());
      std::optional<GatherOp> combined;
      for (const GatherOp& gather : arms) {
        auto* copy = graph_.insertNode(graph_.createClone(
            gather.issue(), [&](torch::jit::Value* input) { return operand(input, copies, region); }));
        GatherOp copied = *GatherOp::of(copy);
        {
          torch::jit::WithInsertPoint after(copy->next());
          insertReshard(graph_, copied);
        }
        combined = combined ? mergeGathers(graph_, *combined, copied) : copied;
      }
      return *combined;
    }();
    // The reshard of the bucket moves after the branch; the arms' own pairs go.
    merged.reshard()->moveAfter(branch);
    for (const GatherOp& gather : arms) {
      gather.reshard()->destroy();
      gather.issue()->output()->replaceAllUsesWith(merged.result()->output());
      gather.issue()->destroy();
    }
    ++changed_;
    context_.diagnostics().remark(kPassName, "branch in " + where_ + " merged: both arms' units gathered in one collective of " +
                                                 std::to_string(bytes) + " bytes before it");
    return true;
  }

  // ---- loops --------------------------------------------------------------------------------

  void uniformLoop(torch::jit::Node* loop) {
    torch::jit::Block* body = loop->blocks()[0];
    if (!reach_.reaches(body)) return;
    if (!signature(body)) {
      context_.diagnostics().warning(kPassName, "a loop in " + where_ +
                                                    " issues collectives this pass cannot copy; ranks that leave it at different iterations stop with a collective mismatch error");
      return;
    }
    const size_t carried = loop->outputs().size();
    torch::jit::Value* ownTrips = loop->input(0);
    torch::jit::Value* ownEnter = loop->input(1);
    torch::jit::Node* rewritten;
    torch::jit::Value* like;
    {
      torch::jit::WithInsertPoint before(loop);
      like = deviceWitness(loop);
      // Whether this rank enters at all: its condition and its own trip count.
      torch::jit::Value* zero = graph_.insertConstant(int64_t{0});
      torch::jit::Value* entersOwn = graph_.insert(c10::aten::__and__, {ownEnter, graph_.insert(c10::aten::gt, {ownTrips, zero})});
      // A `while` loop: it runs while any rank is active, and each rank's own trip count is in its
      // active flag. It carries its own iteration count, since TorchScript prints no loop that
      // is both counted and conditional (nor a `while` that reads the loop's counter).
      torch::jit::Value* trips = graph_.insertConstant(std::numeric_limits<int64_t>::max());
      torch::jit::Value* enter = agree(entersOwn, like);
      std::vector<torch::jit::Value*> inputs{trips, enter};
      for (size_t i = 2; i < loop->inputs().size(); ++i) inputs.push_back(loop->input(i));
      inputs.push_back(entersOwn);
      inputs.push_back(zero);
      rewritten = graph_.insertNode(graph_.create(c10::prim::Loop, inputs, carried + 2));
      for (size_t i = 0; i < carried; ++i) rewritten->output(i)->setType(loop->output(i)->type());
      rewritten->output(carried)->setType(c10::BoolType::get());
      rewritten->output(carried + 1)->setType(c10::IntType::get());
    }
    torch::jit::Block* newBody = rewritten->addBlock();
    newBody->addInput()->setType(c10::IntType::get());  // the loop's own counter, unused
    std::vector<torch::jit::Value*> state;
    for (size_t i = 1; i < body->inputs().size(); ++i) state.push_back(newBody->addInput()->setType(body->inputs()[i]->type()));
    torch::jit::Value* active = newBody->addInput()->setType(c10::BoolType::get());
    torch::jit::Value* iteration = newBody->addInput()->setType(c10::IntType::get());
    {
      torch::jit::WithInsertPoint inBody(newBody);
      // Active ranks run the original body; the others only its collectives and keep their values.
      auto* step = graph_.insertNode(graph_.create(c10::prim::If, {active}, carried + 1));
      step->output(0)->setType(c10::BoolType::get());
      for (size_t i = 0; i < carried; ++i) step->output(i + 1)->setType(loop->output(i)->type());
      torch::jit::Block* live = step->addBlock();
      torch::jit::Block* done = step->addBlock();
      {
        torch::jit::WithInsertPoint inLive(live);
        ValueMap env{{body->inputs()[0], iteration}};
        for (size_t i = 0; i < state.size(); ++i) env[body->inputs()[i + 1]] = state[i];
        // The original body, moved (not copied): its nodes keep their identities.
        for (auto it = body->nodes().begin(); it != body->nodes().end();) {
          torch::jit::Node* node = *it++;
          node->moveBefore(live->return_node());
        }
        auto remap = [&](torch::jit::Value* v) { auto found = env.find(v); return found == env.end() ? v : found->second; };
        for (size_t i = 0; i < body->inputs().size(); ++i) body->inputs()[i]->replaceAllUsesWith(remap(body->inputs()[i]));
        torch::jit::Value* nextIteration = graph_.insert(c10::aten::add, {iteration, graph_.insertConstant(int64_t{1})});
        torch::jit::Value* withinTrips = graph_.insert(c10::aten::lt, {nextIteration, ownTrips});
        live->registerOutput(graph_.insert(c10::aten::__and__, {body->outputs()[0], withinTrips}));
        for (size_t i = 1; i < body->outputs().size(); ++i) live->registerOutput(body->outputs()[i]);
      }
      {
        torch::jit::WithInsertPoint inDone(done);
        ValueMap copies;
        insertSkeleton(live, copies, {live});
        done->registerOutput(graph_.insertConstant(false));
        for (torch::jit::Value* value : state) done->registerOutput(value);
      }
      torch::jit::Value* anyContinues = agree(step->output(0), like);
      newBody->registerOutput(anyContinues);
      for (size_t i = 0; i < carried; ++i) newBody->registerOutput(step->output(i + 1));
      newBody->registerOutput(step->output(0));
      newBody->registerOutput(graph_.insert(c10::aten::add, {iteration, graph_.insertConstant(int64_t{1})}));
    }
    for (size_t i = 0; i < carried; ++i) loop->output(i)->replaceAllUsesWith(rewritten->output(i));
    loop->destroy();
    uniformLoops_.insert(rewritten);
    ++changed_;
    context_.diagnostics().remark(kPassName, "loop in " + where_ + " made rank-uniform: ranks agree each iteration " +
                                                 "whether any continues; a rank that is done joins the collectives only");
  }

  // Whether any rank's flag is set, agreed over the backend of `like`'s device
  // (runtime/agreement.cpp).
  torch::jit::Value* agree(torch::jit::Value* flag, torch::jit::Value* like) {
    auto* node = graph_.insertNode(graph_.create(ops::rankAny(), {flag, like}, 1));
    node->output()->setType(c10::BoolType::get());
    return node->output();
  }

  // A parameter the loop gathers, read before it: its device names the backend the ranks agree
  // over, the one the loop's gathers use.
  torch::jit::Value* deviceWitness(torch::jit::Node* loop) {
    torch::jit::Value* param = nullptr;
    forEachNode(loop->blocks()[0], [&](torch::jit::Node* node) {
      if (!param && (node->kind() == ops::allGather() || node->kind() == ops::gatherStart())) {
        param = GatherOp::of(node)->paramList()->node()->input(0);
      }
    });
    TORCH_INTERNAL_ASSERT(param, "a loop that issues collectives gathers nothing");
    ValueMap copies;
    return operand(param, copies, {loop->blocks()[0]});
  }

  PassContext& context_;
  torch::jit::Graph& graph_;
  GraphGathers gathers_;
  std::string where_;
  CollectiveReach reach_;
  ModuleAssignments assignments_;
  std::set<torch::jit::Node*> uniformLoops_;
  int changed_ = 0;
};

}  // namespace

bool rankUniformControlFlow(PassContext& context) {
  const FsdpPlan* plan = context.plan();
  if (!plan) return false;
  const int changed = forEachMethod(context.module(), MethodScope::kEveryType, [&](const VisitedMethod& m) {
    return Uniformer(context, *plan, *m.graph, m.modulePath, m.label).run();
  });
  context.statistics().add("control flow made rank-uniform", changed);
  return changed > 0;
}

PassInfo rankUniformControlFlowPass() {
  return {kPassName, "make loops and branches issue the same collectives on every rank", rankUniformControlFlow};
}

}  // namespace fsdp_opt
