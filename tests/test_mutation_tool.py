"""tests/mutation.py's bookkeeping: the exported summaries and the score table docs/testing.md shows."""

import configparser
import json

import mutation


def _summary(module, counts, mutants):
    return {"module": module, "tests": ["tests/t.py"], "mutants": mutants, "counts": counts, "score": None,
            "survived": ["m.x_f__mutmut_1"], "no_tests": [], "only": ["m.x_f__mutmut_1"]}


def test_export_copies_each_modules_summary_without_its_run_list_and_the_table_scores_it(tmp_path):
    scratch = tmp_path / ".mutmut"
    for module, counts, mutants in (
            ("erl_agents/grpo.py", {"killed": 6, "timeout": 2, "survived": 2}, 10),
            ("erl_envs/qa/data.py", {"killed": 3, "survived": 1, "no tests": 4, "not checked": 2}, 10)):
        folder = scratch / module.removesuffix(".py").replace("/", ".")
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(_summary(module, counts, mutants)))
    out = tmp_path / "docs"
    written = mutation.export(out, scratch)
    assert [p.name for p in written] == ["erl_agents.grpo.json", "erl_envs.qa.data.json"]
    assert "only" not in json.loads(written[0].read_text())
    rows = mutation.table(out).splitlines()
    assert rows[2] == "| `erl_agents/grpo.py` | 10 | 10 | 6 + 2 | 2 | 0 | 0.800 |"
    # Checked excludes unchecked and untested mutants: 3 of 4 caught.
    assert rows[3] == "| `erl_envs/qa/data.py` | 10 | 4 | 3 + 0 | 1 | 4 | 0.750 |"


def test_prepare_names_the_module_and_its_tests_in_the_scratch_config(tmp_path):
    folder = tmp_path / "scratch"
    mutation.prepare("erl_agents/grpo.py", folder, fresh=True, tests=["tests/agents/test_grpo.py"])
    config = configparser.ConfigParser(interpolation=None)
    config.read(folder / "setup.cfg")
    assert config["mutmut"]["only_mutate"].split() == ["erl_agents/grpo.py"]
    assert config["mutmut"]["pytest_add_cli_args_test_selection"].split() == ["tests/agents/test_grpo.py"]
    assert config["mutmut"]["process_isolation"] == "forkserver"
    assert (folder / "erl_agents" / "grpo.py").read_text() == (mutation.ROOT / "erl_agents" / "grpo.py").read_text()
