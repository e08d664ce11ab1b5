#!/usr/bin/env bash
# ctest `pip-install` (both legs): `pip install .` at the repository root, as a user with a
# torch environment runs it, and what it must refuse.
#   1. a new venv with the leg's torch (and timm, pytest), and no fsdp_opt: on the torch 2.x leg
#      its pinned CUDA torch, so the CUDA backend is built; on the 1.13 leg Debian's CPU torch
#      (a venv with the system's site-packages), so the CPU build is made and says so;
#   2. `pip install <repo>` into it (build isolation on, as pip's default): the wheel's files are
#      there, fsdp_opt.load() finds the libraries with no variable, `fsdp-opt` and `fsdp-run` are
#      on the venv's PATH, fsdp_opt.build_info() says which backend was built;
#   3. the README's timm example, its commands taken from README.md and run as written through
#      the installed tools (their --stats lines are the README's);
#   4. the package's pytest suite (python/tests) against the installed copy;
#   5. examples/cpp-pipeline against the CMake package under fsdp_opt.cmake_prefix_path;
#   6. `pip uninstall fsdp-opt` leaves the venv as it was before the install;
#   7. (torch 2.x leg) refusals, each one `error: fsdp-opt:` line and no install: no torch, a
#      torch outside the supported range, no C++ compiler.
# Step 3 needs timm, which only the torch 2.x leg's venv has; the 1.13 leg says it skips it.
# The venv takes torch from the leg's venv through a .pth file instead of a second copy of its
# GiBs: the same pinned torch at the same path, so the wheel's build hits the leg's ccache
# (build-dir build/pip-LEG sits as deep as build/LEG, and CCACHE_BASEDIR is the checkout). For
# the same reason the wheel is built with the leg's compiler, named as the leg named it (CXX):
# left alone, the wheel's build finds /usr/bin/x86_64-linux-gnu-g++ where the leg's found
# /usr/bin/c++, the same g++ under another name, and ccache keys on the name, so on a machine
# with a cold cache the wheel took 16 minutes to compile what the leg had just compiled.
# usage: pip_install.sh TEST_CONFIG.sh WORKDIR
set -euo pipefail
config=$1 work=$2
source "$config"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/consumer.sh"
source "$FSDP_SOURCE_DIR/scripts/cmake-common.sh"
use_ccache "$FSDP_SOURCE_DIR"
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset FSDP_OPT_LIB_DIR
mkdir -p "$work"
rm -rf "$work/venv" "$work/refusals" "$work/readme"

torch_major=$("$FSDP_PYTHON" -c 'import torch; print(torch.__version__.split(".")[0])')
leg=$([ "$torch_major" -ge 2 ] && echo t2 || echo t113)

# new_venv DIR [torch]: a venv from the leg's Python; with "torch", the leg's site-packages
# (torch, timm, pytest) come after its own through a .pth, or, on the 1.13 leg, the system's.
new_venv() {
  if [ "${2:-}" = torch ] && [ "$leg" = t113 ]; then
    "$FSDP_PYTHON" -m venv --system-site-packages "$1" || fail "python -m venv $1"
  else
    "$FSDP_PYTHON" -m venv "$1" || fail "python -m venv $1"
  fi
  if [ "${2:-}" = torch ] && [ "$leg" = t2 ]; then
    "$FSDP_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
      >"$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pinned_torch.pth"
  fi
}
pip_install() {  # pip_install VENV LOG [pip args...]: pip install the checkout into VENV
  local venv=$1 log=$2
  shift 2
  "$venv/bin/python" -m pip install --root-user-action=ignore "$@" "$FSDP_SOURCE_DIR" >"$log" 2>&1
}

echo "== 1. a new venv with torch $("$FSDP_PYTHON" -c 'import torch; print(torch.__version__)')"
venv=$work/venv
new_venv "$venv" torch
"$venv/bin/python" -c 'import torch, pytest' || fail "the new venv does not see the leg's torch"
! "$venv/bin/python" -c 'import fsdp_opt' 2>/dev/null || fail "fsdp_opt importable before the install"
snapshot() { (cd "$venv" && find . -not -path '*/__pycache__*' | LC_ALL=C sort); }
snapshot >"$work/before.txt"

