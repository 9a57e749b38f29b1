"""The OpenAI-compatible HTTP API: `app.create_app(service, metrics=...)` builds the FastAPI app."""
