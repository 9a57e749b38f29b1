"""The basert runtime: `.base` bundles.

The closed libbaseRT engine runs only on macOS arm64 and Linux arm64 + GB10; everywhere else the
runtime runs bundles on its reference backend, a small numpy implementation of the dense
decoder-only transformers it supports (see `model.py`).
"""
