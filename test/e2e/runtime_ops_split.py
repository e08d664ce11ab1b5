# The split asynchronous form (fsdp::all_gather_start / fsdp::all_gather_wait) of runtime_ops.py
# for W = 1..4, and a rank that dies between start and wait (W = 2): the survivor's wait must
# fail within FSDP_OPT_TIMEOUT_S = 10 and leave its unit sharded.
#
# RUN: %python %S/runtime_ops.py %runtime_lib --scenarios=split,deathwait --timeout=10