echo "== 2. pip install $FSDP_SOURCE_DIR"
start=$SECONDS
CXX=$FSDP_CXX_COMPILER pip_install "$venv" "$work/install.log" -v --config-settings "build-dir=$FSDP_SOURCE_DIR/build/pip-$leg" \
  || { tail -n 60 "$work/install.log"; fail "pip install ."; }
echo "pip install took $((SECONDS - start)) s"
choice=$(grep -oE 'fsdp-opt: (CUDA/NCCL backend|CPU build)[^;]*' "$work/install.log" | head -n 1)
[ -n "$choice" ] || fail "the install does not say which backend it built"
echo "the install says: $choice"
if [ "$leg" = t113 ]; then
  grep -qE "^fsdp-opt: CPU build: torch 1\.13[^ ]* has no CUDA$" <<<"$choice" || fail "torch 1.13 without CUDA: not the CPU build"
elif command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  grep -q "^fsdp-opt: CUDA/NCCL backend" <<<"$choice" || fail "a CUDA torch and nvcc: not the CUDA backend"
fi
! grep -qiE 'Collecting torch|Downloading torch' "$work/install.log" || fail "pip downloaded a torch"
pkg=$("$venv/bin/python" -c 'import os, fsdp_opt; print(os.path.dirname(fsdp_opt.__file__))')
case "$pkg" in "$venv"/*) ;; *) fail "fsdp_opt imported from $pkg, not the venv" ;; esac
for f in lib/libfsdp_passes.so lib/libfsdp_runtime.so bin/fsdp-opt bin/fsdp-run _build_info.py \
         include/fsdp_opt/fsdp_opt.h lib/cmake/FsdpOpt/FsdpOptConfig.cmake lib/cmake/FsdpOpt/FsdpOptTargets.cmake; do
  [ -e "$pkg/$f" ] || fail "not in the wheel: fsdp_opt/$f"
done
if grep -q "^fsdp-opt: CUDA/NCCL backend" <<<"$choice"; then
  [ -e "$pkg/lib/libfsdp_runtime_cuda.so" ] || fail "not in the wheel: fsdp_opt/lib/libfsdp_runtime_cuda.so (the CUDA backend)"
  "$venv/bin/python" -c 'import torch, fsdp_opt; fsdp_opt.load(); assert torch.ops.fsdp.has_cuda_backend()' \
    || fail "the installed runtime does not load its CUDA backend (fsdp_opt/lib/libfsdp_runtime_cuda.so)"
fi
"$venv/bin/python" - "$pkg" <<'PY' || fail "the installed package"
import os, sys, fsdp_opt
pkg = sys.argv[1]
assert fsdp_opt.load() == os.path.join(pkg, "lib"), fsdp_opt.lib_dir()
assert fsdp_opt.cmake_prefix_path == pkg, fsdp_opt.cmake_prefix_path
info = fsdp_opt.build_info()
import torch
assert info["torch"] == torch.__version__ and info["version"] == fsdp_opt.__version__, info
assert info["cuda_backend"] == info["backend_choice"].startswith("CUDA"), info
print("fsdp_opt.build_info():", info)
PY
for tool in fsdp-opt fsdp-run; do
  [ "$(PATH="$venv/bin:$PATH" command -v $tool)" = "$venv/bin/$tool" ] || fail "$tool is not on the venv's PATH"
done
PATH="$venv/bin:$PATH" fsdp-opt --version
check_installed_tools "$pkg/bin" "$pkg/lib"

echo "== 3. the README's timm example through the installed tools"
if ! "$venv/bin/python" -c 'import timm' 2>/dev/null; then
  echo "skipped on this leg: its Python has no timm (the torch 2.x leg runs it)"
else
mkdir -p "$work/readme"
"$FSDP_PYTHON" "$here/readme_blocks.py" "$FSDP_SOURCE_DIR/README.md" "Example: a timm ViT" "$work/readme"
(
  cd "$work/readme"
  export PATH="$venv/bin:$PATH" OMP_NUM_THREADS=1
  bash -euo pipefail block1.sh >make.out 2>&1 || { cat make.out; fail "README block 1 (python -c ..., fsdp-opt)"; }
  # --stats: the README's lines are what this fsdp-opt printed
  while IFS= read -r line; do
    sed "s/^[[:space:]]*//" make.out | grep -qxF "$line" || { cat make.out; fail "README's --stats line '$line' is not what fsdp-opt printed"; }
  done <block2.txt
  head -n 1 block3.txt >run.sh
  bash -euo pipefail run.sh >run.out 2>&1 || { cat run.out; fail "README's fsdp-run command"; }
  tail -n +2 block3.txt | while IFS= read -r line; do
    sed "s/^[[:space:]]*//" run.out | grep -qxF "$line" || { cat run.out; fail "README's fsdp-run line '$line' is not what fsdp-run printed"; }
  done
  cat run.out
)
fi

