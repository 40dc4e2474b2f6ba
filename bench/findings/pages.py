"""A finding's page (docs/findings/<slug>.md) and the index of every page (docs/findings/README.md).

A page's second line is a comment that holds what the index shows of it:
    <!-- finding: source="..." verdict="..." key="..." -->
The index is written from the pages' comments (write_index), and tests/test_findings.py checks
that they agree, so a page re-run with another result cannot leave a stale verdict in the index."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from runner import VERDICTS, Claim, Summary, command

MARKER = re.compile(r'<!-- finding: source="([^"]*)" verdict="([^"]*)" key="([^"]*)" -->')
INDEX_HEAD = """# Findings

Claims from the literature, tested at small scale with aha's own commands on the embedded
SmolLM2-135M (or the tiny model where a page says so), each on a page of its own with the command,
the seeds, the spread between them, a plot and the verdict with its reason. A verdict holds at
this scale only: a 135M model on a 2-core CPU, with budgets of minutes to an hour. Each page is
written by its script in bench/findings/ (re-running it reproduces the table within the stated
spread); this index is written from the pages.

| claim | source | verdict | key number |
|---|---|---|---|
"""


def page_text(claim: Claim, summary: Summary, verdict: str, reason: str, key: str, root: Path, cpu: str,
              plot: str | None = None) -> str:
    """The page's markdown: the claim, how it was run, the table (each condition's metric per
    seed, mean and spread), the plot, and the verdict with its reason."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r}: one of {', '.join(VERDICTS)}")
    seeds = ", ".join(str(s) for s in claim.seeds)
    lines = [f"# {claim.title}", f'<!-- finding: source="{claim.source}" verdict="{verdict}" key="{key}" -->', "",
             f"**Claim** ({claim.source}): {claim.statement}", "",
             f"**Verdict: {verdict}.** {reason}", "",
             f"**Key number:** {key}", "", "## How it was run", "",
             f"Measured on {cpu}; seeds {seeds}; each run is one command (the script `bench/findings/"
             f"{claim.slug}.py` runs them all, skipping finished ones):", "", "```bash"]
    lines += [shlex.join(command(claim, condition, "$SEED", root)) for condition in claim.conditions]
    lines += ["```", "", "## Results", "", f"`{claim.metric}` at the last held-out evaluation:", "",
              "| condition | " + " | ".join(f"seed {s}" for s in claim.seeds) + " | mean | spread |",
              "|---|" + "---|" * (len(claim.seeds) + 2)]
    for condition in claim.conditions:
        values = summary.values[condition.name]
        lines.append(f"| {condition.name} | " + " | ".join(f"{v:.3f}" for v in values)
                     + f" | {summary.mean(condition.name):.3f} | {summary.spread(condition.name):.3f} |")
    if plot:
        lines += ["", f"![{claim.title}]({plot})"]
    return "\n".join(lines) + "\n"


def read_marker(page: Path) -> tuple[str, str, str]:
    """(source, verdict, key number) of a page, or a ValueError naming it."""
    found = MARKER.search(page.read_text())
    if found is None:
        raise ValueError(f"{page}: no finding comment (<!-- finding: source=... verdict=... key=... -->)")
    return found.group(1), found.group(2), found.group(3)


def index_text(folder: Path) -> str:
    """The index of every page in folder, in file-name order."""
    rows = []
    for page in sorted(p for p in folder.glob("*.md") if p.name != "README.md"):
        title = page.read_text().splitlines()[0].removeprefix("# ")
        source, verdict, key = read_marker(page)
        rows.append(f"| [{title}]({page.name}) | {source} | {verdict} | {key} |")
    return INDEX_HEAD + ("\n".join(rows) + "\n" if rows else "| (no claim measured yet) | | | |\n")


def write_index(folder: Path) -> Path:
    path = folder / "README.md"
    path.write_text(index_text(folder))
    return path
