# The mixed-precision scenario of runtime_ops.py (fsdp::all_gather with param_dtype) for
# W = 1..4: results bitwise `full.to(dtype)` for floating-point parameters, other dtypes
# untouched, reshard restores the shard in its own dtype, nested gathers in another dtype fail.
#
# RUN: %python %S/runtime_ops.py %runtime_lib --scenarios=mp
