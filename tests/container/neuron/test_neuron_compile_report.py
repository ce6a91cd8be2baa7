"""The inf1 whole-graph check, fed with torch.neuron log text and TorchScript node kinds."""

from __future__ import annotations

from compile_report import count_operators, inf1_problems, neuron_graph_problems, parse_inf1_log

FULL = """\
INFO:Neuron:There are 3 ops of 1 different types in the TorchScript that are not compiled by neuron-cc: aten::embedding
INFO:Neuron:Number of arithmetic operators (pre-compilation) before = 565, fused = 548, percent fused = 96.99%
INFO:Neuron:Compiling function _NeuronGraph$662 with neuron-cc
INFO:Neuron:Compiling with command line: '/usr/bin/neuron-cc compile /tmp/graph_def.pb --framework TENSORFLOW'
INFO:Neuron:Number of arithmetic operators (post-compilation) before = 565, compiled = 565, percent compiled = 100.0%
INFO:Neuron:The neuron partitioner created 1 sub-graphs
INFO:Neuron:Neuron successfully compiled 1 sub-graphs, Total fused subgraphs = 1, Percent of model sub-graphs successfully compiled = 100.0%
INFO:Neuron:Compiled these operators (and operator counts) to Neuron:
INFO:Neuron: => aten::Int: 96
INFO:Neuron: => aten::linear: 74
"""  # noqa: E501 - the compiler's log lines as it writes them

PARTIAL = """\
INFO:Neuron:Number of arithmetic operators (post-compilation) before = 565, compiled = 480, percent compiled = 84.96%
INFO:Neuron:The neuron partitioner created 3 sub-graphs
INFO:Neuron:Neuron successfully compiled 2 sub-graphs, Total fused subgraphs = 3, Percent of model sub-graphs successfully compiled = 66.7%
INFO:Neuron:Compiled these operators (and operator counts) to Neuron:
INFO:Neuron: => aten::linear: 70
INFO:Neuron:Not compiled operators (and operator counts) to Neuron:
INFO:Neuron: => aten::embedding: 3 [supported]
INFO:Neuron: => aten::erfinv: 2 [not supported]
"""  # noqa: E501 - the compiler's log lines as it writes them


def test_full_compile_is_accepted():
    summary = parse_inf1_log(FULL)
    assert summary.subgraphs_created == 1
    assert summary.subgraphs_compiled == 1 and summary.subgraph_percent == 100.0
    assert (summary.operators_before, summary.operators_compiled, summary.operator_percent) == (565, 565, 100.0)
    assert summary.not_compiled_operators == {}
    assert inf1_problems(summary) == []


def test_partial_compile_is_rejected_with_reasons():
    summary = parse_inf1_log(PARTIAL)
    assert summary.subgraph_percent == 66.7 and summary.subgraphs_created == 3
    assert summary.not_compiled_operators == {"aten::embedding": 3, "aten::erfinv": 2}
    problems = inf1_problems(summary)
    assert any("66.7%" in p for p in problems)
    assert any("3 sub-graphs" in p for p in problems)


def test_all_subgraphs_compiled_but_split_is_rejected():
    # 100% of 2 sub-graphs still means CPU operators run between them.
    text = FULL.replace("created 1 sub-graphs", "created 2 sub-graphs").replace(
        "compiled 1 sub-graphs, Total fused subgraphs = 1", "compiled 2 sub-graphs, Total fused subgraphs = 2"
    )
    assert inf1_problems(parse_inf1_log(text)) == ["the partitioner split the model into 2 sub-graphs (need 1)"]


def test_missing_summary_line_is_rejected():
    problems = inf1_problems(parse_inf1_log("INFO:Neuron:Compiling function _NeuronGraph$1 with neuron-cc\n"))
    assert len(problems) == 1 and "nothing was compiled" in problems[0]


def test_operator_count_separates_neuron_glue_and_cpu():
    whole = count_operators(
        ["prim::Constant", "prim::GetAttr", "neuron::forward_v2_1", "aten::size", "prim::TupleUnpack"]
    )
    assert (whole.neuron, whole.cpu, whole.glue) == (1, 0, 4)
    assert neuron_graph_problems(whole) == []

    split = count_operators(
        ["neuron::forward_v2_1", "aten::embedding", "aten::erfinv", "aten::erfinv", "neuron::forward_v2_2"]
    )
    assert (split.neuron, split.cpu) == (2, 3)
    assert split.cpu_operators == {"aten::embedding": 1, "aten::erfinv": 2}
    assert neuron_graph_problems(split) == ["3 operators left on CPU: aten::embedding x1, aten::erfinv x2"]

    assert neuron_graph_problems(count_operators(["aten::linear"])) == [
        "the traced graph contains no neuron:: operator",
        "1 operators left on CPU: aten::linear x1",
    ]
