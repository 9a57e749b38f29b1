"""The llama.cpp runtime adapter: GGUF models through llama-cpp-python's low-level API.

Nothing here imports llama-cpp-python (an optional extra) until a model is loaded, so the demo
model and the chat templates work without it.
"""
