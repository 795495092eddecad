"""The churn figures README.md and docs/performance.md quote are the stored runs' (benchmarks/results/churn-*.json).

Each ratio is recomputed from the rounds the file keeps (the median of the rounds' churn means and sds,
as `benchmarks.churn.summary` takes them), so a figure typed by hand, or a file edited after its run,
fails here. The reference servers (`--reference floor,knot`) watch nothing: their rounds say so and
carry no final answers to check.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SIX = RESULTS / "churn-reference-6rounds.json"  # cached names, beside the floor and Knot, six rounds
REFERENCE = RESULTS / "churn-reference-0d31688.json"  # the same, three rounds
REFERENCE_CASE = RESULTS / "churn-reference-case-0d31688.json"  # off the packet cache, with `cache 30`
REFERENCE_CPU0 = RESULTS / "churn-reference-api-on-cpu0.json"  # the API, etcd and churners on the other core
WORKERS = RESULTS / "churn-workers-e8864c5.json"  # --workers 1,2 beside the floor
DIAGNOSTICS = [RESULTS / "churn-diagnostic-apply-compile.json", RESULTS / "churn-diagnostic-flush.json"]  # scratch checkouts
LANDING = RESULTS / "churn-91a3860.json"  # mcsdns/ as e018c8f's
SCOPED = RESULTS / "churn-scoped-0d11083.json"  # the landing code (mcsdns-w1) beside the code before it (base-w1)
SCOPED_CASE = RESULTS / "churn-scoped-case-0d11083.json"  # the same, off the packet cache, with `cache 30`
# Off the packet cache, e018c8f's mcsdns/ (label, file): the four runs the claims row quotes (the last with the floor).
OFF_CACHE = [("base-w1", RESULTS / "churn-slice-100us.json"), ("base-w1", RESULTS / "churn-slice-4000us.json"),
             ("mcsdns-w1", RESULTS / "churn-case-cache30-9b83163.json"), ("mcsdns-w1", REFERENCE_CASE)]


def median(path: Path, label: str, what: str) -> float:
    """The median over the rounds of `label`'s churn-phase `what` (mean_ms or sd_ms)."""
    rounds = json.loads(path.read_text())["servers"][label]["rounds"]
    return statistics.median(r["churn"][what] for r in rounds)


def ratio(path: Path, label: str, base: str = "coredns") -> tuple[float, float]:
    """(mean, sd) of `label` under churn over `base`'s, rounded as the docs quote them."""
    return tuple(round(median(path, label, w) / median(path, base, w), 2) for w in ("mean_ms", "sd_ms"))  # type: ignore[return-value]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_reference_servers_watch_nothing_and_mcsdns_applied_every_write() -> None:
    for path in (SIX, REFERENCE, REFERENCE_CASE, REFERENCE_CPU0):
        got = json.loads(path.read_text())
        assert got["settings"]["reference"] == ["floor", "knot"], path.name
        for label in ("floor", "knot"):
            for r in got["servers"][label]["rounds"]:
                assert r["updates"]["watches"] is False and "final_answers_right" not in r["updates"], (path.name, label)
                assert r["churn"]["lost"] == 0 and r["updates"]["writes"] > 0, (path.name, label)
        for r in got["servers"]["mcsdns-w1"]["rounds"]:
            u = r["updates"]
            assert r["churn"]["lost"] == 0 and u["final_answers_right"] == "20/20", path.name
            assert u["slice_changes"] == u["writes"], (path.name, u)


