"""benchmarks/scaling/fsdp_memory.py: the FSDP memory table of docs/scaling.md is the script's output."""

import re

import pytest

from benchmarks.scaling import fsdp_memory
from paths import ROOT


def test_the_activation_and_cache_estimates_follow_the_config():
    # 36 layers x 8 key-value heads x 128 x 2 (keys, values) x 2 bytes: docs/scaling.md's 147 KB per token.
    assert fsdp_memory.kv_bytes_per_token() == 147_456
    assert 3.5e6 < fsdp_memory.activation_bytes_per_token() < 3.8e6  # the docs' "about 3.6 MB"


@pytest.mark.slow
def test_a_rank_holds_its_share_and_the_docs_show_the_scripts_table():
    state = fsdp_memory.rank_state(3, 8, offload=False)
    assert state["parameters"] == 4_022_468_096  # Qwen3-4B with tied embeddings
    assert abs(state["weights"] * 8 / (state["parameters"] * 4) - 1) < 0.001  # fp32 shards, 1/8 each
    assert abs(state["reference"] * 8 / (state["parameters"] * 2) - 1) < 0.001  # bf16 shards
    docs = (ROOT / "docs" / "scaling.md").read_text()
    shown = re.search(r"<!-- fsdp_memory.py -->\n(.*)\n<!-- /fsdp_memory.py -->", docs, re.S).group(1)
    assert shown == fsdp_memory.table()
