"""The markers of SPEC section 3: FSDP units and forward methods, set on an nn.Module before
scripting or recorded on a ScriptModule."""

from typing import List, Tuple

import torch


# Markers recorded on a ScriptModule (whose C++ type cannot take new attributes without
# changing every instance of a shared type): plain Python attributes of the wrapper object,
# read back by transform()/shard() from the root's named_modules().
_RECORDED_UNIT = "_fsdp_opt_recorded_unit"
_RECORDED_METHODS = "_fsdp_opt_recorded_forward_methods"

# The markers of SPEC section 3, set on an nn.Module before scripting.
_UNIT_MARKER = "_fsdp_unit"
_METHODS_MARKER = "_fsdp_forward_methods"


def _is_script_module(module) -> bool:
    return isinstance(module, torch.jit.ScriptModule)


def mark_unit(module: torch.nn.Module) -> torch.nn.Module:
    """Makes `module` an FSDP unit, as fully_shard(module) would. On an nn.Module (before
    torch.jit.script) it sets the marker `module._fsdp_unit = True`, which scripting keeps; on a
    ScriptModule it records the mark, and transform()/shard() of the root pass it on as a
    unit. Returns the module."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("mark_unit expects an nn.Module or a ScriptModule, got %s" % type(module).__name__)
    if _is_script_module(module):
        object.__setattr__(module, _RECORDED_UNIT, True)
    else:
        setattr(module, _UNIT_MARKER, True)
    return module


def register_fsdp_forward_method(module: torch.nn.Module, method_name: str) -> None:
    """Registers `method_name` as a forward method of `module` (FSDP2's function of the same
    name): calls of it see the unit's parameters unsharded. On an nn.Module it appends to the
    marker `module._fsdp_forward_methods` (the method must be compiled by torch.jit.script:
    decorate it with @torch.jit.export); on a ScriptModule it records the registration for
    transform()/shard(). On a module that is not a unit it is a no-op (reported as a remark)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("register_fsdp_forward_method expects an nn.Module or a ScriptModule, got %s"
                        % type(module).__name__)
    if not isinstance(method_name, str) or not method_name:
        raise TypeError("method_name must be a non-empty str, got %r" % (method_name,))
    if _is_script_module(module):
        if not module._c._has_method(method_name):
            raise ValueError("%s has no TorchScript method '%s' (export it with @torch.jit.export "
                             "before scripting)" % (module.original_name, method_name))
        methods = list(getattr(module, _RECORDED_METHODS, []))
        if method_name not in methods:
            methods.append(method_name)
        object.__setattr__(module, _RECORDED_METHODS, methods)
    else:
        if not callable(getattr(module, method_name, None)):
            raise ValueError("%s has no method '%s'" % (type(module).__name__, method_name))
        methods = list(getattr(module, _METHODS_MARKER, []))
        if method_name not in methods:
            methods.append(method_name)
        setattr(module, _METHODS_MARKER, methods)


def _recorded(root) -> Tuple[List[str], List[str]]:
    """Units and PATTERN:METHOD specs recorded on `root` and its submodules."""
    units, methods = [], []
    for name, module in root.named_modules():
        path = name or "."
        if getattr(module, _RECORDED_UNIT, False):
            units.append(path)
        for method in getattr(module, _RECORDED_METHODS, []):
            methods.append("%s:%s" % (path, method))
    return units, methods