def test_readme_quotes_the_stored_churn_ratios() -> None:
    readme = flat((ROOT / "README.md").read_text())
    assert ratio(SCOPED, "mcsdns-w1") == (0.48, 0.59) and ratio(SCOPED, "base-w1") == (0.57, 0.65)
    assert ratio(SCOPED, "floor") == (0.39, 0.53) and ratio(SIX, "knot") == (0.28, 0.46)
    assert ("were 0.48x and 0.59x CoreDNS's on the landing code" in readme
            and "the code before it 0.57x and 0.65x in the same rounds" in readme
            and "had 0.39x/0.53x there, and Knot 0.28x/0.46x in six earlier rounds" in readme
            and "`benchmarks/results/churn-scoped-0d11083.json`" in readme and "`churn-reference-6rounds.json`" in readme), \
        "README's churn paragraph"
    # Off the cache: the landing code beside the code before it, against CoreDNS with and without `cache 30`.
    assert [ratio(SCOPED_CASE, x) for x in ("mcsdns-w1", "base-w1", "floor")] == [(0.45, 0.57), (0.68, 0.75), (0.47, 0.60)]
    assert ratio(SCOPED_CASE, "mcsdns-w1", "coredns-cache30") == (0.53, 0.70)
    assert ("(`--mix clusterset_a_case --coredns-cache 30 --rounds 2`): 0.45x and 0.57x CoreDNS's (0.53x and 0.70x "
            "against `cache 30`), the code before it 0.68x and 0.75x, the floor 0.47x and 0.60x "
            "(`churn-scoped-case-0d11083.json`)") in readme
    settings = json.loads(SCOPED_CASE.read_text())["settings"]
    assert (settings["mix"], settings["coredns_cache"], settings["rounds"]) == ("clusterset_a_case", [30], 2)


def test_the_claims_row_quotes_every_churn_run_it_names() -> None:
    row = next(line for line in (ROOT / "docs" / "performance.md").read_text().splitlines()
               if line.startswith("| Query latency while the API churns"))
    assert ratio(SCOPED, "mcsdns-w1") == (0.48, 0.59) and ratio(SCOPED_CASE, "mcsdns-w1") == (0.45, 0.57)
    assert ("0.48x and 0.59x on cached names against CoreDNS without `cache` (5 rounds, 2026-12-07, 107-173 writes a "
            "second, `churn-scoped-0d11083.json`; the code before it 0.57x and 0.65x in the same rounds, 0.62x and 0.68x "
            "in 3 rounds of `churn-91a3860.json`), 0.45x and 0.57x off the packet cache (0.53x and 0.70x against "
            "`cache 30`; 2 rounds, `churn-scoped-case-0d11083.json`; the code before it 0.68x and 0.75x)") in row
    assert ratio(LANDING, "mcsdns-w1") == (0.62, 0.68) and ratio(SCOPED_CASE, "base-w1") == (0.68, 0.75)
    assert [ratio(SCOPED, "mcsdns-w1", "floor"), ratio(SCOPED_CASE, "mcsdns-w1", "floor")] == [(1.23, 1.11), (0.96, 0.96)]
    assert "mcsdns 1.23x and 1.11x the floor's mean and sd on cached names, 0.96x and 0.96x off the cache" in row
    # e018c8f's mcsdns/ off the cache: two runs as `base-w1`, one with `cache 30` against both CoreDNS settings.
    # (These runs predate the reference servers: the row quotes each file's own summary, the ratio of its
    # rounded medians, which for the second is 0.58x where the unrounded medians give 0.57x.)
    summaries = [json.loads(path.read_text())["servers"][label] for label, path in OFF_CACHE[:3]]
    assert [(v["vs_coredns"]["mean"], v["vs_coredns"]["sd"]) for v in summaries] == [(0.56, 0.69), (0.58, 0.70), (0.59, 0.68)]
    assert [ratio(path, label) for label, path in OFF_CACHE[:3]] == [(0.56, 0.69), (0.57, 0.70), (0.59, 0.68)]
    assert summaries[2]["vs_coredns_cache30"] == {"mean": 0.60, "sd": 0.67}
    assert ratio(OFF_CACHE[2][1], "mcsdns-w1", "coredns-cache30") == (0.60, 0.67)
    assert ("0.56x and 0.69x, 0.58x and 0.70x for e018c8f's mcsdns/, and 0.59x and 0.68x (0.60x and 0.67x against "
            "`cache 30`) in a run with `cache 30`") in row
    assert ratio(SIX, "mcsdns-w1") == (0.51, 0.62) and ratio(SIX, "mcsdns-w1", "floor") == (1.55, 1.16)


