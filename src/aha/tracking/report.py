"""report.html: one self-contained file (plots embedded as PNG) that opens offline."""

from __future__ import annotations

import base64
import html
import io

CURVES = ["pass@k", "maj@k", "best_of_k (mean log-prob)"]


def curve_png(report: dict, curve: str) -> bytes:
    """Each model's mean curve over k (log2 axis) with its 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for label, summary in report["models"].items():
        c = summary["curves"][curve]
        (line,) = ax.plot(c["k"], c["mean"], marker="o", markersize=3, label=label)
        ax.fill_between(c["k"], c["lo"], c["hi"], color=line.get_color(), alpha=0.2)
    ax.set_xscale("log", base=2)
    ks = next(iter(report["models"].values()))["curves"][curve]["k"]
    ax.set_xticks(ks, labels=[str(k) for k in ks])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel(curve)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{curve} on {report['task']}")
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _pct(x: float) -> str:
    return f"{x:.1%}"


def eval_report_html(report: dict) -> str:
    e = html.escape
    rows = []
    for label, s in report["models"].items():
        last = lambda name: s["curves"][name]["mean"][-1]
        first = s["curves"]["pass@k"]["mean"][0]
        n = s["samples_per_problem"]
        rows.append(f"<tr><td>{e(label)}</td><td>{s['problems']}</td><td>{n}</td><td>{_pct(first)}</td>"
                    f"<td>{_pct(last('pass@k'))}</td><td>{_pct(last('maj@k'))}</td><td>{_pct(last(CURVES[2]))}</td>"
                    f"<td>{s['length']['mean']:.1f}</td><td>{_pct(s['length']['truncated_frac'])}</td></tr>")
    parts = [f"<h1>{e(report['task'])}: what changed</h1>",
             "<table><tr><th>model</th><th>problems</th><th>n</th><th>pass@1</th><th>pass@n</th><th>maj@n</th>"
             "<th>best-of-n (log-prob)</th><th>mean length</th><th>truncated</th></tr>" + "".join(rows) + "</table>"]
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
    parts.append('<div class="plots">' + "".join(_img(curve_png(report, c), c) for c in CURVES) + "</div>")
    examples = report.get("examples", [])
    if examples:
        parts.append("<h2>Examples</h2><table><tr><th>problem</th><th>answer</th>"
                     + "".join(f"<th>{e(m)}</th>" for m in report["models"]) + "</tr>")
        for ex in examples:
            cells = "".join(f"<td>{m['correct']}/{m['n']}<pre>{e(m['sample'])}</pre></td>" for m in ex["models"].values())
            parts.append(f"<tr><td>{e(ex['prompt'])}<br><small>{e(ex['group'])}</small></td>"
                         f"<td>{e(str(ex['answer']))}</td>{cells}</tr>")
        parts.append("</table>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
             "pre{white-space:pre-wrap;margin:0.3em 0;font-size:0.85em}.plots img{margin:0.5em;border:1px solid #eee}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>aha eval: {e(report['task'])}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
