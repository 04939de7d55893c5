"""The CPU device: runs MSL text on the CPU with Metal's execution model."""

from __future__ import annotations
