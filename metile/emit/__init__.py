"""Lowered Metal IR to MSL text: pure string building."""

from __future__ import annotations
