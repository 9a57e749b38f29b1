"""The llama.cpp runtime adapter: GGUF models through llama-cpp-python's low-level API.

Nothing here imports llama-cpp-python (an optional extra) until a model is loaded, so the demo
model and the chat templates work without it.
"""

from superfluid.adapters.llamacpp.chat_template import ChatTemplateError
from superfluid.adapters.llamacpp.demo_model import (
    DemoModelMissing,
    demo_model_path,
    instruct_model_path,
)
from superfluid.adapters.llamacpp.native import LlamaCppUnavailable
from superfluid.adapters.llamacpp.runtime import LlamaCppRuntime, ModelLoadError

__all__ = [
    "ChatTemplateError",
    "DemoModelMissing",
    "LlamaCppRuntime",
    "LlamaCppUnavailable",
    "ModelLoadError",
    "demo_model_path",
    "instruct_model_path",
]
