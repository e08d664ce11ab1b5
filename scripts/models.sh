#!/usr/bin/env bash
# The whole model zoo (test/models/zoo.py --subset all), then docs/models.md rewritten from it:
# every torchvision, timm and Hugging Face entry on the torch 2.x leg (build/t2, the venv's
# Python), and the torchvision models on the torch 1.13 leg (build/t113, Debian's Python),
# each leg rewriting its own section of the file. Builds neither leg: run scripts/build.sh
# first. Slow (the largest torchvision models have 600M parameters): tens of minutes per leg.
#
# Environment: FSDP_OPT_LEGS (default "t2 t113"), FSDP_OPT_VENV (the torch 2.x venv),
# OMP_NUM_THREADS (default 1: the thread count the original and every rank run with).
# Extra arguments go to zoo.py (e.g. --filter 'resnet'; a filtered run still rewrites the
# leg's section, with only the entries it ran). Exits non-zero when an entry expected to work
# is not exact on either leg; docs/models.md is written all the same.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
venv=${FSDP_OPT_VENV:-$HOME/.cache/fsdp-opt/venv-torch2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export FSDP_OPT_TIMEOUT_S=${FSDP_OPT_TIMEOUT_S:-300}

status=0
for leg in ${FSDP_OPT_LEGS:-t2 t113}; do
  case $leg in
    t2) python=$venv/bin/python ;;
    t113) python=/usr/bin/python3 ;;
    *) echo "models.sh: unknown leg '$leg' (t2 or t113)"; exit 2 ;;
  esac
  if [ ! -x "build/$leg/bin/fsdp-opt" ] || [ ! -f "build/$leg/lib/libfsdp_runtime.so" ]; then
    echo "models.sh: build/$leg is not built (bash scripts/build.sh $leg)"
    status=1
    continue
  fi
  echo "=== $leg: model zoo"
  "$python" test/models/zoo.py --subset all --build "build/$leg" --write-docs docs/models.md "$@" || status=1
done
exit $status
