# The failure scenarios of runtime_ops.py (a separate lit test, so each stays well inside lit's
# per-test timeout): a rank dies (os._exit) for W = 2, 3, 4, the rendezvous host (rank 0) dies
# for W = 3, 4, and a rank stays alive but stops calling (W = 2). The survivors must fail with
# an error naming the unit and saying a peer may have died, within FSDP_OPT_TIMEOUT_S = 10.
#
# RUN: %python %S/runtime_ops.py %runtime_lib --scenarios=death,stall --timeout=10
