"""Shared test configuration: Hypothesis profiles (CI runs every property 500 times)."""

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=500, deadline=None, print_blob=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
