"""Ratios between configurations and the tie rule (`nnperf.report.comparisons`): paired or
unpaired from the rows of runs.csv, the one rule behind every "fastest" and "best", and a
report built from results folders whose every comparison carries a CI or "not separated"."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from nnperf.cli import main
from nnperf.core import ratios
from nnperf.report.wording.words import sentences
from nnperf.report import aggregate, comparisons
from report_tables import (
    Config,
    ceilings_document,
    compare_with,
    gpu_folder,
    laptop_folder,
    over_budget_config,
    roofline_point,
    write_machine,
)
from test_aggregate import run_document

GROUP = "synthetic/cpu/m/bs8"


def runs_of(*configs: tuple[str, list[float]], group: str | None = None) -> pd.DataFrame:
    """runs.csv rows: per (variant, process throughputs), process i in round i of `group`
    (no group or round columns at all when `group` is None: a run before interleaving)."""
    rows = []
    for variant, rates in configs:
        for process, rate in enumerate(rates):
            row = {
                "machine": "box",
                "device": "cpu",
                "model": "m",
                "precision": "fp32",
                "batch_size": 8,
                "variant": variant,
                "process": process,
                "status": "ok",
                "throughput_img_s": rate,
            }
            if group is not None:
                row.update(group=group, round=process)
            rows.append(row)
    return pd.DataFrame(rows)


def config(variant: str, mean: float) -> dict:
    return {
        "machine": "box",
        "device": "cpu",
        "model": "m",
        "precision": "fp32",
        "batch_size": 8,
        "variant": variant,
        "throughput_img_s_mean": mean,
    }


# Both drift upwards over the job, A 10% above B in every round: paired, the drift cancels.
DRIFTING_A = [100.0, 150.0, 200.0]
DRIFTING_B = [91.0, 136.0, 182.0]


def test_interleaved_configurations_are_paired_by_round():
    runs = runs_of(("a", DRIFTING_A), ("b", DRIFTING_B), group=GROUP)
    ci = comparisons.ratio_between(runs, config("a", 150), config("b", 136.3))
    assert ci == ratios.paired_ratio(DRIFTING_A, DRIFTING_B)
    assert ci.method == ratios.PAIRED and ci.separated and ci.n == 3
    # The same processes measured apart: the drift is noise, and nothing is separated.
    apart = comparisons.ratio_between(
        runs_of(("a", DRIFTING_A), ("b", DRIFTING_B)), config("a", 150), config("b", 136.3)
    )
    assert apart == ratios.unpaired_ratio(DRIFTING_A, DRIFTING_B)
    assert apart.method == ratios.FIELLER and not apart.separated


def test_rounds_are_matched_by_number_not_by_position():
    runs = runs_of(("a", DRIFTING_A), ("b", DRIFTING_B), group=GROUP)
    shuffled = runs.iloc[[2, 0, 1, 5, 3, 4]]
    assert comparisons.ratio_between(shuffled, config("a", 0), config("b", 0)) == (
        ratios.paired_ratio(DRIFTING_A, DRIFTING_B)
    )


def test_rounds_that_shared_a_process_are_paired_alone_at_the_window_grain():
    # Round 0 ran alone (process pairs: loose), rounds 1-3 shared a process (windows taking
    # turns): the interval is built from the shared rounds only (ratios.pairing_rounds).
    a, b = [100.0, 110.0, 121.0, 133.0], [80.0, 100.0, 110.0, 121.0]
    runs = runs_of(("a", a), ("b", b), group=GROUP)
    runs["shared_with"] = ["", "fp32_b", "fp32_b", "fp32_b", "", "fp32_a", "fp32_a", "fp32_a"]
    ci = comparisons.ratio_between(runs, config("a", 0), config("b", 0))
    assert ci == ratios.paired_ratio(a[1:], b[1:]) and ci.n == 3
    rates = [comparisons.process_rates(runs, config(v, 0)) for v in ("a", "b")]
    assert comparisons.pairing(*rates)[1] == "window"
    # Without the shared rounds' marks, every round pairs, at the process grain.
    runs["shared_with"] = ""
    assert comparisons.ratio_between(runs, config("a", 0), config("b", 0)).n == 4
    rates = [comparisons.process_rates(runs, config(v, 0)) for v in ("a", "b")]
    assert comparisons.pairing(*rates)[1] == "process"


@pytest.mark.parametrize(
    "change",
    [
        "other group",  # measured in another job (another batch size, another machine)
        "one round",  # only one shared round: no spread to pair over
        "no group",  # run before interleaving: the columns are there but empty
    ],
)
def test_anything_but_two_shared_rounds_of_one_group_is_unpaired(change):
    runs = runs_of(("a", DRIFTING_A), ("b", DRIFTING_B), group=GROUP)
    b = runs["variant"] == "b"
    if change == "other group":
        runs.loc[b, "group"] = "synthetic/cpu/m/bs16"
    elif change == "one round":
        runs.loc[b, "round"] = [0, 7, 8]
    else:
        runs["group"], runs["round"] = math.nan, math.nan
    ci = comparisons.ratio_between(runs, config("a", 0), config("b", 0))
    assert ci == ratios.unpaired_ratio(DRIFTING_A, DRIFTING_B)


def test_unmeasured_processes_and_other_configurations_are_left_out():
    runs = runs_of(("a", [100.0, 110.0, math.nan]), ("b", [50.0, 55.0]), ("c", [1.0, 2.0]))
    runs["batch_size"] = runs["batch_size"].astype(object)
    runs.loc[runs["variant"] == "b", "batch_size"] = "8"  # read back from CSV as text
    ci = comparisons.ratio_between(runs, config("a", 105), config("b", 52.5))
    assert ci.ratio == pytest.approx(2.0) and ci.n == 2


def test_tie_rule_names_one_configuration_when_separated():
    runs = runs_of(("fast", [198.0, 200.0, 202.0]), ("slow", [99.0, 100.0, 101.0]))
    ranked = comparisons.ranking([config("slow", 100), config("fast", 200)], runs)
    assert ranked.best["variant"] == "fast" and [c["variant"] for c in ranked.tied] == ["fast"]
    assert ranked.ci.separated and ranked.ci.ratio == pytest.approx(2.0)


def test_tie_rule_names_the_tie_when_intervals_overlap():
    runs = runs_of(
        ("a", [90.0, 110.0, 103.0]),
        ("b", [95.0, 105.0, 98.0]),
        ("c", [49.0, 50.0, 51.0]),
    )
    ranked = comparisons.ranking([config("a", 101), config("b", 99.3), config("c", 50)], runs)
    assert ranked.best is None and ranked.top["variant"] == "a"
    # c is separated from the top: not part of the tie.
    assert [c["variant"] for c in ranked.tied] == ["a", "b"]
    assert comparisons.names(ranked.tied, lambda c: c["variant"]) == "a and b"
    assert ranked.ci.low < 1 < ranked.ci.high and round(ranked.ci.ratio, 2) == 1.02


def test_a_configuration_its_paired_rival_beats_is_never_named_best():
    # a's mean is higher (its drifting extra rounds ran while the machine was fast), but in
    # every round both shared, b was faster: the paired interval puts b ahead, separated.
    runs = runs_of(
        ("a", [100.0, 102.0, 98.0, 160.0, 170.0]), ("b", [110.0, 113.0, 108.0]), group=GROUP
    )
    ranked = comparisons.ranking([config("a", 126), config("b", 110.3)], runs)
    assert ranked.best["variant"] == "b" and [c["variant"] for c in ranked.order] == ["b", "a"]
    assert ranked.ci.separated and ranked.ci.ratio > 1


def test_best_needs_separation_from_every_candidate_not_only_the_runner_up():
    # b is paired with a and clearly behind it; c ran apart with a wide spread, overlapping a.
    runs = pd.concat(
        [
            runs_of(("a", [120.0, 121.0, 119.0]), ("b", [100.0, 101.0, 99.0]), group=GROUP),
            runs_of(("c", [60.0, 170.0, 90.0])),
        ]
    )
    ranked = comparisons.ranking([config("a", 120), config("b", 100), config("c", 106.7)], runs)
    assert ranked.best is None
    assert [c["variant"] for c in ranked.tied] == ["a", "c"]
    assert ranked.order[1]["variant"] == "c" and not ranked.ci.separated


def test_one_process_is_never_separated():
    runs = runs_of(("fast", [200.0]), ("slow", [100.0, 101.0, 99.0]))
    ranked = comparisons.ranking([config("fast", 200), config("slow", 100)], runs)
    assert ranked.best is None and len(ranked.tied) == 2
    assert not ranked.ci.bounded and ranked.ci.ratio == pytest.approx(2.0)
    assert comparisons.ratio_text(ranked.ci) == (
        "2.00x, not separated (no bounded 95% CI: too few processes)"
    )
    # One candidate is trivially first, with nothing to separate it from.
    alone = comparisons.ranking([config("fast", 200)], runs)
    assert alone.best["variant"] == "fast" and alone.ci is None


def test_aggregate_writes_group_and_round_and_the_paired_speedup_ci():
    documents = [
        run_document("fp32", 8, "baseline", windows=((91.0,), (136.0,), (182.0,))),
        run_document("fp32", 8, "tuned", windows=((100.0,), (150.0,), (200.0,)), start=2e9),
    ]
    for document in documents:
        document["group"] = GROUP
        for process in document["processes"]:
            process["round"] = process["process"]
    pairs = [(f"doc{i}.json", d) for i, d in enumerate(documents)]
    runs = aggregate.runs_table(pairs)
    assert runs["group"].tolist() == [GROUP] * 6
    assert runs["round"].tolist() == [0, 1, 2, 0, 1, 2]
    tuned = comparisons.comparisons_table(aggregate.summary_table(pairs, runs), runs).iloc[0]
    expected = ratios.paired_ratio(DRIFTING_A, DRIFTING_B)
    assert (tuned["a_variant"], tuned["method"], tuned["verdict"]) == ("tuned", "paired", "faster")
    # The speedup is the interval's own estimate, so it lies inside its interval.
    assert tuned["ratio"] == pytest.approx(expected.ratio)
    assert tuned["ci95_low"] == pytest.approx(expected.low)
    assert tuned["ci95_high"] == pytest.approx(expected.high)
    # Older documents (no group, no round) give empty columns and an unpaired interval.
    for document in documents:
        del document["group"]
        for process in document["processes"]:
            del process["round"]
    runs = aggregate.runs_table(pairs)
    assert runs["group"].isna().all() and runs["round"].isna().all()
    tuned = comparisons.comparisons_table(aggregate.summary_table(pairs, runs), runs).iloc[0]
    assert tuned["method"] == "unpaired" and tuned["verdict"] != "faster"


# ------------------------------------------------------------------------------------------
# A report built from results folders.
# ------------------------------------------------------------------------------------------
# Ratios as `ratios.ratio_text` and `comparisons.describe` write them.
RATIO = re.compile(
    r"\d+\.\d\dx (faster|slower|higher|lower) \(([\d.]+x, )?95% CI \d+\.\d\d-\d+\.\d\d\)"
    r"|not separated"
)
COMPARING = re.compile(r"\d\.\d\dx|faster|slower|fastest|best|tied|against")


def render(tmp_path: Path, *folders: Path) -> str:
    out = tmp_path / "summary.md"
    extra = [a for f in folders[1:] for a in ("--extra-results", str(f))]
    assert (
        main(
            [
                "render-report",
                "--results",
                str(folders[0]),
                *extra,
                "--out-html",
                str(tmp_path / "summary.html"),
                "--out-md",
                str(out),
            ]
        )
        == 0
    )
    return out.read_text(encoding="utf-8")


def findings(md: str, title: str) -> list[str]:
    part = md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in part.splitlines() if line.startswith("- ")]


def test_every_comparison_in_the_report_carries_a_ratio_ci_or_not_separated(tmp_path):
    laptop = laptop_folder(tmp_path / "laptop", extra=[over_budget_config()])
    gpu = gpu_folder(tmp_path / "gpu")
    compare_with(laptop, gpu)
    md = render(tmp_path, laptop, gpu)
    speedup = findings(md, "Speedups")
    assert len(speedup) == 4
    assert all(RATIO.search(s) for s in speedup), speedup
    comparing = [
        s
        for s in findings(md, "Key findings")
        if s.startswith(("Fastest", "Best", "No single", "Across", "For "))
    ]
    assert len(comparing) >= 6
    assert all(RATIO.search(s) for s in comparing), comparing
    machines = findings(md, "Machines compared")
    assert machines and all(RATIO.search(s) for s in machines), machines
    # Every "fastest" is followed by the ratio that separates it from the runner-up.
    for sentence in re.findall(r"Fastest configuration[^\n]*", md):
        assert "than the runner-up" in sentence and RATIO.search(sentence), sentence


def test_a_tie_is_named_and_no_configuration_is_called_fastest(tmp_path):
    m = "resnet18_cifar"
    noisy = {"between_rsd": 0.08, "target_ci": 0.03}
    configs = [
        Config("cpu", m, "fp32", 64, "baseline", 200.0, (180.0, 220.0), **noisy),
        Config("cpu", m, "fp32", 64, "tuned", 205.0, (185.0, 225.0), **noisy),
        Config("cpu", m, "bf16", 64, "baseline", 150.0, (148.0, 152.0), target_ci=0.03),
    ]
    ceilings = ceilings_document("cpu", "Box CPU", gemm={"fp32": 1e11}, bandwidth=1e10)
    point = roofline_point(
        configs[0], source="analytic", level="algorithmic", flops=2.5e9, bytes_=5e8, time_s=0.1
    )
    folder = write_machine(
        tmp_path / "box", ("cpu", "Box CPU", "box"), configs, ceilings=ceilings, points=[point]
    )
    key = findings(render(tmp_path, folder), "Key findings")
    assert not any("Fastest" in s for s in key)
    (tie,) = [s for s in key if s.startswith("No single fastest configuration on Box CPU (box)")]
    assert (
        ": resnet18_cifar fp32 at batch 64 (tuned) at 205 img/s (95% CI 185–225) and "
        "resnet18_cifar fp32 at batch 64 (baseline) at 200 img/s (95% CI 180–220) are not "
        "separated ("
    ) in tie
    # Both CIs (±9.8% and ±10%) are wider than the 3% target, and the finding says so.
    assert tie.endswith("missed their CI target."), tie
    (variant,) = [s for s in key if "variant" in s]
    assert variant.startswith("No single best variant for fp32 at batch 64: tuned at " "205 img/s")
    # bf16 is separated from fp32, and the finding names it with the ratio's interval.
    (precision,) = [s for s in key if "precision" in s]
    assert re.match(
        r"Best precision at batch 64 \(baseline\): fp32, "
        r"1\.33x faster \(95% CI 1\.\d\d-1\.\d\d\) than bf16",
        precision,
    ), precision


# The machine's capacity over eight rounds: two slow episodes that hit every configuration.
CAPACITY = (1.0, 1.02, 0.7, 0.66, 1.0, 0.98, 0.75, 1.01)


def test_a_missed_target_that_follows_the_whole_group_names_the_machine_slowing():
    def document(variant, level, wobble, start):
        windows = tuple(
            (level * c * (1 + w), level * c * (1 - w)) for c, w in zip(CAPACITY, wobble)
        )
        doc = run_document("fp32", 8, variant, windows=windows, start=start, ci_rel=0.2)
        doc["group"] = GROUP
        for process in doc["processes"]:
            process["round"] = process["process"]
        return doc

    documents = [
        document("baseline", 100.0, (0.01, 0.0, 0.02, 0.01, 0.0, 0.01, 0.02, 0.0), 1e9),
        document("tuned", 50.0, (0.0, 0.02, 0.01, 0.0, 0.01, 0.02, 0.0, 0.01), 2e9),
    ]
    pairs = [(f"doc{i}.json", d) for i, d in enumerate(documents)]
    summary = aggregate.summary_table(pairs, aggregate.runs_table(pairs))
    assert summary["noise_cause"].tolist() == ["shared_slowdown"] * 2
    row = summary.iloc[0]
    assert (row["shared_slowdown_configurations"], row["shared_slowdown_rounds"]) == (1, 8)
    assert row["shared_slowdown_r2"] == pytest.approx(1.0, abs=0.005)
    assert row["shared_slowdown_dip"] == pytest.approx(0.33, abs=0.005)
    # The windows' own reading follows it: two episodes of slow rounds look like two process
    # levels from inside one configuration.
    assert row["noise_causes"] == "shared_slowdown;bimodal"
    assert (row["bimodal_low_n"], round(row["bimodal_low_img_s"], 1)) == (3, 70.3)


# ------------------------------------------------------------------------------------------
# comparisons.csv and the Speedups section drawn from it alone.
# ------------------------------------------------------------------------------------------
def _summary(rows: list[tuple]) -> pd.DataFrame:
    """summary.csv rows from (machine, precision, batch, variant, mean)."""
    return pd.DataFrame(
        [
            {**config(v, mean), "machine": m, "precision": p, "batch_size": b, "status": "ok"}
            for m, p, b, v, mean in rows
        ]
    )


def _runs(rows: list[tuple]) -> pd.DataFrame:
    """runs.csv rows from (machine, precision, batch, variant, rates, group)."""
    out = []
    for m, p, b, v, rates, group in rows:
        for process, rate in enumerate(rates):
            out.append(
                {
                    **config(v, rate),
                    "machine": m,
                    "precision": p,
                    "batch_size": b,
                    "process": process,
                    "status": "ok",
                    "throughput_img_s": rate,
                    "group": group,
                    "round": process if group else None,
                }
            )
    return pd.DataFrame(out)


STUDY_RUNS = [
    # Interleaved in one group: tuned vs baseline paired; bf16 vs fp32 paired and tied.
    ("box", "fp32", 8, "baseline", DRIFTING_B, "g8"),
    ("box", "fp32", 8, "tuned", DRIFTING_A, "g8"),
    ("box", "bf16", 8, "baseline", [91.5, 135.0, 183.0], "g8"),
    # Another batch size, measured apart: unpaired against batch 8.
    ("box", "fp32", 16, "baseline", [300.0, 310.0, 305.0], None),
    ("other", "fp32", 8, "baseline", [50.0, 52.0, 51.0], None),
]
TRAINING = pd.DataFrame(
    [
        {**config("baseline", 0), "recipe": "r", "time_to_target_s": 100.0, "machine": "box"},
        {**config("tuned", 0), "recipe": "r", "time_to_target_s": 150.0, "machine": "box"},
    ]
)


def study_comparisons() -> pd.DataFrame:
    runs = _runs(STUDY_RUNS)
    means = [(m, p, b, v, sum(r) / len(r)) for m, p, b, v, r, _ in STUDY_RUNS]
    return comparisons.comparisons_table(_summary(means), runs, TRAINING)


def test_comparisons_table_has_every_family_with_its_method_and_verdict():
    table = study_comparisons()
    assert set(table["kind"]) == set(comparisons.KINDS)
    by = {(r["kind"], r["pair"], r["a_variant"], r["a_precision"]): r for _, r in table.iterrows()}
    tuned = by[("variant", "vs_reference", "tuned", "fp32")]
    assert tuned["method"] == "paired" and tuned["verdict"] == "faster"
    assert tuned["grain"] == "process"
    assert tuned["ratio"] == pytest.approx(ratios.paired_ratio(DRIFTING_A, DRIFTING_B).ratio)
    assert tuned["rounds"] == 3
    bf16 = by[("precision", "vs_reference", "baseline", "bf16")]
    assert bf16["method"] == "paired" and bf16["verdict"] in ("tie", "unresolved")
    assert bf16["ci95_low"] < 1 < bf16["ci95_high"]
    batch = table[table["kind"] == "batch"]
    assert set(batch["method"]) == {"unpaired"} and batch["grain"].isna().all()
    assert (batch["a_batch_size"] == 16).all() and (batch["b_batch_size"] == 8).all()
    machine = table[table["kind"] == "machine"].iloc[0]
    assert (machine["a_machine"], machine["b_machine"], machine["method"]) == (
        "box",
        "other",
        "unpaired",
    )
    time = table[table["kind"] == "time_to_accuracy"].iloc[0]
    assert time["a_variant"] == "baseline" and time["ratio"] == pytest.approx(1.5)
    assert time["method"] == "single"


def test_a_tie_within_the_target_is_a_tie_and_wider_is_unresolved():
    tight = ratios.RatioCI(1.0, 0.99, 1.01, ratios.PAIRED, 3)
    wide = ratios.RatioCI(1.0, 0.9, 1.1, ratios.PAIRED, 3)
    assert tight.verdict(0.03) == "tie"
    assert wide.verdict(0.03) == "unresolved"
    assert ratios.RatioCI(1.2, None, None, None, 1).verdict(0.03) == "no_ci"


def test_the_speedups_section_renders_from_comparisons_csv_alone(tmp_path):
    from nnperf.core import files
    from nnperf.report import results
    from nnperf.report.outline import Page
    from nnperf.report.sections import speedups

    path = tmp_path / "comparisons.csv"
    files.write_csv(path, study_comparisons())
    loaded = results.ResultSet(comparisons=results.read_table(path))
    page = Page.__new__(Page)
    page.tables, page.machines = loaded, ["box", "other"]
    page.drop = lambda frame: frame
    page.figures_of = lambda kind: []
    page.sources = lambda *kinds: []
    built = speedups.build(page)
    text = " ".join(sentences(built.findings))
    assert "The tuned variant is 1.10x faster" in text
    assert "bf16 vs fp32" in text and "batch 16 against batch 8" in text


# Three machines on fp32 batch 8; two of them on bf16 batch 8 (within noise of each other) and
# on fp32 batch 16.
MACHINE_RUNS = [
    ("fast", "fp32", 8, "baseline", [300.0, 303.0, 297.0], None),
    ("mid", "fp32", 8, "baseline", [150.0, 152.0, 148.0], None),
    ("slow", "fp32", 8, "baseline", [50.0, 51.0, 49.0], None),
    ("fast", "bf16", 8, "baseline", [600.0, 606.0, 594.0], None),
    ("mid", "bf16", 8, "baseline", [598.0, 640.0, 560.0], None),
    ("fast", "fp32", 16, "baseline", [400.0, 404.0, 396.0], None),
    ("slow", "fp32", 16, "baseline", [100.0, 101.0, 99.0], None),
]


def test_machine_rows_cover_every_shared_configuration_and_the_section_states_one():
    from nnperf.report.sections import machines_compared

    means = [(m, p, b, v, sum(r) / len(r)) for m, p, b, v, r, _ in MACHINE_RUNS]
    table = comparisons.comparisons_table(_summary(means), _runs(MACHINE_RUNS))
    rows = machines_compared.machine_rows(table)
    # The fastest machine against each other one, on every configuration two machines ran.
    assert sorted(zip(rows["a_precision"], rows["a_batch_size"], rows["b_machine"])) == [
        ("bf16", 8, "mid"),
        ("fp32", 8, "mid"),
        ("fp32", 8, "slow"),
        ("fp32", 16, "slow"),
    ]
    assert set(rows["a_machine"]) == {"fast"} and set(rows["method"]) == {"unpaired"}
    # One sentence for the model: the configuration all three machines ran, not the larger
    # batch two of them ran.
    (sentence,) = sentences(machines_compared.machine_comparison_findings(table))
    assert re.fullmatch(
        r"Across machines, m fp32 at batch 8 \(baseline\) runs fastest on fast at 300 img/s, "
        r"6\.00x faster \(95% CI 5\.\d\d-6\.\d\d\) than the slowest machine, slow, at 50\.0 "
        r"img/s; 2\.00x faster \(95% CI 1\.\d\d-2\.\d\d\) than the runner-up, mid\.",
        sentence,
    ), sentence
    bf16 = rows[rows["a_precision"] == "bf16"]
    assert sentences([machines_compared.machine_record(bf16)])[0].startswith(
        "Across machines, m bf16 at batch 8 (baseline) has no single fastest machine: fast at "
        "600 img/s and mid at 599 img/s are not separated"
    )


def test_the_machines_section_shows_every_row_and_says_when_there_are_none():
    from nnperf.report import results
    from nnperf.report.outline import Page
    from nnperf.report.sections import machines_compared

    means = [(m, p, b, v, sum(r) / len(r)) for m, p, b, v, r, _ in MACHINE_RUNS]
    page = Page.__new__(Page)
    page.machines = ["fast", "mid", "slow"]
    page.figures_of = lambda kind: []
    page.sources = lambda *kinds: []
    page.tables = results.ResultSet(
        comparisons=comparisons.comparisons_table(_summary(means), _runs(MACHINE_RUNS))
    )
    (table,) = machines_compared.build(page).tables
    assert table.frame["Against machine"].tolist().count("mid") == 2 and len(table.frame) == 4
    # Folders whose comparisons.csv was written apart: said, not an empty section.
    page.tables = results.ResultSet()
    assert machines_compared.build(page).findings == [machines_compared.NO_ROWS]


def test_a_comparison_the_engine_gave_up_is_out_of_reach_in_the_csv_and_its_words(tmp_path):
    from nnperf.core import files
    from nnperf.report import results
    from nnperf.report.outline import Page
    from nnperf.report.sections import speedups

    wide = [
        ("box", "fp32", 8, "baseline", [100.0, 110.0, 95.0], "g8"),
        ("box", "bf16", 8, "baseline", [105.0, 96.0, 101.0], "g8"),
    ]
    means = [(m, p, b, v, sum(r) / len(r)) for m, p, b, v, r, _ in wide]

    def verdict(given_up: str | None) -> str:
        summary = _summary(means).assign(comparisons_out_of_reach=["", given_up])
        (row,) = comparisons.comparisons_table(summary, _runs(wide)).to_dict("records")
        return row["verdict"]

    # The bf16 run's document names its partner (interleave.out_of_reach_with).
    assert verdict("fp32_baseline") == ratios.OUT_OF_REACH
    assert verdict(None) == verdict("fp32_tuned") == "unresolved"

    summary = _summary(means).assign(comparisons_out_of_reach=["", "fp32_baseline"])
    path = tmp_path / "comparisons.csv"
    files.write_csv(path, comparisons.comparisons_table(summary, _runs(wide)))
    loaded = results.ResultSet(comparisons=results.read_table(path))
    assert loaded.comparisons["verdict"].tolist() == [ratios.OUT_OF_REACH]
    page = Page.__new__(Page)
    page.tables, page.machines = loaded, ["box"]
    page.drop = lambda frame: frame
    page.figures_of = lambda kind: []
    page.sources = lambda *kinds: []
    text = " ".join(sentences(speedups.build(page).findings))
    assert "bf16 vs fp32" in text and "not separated" in text
    assert "out of reach after 3 rounds: the rounds both budgets still fit" in text


def test_batch_sizes_measured_in_one_group_are_paired_on_their_shared_rounds():
    # One group of batch 8 and 16 (rule timed_group's folder `bs8-16`): members are named
    # with their batch size, round 0 alone, rounds 1-3 in one process, windows taking turns.
    group = "synthetic/cpu/m/bs8-16"
    small, large = [100.0, 110.0, 121.0, 133.0], [80.0, 120.0, 132.0, 145.0]
    runs = _runs(
        [
            ("box", "fp32", 8, "baseline", small, group),
            ("box", "fp32", 16, "baseline", large, group),
        ]
    )
    partners = {8: "fp32_bs16_baseline", 16: "fp32_bs8_baseline"}
    runs["shared_with"] = [
        "" if row.round == 0 else partners[row.batch_size] for row in runs.itertuples()
    ]
    means = [("box", "fp32", b, "baseline", sum(r) / len(r)) for b, r in ((8, small), (16, large))]
    table = comparisons.comparisons_table(_summary(means), runs)
    row = table[table["pair"] == "largest_vs_smallest"].iloc[0]
    assert (row["method"], row["grain"], row["rounds"]) == ("paired", "window", 3)
    assert row["ratio"] == pytest.approx(ratios.paired_ratio(large[1:], small[1:]).ratio)

    # The engine gave it up: each member's run JSON names the other with its batch size
    # (interleave.out_of_reach_with), and both rows of the pair say so.
    wide = _runs(
        [
            ("box", "fp32", 8, "baseline", [100.0, 110.0, 95.0], group),
            ("box", "fp32", 16, "baseline", [105.0, 96.0, 101.0], group),
        ]
    )
    summary = _summary([("box", "fp32", b, "baseline", 100.0) for b in (8, 16)])
    summary = summary.assign(comparisons_out_of_reach=["fp32_bs16_baseline", "fp32_bs8_baseline"])
    verdicts = set(comparisons.comparisons_table(summary, wide)["verdict"])
    assert verdicts == {ratios.OUT_OF_REACH}
