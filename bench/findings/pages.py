"""A finding's page (docs/findings/<slug>.md) and the index of every page (docs/findings/README.md).

A page's second line is a comment that holds what the index shows of it:
    <!-- finding: source="..." verdict="..." key="..." -->
The index is written from the pages' comments (write_index), and tests/test_findings.py checks
that they agree, so a page re-run with another result cannot leave a stale verdict in the index."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from runner import ROOT, VERDICTS, Claim, command, curves, prepare_commands, run_claim, spread

MARKER = re.compile(r'<!-- finding: source="([^"]*)" verdict="([^"]*)" key="([^"]*)" -->')
INDEX_HEAD = """# Findings

Claims from the literature, tested at small scale with aha's own commands on the embedded
SmolLM2-135M (or the tiny model where a page says so), each on a page of its own with the command,
the seeds, the spread between them, a plot and the verdict with its reason. A verdict holds at
this scale only: a 135M model on a 2-core CPU, with budgets of minutes to an hour. Each page is
written by its script in bench/findings/; this index is written from the pages. On the CPU a page
names, a re-run gives the same numbers (the runs are seeded and deterministic); another CPU's
kernels (bf16 or fp32) draw otherwise (the base model's greedy accuracy on the demo task is
13.5% on an AMD EPYC with AVX512-BF16 and 11.0% on an Intel Xeon with AMX), so elsewhere a re-run
should land within the seeds' spread, not on the same digits.

| claim | source | verdict | key number |
|---|---|---|---|
"""
NOT_YET_HEAD = """
## Not measured yet

These claims have a script to come; until then they have no verdict here. Measured results still
on other pages of the docs (DPO's likelihood displacement and RPO's fix, PURE's PRM
hacking in methods.md) are single runs that move here as their scripts re-run them with seeds.

"""


def page_text(claim: Claim, tables: dict[str, dict[str, list[float]]], verdict: str, reason: str, key: str,
              root: Path, cpu: str, plot: str | None = None, notes: str = "", extra: tuple[str, ...] = ()) -> str:
    """The page's markdown: the claim, how it was run, one table per measured number (each
    condition's value per seed, the mean and the spread), the plot, notes, and the verdict with
    its reason."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r}: one of {', '.join(VERDICTS)}")
    seeds = ", ".join(str(s) for s in claim.seeds)
    lines = [f"# {claim.title}", f'<!-- finding: source="{claim.source}" verdict="{verdict}" key="{key}" -->', "",
             f"**Claim** ({claim.source}): {claim.statement}", "",
             f"**Verdict: {verdict}.** {reason}", "",
             f"**Key number:** {key}", "", "## How it was run", "",
             f"Measured on {cpu}; seeds {seeds}; each run is one command (`.venv/bin/python bench/findings/"
             f"{claim.slug.replace('-', '_')}.py` runs them all, keeping finished ones and resuming stopped ones, then "
             "writes this page):", "", "```bash"]
    lines += [shlex.join(argv) for condition in claim.conditions for seed in claim.seeds
              for argv in [*prepare_commands(condition, seed, root), command(claim, condition, seed, root)]]
    lines += list(extra)  # what the script runs on the trained runs (evaluations)
    lines += ["```", "", "## Results", ""]
    for title, values in tables.items():
        head = "| condition | " + " | ".join(f"seed {s}" for s in claim.seeds) + " | mean | spread |"
        lines += [f"{title}:", "", head, "|---|" + "---|" * (len(claim.seeds) + 2)]
        finite = [v for got in values.values() for v in got if v == v and v != float("inf")]
        whole = all(v == int(v) for v in finite) and max(finite, default=0) > 1  # steps or counts, not rates
        lines += [f"| {name} | " + " | ".join(cell(v, whole) for v in got) + f" | {summary_cells(got, whole)} |"
                  for name, got in values.items()]
        lines.append("")
    if plot:
        lines += [f"![{claim.title}]({plot})", ""]
    if notes:
        lines += [notes.strip(), ""]
    return "\n".join(lines)


def summary_cells(values: list[float], whole: bool) -> str:
    """'mean | spread'; where some seeds never reached (inf) and others did, neither is a number."""
    if float("inf") in values and len(set(values)) > 1:
        return "- | -"
    return f"{cell(mean(values), whole)} | {cell(spread(values) if float('inf') not in values else 0.0, whole)}"


def cell(value: float, whole: bool = False) -> str:
    """A table's number: never-reached (inf) as "never", a missing one (NaN) as "-", a table of
    counts or steps (whole) without decimals, else 3 decimals."""
    if value == float("inf"):
        return "never"
    if value != value:
        return "-"
    if whole:  # a mean of steps may fall between two
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    return f"{value:.3f}"


def plot_curves(claim: Claim, root: Path, panels: dict[str, str], path: Path) -> Path:
    """One panel per metric (metric: its title), one line per condition: the mean over seeds at
    each step, with the seeds' range shaded."""
    fig, axes = new_figure(1, len(panels), figsize=(4.5 * len(panels), 3.4), squeeze=False)
    for ax, (metric, title) in zip(axes[0], panels.items()):
        for name, per_seed in curves(claim, root, metric).items():
            steps = sorted(set().union(*per_seed))
            rows = [[run[s] for run in per_seed if s in run] for s in steps]
            line, = ax.plot(steps, [mean(r) for r in rows], label=name, marker="o" if len(steps) < 4 else None)
            ax.fill_between(steps, [min(r) for r in rows], [max(r) for r in rows], color=line.get_color(), alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize=8)
    return save_figure(fig, path)


