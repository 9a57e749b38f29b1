"""The OpenAI-compatible HTTP API: `create_app(service, metrics=...)` builds the FastAPI app."""

from superfluid.entrypoints.http.app import create_app
from superfluid.entrypoints.http.exposition import MetricsExposition

__all__ = ["MetricsExposition", "create_app"]
