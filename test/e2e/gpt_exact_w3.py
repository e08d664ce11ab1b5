# gpt_exact.py's checks (GPT generate and forward, bitwise, collective counts, shard layout)
# for W=3, units and generate designated on the command line only, and a budget of the root
# plus one block (--max-unsharded-bytes) that keeps the block gathers inside the decoding
# loop: one gather per block per token. A lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/gpt_exact.py --worlds 3 --designate=cli --budget-one-block %t
