# dead_peer.py at W=3: after one successful generate on every rank, rank 0 (which also hosts
# the rendezvous store) is killed with SIGKILL; ranks 1 and 2 keep calling generate and must
# fail with an error within FSDP_OPT_TIMEOUT_S (10) plus slack, never hang.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/dead_peer.py --world 3 %t
