"""Kernels shared by the acceptance tests (`tests/test_acceptance_*.py`)."""

from __future__ import annotations
