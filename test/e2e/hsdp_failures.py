# hsdp.py's failure checks: a divergence inside one shard group (the fingerprint error names the
# two global ranks, the other group gathers exactly, the world still agrees afterwards), and rank
# files run with the wrong mesh (files of two runs for different meshes; a mesh other than
# FSDP_OPT_SHARD_GROUP_SIZE declares): errors before any collective, within seconds.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/hsdp.py --cases divergence,wrong-mesh %t