def new_figure(*args, **kwargs):
    """matplotlib's plt.subplots(...) drawn off-screen (these machines have no display): (fig, axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def save_figure(fig, path: Path) -> Path:
    """A page's plot as every page writes it: laid out, 110 dpi, the figure closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def read_marker(page: Path) -> tuple[str, str, str]:
    """(source, verdict, key number) of a page, or a ValueError naming it."""
    found = MARKER.search(page.read_text())
    if found is None:
        raise ValueError(f"{page}: no finding comment (<!-- finding: source=... verdict=... key=... -->)")
    return found.group(1), found.group(2), found.group(3)


# The claims that have no page yet: (the page's slug to be, the claim, its source). A
# claim leaves this list when its script writes its page (index_text refuses one in both).
NOT_MEASURED = [
    ("rm-ensembles", "reward-model accuracy predicts best-of-N gains; ensembles (mean, min, mean - k std) against one "
     "head, at selection and as the RL reward under a gold monitor",
     "Coste et al. 2024, RM ensembles (arXiv:2310.02743)"),
    ("prm-credit", "a PRM's min form against its sum form, and 10% verifiable reward mixed in",
     "Cheng et al. 2025, PURE (arXiv:2504.15275)"),
]


def index_text(folder: Path) -> str:
    """The index of every page in folder, in file-name order, then the claims not measured yet."""
    rows = []
    for page in sorted(p for p in folder.glob("*.md") if p.name != "README.md"):
        title = page.read_text().splitlines()[0].removeprefix("# ")
        source, verdict, key = read_marker(page)
        rows.append(f"| [{title}]({page.name}) | {source} | {verdict} | {key} |")
        if page.stem in (slug for slug, _, _ in NOT_MEASURED):
            raise ValueError(f"{page}: its claim is still listed in NOT_MEASURED (bench/findings/pages.py)")
    waiting = [f"- {claim} ({source})" for _, claim, source in NOT_MEASURED]
    return (INDEX_HEAD + ("\n".join(rows) + "\n" if rows else "| (no claim measured yet) | | | |\n")
            + (NOT_YET_HEAD + "\n".join(waiting) + "\n" if waiting else ""))


def write_index(folder: Path) -> Path:
    path = folder / "README.md"
    path.write_text(index_text(folder))
    return path


def cpu_description() -> str:
    """The CPU a page's numbers came from, and whether bf16 autocast was picked on it."""
    from aha.models.compute import native_bf16
    from aha.perf.profile import cpu_model

    return f"{cpu_model()} ({'bf16 autocast' if native_bf16() else 'fp32, no native bf16'}, {os.cpu_count()} cores)"


def record_machine(folder: Path) -> None:
    """Add this machine to folder/machines.txt (one line per CPU that trained or evaluated the
    claim's runs), read back by --page-only wherever the page is written."""
    folder.mkdir(parents=True, exist_ok=True)
    listed = folder / "machines.txt"
    seen = listed.read_text().splitlines() if listed.is_file() else []
    if cpu_description() not in seen:
        listed.write_text("".join(line + "\n" for line in [*seen, cpu_description()]))


def machines(folder: Path) -> str:
    """The CPUs that made a claim's runs, as record_machine listed them."""
    listed = folder / "machines.txt"
    if not listed.is_file():
        raise FileNotFoundError(f"{listed} is missing: it names the CPU the runs came from. Write its one line (the "
                                "CPU model, 'bf16 autocast' or 'fp32, no native bf16', the cores) on that machine")
    return " and ".join(line for line in listed.read_text().splitlines() if line.strip())


def main(claim: Claim, analyse, evaluate=None) -> None:
    """A claim script's body: train what is missing and evaluate(root) it (unless --page-only), then analyse(root) gives
    the page's tables, verdict, reason, key number, plot panels and notes; the page, its plot
    and the index are written."""
    parser = argparse.ArgumentParser(description=f"{claim.title} ({claim.source}): runs, then docs/findings/"
                                                 f"{claim.slug}.md")
    parser.add_argument("--root", type=Path, default=Path("runs/findings"), help="where the runs go (relative to "
                        "the repository)")
    parser.add_argument("--page-only", action="store_true", help="write the page from the runs there, train nothing")
    args = parser.parse_args()
    os.chdir(ROOT)  # the commands and run folders are relative to the repository
    if not args.page_only:
        record_machine(args.root / claim.slug)  # the page names the CPU the runs came from, not the one writing it
        run_claim(claim, args.root)
        if evaluate is not None:  # what the claim measures on the trained runs (evaluate(root))
            evaluate(args.root)
    found = analyse(args.root)
    docs = ROOT / "docs" / "findings"
    if found.plot is not None:  # a plot of its own (not of training curves)
        found.plot(docs / "img" / f"{claim.slug}.png")
    else:
        plot_curves(claim, args.root, found.panels, docs / "img" / f"{claim.slug}.png")
    page = docs / f"{claim.slug}.md"
    text = page_text(claim, found.tables, found.verdict, found.reason, found.key, args.root,
                     machines(args.root / claim.slug), f"img/{claim.slug}.png", found.notes, found.commands)
    earlier = Path(__file__).parent / "earlier" / f"{claim.slug}.md"  # single runs measured before this script
    page.write_text(text + ("\n" + earlier.read_text() if earlier.is_file() else ""))
    write_index(docs)
    print(f"wrote {page} and {docs / 'README.md'}")


@dataclass
class Found:
    """What a claim's analysis concludes from its runs."""
    tables: dict[str, dict[str, list[float]]]  # a table's title -> condition -> one value per seed
    verdict: str
    reason: str
    key: str
    panels: dict[str, str]  # the plot's metrics -> their titles
    notes: str = ""
    commands: tuple[str, ...] = ()  # the commands the script ran after training (evaluations), as shown
    plot: Callable[[Path], None] | None = None  # draws the page's plot instead of panels' training curves
