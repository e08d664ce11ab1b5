"""unsharded(): unshard scopes on what transform() returns, in one process (world size 1, where a
gather moves no data but is counted like any other). The 2-rank runs on rank files, with the
fingerprint and the Hugging Face GPT-2 loop, are test/e2e/unsharded_scope.py."""

import pytest
import torch

from fsdp_test_helpers import same_bits


def _own_bytes(module, exclude=()):
    """Bytes of the distinct parameters below `module`, without those below `exclude`."""
    skip = {id(p) for sub in exclude for p in sub.parameters()}
    seen, total = set(), 0
    for p in module.parameters():
        if id(p) in seen or id(p) in skip or p.dim() == 0:
            continue
        seen.add(id(p))
        total += p.numel() * p.element_size()
    return total


@pytest.fixture
def rewritten(fsdp_opt, gpt):
    """(the scripted GPT, its rewrite with the root and each block a unit, the input, bytes by unit)."""
    model, x = gpt
    scripted = torch.jit.script(model)
    sizes = {".": _own_bytes(model, model.blocks)}
    sizes.update({"blocks.%d" % i: _own_bytes(b) for i, b in enumerate(model.blocks)})

    def make(**keywords):
        return fsdp_opt.transform(scripted, units=["blocks.*", "."], **keywords)

    return scripted, make, x, sizes


def test_scope_gathers_once_and_nothing_per_call(fsdp_opt, rewritten):
    scripted, make, x, sizes = rewritten
    m = make()
    want = [scripted(x) for _ in range(3)]
    fsdp_opt.reset_stats()
    with torch.no_grad(), fsdp_opt.unsharded(m) as scope:
        entered = fsdp_opt.stats()
        got = [m(x) for _ in range(3)]
        inside = fsdp_opt.stats()
    after = fsdp_opt.stats()
    assert scope.units == [".", "blocks.0", "blocks.1"]
    assert scope.bytes == sum(sizes.values()) == entered["unsharded_bytes"], (scope.bytes, sizes, entered)
    # Everything fits one 25 MiB bucket: one collective, and none for the three calls.
    assert scope.collectives == 1 and entered["all_gathers"] == 1 and entered["gather_calls"] == 1, entered
    assert inside["all_gathers"] == 1 and inside["gather_calls"] > 1, inside
    assert after["unsharded_bytes"] == 0 and after["reshards"] == 1, after
    assert all(same_bits(a, b) for a, b in zip(got, want))
    fsdp_opt.reset_stats()
    m(x)
    assert fsdp_opt.stats()["all_gathers"] > 0  # outside the scope the calls gather again


def test_one_collective_per_bucket(fsdp_opt, rewritten):
    _, make, x, _ = rewritten
    m = make(bucket_bytes=0)
    fsdp_opt.reset_stats()
    with fsdp_opt.unsharded(m) as scope:
        assert scope.collectives == 3 and fsdp_opt.stats()["all_gathers"] == 3
        m(x)
        assert fsdp_opt.stats()["all_gathers"] == 3
    assert fsdp_opt.stats()["unsharded_bytes"] == 0


def test_exception_inside_reshards_and_the_next_call_is_exact(fsdp_opt, rewritten):
    scripted, make, x, _ = rewritten
    m = make()
    with pytest.raises(ValueError, match="inside"):
        with fsdp_opt.unsharded(m):
            m(x)
            raise ValueError("inside")
    assert fsdp_opt.stats()["unsharded_bytes"] == 0
    assert same_bits(m(x), scripted(x))
    # The scope object can be entered again once left.
    scope = fsdp_opt.unsharded(m)
    for _ in range(2):
        with scope:
            assert fsdp_opt.stats()["unsharded_bytes"] == scope.bytes
    assert fsdp_opt.stats()["unsharded_bytes"] == 0


def test_release_all_inside_keeps_the_scope(fsdp_opt, rewritten):
    # What a TorchScript raise inside an entry method runs (reshard-on-raise): the scope's units
    # stay gathered with the scope's counts, so calls after it still gather nothing.
    scripted, make, x, _ = rewritten
    m = make()
    with fsdp_opt.unsharded(m) as scope:
        torch.ops.fsdp.release_all()
        assert fsdp_opt.stats()["unsharded_bytes"] == scope.bytes
        fsdp_opt.reset_stats()
        assert same_bits(m(x), scripted(x))
        assert fsdp_opt.stats()["all_gathers"] == 0
    assert fsdp_opt.stats()["unsharded_bytes"] == 0


