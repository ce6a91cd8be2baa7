"""`inferstack plan`: published figures reproduced to the cent, the CLI's table/JSON/compare output,
price overrides and bad input."""

from __future__ import annotations

import datetime
import json
import math
from decimal import ROUND_HALF_UP, Decimal

import pytest
import yaml

from inferstack import config
from inferstack.capacity import pricing
from inferstack.commands import plan_report
from inferstack.schema import instances
from tests.support.cli import run
from tests.support.config_edits import mark_measured
from tests.support.paths import CONFIG_DIR

# BERT-base seq 128 throughputs and the prices the post used (us-east-1 on-demand then), from the AWS Machine
# Learning Blog post "Achieve 12x higher throughput and lowest latency for PyTorch Natural Language Processing
# applications out-of-the-box on AWS Inferentia" (https://aws.amazon.com/blogs/machine-learning/achieve-12x-higher-throughput-and-lowest-latency-for-pytorch-natural-language-processing-applications-out-of-the-box-on-aws-inferentia/).
POST_PRICES = {"inf1.6xlarge": 1.904, "inf1.xlarge": 0.368, "ml.g4dn.xlarge": 0.526}
PUBLISHED = [
    # name, instance, throughput/s, pipeline cores (None = data parallel), published $ per 1M
    ("pipeline-16", "inf1.6xlarge", 1793, 16, 0.30),
    ("dp-16", "inf1.6xlarge", 974, None, 0.54),
    ("pipeline-4", "inf1.xlarge", 291, 4, 0.35),
    ("dp-4", "inf1.xlarge", 245, None, 0.42),
    ("dp-16-batch6", "inf1.6xlarge", 3880, None, 0.14),
    ("g4dn-torchscript", "ml.g4dn.xlarge", 149, None, 0.98),
]


def _published_rounding(value: float) -> Decimal:
    # The posts quote three decimals rounded half-up, then cents: $0.29497 -> $0.295 -> $0.30.
    three = Decimal(value).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    return three.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _reference_model(name, itype, throughput, pipeline_cores):
    common = {
        "name": name,
        "source": {"huggingface_id": "bert-base-uncased", "task": "text-classification", "labels": ["a", "b"]},
        "slo": {"p99_latency_ms": 100, "peak_tps": throughput},
        "throughput_profile": {
            itype: {
                "throughput_per_second": throughput,
                "p99_latency_ms": 20,
                "source": "AWS ML Blog, BERT-base on Inferentia",
            }
        },
        "capacity": {"instance_type": itype, "min": 1, "max": 4},
    }
    if itype.startswith("ml."):
        return {**common, "kind": "triton-sagemaker", "serving": {"backend": "onnx"}}
    compile_ = {
        "neuron_generation": "inf1",
        "parallelism": "pipeline" if pipeline_cores else "data-parallel",
        "neuron_cores_per_model": pipeline_cores or 1,
    }
    return {
        **common,
        "kind": "neuron-ecs",
        "compile": compile_,
        "serving": {"data_parallel": not pipeline_cores, "workers": 1},
    }


@pytest.fixture
def reference_project(tmp_path):
    environments = yaml.safe_load((CONFIG_DIR / "environments.yaml").read_text())
    environments["environments"] = {"dev": {**environments["environments"]["dev"], "prices": POST_PRICES}}
    environments.pop("pipeline")  # it deploys staging and prod too, which this dev-only config leaves out
    environments.pop("fleets")  # they carry the shipped models, which this config replaces
    (tmp_path / "environments.yaml").write_text(yaml.safe_dump(environments))
    for name, itype, throughput, cores, _ in PUBLISHED:
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(_reference_model(name, itype, throughput, cores)))
    return config.load(tmp_path)


def test_published_cost_per_million_reproduced_to_the_cent(reference_project):
    rows = {r.model: r for r in plan_report.build(reference_project, ["dev"])}
    for name, _, _, _, published in PUBLISHED:
        assert _published_rounding(rows[name].cost_per_million) == Decimal(str(published)), name
        assert rows[name].price_source == "environments.yaml override"


def test_cost_formula():
    # price / (throughput x 3600) x 1e6
    assert pricing.cost_per_million(1.904, 974) == pytest.approx(0.54300, abs=1e-5)


def test_every_catalog_instance_has_a_dated_price():
    assert set(pricing.PRICES) == set(instances.INSTANCES)
    assert all(p.usd_per_hour > 0 and p.source and p.recorded for p in pricing.PRICES.values())


def test_unknown_instance_type_is_a_clear_error():
    with pytest.raises(instances.UnknownInstanceType, match="unknown instance type 'inf9.huge'"):
        pricing.price("inf9.huge")


