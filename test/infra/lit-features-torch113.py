# The torch113 feature is set exactly when the leg's Python has torch 1.13.
# REQUIRES: torch113
# UNSUPPORTED: torch2
# RUN: %python -c "import torch; print(torch.__version__)" | FileCheck %s
# CHECK: {{^1\.13\.}}
