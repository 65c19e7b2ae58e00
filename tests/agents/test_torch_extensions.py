"""A torch extension package that cannot load is hidden before transformers imports it
(erl_agents/torch_extensions.py)."""

import os
import subprocess
import sys

from paths import ROOT


def _run(tmp_path, code, **env):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=300)


def test_a_package_whose_operators_cannot_load_is_hidden_and_transformers_still_imports(tmp_path):
    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    (package / "_C.so").write_bytes(b"not a shared library")
    code = ("import erl_agents, importlib.util, sys\n"
            "from erl_agents.torch_extensions import hide_unloadable_torch_extensions as h\n"
            "print(sorted(h()))\n"
            "assert importlib.util.find_spec('torchvision') is None\n"
            "from transformers import LlamaConfig\n"
            "try:\n    import torchvision\nexcept ImportError:\n    print('hidden')\n")
    result = _run(tmp_path, code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["['torchvision']", "hidden"]
    # The switch leaves it alone (and then the broken package is what it is).
    kept = _run(tmp_path, "import erl_agents, sys\nfrom erl_agents.torch_extensions import _hidden\nprint(_hidden)",
                ERL_KEEP_TORCH_EXTENSIONS="1")
    assert kept.stdout.strip() == "{}", kept.stderr[-2000:]


def test_a_package_without_its_operator_library_is_left_alone(tmp_path):
    package = tmp_path / "torchaudio"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 7\n")
    result = _run(tmp_path, "import erl_agents, torchaudio\nprint(torchaudio.VALUE)")
    assert result.returncode == 0 and result.stdout.strip() == "7", result.stderr[-2000:]
