"""A step's metrics: merged over ranks with the right weights, and what the logged rows say about bad steps."""

from erl_agents.metrics import consecutive_bad_steps, merge_rollout_rows


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
