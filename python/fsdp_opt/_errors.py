"""The package's exceptions and warnings, and the one-line text of a library error."""

import torch


class FsdpOptError(RuntimeError):
    """A transform or shard that failed; the message is fsdp-opt's error text."""


class FsdpOptWarning(UserWarning):
    """A warning of the pipeline (e.g. lint-sharded-reads)."""


def _message(error: Exception) -> str:
    """The error's one line, as fsdp-opt and fsdp-run print it (the libraries' oneLineMessage:
    no C++ backtrace, a TorchScript traceback's cause)."""
    return torch.ops.fsdp_opt.one_line_message(str(error))
