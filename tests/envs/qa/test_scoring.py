"""Reading the final answer (boxed, paper), and the paper's EM / F1 / yes-no reward against the official definitions."""

import pytest

from erl_envs.qa.scoring import (
    QAScore,
    exact_match,
    extract_answer,
    extract_answer_paper,
    extract_boxed,
    normalize_answer,
    qa_reward,
    token_f1,
)

# ------------------------------------------------------------------------------------------------ reading the answer


def test_extract_boxed_without_box_or_unclosed():
    assert extract_boxed("no box") is None
    assert extract_boxed("\\boxed{never closed") is None


# ------------------------------------------------------------------------------------------------ reward


@pytest.mark.parametrize(
    "text, normal, scoring",
    [
        ("The Beatles!", "beatles", "official"),
        ("  a   tale of  TWO cities ", "tale of two cities", "official"),
        ("U.S.", "us", "official"),
        ("Rock-and-roll", "rockandroll", "official"),
        ("$10.5 million + <tax>", "105 million tax", "official"),  # every ASCII punctuation mark goes
        ("Zoë’s “café”", "zoë’s “café”", "official"),  # the official definition keeps Unicode punctuation
        ("Zoë’s “café”", "zoës café", "unicode"),
        ("$10.5 million", "105 million", "unicode"),  # the extension is a superset of the official rule
        ("Theatre", "theatre", "official"),
    ],
)
def test_normalize_answer(text, normal, scoring):
    assert normalize_answer(text, scoring) == normal


def test_scoring_is_official_by_default():
    assert qa_reward("10.5 million", "$10.5 million").reward == 1.0
    assert qa_reward("Zoe’s", "Zoe's").em is False
    assert qa_reward("Zoe’s", "Zoe's", scoring="unicode").em is True
    with pytest.raises(ValueError, match="scoring"):
        normalize_answer("x", "ascii")


def test_exact_match_and_f1_values():
    assert exact_match("the Chief of Protocol.", "Chief of Protocol")
    assert not exact_match("Chief", "Chief of Protocol")
    # pred "paul mccartney" vs gold "james paul mccartney": precision 1, recall 2/3, F1 0.8
    assert token_f1("Paul McCartney", "James Paul McCartney") == pytest.approx(0.8)
    assert token_f1("red red blue", "red blue green") == pytest.approx(2 / 3)
    assert token_f1("", "anything") == 0.0


def test_yes_no_mismatch_scores_zero():
    assert token_f1("yes", "no") == 0.0
    assert token_f1("no answer", "no") == 0.0
    assert token_f1("yes it is", "yes") == 0.0
    assert qa_reward("yes", "no").reward == 0.0
    assert qa_reward("Yes.", "yes").reward == 1.0


def test_reward_rule_em_f1_threshold():
    exact = qa_reward("The Chief of Protocol", "Chief of Protocol")
    assert (exact.em, exact.reward) == (True, 1.0)
    partial = qa_reward("Paul McCartney", "James Paul McCartney")
    assert (partial.em, partial.reward) == (False, pytest.approx(0.8))
    # one shared token of 1 vs 4: precision 1, recall 0.25, F1 0.4 (kept); 1 vs 6: F1 2/7 = 0.286 (below 0.3)
    assert qa_reward("Paris", "Paris France Europe Earth").reward == pytest.approx(0.4)
    low = qa_reward("Paris", "Paris in France in Europe today")
    assert low.f1 == pytest.approx(2 / 7) and low.reward == 0.0
    assert qa_reward("Paris", "Paris in France in Europe today", f1_threshold=0.2).reward == pytest.approx(2 / 7)


def test_reward_uses_the_best_gold_and_handles_no_answer():
    assert qa_reward("NYC", ["New York City", "NYC"]).em
    assert qa_reward(None, "anything").reward == 0.0
    with pytest.raises(ValueError, match="at least one gold"):
        qa_reward("x", [])


# ------------------------------------------------------------------------------------------------ official scoring