def test_plan_json_has_one_object_per_model_and_environment():
    result = run("-m", "inferstack", "plan", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["models"]
    assert len(rows) == 15  # 5 models x 3 environments
    prod_intent = next(r for r in rows if (r["model"], r["env"]) == ("intent-bert", "prod"))
    assert {
        k: prod_intent[k]
        for k in ("instance_type", "throughput_per_instance", "instances_min", "instances_max", "instances_at_peak")
    } == {
        "instance_type": "inf1.6xlarge",
        "throughput_per_instance": 4000.0,
        "instances_min": 2,
        "instances_max": 10,
        "instances_at_peak": 8,
    }
    assert prod_intent["cost_per_hour"] == pytest.approx(8 * 1.18)
    assert prod_intent["cost_per_million"] == pytest.approx(1.18 / (4000 * 3600) * 1e6)
    assert prod_intent["scaling_target_per_instance_per_minute"] == pytest.approx(4000 * 0.5 * 60)


def test_plan_compare_marks_the_cheapest_type_meeting_the_slo(config_copy):
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge", "inf1.xlarge")
    result = run("-m", "inferstack", "plan", "--env", "prod", "--compare", "--json", "--config-dir", str(config_copy))
    assert result.returncode == 0, result.stderr
    intent = next(r for r in json.loads(result.stdout)["models"] if r["model"] == "intent-bert")
    options = {o["instance_type"]: o for o in intent["compare"]}
    assert set(options) == {"inf1.6xlarge", "inf1.xlarge"}
    # peak 16,000 TPS: 32 x inf1.xlarge ($0.228) = $7.30/h beats 8 x inf1.6xlarge ($1.18) = $9.44/h
    assert options["inf1.xlarge"]["instances_at_peak"] == 32
    assert options["inf1.xlarge"]["cheapest"] and not options["inf1.6xlarge"]["cheapest"]
    assert options["inf1.6xlarge"]["deployed"] and not intent["cheapest"]
    assert all(o["ranked"] and o["profile"] == "measured" for o in options.values())


def test_plan_compare_ranks_only_measured_entries(config_copy):
    """The shipped profiles are estimates: listed, never the cheapest. Measure only the dearer inf1.6xlarge and
    it wins over the cheaper-looking estimate for inf1.xlarge."""
    rows = plan_report.build(config.load(config_copy), ["prod"], compare=True)
    for row in rows:
        assert row.compare and not any(o.cheapest or o.ranked for o in row.compare), row.model
        assert not row.cheapest and row.profile == "estimate"
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge")
    rows = plan_report.build(config.load(config_copy), ["prod"], compare=True)
    intent = next(r for r in rows if r.model == "intent-bert")
    assert [(o.instance_type, o.ranked, o.cheapest) for o in intent.compare] == [
        ("inf1.6xlarge", True, True),
        ("inf1.xlarge", False, False),
    ]  # ranked first, estimates apart
    assert intent.cheapest and intent.profile == "measured"


def mark_p95(config_dir, model: str, itype: str) -> None:
    """The entry as --from-recommendations writes it: the job's p95 under its own key, the p99 assumed."""
    path = config_dir / f"{model}.yaml"
    data = yaml.safe_load(path.read_text())
    point = data["throughput_profile"][itype]
    point["measured"] = {
        "date": "2025-03-04",
        "method": "inference-recommender job j-1",
        "environment": "staging",
        "instances": 1,
        "p95_latency_ms": point["p99_latency_ms"],
        "results": "job.json",
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_plan_compare_does_not_rank_a_p95_against_a_measured_p99(config_copy):
    """inf1.xlarge is the cheaper (test_plan_compare_marks_the_cheapest_type_meeting_the_slo), but its entry holds
    a p95 (an Inference Recommender job's), not a measured p99: listed with that said, not ranked."""
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge")
    mark_p95(config_copy, "intent-bert", "inf1.xlarge")
    rows = plan_report.build(config.load(config_copy), ["prod"], compare=True, today=datetime.date(2025, 3, 16))
    intent = next(r for r in rows if r.model == "intent-bert")
    assert [(o.instance_type, o.profile, o.measured_percentile, o.ranked, o.cheapest) for o in intent.compare] == [
        ("inf1.6xlarge", "measured", "p99", True, True),
        ("inf1.xlarge", "measured", "p95", False, False),
    ]
    assert intent.compare[1].profile_caveat == "p95 from Inference Recommender, not a p99 measurement"
    table = plan_report.to_table(rows)
    (line,) = [line for line in table.splitlines() if "inf1.xlarge" in line and "not ranked: measured" in line]
    assert line.rstrip().endswith(
        "not ranked: measured 2025-03-04 (12d ago), p95 from Inference Recommender, not a p99 measurement"
    )
    assert (
        "p95: the entry's latency is an Inference Recommender job's p95 (measured.p95_latency_ms), not a p99 "
        "measurement; its p99 is assumed, and --compare does not rank it"
    ) in table
    as_json = json.loads(plan_report.to_json(rows))
    option = next(
        o
        for m in as_json["models"]
        if m["model"] == "intent-bert"
        for o in m["compare"]
        if o["instance_type"] == "inf1.xlarge"
    )
    assert (option["measured_percentile"], option["ranked"]) == ("p95", False)


def test_plan_without_p95_entries_says_nothing_of_them(config_copy):
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge", "inf1.xlarge")
    rows = plan_report.build(config.load(config_copy), ["prod"], compare=True)
    assert "p95" not in plan_report.to_table(rows)
    assert {o.measured_percentile for r in rows for o in r.compare if o.profile == "measured"} == {"p99"}


def test_plan_names_the_entry_each_row_is_sized_from_and_its_age(config_copy):
    mark_measured(config_copy, "t5-spelling", "ml.g4dn.xlarge", date="2025-03-04")
    project = config.load(config_copy)
    today = datetime.date(2025, 3, 16)
    rows = {(r.model, r.env): r for r in plan_report.build(project, ["prod"], today=today)}
    t5 = rows[("t5-spelling", "prod")]
    assert (t5.instance_type, t5.profile, t5.measured_date, t5.profile_age_days) == (
        "ml.g4dn.xlarge",
        "measured",
        "2025-03-04",
        12,
    )
    assert rows[("bert-large-classifier", "prod")].profile == "estimate"
    assert rows[("bert-large-classifier", "prod")].profile_age_days is None
    table = plan_report.to_table(list(rows.values()))
    (line,) = [line for line in table.splitlines() if line.startswith("t5-spelling")]
    assert "measured 2025-03-04 (12d ago)" in line
    (line,) = [line for line in table.splitlines() if line.startswith("bert-large-classifier")]
    assert line.split()[-1] == "estimate"
    # a fleet's members: the entry the fleet's plan reads (dev's shared endpoint reads the models' own type)
    (fleet,) = [f for f in plan_report.build_fleets(project, ["dev"], today=today) if f.fleet == "triton-shared"]
    members = {m.model: m for m in fleet.members}
    assert (
        members["t5-spelling"].profile_instance_type,
        members["t5-spelling"].profile,
        members["t5-spelling"].profile_age_days,
    ) == ("ml.g4dn.xlarge", "measured", 12)
    assert members["bert-large-classifier"].profile == "estimate"
    text = plan_report.fleets_to_text([fleet])
    assert "profile ml.g4dn.xlarge measured 2025-03-04 (12d ago)" in text
    assert "profile ml.g4dn.xlarge estimate" in text


def test_plan_compare_excludes_types_whose_latency_misses_the_slo(config_copy):
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge", "inf1.xlarge")
    data = yaml.safe_load((config_copy / "intent-bert.yaml").read_text())
    data["throughput_profile"]["inf1.xlarge"]["p99_latency_ms"] = 12  # above the 10 ms SLO
    data["throughput_profile"]["inf1.xlarge"]["measured"]["p99_latency_ms"] = 12
    data["environments"]["dev"]["capacity"]["instance_type"] = "inf1.6xlarge"
    (config_copy / "intent-bert.yaml").write_text(yaml.safe_dump(data))
    environments = yaml.safe_load((config_copy / "environments.yaml").read_text())
    environments["fleets"]["intent-pack"]["environments"]["dev"]["capacity"]["instance_type"] = "inf1.6xlarge"
    (config_copy / "environments.yaml").write_text(yaml.safe_dump(environments))
    rows = plan_report.build(config.load(config_copy), ["prod"], compare=True)
    intent = next(r for r in rows if r.model == "intent-bert")
    options = {o.instance_type: o for o in intent.compare}
    assert not options["inf1.xlarge"].meets_slo and not options["inf1.xlarge"].cheapest
    assert options["inf1.6xlarge"].cheapest and intent.cheapest


def test_plan_table_is_readable(config_copy):
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge", "inf1.xlarge")
    result = run("-m", "inferstack", "plan", "--env", "prod", "--compare", "--config-dir", str(config_copy))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["model", "env", "instance"] and "profile" in lines[0].split()
    assert any(line.split()[:3] == ["intent-bert", "prod", "inf1.6xlarge"] for line in lines)
    assert any(line.lstrip().startswith("*") and "inf1.xlarge" in line for line in lines)
    estimates = [line for line in lines if line.rstrip().endswith("not ranked: estimate")]
    assert estimates and not any(line.lstrip().startswith("*") for line in estimates)


def test_environment_price_override_changes_cost(config_copy):
    data = yaml.safe_load((config_copy / "environments.yaml").read_text())
    data["environments"]["prod"]["prices"] = {"inf1.6xlarge": 2.0}
    (config_copy / "environments.yaml").write_text(yaml.safe_dump(data))
    rows = plan_report.build(config.load(config_copy), ["prod"])
    intent = next(r for r in rows if r.model == "intent-bert")
    assert intent.cost_per_hour == pytest.approx(16.0) and intent.price_source == "environments.yaml override"


@pytest.mark.parametrize(
    "prices,expected",
    [
        ({"inf9.huge": 1.0}, "environments.prod.prices.inf9.huge: unknown instance type 'inf9.huge'"),
        ({"inf1.xlarge": -1}, "environments.prod.prices.inf1.xlarge: Input should be greater than 0"),
    ],
)
def test_bad_price_overrides_are_rejected(config_copy, prices, expected):
    data = yaml.safe_load((config_copy / "environments.yaml").read_text())
    data["environments"]["prod"]["prices"] = prices
    (config_copy / "environments.yaml").write_text(yaml.safe_dump(data))
    result = run("-m", "inferstack", "plan", "--config-dir", str(config_copy))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert expected in result.stderr


def test_plan_unknown_environment_exits_2():
    result = run("-m", "inferstack", "plan", "--env", "qa")
    assert result.returncode == 2
    assert result.stderr.strip() == "plan: error: --env: unknown environment 'qa'; known: dev, staging, prod"


def test_compare_puts_one_checkpoint_on_inf1_and_inf2_side_by_side(config_copy):
    """intent-bert (inf1) and intent-bert-inf2 share their source: both planned at intent-bert's SLO, priced
    from the dated table, the cheapest measured entry that meets the SLO marked, each generation's support
    status named."""
    mark_measured(config_copy, "intent-bert", "inf1.6xlarge", "inf1.xlarge")
    mark_measured(config_copy, "intent-bert-inf2", "inf2.xlarge", "inf2.8xlarge")
    result = run("-m", "inferstack", "plan", "--env", "prod", "--compare", "--json", "--config-dir", str(config_copy))
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["generations"]
    assert {(r["model"], r["instance_type"]) for r in rows} == {
        ("intent-bert", "inf1.6xlarge"),
        ("intent-bert", "inf1.xlarge"),
        ("intent-bert-inf2", "inf2.xlarge"),
        ("intent-bert-inf2", "inf2.8xlarge"),
    }
    assert {(r["peak_tps"], r["slo_p99_ms"]) for r in rows} == {(16000, 10)}  # intent-bert's prod SLO for all
    inf2 = next(r for r in rows if r["instance_type"] == "inf2.xlarge")
    assert inf2["instances_at_peak"] == math.ceil(16000 / (1500 * 0.5))
    assert inf2["cost_per_hour"] == pytest.approx(
        inf2["instances_at_peak"] * pricing.PRICES["inf2.xlarge"].usd_per_hour
    )
    assert inf2["price_recorded"] == pricing.RECORDED and inf2["support"].startswith("current")
    cheapest = [r for r in rows if r["cheapest"]]
    assert len(cheapest) == 1
    assert cheapest[0]["cost_per_hour"] == min(r["cost_per_hour"] for r in rows if r["meets_slo"])


def test_compare_of_generations_ranks_only_measured_entries(config_copy):
    """Measured, only the Inf2 entries can be the cheapest, though Inf1's estimates look cheaper."""
    mark_measured(config_copy, "intent-bert-inf2", "inf2.xlarge", "inf2.8xlarge")
    rows = plan_report.build_generations(config.load(config_copy), ["prod"])
    (cheapest,) = [r for r in rows if r.cheapest]
    assert cheapest.instance_type == "inf2.xlarge" and cheapest.measured
    assert min(r.cost_per_hour for r in rows) < cheapest.cost_per_hour  # an Inf1 estimate, not ranked
    text = plan_report.generations_to_text(rows)
    assert sum("not ranked: estimate" in line for line in text.splitlines()) == 2


def test_compare_text_names_the_support_status():
    result = run("-m", "inferstack", "plan", "--env", "dev", "--compare")
    assert "Inf1 vs Inf2 in dev, at intent-bert's SLO (p99 10 ms, 400 TPS at peak):" in result.stdout
    assert "no longer officially supported by the AWS Neuron SDK" in result.stdout
