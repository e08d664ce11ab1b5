# fsdp-run with a --nproc that does not fit the rank files: a W=2 directory with --nproc=1
# and --nproc=3 (without, then with a stray rank2.pt of a W=3 run), a W=1 model file with
# --nproc=2. Each must exit non-zero with one `error:` line naming the cause, none may hang.
# The driver is rank_files_fsdp_run.py.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/rank_files_fsdp_run.py --nproc-cases %t
