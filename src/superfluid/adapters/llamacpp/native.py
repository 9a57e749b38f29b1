"""The llama.cpp library, loaded once: import guard, backend init and log routing.

llama-cpp-python is an optional extra, so importing it is deferred to the first model load and a
missing install becomes one sentence saying what to install. llama.cpp logs every tensor it
loads to stderr; its messages are routed to Python logging instead, where the daemon's log
configuration decides what a user sees.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from types import ModuleType
from typing import Any

from superfluid.domain.errors import SuperfluidError

log = logging.getLogger("superfluid.llamacpp")

# ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT (continue the previous message). Each is
# lowered a step: llama.cpp warns about things a user cannot act on ("using full-size SWA
# cache"), and its errors come back to us as return codes that become RuntimeFaults anyway.
_LEVELS = (logging.DEBUG, logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING)
_CONTINUE = 5


class LlamaCppUnavailable(SuperfluidError):
    """llama-cpp-python is not installed (or its native library does not load)."""


_lock = threading.Lock()
_lib: ModuleType | None = None
# ctypes frees a callback whose Python object is collected; llama.cpp would then call freed code.
_log_callback: Any = None


def llama() -> ModuleType:
    """The `llama_cpp` module, with the backend initialised and logs routed (once)."""
    global _lib, _log_callback
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        try:
            import llama_cpp
        except (ImportError, OSError) as exc:
            raise LlamaCppUnavailable(
                f"the llamacpp runtime needs llama-cpp-python ({exc}); install it with scripts/install.sh or pip install 'superfluid[llamacpp]'"
            ) from exc
        last = [logging.DEBUG]

        def route(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
            mapped = last[0] if level == _CONTINUE else _LEVELS[min(level, 4)]
            last[0] = mapped
            if log.isEnabledFor(mapped):
                log.log(mapped, "%s", text.decode("utf-8", "replace").rstrip("\n"))

        _log_callback = llama_cpp.llama_log_callback(route)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _lib = llama_cpp
        return _lib


def c_string(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def model_meta(lib: ModuleType, model: Any, key: str) -> str | None:
    """A GGUF metadata value as text, or None when the key is absent."""
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = lib.llama_model_meta_val_str(model, key.encode(), buf, size)
        if n < 0:
            return None
        if n < size:
            return buf.value.decode("utf-8", "replace")
        size = n + 1
