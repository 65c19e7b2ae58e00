"""Files an attacker who can write a run folder could plant there (shared by the checkpoint and run-folder tests)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch


class RunsCodeWhenUnpickled:
    """What a crafted pickle holds: unpickling calls ``open(marker, "w")``, which creates the marker file (a real
    attack would call ``os.system``)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def evil_pickle(scratch: Path, marker: Path) -> bytes:
    """The bytes of a torch checkpoint whose loading with ``torch.load(weights_only=False)`` creates ``marker``."""
    source = scratch / "evil.pt"
    torch.save({"step": 2, "weights": RunsCodeWhenUnpickled(marker)}, source)
    return source.read_bytes()


def plant(path: Path, payload: bytes) -> None:
    """Write ``payload`` to the checkpoint ``path`` with a manifest that vouches for it."""
    digest = hashlib.sha256(payload).hexdigest()
    path.write_bytes(payload)
    step = int(path.name.split("_")[1].split(".")[0])
    path.with_name(f"step_{step:06d}.json").write_text(json.dumps({"step": step, "file": path.name,
                                                                   "bytes": len(payload), "sha256": digest}))
