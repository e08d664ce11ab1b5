"""Helpers of the fsdp_opt package tests (not tests themselves)."""

import torch


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality: same dtype, same shape, same bytes (NaNs included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.detach().reshape(-1).contiguous().view(torch.uint8),
                       b.detach().reshape(-1).contiguous().view(torch.uint8))
