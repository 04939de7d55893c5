"""Shared pytest configuration for unit tests."""

from __future__ import annotations
