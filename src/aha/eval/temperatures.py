"""eval.temperatures: the same problems sampled at several temperatures, each temperature
summarised alone and all of them pooled. Different temperatures solve different problems
(temperature scaling), so the pool's pass@k can pass every single temperature's at equal k.

`aha eval --samples N` draws N samples per problem at each of the K temperatures (the same
number at each, so no temperature outweighs another in the pool), each temperature in its own
cache folder whose meta records it: a cache is never mixed across temperatures. A problem's
pool is its N x K samples together; pass@k over it is the unbiased estimator over the pooled
N x K samples (a random k of them, whatever their temperature), and maj@k is majority voting
over them (multi-temperature voting). The pool's curves go on to k = N x K; at k <= N they
compare with each temperature's at an equal number of samples.
"""

from __future__ import annotations


def folder_name(slug: str, temperature: float | None) -> str:
    """A model's sample folder at one temperature; None (rollout.temperature) keeps the plain
    folder every cache drawn before eval.temperatures used."""
    return slug if temperature is None else f"{slug}@T{temperature:g}"


def draw_seed(seed: int, temperature: float | None) -> int:
    """The sampling seed at one temperature. The HF engine draws each token by inverse transform
    of one uniform number, so one seed at every temperature would give each temperature the same
    uniform numbers: samples that agree far more often than independent draws would, and a pool
    less diverse than it should be. A seed per temperature (by its value, not its place in the
    list) keeps them independent; None keeps the seed samples were always drawn with."""
    return seed if temperature is None else (seed + 1000 * round(temperature * 1000)) % 2**32


def entry_label(label: str, temperatures: list[float]) -> str:
    """The report's name for a model at one temperature, or pooled over several."""
    if len(temperatures) == 1:
        return f"{label} @ T={temperatures[0]:g}"
    return f"{label} @ pooled T={','.join(f'{t:g}' for t in temperatures)}"


def pool_samples(by_temperature: dict[float, dict[str, list[dict]]]) -> dict[str, list[dict]]:
    """Each problem's samples at every temperature together, temperature by temperature."""
    ids = next(iter(by_temperature.values())).keys()
    return {pid: [s for got in by_temperature.values() for s in got[pid]] for pid in ids}


def _at(curve: dict | None, k: int) -> str:
    if curve is None or k not in curve["k"]:
        return "-"
    return f"{curve['mean'][curve['k'].index(k)]:.1%}"


def temperature_table(report: dict, label: str) -> list[str]:
    """Printed lines for one model: each temperature's pass@k and maj@k beside the pool's, at
    k = 1, N (equal samples) and N x K (the whole pool)."""
    n, temperatures = report["samples_per_problem"], report["temperatures"]
    ks = sorted({1, n, n * len(temperatures)})
    rows = [(f"T={t:g}", entry_label(label, [t])) for t in temperatures]
    rows.append(("pooled", entry_label(label, temperatures)))
    header = ["temperature", *(f"pass@{k}" for k in ks), *(f"maj@{k}" for k in ks if k > 1), "mean length"]
    table = [header]
    for name, entry in rows:
        summary = report["models"][entry]
        curves = summary["curves"]
        table.append([name, *(_at(curves["pass@k"], k) for k in ks),
                      *(_at(curves.get("maj@k"), k) for k in ks if k > 1), f"{summary['length']['mean']:.1f}"])
    widths = [max(len(row[j]) for row in table) for j in range(len(header))]
    lines = [f"{label}: {summary['problems']} problems x {n} samples at each of {len(temperatures)} temperatures "
             f"({n * len(temperatures)} pooled)"]
    lines += ["  " + "  ".join(cell.rjust(w) if j else cell.ljust(w) for j, (cell, w) in enumerate(zip(row, widths)))
              for row in table]
    return lines