def _official_normalize(s):
    """The official HotpotQA normalize_answer, written out independently: lower, delete string.punctuation,
    articles -> space, split/join."""
    import re
    import string

    s = s.lower().translate(str.maketrans("", "", string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _official_f1(prediction, gold):
    p, g = _official_normalize(prediction), _official_normalize(gold)
    for side in (p, g):
        if side in ("yes", "no", "noanswer") and p != g:
            return 0.0
    p_tokens, g_tokens = p.split(), g.split()
    counts = {}
    for t in g_tokens:
        counts[t] = counts.get(t, 0) + 1
    same = 0
    for t in p_tokens:
        if counts.get(t, 0) > 0:
            counts[t] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision, recall = same / len(p_tokens), same / len(g_tokens)
    return (2 * precision * recall) / (precision + recall)


def test_scoring_agrees_with_the_official_definition_on_fuzzed_pairs():
    import random
    import string

    rng = random.Random(0)
    pieces = (list(string.ascii_letters + string.digits + string.punctuation) + [" ", "  ", "\t", "\n", "\u00a0"]
              + list("’“”—…«»¿¡·éÉßİıΣ東京") + ["a", "an", "the", "The", "A", "AN", "yes", "no", "noanswer", "no answer",
                                              "Yes.", "U.S.", "$1", "10.5", "rock-and-roll", "theatre", "another"])
    words = ["paris", "the", "beatles", "yes", "no", "an", "apple", "U.S.", "$10.5", "million", "(film)", "1999"]
    disagreements, pairs = [], 0
    for _ in range(12_000):
        gold = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.5:  # a perturbed copy of the gold: many exact and partial matches
            pred = "".join(c if rng.random() > 0.2 else rng.choice(pieces) for c in gold) + rng.choice(["", " ", "."])
        else:
            pred = " ".join(rng.choice(words + pieces) for _ in range(rng.randint(0, 6)))
        pairs += 1
        ours = (exact_match(pred, gold), token_f1(pred, gold))
        official = (_official_normalize(pred) == _official_normalize(gold), _official_f1(pred, gold))
        if ours != official:
            disagreements.append((pred, gold, ours, official))
    assert pairs >= 10_000
    assert disagreements == []


def _official_reward(prediction, golds, threshold=0.3):
    """The paper's HotpotQA reward (PAPER.md section 3) from the official definitions above: exact match 1.0, else
    the best token F1 when it reaches the threshold (inclusive), else 0."""
    if any(_official_normalize(prediction) == _official_normalize(g) for g in golds):
        return 1.0
    f1 = max(_official_f1(prediction, g) for g in golds)
    return f1 if f1 >= threshold else 0.0


@pytest.mark.parametrize("prediction, gold, f1", [
    ("paris paris", "paris", 2 / 3),  # one match: the second "paris" has nothing left to match
    ("paris", "paris paris", 2 / 3),
    ("paris paris", "paris paris", 1.0),
    ("paris paris london", "paris paris berlin", 2 / 3),  # two matches (a set would see one)
    ("paris paris paris rome", "paris rome rome rome", 0.5),  # min(3, 1) + min(1, 3) = 2 matches of 4 and 4
    ("the paris, the paris!", "Paris", 2 / 3),  # normalised first: articles and punctuation go, repeats stay
])
def test_token_f1_counts_repeated_tokens_as_a_multiset(prediction, gold, f1):
    assert token_f1(prediction, gold) == pytest.approx(f1)
    assert _official_f1(prediction, gold) == pytest.approx(f1)


def test_reward_keeps_an_f1_of_exactly_the_threshold():
    # 3 shared tokens of 10 and 10: precision = recall = 0.3, F1 = 0.3 exactly (in floating point too).
    shared = "alpha beta gamma "
    prediction = shared + " ".join(f"p{k}" for k in range(7))
    gold = shared + " ".join(f"g{k}" for k in range(7))
    assert token_f1(prediction, gold) == 0.3
    assert qa_reward(prediction, gold).reward == 0.3
    # One more gold token: F1 = 6 / 21 = 0.2857, below the threshold.
    assert qa_reward(prediction, gold + " g7").reward == 0.0
    assert qa_reward(prediction, gold + " g7", f1_threshold=0.28).reward == pytest.approx(6 / 21)
    # Repeats decide the boundary: 3 repeated shared tokens make 0.3 only when counted as a multiset.
    repeated = "rome rome rome " + " ".join(f"p{k}" for k in range(7)), "rome rome rome " + " ".join(
        f"g{k}" for k in range(7))
    assert qa_reward(*repeated).reward == 0.3


def test_reward_agrees_with_the_official_definitions_on_repetitive_answers():
    """Answers drawn from a three-word vocabulary repeat tokens all the time: the multiset and the threshold matter."""
    import random

    rng = random.Random(1)
    vocabulary = ["rome", "paris", "the", "Rome,", "oslo"]
    disagreements = []
    for _ in range(3_000):
        prediction = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 10)))
        golds = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 10))) for _ in range(rng.randint(1, 2))]
        ours = qa_reward(prediction, golds)
        official = _official_reward(prediction, golds)
        if ours.reward != pytest.approx(official) or ours.f1 != pytest.approx(max(_official_f1(prediction, g)
                                                                                   for g in golds)):
            disagreements.append((prediction, golds, ours, official))
    assert disagreements == []


