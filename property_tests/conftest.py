"""Hypothesis profiles: `ci` (derandomized, bounded) when the CI variable is set, `dev` otherwise."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "ci",
    max_examples=1000,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# Slow properties use @settings(parent=...) with this profile's bounded example count.
settings.register_profile("ci-slow", parent=settings.get_profile("ci"), max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