def test_performance_doc_quotes_the_landing_code_off_the_cache() -> None:
    doc = flat((ROOT / "docs" / "performance.md").read_text())
    f = {x: (median(SCOPED_CASE, x, "mean_ms"), median(SCOPED_CASE, x, "sd_ms"))
         for x in ("mcsdns-w1", "base-w1", "floor", "coredns", "coredns-cache30")}
    assert (f"mcsdns {f['mcsdns-w1'][0]:.3f} / {f['mcsdns-w1'][1]:.3f} ms, **0.45x / 0.57x** CoreDNS's "
            f"{f['coredns'][0]:.3f} / {f['coredns'][1]:.3f} and 0.53x / 0.70x its {f['coredns-cache30'][0]:.3f} / "
            f"{f['coredns-cache30'][1]:.3f} with `cache 30`; the code before it {f['base-w1'][0]:.3f} / {f['base-w1'][1]:.3f} "
            f"(0.68x / 0.75x); the floor {f['floor'][0]:.3f} / {f['floor'][1]:.3f} (0.47x / 0.60x)") in doc
    servers = json.loads(SCOPED_CASE.read_text())["servers"]
    rates = [r["updates"]["writes_per_s"] for label in servers for r in servers[label]["rounds"]]
    assert (min(rates), max(rates)) == (102, 170) and "churn-scoped-case-0d11083.json); 102-170 writes a second" in doc
    for label in ("mcsdns-w1", "base-w1"):
        for r in servers[label]["rounds"]:
            assert r["churn"]["lost"] == 0 and r["updates"]["final_answers_right"] == "20/20"
    assert "There mcsdns's churn mean and sd were 0.96x the floor's" in doc


def test_performance_doc_quotes_the_reference_runs() -> None:
    doc = flat((ROOT / "docs" / "performance.md").read_text())
    # The table of the cached run: each server's medians and its ratios to CoreDNS's.
    for label, row in (("mcsdns-w1", "mcsdns"), ("floor", "the floor (`benchmarks/floor.py`)"), ("knot", "Knot DNS")):
        mean, sd = median(REFERENCE, label, "mean_ms"), median(REFERENCE, label, "sd_ms")
        m, s = ratio(REFERENCE, label)
        ratios = f"**{m:.2f}x / {s:.2f}x**" if label == "mcsdns-w1" else f"{m:.2f}x / {s:.2f}x"
        assert f"| {row} | {mean:.3f} / {sd:.3f} | {ratios} |" in doc, label
    assert ratio(REFERENCE_CASE, "mcsdns-w1") == (0.62, 0.72) and ratio(REFERENCE_CASE, "knot") == (0.33, 0.53)
    assert "mcsdns had 0.62x / 0.72x CoreDNS's, the floor 0.46x / 0.59x, Knot 0.33x / 0.53x" in doc
    assert [ratio(REFERENCE_CASE, x, "coredns-cache30") for x in ("mcsdns-w1", "floor", "knot")] == [
        (0.65, 0.74), (0.48, 0.61), (0.34, 0.54)]
    assert "(0.65x / 0.74x, 0.48x / 0.61x and 0.34x / 0.54x against `cache 30`)" in doc
    assert [ratio(REFERENCE_CPU0, x) for x in ("mcsdns-w1", "floor", "knot")] == [(0.70, 0.57), (0.54, 0.50), (0.48, 0.44)]
    assert "mcsdns 0.70x / 0.57x, the floor 0.54x / 0.50x, Knot 0.48x / 0.44x" in doc
    assert f"CoreDNS's mean barely rose ({median(REFERENCE_CPU0, 'coredns', 'mean_ms'):.3f} ms)" in doc
    # The six rounds, in a sentence after the table.
    six = [(median(SIX, x, "mean_ms"), median(SIX, x, "sd_ms"), *ratio(SIX, x)) for x in ("mcsdns-w1", "floor", "knot")]
    core = (median(SIX, "coredns", "mean_ms"), median(SIX, "coredns", "sd_ms"))
    assert (f"mcsdns {six[0][0]:.3f} / {six[0][1]:.3f} ms, **{six[0][2]:.2f}x / {six[0][3]:.2f}x** CoreDNS's "
            f"{core[0]:.3f} / {core[1]:.3f}, the floor {six[1][0]:.3f} / {six[1][1]:.3f} ({six[1][2]:.2f}x / {six[1][3]:.2f}x), "
            f"Knot {six[2][0]:.3f} / {six[2][1]:.3f} ({six[2][2]:.2f}x / {six[2][3]:.2f}x)") in doc
    rounds = json.loads(SIX.read_text())["servers"]
    by_round = [m["churn"]["mean_ms"] / f["churn"]["mean_ms"] for m, f in zip(rounds["mcsdns-w1"]["rounds"], rounds["floor"]["rounds"])]
    assert f"{min(by_round):.2f}-{max(by_round):.2f}x" == "1.44-1.80x" and "1.44-1.80x the floor's round by round" in doc
    # mcsdns's distance from the floor under the same churn, in the four runs.
    distances = [ratio(path, "mcsdns-w1", "floor") for path in (SIX, REFERENCE, REFERENCE_CASE, REFERENCE_CPU0)]
    assert distances == [(1.55, 1.16), (1.45, 1.17), (1.35, 1.21), (1.31, 1.15)]
    assert ("**1.55x the floor's mean and 1.16x its sd** on cached names over six rounds (1.45x and 1.17x over three), "
            "1.35x and 1.21x off the cache, 1.31x and 1.15x with the API on the other core") in doc
    lost = [r["churn"]["lost"] for r in json.loads(REFERENCE.read_text())["servers"]["coredns"]["rounds"]]
    assert lost[2] == 744 and "CoreDNS lost 744 queries in its third round" in doc
    assert re.search(r"mcsdns 0\.51x and 0\.62x, `benchmarks/floor\.py` 0\.33x and 0\.53x, Knot 0\.28x and 0\.46x "
                     r"\(0\.46x and 0\.55x, 0\.32x and 0\.47x, 0\.29x and 0\.47x in three\)", doc)
    assert "mcsdns 1.55x the floor's mean, 1.16x its sd" in doc


