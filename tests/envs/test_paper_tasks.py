"""The paper's task sets as erl_envs.paper_tasks gives them: the FrozenLake training rows drawn again from the
reference's NumPy stream."""

import hashlib
import json

from erl_envs.paper_tasks import frozenlake_test_rows, frozenlake_train_rows

# sha256 of json.dumps([[seed, size, p], ...]) over the 10,000 rows of the reference's
# rllm_data/datasets/frozenlake/train.parquet (microsoft/experiential_rl at commit 20cd646), in file order.
REFERENCE_TRAIN_SHA256 = "0a407b73ced1d89e3f75343ee54d75f1304f1c172403df2d1de8d5d4e6a2aabb"


def test_frozenlake_train_rows_are_the_reference_train_file():
    rows = frozenlake_train_rows()
    assert len(rows) == 10_000 and [r["index"] for r in rows] == list(range(10_000))
    assert rows[0] == {"seed": 15795, "size": 4, "p": 0.6052909534955095, "index": 0}
    digest = hashlib.sha256(json.dumps([[r["seed"], r["size"], r["p"]] for r in rows]).encode()).hexdigest()
    assert digest == REFERENCE_TRAIN_SHA256
    assert {r["size"] for r in rows} == set(range(2, 10)) and all(0.6 <= r["p"] < 0.85 for r in rows)


def test_the_same_stream_gives_the_shipped_test_rows():
    """The test rows are drawn from the same stream, interleaved with the train rows: reproducing them exactly
    checks the order of the draws."""
    from erl_envs.paper_tasks import _frozenlake_rows

    drawn = _frozenlake_rows()[1]
    assert [(r["seed"], r["size"], r["p"]) for r in drawn] == [(r["seed"], r["size"], r["p"])
                                                              for r in frozenlake_test_rows()]
