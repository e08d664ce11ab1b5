"""Shared fixtures of the fsdp_opt package tests.

Run by ctest on each LibTorch leg (python/CMakeLists.txt), with FSDP_OPT_LIB_DIR set to the
build's lib/ and FSDP_OPT_TEST_PLUGIN to libfsdp_test_plugin.so. By hand:

    FSDP_OPT_LIB_DIR=build/t2/lib PYTHONPATH=python \
        ~/.cache/fsdp-opt/venv-torch2/bin/python -m pytest python/tests
"""

import os
import sys

import pytest

# The shared test models (test/Inputs/fsdp_models.py).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "test", "Inputs"))

# torch 2.x deprecates torch.jit; the package is about TorchScript, so that warning is noise.
JIT_DEPRECATED = r"ignore:`torch\.jit\.\w+` is deprecated:FutureWarning"


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", JIT_DEPRECATED)


@pytest.fixture(scope="session")
def fsdp_opt():
    import fsdp_opt as package
    package.load()
    return package


@pytest.fixture(scope="session")
def fm():
    import fsdp_models
    return fsdp_models


@pytest.fixture
def gpt(fm):
    """A small GPT (tied embedding, generate()) and its forward input."""
    return fm.make("gpt"), fm.example_inputs("gpt")[0]