def test_no_answer_is_no_match_and_the_scoring_choice_reaches_both_sides():
    assert normalize_answer("The Beatles!") == "beatles"  # official unless asked otherwise
    # No answer: not an exact match (the env's success), no F1, no reward.
    assert qa_reward(None, "Paris") == QAScore(em=False, f1=0.0, reward=0.0)
    # "unicode" scoring applies to the prediction and the gold alike, in EM, in F1 and in the reward's F1.
    assert exact_match("Zoes cafe", "Zoe’s cafe", "unicode") and not exact_match("Zoes cafe", "Zoe’s cafe")
    assert token_f1("Zoes", "Zoe’s", "unicode") == 1.0 and token_f1("Zoe’s", "Zoes", "unicode") == 1.0
    assert qa_reward("Zoes Paris", "Zoe’s Paris France", scoring="unicode").f1 == pytest.approx(0.8)
    assert qa_reward("Zoes Paris", "Zoe’s Paris France").f1 == pytest.approx(0.4)


# ------------------------------------------------------------------------------------------------ paper extraction


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("first \\boxed{wrong} then \\boxed{right}", "wrong"),  # the first box, not the last
        ("\\boxed{\\text{Chief of Protocol}}", "\\text{Chief of Protocol}"),  # LaTeX kept literally
        ("\\boxed{unclosed and \\boxed{closed}", None),  # an unbalanced first box: fallbacks, not the second box
        ("<think>\\boxed{draft}</think> It is **Tulsa**.", "Tulsa"),
        ("He was born on March 3, 1990 in Paris.", "March 3, 1990"),
        ("It happened in 1887, they say.", "1887"),
        ("I believe it was Barack Obama all along.", "Barack Obama"),
        ("about 4,500 people came", "4,500"),
        ("the correct answer is: forty two! really", "forty two"),
        ("hmm", "hmm"),
        ("   ", ""),
    ],
)
def test_paper_extraction_reads_a_reply_like_the_reference(reply, answer):
    got = extract_answer_paper(reply)
    if answer is None:  # falls through to the heuristics: something other than either box
        assert got not in ("closed", "unclosed and \\boxed{closed}")
    else:
        assert got == answer
    assert extract_answer(reply, "paper") == got


def test_paper_extraction_scores_latex_literally():
    assert qa_reward(extract_answer_paper("\\boxed{\\text{Paris}}"), "Paris").reward == 0.0
    assert qa_reward(extract_answer("\\boxed{\\text{Paris}}"), "Paris").reward == 1.0


# Each fallback's bounds, one reply per bound. Copula sentences sit after "!" or "?": after "." or at the start the
# declarative phrase ("X is/was ...", case-insensitive) takes them before the sentence scoring.
@pytest.mark.parametrize(
    "reply, answer",
    [
        ("boxed{abc} at the very start", "abc"),
        ("**ab** x **abc**", "abc"),  # an emphasised span needs 3+ characters
        ("**...** and **abc**", "abc"),  # ... and a letter or digit
        ("we saw Alpha Beta Gamma Delta Epsilon and then Foo Bar Baz Qux here", "Foo Bar Baz Qux"),  # 2-4 words
        ("in New York we met Ada Lovelace", "Ada Lovelace"),  # common place names are not the answer
        ("the answer is abcd", "abcd"),  # an answer phrase needs 4+ characters ...
        ("the answer is abc", "the answer is abc"),  # ... or the declarative sentence is read instead
        ("xx yy zz! aa is bbbb? cc dd ee is ff", "cc dd ee is ff"),  # scored sentences: over 10 characters
        ("xx yy zz! aa is bbbbb? cc dd ee is ff", "aa is bbbbb"),  # equal scores: the first
        ("xx yy zz! aa is bbbbb? zz yy xx ww vv", "aa is bbbbb"),  # the best score, not the last in order
        ("xx yy! cc dd ee is ff? aa United States bb", "aa United States bb"),  # a name: 2, a copula: 1
        ("xx yy! cc dd ee is ff? aa bb United States cc dd ee ff gg hh jj kk ll mm nn pp qq", "cc dd ee is ff"),
        ("xx yy! gg hh jj kk ll? cc dd ee IS ff", "cc dd ee IS ff"),  # copulas in any case
        ("xx yy! aa bb cc dd ee ff gg hh jj kk ll mm nn pp qq? rr tt uu vv", "rr tt uu vv"),  # under 15 words: 1
        ("abcdef. gg hh jj kk ll", "gg hh jj kk ll"),  # a score of 1 is enough
        ("abcdef! gg hh jj kk ll mm nn pp qq rr tt uu vv ww xx yy", "abcdef"),  # 0 is not: the first over 5
        ("abcde. abcdef", "abcdef"),
        ("ab. " * 30, ("ab. " * 30)[:100].strip()),  # nothing else: the first 100 characters
        ('the answer is "abcd".', "abcd"),  # an answer phrase is trimmed of punctuation at both ends
        ("<think>long draft</think>hmm", "hmm"),  # thinking is dropped, not replaced
    ],
)
def test_paper_extraction_fallback_bounds(reply, answer):
    assert extract_answer_paper(reply) == answer


def test_an_unknown_answer_extraction_is_named():
    with pytest.raises(ValueError, match=r"^answer_extraction must be one of \['boxed', 'paper'\], got 'fancy'$"):
        extract_answer("x", "fancy")
