"""Helpers shared by the benchmarks in bench/ (not a benchmark itself)."""

import statistics
import subprocess


def git_head(root):
    """The short commit of the checkout at `root`, or "?" outside git."""
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def median(xs):
    """statistics.median, NaN for no samples (a configuration that was not run)."""
    return statistics.median(xs) if xs else float("nan")