def test_subset_and_nesting(fsdp_opt, fm, rewritten):
    scripted, make, x, sizes = rewritten
    m = make(bucket_bytes=0)
    fsdp_opt.reset_stats()
    with fsdp_opt.unsharded(m, units=["blocks.1", fm.submodule(m, "blocks.0")]) as scope:
        assert scope.units == ["blocks.0", "blocks.1"] and scope.collectives == 2
        assert scope.bytes == sizes["blocks.0"] + sizes["blocks.1"]
        fsdp_opt.reset_stats()
        assert same_bits(m(x), scripted(x))
        call = fsdp_opt.stats()
        assert call["all_gathers"] == 1 and call["bytes_gathered"] == sizes["."], call  # the root only
        with fsdp_opt.unsharded(m) as outer_all:  # nested: only the root is new
            assert outer_all.collectives == 1
        assert fsdp_opt.stats()["unsharded_bytes"] == scope.bytes
    assert fsdp_opt.stats()["unsharded_bytes"] == 0


def test_budget_refuses_the_scope_naming_the_bytes(fsdp_opt, rewritten):
    scripted, make, x, sizes = rewritten
    budget = sizes["."] + sizes["blocks.0"]
    m = make(max_unsharded_bytes=budget, bucket_bytes=0)
    fsdp_opt.reset_stats()
    total = sum(sizes.values())
    with pytest.raises(fsdp_opt.FsdpOptError, match=r"would hold %d bytes unsharded at once .* "
                       r"--max-unsharded-bytes=%d" % (total, budget)):
        with fsdp_opt.unsharded(m):
            pass
    assert fsdp_opt.stats()["all_gathers"] == 0 and fsdp_opt.stats()["unsharded_bytes"] == 0
    # The root alone fits, and so does each block gathered on top of it inside.
    with fsdp_opt.unsharded(m, units=".") as scope:
        fsdp_opt.reset_stats()
        assert same_bits(m(x), scripted(x))
        assert fsdp_opt.stats()["all_gathers"] == 2 and fsdp_opt.stats()["peak_unsharded_bytes"] <= budget
    # One block held, the root and the other block on top: over the budget inside the call.
    with fsdp_opt.unsharded(m, units="blocks.0") as scope:
        with pytest.raises(RuntimeError, match=r"inside an unshard scope.*--max-unsharded-bytes=%d" % budget):
            m(x)
        assert fsdp_opt.stats()["unsharded_bytes"] == scope.bytes  # what the scope holds, nothing else
    assert fsdp_opt.stats()["unsharded_bytes"] == 0
    assert same_bits(m(x), scripted(x))


def test_backward_inside_raises_and_after_is_exact(fsdp_opt, rewritten):
    scripted, make, x, _ = rewritten
    m = make()
    with fsdp_opt.unsharded(m):
        loss = m(x).sum()
        with pytest.raises(RuntimeError, match="backward while an unshard scope is open"):
            loss.backward()
    assert all(p.grad is None for p in m.parameters())
    # Forward inside the scope, backward after it: the gradients of a plain step.
    with fsdp_opt.unsharded(m):
        loss = m(x).sum()
    loss.backward()
    inside = [p.grad.clone() for p in m.parameters()]
    for p in m.parameters():
        p.grad = None
    m(x).sum().backward()
    plain = [p.grad for p in m.parameters()]
    assert all(same_bits(a, b) for a, b in zip(inside, plain))
    assert fsdp_opt.stats()["unsharded_bytes"] == 0


def test_bad_arguments(fsdp_opt, rewritten):
    scripted, make, x, _ = rewritten
    m = make()
    with pytest.raises(TypeError):
        fsdp_opt.unsharded(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError):
        fsdp_opt.unsharded(m, units=[3])
    fsdp_opt.reset_stats()
    with pytest.raises(fsdp_opt.FsdpOptError, match=r"'nope' is not a unit of the module \(its units: '\.', "
                       r"'blocks\.0', 'blocks\.1'\)"):
        with fsdp_opt.unsharded(m, units=["blocks.0", "nope"]):
            pass
    with pytest.raises(fsdp_opt.FsdpOptError, match="not rewritten by fsdp-opt"):
        with fsdp_opt.unsharded(scripted):
            pass
    assert fsdp_opt.stats()["all_gathers"] == 0


def test_param_dtype_scope_gathers_in_that_dtype(fsdp_opt, rewritten):
    # A file built with --param-dtype: the scope gathers in that dtype too (else the entry
    # methods' nested gathers would be refused as asking for another dtype).
    _, make, x, sizes = rewritten
    m = make(param_dtype=torch.bfloat16)
    with torch.no_grad():
        want = m(x)
        fsdp_opt.reset_stats()
        with fsdp_opt.unsharded(m) as scope:
            got = m(x)
            inside = fsdp_opt.stats()
    assert scope.bytes == sum(sizes.values()) // 2 == inside["unsharded_bytes"], (scope.bytes, inside)
    assert inside["all_gathers"] == 1 and same_bits(got, want)
    assert fsdp_opt.stats()["unsharded_bytes"] == 0
