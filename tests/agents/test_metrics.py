"""A step's metrics: merged over ranks with the right weights, and what the logged rows say about bad steps."""

from erl_agents.metrics import consecutive_bad_steps, merge_rollout_rows, rollout_metrics
from erl_agents.rollout import Episode


def test_reflection_prompt_rate_is_merged_over_ranks_by_reflection_count():
    rows = [{"reflection/count": 1, "reflection/prompt_rate": 1.0}, {"reflection/count": 3, "reflection/prompt_rate": 0.0}]
    assert merge_rollout_rows(rows) == {"reflection/count": 4, "reflection/prompt_rate": 0.25}


def test_consecutive_bad_steps_reads_the_trailing_rows():
    rows = [{"step": 0, "eval/success": 0.0}, {"step": 1, "skipped_updates": 1}, {"step": 2, "skipped_updates": 0},
            {"step": 3, "skipped_updates": 2}, {"step": 4, "skipped_updates": 1}]
    assert consecutive_bad_steps(rows) == 2
    assert consecutive_bad_steps(rows[:3]) == 0
    assert consecutive_bad_steps(rows[:2]) == 1
    assert consecutive_bad_steps([]) == 0


def test_rows_are_strict_json_non_finite_numbers_become_null():
    from erl_agents.metrics import finite_row

    row = {"step": 3, "loss": float("nan"), "grad_norm": float("inf"), "lift": -0.5, "count/attempt1": 4, "x": None}
    assert finite_row(row) == {"step": 3, "loss": None, "grad_norm": None, "lift": -0.5, "count/attempt1": 4,
                               "x": None}


def _retried(fallback: bool, solved: bool) -> Episode:
    return Episode(task=0, index=0, record={"reflection": {"fallback": fallback, "text": ""},
                                            "attempt2": {"success": solved}})


def test_retries_are_counted_apart_by_whether_their_reflection_was_usable():
    episodes = [_retried(False, True), _retried(False, False), _retried(True, True), _retried(True, False),
                _retried(True, False), Episode(task=1, index=1, record={"reflection": None, "attempt2": None})]
    row = rollout_metrics(episodes, [])
    assert (row["retry/usable"], row["retry/usable_solved"]) == (2, 1)
    assert (row["retry/fallback"], row["retry/fallback_solved"]) == (3, 1)
    # Counts: over ranks they add up.
    merged = merge_rollout_rows([row, rollout_metrics(episodes[:1], [])])
    assert (merged["retry/usable"], merged["retry/usable_solved"]) == (3, 2)
