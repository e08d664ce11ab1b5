#!/usr/bin/env bash
# Install everything fsdp-opt needs to build and test both LibTorch legs on Debian bookworm.
# Idempotent and cheap when nothing is missing: `apt-get update` runs only when a package is
# absent, and pip touches the torch 2.x venv only when it is absent, cannot import what the
# tests need, or has a torch outside the tested range (TORCH_MIN/TORCH_BELOW below).
#
#   t113 leg: Debian's LibTorch 1.13 (libtorch-dev) + /usr/bin/python3 with python3-torch.
#   t2   leg: PyPI torch 2.15.x in a venv ($FSDP_OPT_VENV, default ~/.cache/fsdp-opt/venv-torch2);
#             its CMake package, headers and libraries are built against.
#
# Needs root (apt). Runs unattended: no prompt, no stdin.
set -euo pipefail

VENV=${FSDP_OPT_VENV:-$HOME/.cache/fsdp-opt/venv-torch2}

# The torch 2.x the t2 leg is tested with (README, "Supported versions"). Pinned to a minor
# release: TorchScript is deprecated upstream (torch 2.x warns on torch.jit.load/script), and a
# later release may turn those warnings into errors or drop what fsdp-opt builds on. Widen the
# range only after the whole suite passed against the new release.
TORCH_MIN=2.15 TORCH_BELOW=2.16
TORCH_PIP=("torch>=$TORCH_MIN,<$TORCH_BELOW" "torchvision>=0.29,<0.30")

APT_PACKAGES=(
  # toolchain
  cmake ninja-build g++ ccache git ca-certificates
  # libraries the project links
  libtorch-dev libgloo-dev libcli11-dev nlohmann-json3-dev libssl-dev libgtest-dev
  # t113 leg's Python
  python3-torch python3-torchvision python3-numpy python3-pytest
  # test tools: FileCheck, not and lit (lit's per-test timeout needs psutil)
  llvm-14-tools python3-psutil
  # to build the t2 venv with Debian's Python
  python3-pip python3-venv
)

log() { printf 'install-deps: %s\n' "$*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
else
  log "apt: all ${#APT_PACKAGES[@]} packages present"
fi

# The t2 venv. Several shells may run this at once (a developer and a test run): the lock
# makes the second wait for the first install instead of racing it in the same directory.
# Prints torch's version when the venv has everything (one torch import: seconds).
# timm and transformers are pinned: the model zoo (test/models/zoo.py, docs/models.md) records
# which of their models script or trace, and that changes between their releases.
TIMM_VERSION=1.0.31
TRANSFORMERS_VERSION=5.23.0
venv_torch() {
  "$VENV/bin/python" - "$TORCH_MIN" "$TORCH_BELOW" "$TIMM_VERSION" "$TRANSFORMERS_VERSION" 2>/dev/null <<'PY'
import sys
import torch, torchvision, numpy, pytest, matplotlib, timm, transformers  # noqa: F401 - what the t2 leg's tests import
torch_min, torch_below, timm_version, transformers_version = sys.argv[1:]
minor = lambda v: tuple(int(p) for p in v.split("+")[0].split(".")[:2])
if not minor(torch_min) <= minor(torch.__version__) < minor(torch_below):
    sys.exit("torch %s is outside the tested range" % torch.__version__)
if (timm.__version__, transformers.__version__) != (timm_version, transformers_version):
    sys.exit("timm/transformers versions")
print(torch.__version__)
PY
}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if version=$(venv_torch); then
  log "venv: $VENV ok (torch $version)"
else
  # A venv whose interpreter no longer starts (Debian's python3 upgraded under it) is rebuilt
  # from scratch; one that only lacks packages gets them, keeping what is already downloaded.
  if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "venv: creating $VENV"
    rm -rf "$VENV"
    /usr/bin/python3 -m venv "$VENV"
  fi
  log "venv: installing ${TORCH_PIP[*]}, numpy, pytest, matplotlib, timm $TIMM_VERSION, transformers $TRANSFORMERS_VERSION (several GiB on a fresh machine)"
  "$VENV/bin/python" -m pip install --no-input -q "${TORCH_PIP[@]}" numpy pytest matplotlib \
    "timm==$TIMM_VERSION" "transformers==$TRANSFORMERS_VERSION" </dev/null
  version=$(venv_torch) || { log "error: $VENV still cannot import torch $TORCH_MIN.x, torchvision, numpy, pytest, matplotlib, timm $TIMM_VERSION, transformers $TRANSFORMERS_VERSION"; exit 1; }
  log "venv: torch $version installed"
fi
flock -u 9

# The PyPI wheel is CUDA-enabled, and its CMake package (find_package(Torch)) fails without a
# CUDA toolkit. Machines of this project's kind ship one in /usr/local/cuda; Debian has none
# to install, so say so plainly instead of failing later inside Caffe2's CMake.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  log "warning: no CUDA toolkit (nvcc) found; the t2 leg's CMake configure will fail"
fi
