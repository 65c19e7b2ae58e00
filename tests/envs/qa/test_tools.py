"""Reading a reply as tool calls: every search form, malformed calls with their reasons, several calls per reply,
the reference's tool name; a reply without a call is an answer."""

import pytest

from erl_envs.qa.scoring import extract_answer
from erl_envs.qa.tools import MAX_CALLS_PER_REPLY, QAReply, parse_qa_calls, parse_qa_reply

# ------------------------------------------------------------------------------------------------ search forms


@pytest.mark.parametrize(
    "reply, query, top_k",
    [
        ("<search>Tinted Windows band</search>", "Tinted Windows band", None),
        ("Let me look.\n<SEARCH>capital of France</Search> then answer", "capital of France", None),
        ('{"name": "search", "arguments": {"query": "Ed Wood", "top_k": 3}}', "Ed Wood", 3),
        ('I will search.\n<tool_call>\n{"name": "search", "arguments": {"query": "Ed Wood"}}\n</tool_call>',
         "Ed Wood", None),
        ('```json\n{"name": "search", "arguments": {"query": "Kiss and Tell film"}}\n```', "Kiss and Tell film", None),
        ('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"Animorphs\\", \\"top_k\\": 2}"}</tool_call>',
         "Animorphs", 2),
        ('{"name": "search", "parameters": {"query": "Scott Derrickson"}}', "Scott Derrickson", None),
        ('[{"name": "search", "arguments": {"query": "first", "top_k": "4"}}]', "first", 4),
        ('{"arguments": {"query": "keys in any order"}, "name": "search"}', "keys in any order", None),
        ("<search>Zürich 東京 – café</search>", "Zürich 東京 – café", None),
    ],
)
def test_search_forms(reply, query, top_k):
    assert parse_qa_reply(reply) == QAReply("search", query=query, top_k=top_k)


def test_first_tool_call_wins_and_a_call_beats_an_answer():
    reply = "<search>one</search> and <search>two</search> \\boxed{Paris}"
    assert parse_qa_reply(reply) == QAReply("search", query="one")
    both = '{"name": "search", "arguments": {"query": "json first"}} then <search>tag second</search>'
    assert parse_qa_reply(both).query == "json first"


@pytest.mark.parametrize(
    "reply, error",
    [
        ('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "search", "arguments": {"query": "x"}', "not valid JSON"),  # unclosed tag, bad JSON
        ('{"name": "search", "arguments": {"query": ', "not valid JSON"),
        ('<tool_call>not json at all</tool_call>', "not valid JSON"),
        ('<tool_call>[1, 2]</tool_call>', 'must look like {"name": "search"'),
        ('{"name": "lookup", "arguments": {"query": "x"}}', "unknown tool 'lookup'"),
        ('{"name": "search", "arguments": {"q": "x"}}', 'needs a "query" string'),
        ('{"name": "search", "arguments": ["x"]}', "must be an object"),
        ('{"name": "search", "arguments": "{not json"}', "arguments are not valid JSON"),
        ('{"name": "search", "arguments": {"query": "x", "top_k": "many"}}', "top_k must be a whole number"),
        ("<search>   </search>", "the search query is empty"),
        ('{"name": "search", "arguments": {"query": ""}}', "the search query is empty"),
        ("<search>never closed", "not closed"),
    ],
)
def test_malformed_calls_are_invalid_with_a_reason(reply, error):
    parsed = parse_qa_reply(reply)
    assert parsed.kind == "invalid"
    assert error in parsed.error


# ------------------------------------------------------------------------------------------------ answers and odd replies


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("The answer is \\boxed{Tulsa}.", "Tulsa"),
        ("\\boxed{\\text{Chief of Protocol}}", "Chief of Protocol"),
        ("\\boxed{\\textbf{\\text{yes}}}", "yes"),
        ("\\boxed{ {1, 2} set }", "{1, 2} set"),
        ("first \\boxed{wrong} then \\boxed{right}", "right"),
        ("\\boxed{closed} and \\boxed{unclosed", "closed"),
        ("<answer>Animorphs</answer>", "Animorphs"),
        ("<answer>\\boxed{inner}</answer>", "inner"),
        ("<answer>tag</answer> \\boxed{boxed wins}", "boxed wins"),
        ("\\fbox{framed}", "framed"),
        ("I am not sure.", None),
        ("", None),
        ('{"some": "json", "but": "no tool"}', None),
    ],
)
def test_answer_forms(reply, answer):
    assert parse_qa_reply(reply) == QAReply("answer", answer=answer)
    assert extract_answer(reply) == answer


def test_huge_and_unicode_replies_parse():
    huge = "blah " * 200_000 + "<search>needle</search>"
    assert parse_qa_reply(huge) == QAReply("search", query="needle")
    assert parse_qa_reply("思考中… \\boxed{東京}").answer == "東京"
    many_braces = '{"name": 1} ' * 100 + "\\boxed{x}"
    assert parse_qa_reply(many_braces).kind in {"answer", "invalid"}


def test_non_string_reply_is_a_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        parse_qa_reply(None)


# ------------------------------------------------------------------------------------------------ tool protocol