def test_performance_doc_quotes_the_workers_run() -> None:
    doc = flat((ROOT / "docs" / "performance.md").read_text())
    assert [ratio(WORKERS, x) for x in ("mcsdns-w1", "floor", "mcsdns-w2")] == [(0.56, 0.63), (0.47, 0.61), (0.66, 0.75)]
    assert [ratio(WORKERS, x, "floor") for x in ("mcsdns-w1", "mcsdns-w2")] == [(1.19, 1.04), (1.41, 1.23)]
    assert ("mcsdns 0.56x / 0.63x CoreDNS's and 1.19x / 1.04x the floor's (the floor 0.47x / 0.61x). With "
            "`--workers 2`") in doc and "0.66x / 0.75x and 1.41x / 1.23x" in doc
    assert "moved from 1.45x to 1.19x, and over six rounds it was 1.55x (1.44-1.80x by round)" in doc


def test_performance_doc_quotes_the_diagnostic_runs() -> None:
    """The runs of scratch checkouts that each leave one step out: labelled as such, their patches kept,
    and the medians the doc quotes."""
    doc = flat((ROOT / "docs" / "performance.md").read_text())
    apply_compile, flush = (json.loads(path.read_text()) for path in DIAGNOSTICS)
    assert set(apply_compile["patches"]) == {"noapply", "nocompile"} and set(flush["patches"]) == {"noflush", "nocompile"}
    for got in (apply_compile, flush):
        assert got["note"].startswith("Diagnostic run, not code that serves")
        assert all("DIAGNOSTIC" in patch for patch in got["patches"].values())
    first = [median(DIAGNOSTICS[0], x, "mean_ms") for x in ("mcsdns-w1", "noapply-w1", "nocompile-w1", "floor")]
    second = [median(DIAGNOSTICS[1], x, "mean_ms") for x in ("mcsdns-w1", "noflush-w1", "nocompile-w1", "floor")]
    assert [f"{v:.3f}" for v in first] == ["0.445", "0.338", "0.340", "0.314"]
    assert [f"{v:.3f}" for v in second] == ["0.444", "0.362", "0.336", "0.232"]
    assert ("mcsdns's churn mean was 0.445 ms, 0.338 without applying the churned slices (the watch and decoding "
            "kept), 0.340 applying them without compiling them or making a new table generation, and the floor's 0.314") in doc
    assert ("mcsdns 0.444, compiling every change but keeping the resolver's caches across the churned namespace's "
            "changes 0.362, not compiling 0.336, the floor 0.232") in doc
    rates = [r["updates"]["writes_per_s"] for got in (apply_compile, flush) for label in ("mcsdns-w1",)
             for r in got["servers"][label]["rounds"]]
    assert (min(rates), max(rates)) == (103, 146)
    assert "at 103-146 changes a second (mcsdns's rounds) the packet cache was emptied every 7-10 ms" in doc
    assert (round(1000 / max(rates)), round(1000 / min(rates))) == (7, 10)
    rate = json.loads(DIAGNOSTICS[0].read_text())["settings"]["rate"]
    assert (round(rate / max(rates)), round(rate / min(rates))) == (68, 97)  # queries between two emptyings: 70-100
    assert "70-100 queries arrive between two emptyings, over 1,000 names" in doc


