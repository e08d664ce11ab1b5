# The memory scenario of runtime_ops.py for W = 2 and 3: 600 gathers and reshards in a steady
# state, of a unit under 1 MiB per rank and one over it, allocate no host buffer and grow
# malloc's heap by at most 256 KiB (the Gloo backend's collectives, runtime/gloo_backend.cpp; the
# host buffer pool's eviction, runtime/host_buffer_pool.cpp).
#
# RUN: %python %S/runtime_ops.py %runtime_lib --scenarios=memory --worlds=2,3
