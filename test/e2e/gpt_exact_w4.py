# gpt_exact.py's checks (GPT generate and forward, bitwise, collective counts, shard layout)
# for W=4, root unit and generate designated by markers, in a lit test of its own.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/gpt_exact.py --worlds 4 %t