def test_the_writes_a_second_the_doc_gives_each_run() -> None:
    doc = flat((ROOT / "docs" / "performance.md").read_text())

    def span(path: Path, *labels: str) -> str:
        servers = json.loads(path.read_text())["servers"]
        rates = [r["updates"]["writes_per_s"] for label in labels for r in servers[label]["rounds"]]
        return f"{min(rates)}-{max(rates)}"

    for label, row in (("mcsdns-w1", "mcsdns"), ("floor", "the floor (`benchmarks/floor.py`)"), ("knot", "Knot DNS"),
                       ("coredns", "CoreDNS")):
        assert re.search(rf"\| {re.escape(row)} \| [^|]+ \|[^|]*\| {span(REFERENCE, label)} \|", doc), label
    everyone = ("mcsdns-w1", "coredns", "floor", "knot")
    assert f"{span(SIX, *everyone)} writes a second" in doc and span(SIX, *everyone) == "97-172"
    assert f"{span(REFERENCE_CPU0, *everyone)} writes a second" in doc and span(REFERENCE_CPU0, *everyone) == "46-61"


def test_performance_doc_quotes_the_landing_code_beside_the_code_before_it() -> None:
    """The run that measured the caches kept across a change: both checkouts applied every write, with the
    same programming p99, and the medians, ratios and round-by-round comparison the doc gives."""
    doc = flat((ROOT / "docs" / "performance.md").read_text())
    servers = json.loads(SCOPED.read_text())["servers"]
    for label in ("mcsdns-w1", "base-w1"):
        for r in servers[label]["rounds"]:
            u = r["updates"]
            assert r["churn"]["lost"] == 0 and u["final_answers_right"] == "20/20" and u["slice_changes"] == u["writes"]
            assert u["programming_p99_s"] == 0.128, (label, u)
    figures = {x: (median(SCOPED, x, "mean_ms"), median(SCOPED, x, "sd_ms")) for x in ("mcsdns-w1", "base-w1", "floor", "coredns")}
    (m, s), (b, bs), (f, fs), (c, cs) = (figures[x] for x in ("mcsdns-w1", "base-w1", "floor", "coredns"))
    assert (f"mcsdns {m:.3f} / {s:.3f} ms, **0.48x / 0.59x** CoreDNS's {c:.3f} / {cs:.3f}, the code before it "
            f"{b:.3f} / {bs:.3f} (0.57x / 0.65x), the floor {f:.3f} / {fs:.3f} (0.39x / 0.53x)") in doc
    assert ratio(SCOPED, "mcsdns-w1", "floor") == (1.23, 1.11) and ratio(SCOPED, "base-w1", "floor") == (1.46, 1.23)
    assert "**1.23x the floor's mean and 1.11x its sd** (the code before it 1.46x and 1.23x)" in doc
    pairs = zip(servers["mcsdns-w1"]["rounds"], servers["base-w1"]["rounds"])
    assert all(new["churn"]["mean_ms"] < old["churn"]["mean_ms"] for new, old in pairs)
    assert "below the code before it in each of the five rounds" in doc
    rates = [r["updates"]["writes_per_s"] for label in servers for r in servers[label]["rounds"]]
    assert (min(rates), max(rates)) == (107, 173) and "churn-scoped-0d11083.json); 107-173 writes a second" in doc