def test_local_search_is_the_search_tool_too():
    reply = '<tool_call>\n{"name": "local_search", "arguments": {"query": "Ed Wood", "top_k": 5}}\n</tool_call>'
    assert parse_qa_reply(reply) == QAReply("search", query="Ed Wood", top_k=5)
    assert parse_qa_reply('{"name": "lookup", "arguments": {"query": "x"}}').kind == "invalid"


def test_every_tool_call_of_a_reply_is_read_in_order():
    reply = ('<tool_call>{"name": "search", "arguments": {"query": "one"}}</tool_call> text '
             '<tool_call>{"name": "local_search", "arguments": {"query": "two"}}</tool_call>'
             '<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    calls = parse_qa_calls(reply)
    assert [(c.kind, c.query) for c in calls] == [("search", "one"), ("search", "two"), ("invalid", None)]
    bare = '[{"name": "search", "arguments": {"query": "x"}}, {"name": "search", "arguments": {"query": "y"}}]'
    assert [c.query for c in parse_qa_calls(bare)] == ["x", "y"]
    tags = "<search>a</search> <search>b</search>"
    assert [c.query for c in parse_qa_calls(tags)] == ["a", "b"]
    many = "<search>q</search>" * 50
    assert len(parse_qa_calls(many)) == MAX_CALLS_PER_REPLY
    assert parse_qa_calls("no call \\boxed{x}") == [QAReply("answer", answer="x")]




# ------------------------------------------------------------------------------------------------ the paper protocol

CALL = '<tool_call>\n{"name": "local_search", "arguments": {"query": "Ed Wood"}}\n</tool_call>'


@pytest.mark.parametrize(
    "reply, expected",
    [
        # Read as vLLM's Hermes parser reads them: only <tool_call> tags, each body one JSON object.
        (f"Let me look it up.\n{CALL}", [QAReply("search", query="Ed Wood")]),
        ('<tool_call>{"name": "local_search", "arguments": {"query": "a", "top_k": "3"}}', [QAReply("search", query="a", top_k=3)]),
        ('<tool_call>{"name": "local_search", "arguments": {"query": "a", "top_k": 2.0}}</tool_call>',
         [QAReply("search", query="a", top_k=2)]),
        # A call the tool refuses costs the turn with an error message: another name, arguments it does not take.
        ('<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>',
         [QAReply("invalid", error="'search' is not a tool; the only tool is 'local_search'")]),
        ('<tool_call>{"name": "local_search", "arguments": "a"}</tool_call>',
         [QAReply("invalid", error="the arguments of local_search must be an object, got 'a'")]),
        ('<tool_call>{"name": "local_search", "arguments": {"q": "a"}}</tool_call>',
         [QAReply("invalid", error='local_search needs a "query" string')]),
        ('<tool_call>{"name": "local_search", "arguments": {"query": "a", "top_k": 2.5}}</tool_call>',
         [QAReply("invalid", error="top_k must be a whole number, got 2.5")]),
    ],
)
def test_paper_protocol_reads_tool_calls_as_the_hermes_parser(reply, expected):
    assert parse_qa_calls(reply, protocol="paper") == expected


@pytest.mark.parametrize(
    "reply",
    [
        "<search>Ed Wood</search> \\boxed{yes}",  # not a tool call in the reference: a final answer
        '{"name": "local_search", "arguments": {"query": "Ed Wood"}}',  # bare JSON
        '```json\n{"name": "local_search", "arguments": {"query": "Ed Wood"}}\n```',  # a code fence
        '<TOOL_CALL>{"name": "local_search", "arguments": {"query": "Ed Wood"}}</TOOL_CALL>',  # the tag is exact
        # One malformed call, even beside a good one, leaves the reply with no tool call: it is the final answer.
        CALL + '<tool_call>{"name": "local_search", "arguments": {"query": "x"</tool_call> \\boxed{yes}',
        '<tool_call>{"name": "local_search"}</tool_call> \\boxed{yes}',  # no "arguments"
        '<tool_call>{"name": 7, "arguments": {}}</tool_call>',  # a name that is not a string
        '<tool_call>[{"name": "local_search", "arguments": {"query": "a"}}]</tool_call>',  # a list, not an object
    ],
)
def test_paper_protocol_reads_anything_else_as_the_final_answer(reply):
    assert [c.kind for c in parse_qa_calls(reply, protocol="paper")] == ["answer"]


def test_paper_protocol_runs_every_call_of_a_reply():
    calls = parse_qa_calls(CALL * (3 * MAX_CALLS_PER_REPLY), protocol="paper")
    assert len(calls) == 3 * MAX_CALLS_PER_REPLY and {c.kind for c in calls} == {"search"}
    assert len(parse_qa_calls(CALL * (3 * MAX_CALLS_PER_REPLY))) == MAX_CALLS_PER_REPLY  # ours caps them


@pytest.mark.parametrize("protocol", ["extended", "paper"])
def test_the_answer_extraction_and_protocol_reach_the_reply_reader(protocol):
    """A reply with no call is read with the caller's answer extraction, under either protocol, by both readers."""
    reply = "The answer: Marn River"
    for extraction in ("boxed", "paper"):
        expected = QAReply("answer", answer=extract_answer(reply, extraction))
        assert parse_qa_calls(reply, extraction, protocol) == [expected]
        assert parse_qa_reply(reply, extraction, protocol) == expected
    assert parse_qa_reply(reply, "paper", protocol).answer == "Marn River"
    assert parse_qa_reply(reply, "boxed", protocol).answer is None
    # The protocol reaches parse_qa_reply: a bare JSON call is a search under the extended protocol only (the paper
    # reads tool calls as the Hermes parser does: inside <tool_call> tags).
    bare = '{"name": "search", "arguments": {"query": "Osk"}}'
    assert parse_qa_reply(bare, "boxed", protocol).kind == ("search" if protocol == "extended" else "answer")


# ------------------------------------------------------------------------------------------------ the scanners

SEARCH_Q = '{"name": "search", "arguments": {"query": "q"}}'


def kinds(reply):
    return [(c.kind, c.query or c.error) for c in parse_qa_calls(reply)]


def test_bare_json_lists_are_read_from_their_bracket():
    """A bare list of calls is one call per item (a non-call item is an invalid call): read from its '[', which may
    start the reply or follow prose directly; a '[' with other text before the object is prose."""
    not_a_call = ("invalid", 'a tool call must look like {"name": "search", "arguments": {"query": "..."}}')
    for prefix in ("", "Calls:", "See [1] and then: "):
        assert kinds(prefix + "[" + SEARCH_Q + ", 5]") == [("search", "q"), not_a_call], prefix
    assert kinds("[a " + SEARCH_Q + "]") == [("search", "q")]  # '[a ' is prose: the object alone is the call


def test_the_bare_scanner_skips_what_it_has_read_and_what_is_not_a_call():
    """Keys inside a call's arguments that look like a call's start are part of that call; an undecodable span far
    from any search name is prose; both are skipped and the scan goes on."""
    nested = '{"name": "search", "arguments": {"name": "inner", "query": "a"}}'
    assert kinds(nested + " and " + SEARCH_Q) == [("search", "a"), ("search", "q")]
    prose = '{"parameters": oops ' + "x" * 250 + " " + SEARCH_Q
    assert kinds(prose) == [("search", "q")]


def test_a_broken_call_is_one_whose_search_name_is_within_200_characters_of_its_start():
    for gap, broken in ((0, True), (200 - len('{"arguments": oops, "name": "search"'), True),
                        (201 - len('{"arguments": oops, "name": "search"'), False)):
        reply = '{"arguments": oops, ' + " " * gap + '"name": "search"'
        calls = parse_qa_calls(reply)
        if broken:
            assert calls == [QAReply("invalid", error="the tool call is not valid JSON (Expecting value at char "
                                                      "14)")], gap
        else:
            assert calls[0].kind == "answer", gap


def test_the_bare_scanner_tries_at_most_16_candidates():
    """Decoding is linear in the reply, so at most 16 call-like spans are tried: a call after 15 undecodable spans
    is read, after 16 it is not (the reply is then an answer)."""
    junk = ('{"name": x ' + "." * 210 + " ")
    assert kinds(junk * 15 + SEARCH_Q) == [("search", "q")]
    assert parse_qa_calls(junk * 16 + SEARCH_Q)[0].kind == "answer"


def test_unclosed_search_tags():
    """Only the last unclosed <search> is reported, and a stray </search> before it does not close it."""
    unclosed = ("invalid", "the <search> tag is not closed by </search>")
    assert kinds("<search>a</search> <search>b") == [("search", "a"), unclosed]
    assert kinds("<search>a <search>b") == [unclosed]
    assert kinds("</search> oops <search>b") == [unclosed]


def test_tagged_calls_keep_their_order_and_fenced_multiline_json():
    listed = '<tool_call>[{"name": "search", "arguments": {"query": "x"}}, ' \
             '{"name": "search", "arguments": {"query": "y"}}]</tool_call>'
    assert kinds(listed) == [("search", "x"), ("search", "y")]
    fenced = '<tool_call>\n```json\n{"name": "search",\n "arguments": {"query": "q"}}\n```\n</tool_call>'
    assert kinds(fenced) == [("search", "q")]


def test_tagged_objects_that_are_not_calls_are_one_invalid_call():
    not_a_call = ("invalid", 'a tool call must look like {"name": "search", "arguments": {"query": "..."}}')
    assert kinds('<tool_call>{"tool": "search"}</tool_call>') == [not_a_call]
    assert kinds('<tool_call>[{"x": 1}, ' + SEARCH_Q + ']</tool_call>') == [not_a_call]
    assert kinds('<tool_call>{"name": "search"}</tool_call>') == [("invalid",
                                                                   'the search call needs a "query" string')]


def test_the_paper_tool_reads_a_boolean_top_k_as_an_int():
    from erl_envs.qa.tools import parse_paper_calls

    call = '<tool_call>{"name": "local_search", "arguments": {"query": "q", "top_k": true}}</tool_call>'
    assert parse_paper_calls(call) == [QAReply("search", query="q", top_k=1)]
