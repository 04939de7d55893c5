"""The hypothesis profile follows the CI variable."""

from __future__ import annotations

import os

from hypothesis import settings


def test_profile_selected():
    current = settings.default
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return
    if os.environ.get("CI"):
        assert current.derandomize and current.max_examples == 1000
    else:
        assert current.max_examples == 100
