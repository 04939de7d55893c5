"""Rewrite rules, drivers, passes and pipelines over the IR."""

from __future__ import annotations
