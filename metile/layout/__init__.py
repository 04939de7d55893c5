"""CuTe-style layout algebra on integers and nested integer tuples (a leaf: imports nothing from metile)."""

from __future__ import annotations
