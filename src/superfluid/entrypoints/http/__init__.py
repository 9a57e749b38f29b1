"""The OpenAI-compatible HTTP API: `create_app(service, metrics=...)` builds the FastAPI app."""