echo "== 4. python/tests against the installed copy"
(
  cd "$work"
  FSDP_OPT_EXPECT_PACKAGE_DIR="$pkg" OMP_NUM_THREADS=1 FSDP_OPT_TIMEOUT_S=60 \
    "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "$FSDP_SOURCE_DIR/python/tests" >pytest.out 2>&1 \
    || { tail -n 60 pytest.out; fail "pytest against the installed package"; }
  tail -n 3 pytest.out
  ! grep -q "SKIPPED.*not run by ctest" pytest.out || fail "the installed-package check was skipped"
)

echo "== 5. examples/cpp-pipeline against fsdp_opt.cmake_prefix_path"
consumer_pipeline "$pkg" "$work/consumer"

echo "== 6. pip uninstall fsdp-opt"
"$venv/bin/python" -m pip uninstall -y --root-user-action=ignore fsdp-opt >"$work/uninstall.log" 2>&1 \
  || { cat "$work/uninstall.log"; fail "pip uninstall"; }
snapshot >"$work/after.txt"
diff "$work/before.txt" "$work/after.txt" || fail "pip uninstall left the files above behind"
echo "the venv is as before the install"

if [ "$leg" = t113 ]; then
  echo "PASS (the refusals are the torch 2.x leg's)"
  exit 0
fi
echo "== 7. refusals"
mkdir -p "$work/refusals"
# refused NAME PATTERN VENV [env...]: the install fails, with one error line matching PATTERN,
# and installs nothing.
refused() {
  local name=$1 pattern=$2 v=$3
  shift 3
  if env "$@" "$v/bin/python" -m pip install --root-user-action=ignore "$FSDP_SOURCE_DIR" >"$work/refusals/$name.log" 2>&1; then
    fail "$name: pip install succeeded"
  fi
  local lines
  # pip indents the build's output
  lines=$(sed -nE 's/^[[:space:]]*(error: fsdp-opt: )/\1/p' "$work/refusals/$name.log")
  [ "$(printf '%s' "$lines" | grep -c '')" = 1 ] || { tail -n 40 "$work/refusals/$name.log"; fail "$name: not one 'error: fsdp-opt:' line"; }
  grep -qE "$pattern" <<<"$lines" || fail "$name: '$lines' does not match '$pattern'"
  ! "$v/bin/python" -c 'import fsdp_opt' 2>/dev/null || fail "$name: fsdp_opt installed anyway"
  echo "$name: $lines"
}
new_venv "$work/refusals/no-torch"
refused no-torch "no torch in the environment of .*: install torch 2\.15\.x or 1\.13\.x first" "$work/refusals/no-torch"
# A torch outside the range: only its version is asked before the refusal, so a stand-in
# package that says 2.3.0 is that torch as far as the install can tell.
new_venv "$work/refusals/old-torch"
stub=$("$work/refusals/old-torch/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch
mkdir -p "$stub/utils"
printf '__version__ = "2.3.0"\nfrom . import utils, version\n' >"$stub/__init__.py"
printf 'cmake_prefix_path = "/nonexistent"\n' >"$stub/utils/__init__.py"
printf 'cuda = None\n' >"$stub/version.py"
refused old-torch "torch 2\.3\.0 \(of .*\) is not supported: fsdp-opt builds against torch 2\.15\.x or 1\.13\.x" "$work/refusals/old-torch"
refused no-compiler "no working C\+\+17 compiler found \(CXX=/nonexistent/c\+\+\)" "$venv" CXX=/nonexistent/c++
echo "PASS"
