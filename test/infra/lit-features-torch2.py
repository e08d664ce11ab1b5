# The torch2 feature is set exactly when the leg's Python has torch 2.x.
# REQUIRES: torch2
# UNSUPPORTED: torch113
# RUN: %python -c "import torch; print(torch.__version__)" | FileCheck %s
# CHECK: {{^2\.}}
