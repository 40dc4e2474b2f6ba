"""report.html: one self-contained file (plots embedded as PNG) that opens offline.

The eval report (`aha eval --samples`) lives here; the training run's report
(`aha report RUN`, tracking/run_report.py) builds on the same page helpers and embeds
the eval sections."""

from __future__ import annotations

import base64
import html
import io

from aha.prompts import prompt_text

STYLE = ("body{font-family:sans-serif;max-width:1250px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
         "pre{white-space:pre-wrap;margin:0.3em 0;font-size:0.85em}.plots img{margin:0.5em;border:1px solid #eee}"
         ".flag{color:#b00020}details{margin:1em 0}")


def pyplot():
    """matplotlib without a display: the Agg backend renders straight to PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    pyplot().close(fig)
    return buffer.getvalue()


def img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def page(title: str, parts: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>")


def pct(x: float) -> str:
    return f"{x:.1%}"


def curve_png(report: dict, curve: str) -> bytes:
    """Each model's mean curve over k (log2 axis) with its 95% bootstrap band."""
    fig, ax = pyplot().subplots(figsize=(6, 4), dpi=100)
    ks = []
    for label, summary in report["models"].items():
        c = summary["curves"].get(curve)
        if c is None:  # e.g. a cache drawn before this score existed
            continue
        # eval.temperatures: each temperature dashed, their pool solid, so the pool stands out beside them
        alone = bool(report.get("temperatures")) and len(summary.get("temperatures", ())) == 1
        (line,) = ax.plot(c["k"], c["mean"], marker="o", markersize=3, label=label, linestyle="--" if alone else "-")
        ax.fill_between(c["k"], c["lo"], c["hi"], color=line.get_color(), alpha=0.2)
        ks = max(ks, c["k"], key=len)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, labels=[str(k) for k in ks])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel(curve)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{curve} on {report['task']}")
    return figure_png(fig)


def curve_names(report: dict) -> list[str]:
    """Every curve any model has, in the order summarize() makes them."""
    return list(dict.fromkeys(name for s in report["models"].values() for name in s["curves"]))


def eval_sections(report: dict, heading: str = "h1") -> list[str]:
    """The eval report's body: table, coverage and crossings, plots, examples."""
    e = html.escape
    curves = curve_names(report)
    rows = []
    for label, s in report["models"].items():
        at_n = "".join(f"<td>{pct(s['curves'][c]['mean'][-1]) if c in s['curves'] else '-'}</td>" for c in curves)
        rows.append(f"<tr><td>{e(label)}</td><td>{s['problems']}</td><td>{s['samples_per_problem']}</td>"
                    f"<td>{pct(s['curves']['pass@k']['mean'][0])}</td>{at_n}"
                    f"<td>{s['length']['mean']:.1f}</td><td>{pct(s['length']['truncated_frac'])}</td></tr>")
    header = "".join(f"<th>{e(c.replace('@k', '@n').replace('_of_k', '-of-n'))}</th>" for c in curves)
    parts = [f"<{heading}>{e(report['task'])}: what changed</{heading}>",
             "<table><tr><th>model</th><th>problems</th><th>n</th><th>pass@1</th>" + header
             + "<th>mean length</th><th>truncated</th></tr>" + "".join(rows) + "</table>"]
    comparison = report.get("comparison") or {}
    if comparison:
        a, b = (e(m) for m in comparison["models"])
        cov = comparison["coverage"]
        crossings = comparison["pass@k_crossings"]
        where = ("; ".join(f"between k = {c['between_k'][0]} and {c['between_k'][1]}" for c in crossings)
                 if crossings else "nowhere")
        parts.append(f"<p>Solved at any k: both {len(cov['both'])}, only {a} {len(cov['only_a'])}, "
                     f"only {b} {len(cov['only_b'])}, neither {len(cov['neither'])}. "
                     f"The pass@k curves cross {where}.</p>")
    for label, s in report["models"].items():
        for metric, why in s.get("not_computable", {}).items():
            parts.append(f"<p><b>{e(metric)} not computable</b> for {e(label)}: {e(why)}.</p>")
    parts.append('<div class="plots">' + "".join(img(curve_png(report, c), c) for c in curves) + "</div>")
    examples = report.get("examples", [])
    if examples:
        parts.append("<h3>Examples</h3><table><tr><th>problem</th><th>answer</th>"
                     + "".join(f"<th>{e(m)}</th>" for m in report["models"]) + "</tr>")
        for ex in examples:
            cells = "".join(f"<td>{m['correct']}/{m['n']}<pre>{e(m['sample'])}</pre></td>"
                            for m in ex["models"].values())
            parts.append(f"<tr><td>{e(prompt_text(ex['prompt']))}<br><small>{e(ex['group'])}</small></td>"
                         f"<td>{e(str(ex['answer']))}</td>{cells}</tr>")
        parts.append("</table>")
    return parts


def eval_report_html(report: dict) -> str:
    return page(f"aha eval: {report['task']}", eval_sections(report))
