"""Merge every part's JSON (``benchmarks/results/*.json``) into one Markdown table
(``benchmarks/results/report.md``) and plot the ratios to ``docs/benchmarks/ratios.png`` (the
start-up phases of ``results/startup.json`` to ``docs/benchmarks/startup.png``, and the worker memory
and throughput against data size of ``results/memory.json`` to ``docs/benchmarks/memory.png``).

    python benchmarks/report.py            (nox -s bench_report; needs matplotlib for the PNG)

Rows with a target are compared with it (``met`` / ``**MISSED**`` / ``n/a``); the ``scale`` rows
become one wide table per measurement (x1, x4, x16).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import startup
from harness import RESULTS, fmt, verdict

ORDER = ["training", "startup", "tf", "data", "memory", "inference", "openvino"]
PNG = HERE.parent / "docs" / "benchmarks" / "ratios.png"
MEMORY_PNG = HERE.parent / "docs" / "benchmarks" / "memory.png"


def _value(r: dict) -> str:
    v = r.get("value")
    if v is None:
        return "n/a"
    digits = 2 if r.get("unit") == "s" else 0
    out = f"{fmt(v, digits)} {r.get('unit') or ''}".strip()
    if r.get("mb_per_s"):
        out += f" ({fmt(r['mb_per_s'], 0)} MB/s)"
    return out


def _note(r: dict) -> str:
    note = str(r.get("note") or "")
    if len(note) > 160:
        note = note[:157] + "..."
    return note.replace("|", "/").replace("\n", " ")


def markdown(rows: list[dict]) -> str:
    main = [r for r in rows if r.get("part") != "scale"]
    parts = sorted({r.get("part", "?") for r in main}, key=lambda p: (ORDER.index(p) if p in ORDER else 99, p))
    lines = ["| part | measurement | Orca | reference | ratio | target | verdict | note |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for part in parts:
        for r in (r for r in main if r.get("part", "?") == part):
            ref = r.get("reference")
            ref_s = fmt(ref, 2 if r.get("unit") == "s" else 0) if ref is not None else ""
            lines.append(f"| {part} | {r['name']} | {_value(r)} | {ref_s} | {fmt(r.get('ratio'), 3)} "
                         f"| {r.get('target') or ''} | {verdict(r)} | {_note(r)} |")
    scale = [r for r in rows if r.get("part") == "scale"]
    if scale:
        scales = sorted({int(r.get("scale", 1)) for r in scale})
        lines += ["", "Scale: value (ratio) as the data grows; the ratio is against the row's own reference "
                  "(training: the same configuration at x1)", "",
                  "| measurement | " + " | ".join(f"x{s}" for s in scales) + " |",
                  "|---|" + "---:|" * len(scales)]
        names = list(dict.fromkeys(r["name"] for r in scale))
        for name in names:
            cells = []
            for s in scales:
                r = next((r for r in scale if r["name"] == name and int(r.get("scale", 1)) == s), None)
                if r is None or r.get("value") is None:
                    cells.append("n/a")
                else:
                    cells.append(f"{fmt(r['value'])} ({fmt(r.get('ratio'), 2)})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load() -> tuple[list[dict], list[dict]]:
    """Every part's rows, and a line per part (its time, quick or not, load before/after)."""
    rows, parts = [], []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        if "rows" not in doc or path.stem == "report":  # the old torch.json; this script's own output
            continue
        rows += doc["rows"]
        m = doc.get("machine", {})
        parts.append({"part": doc.get("part", path.stem), "created": doc.get("created"),
                      "quick": doc.get("settings", {}).get("quick"), "total_s": doc.get("total_s"),
                      "load_before": m.get("load_average_before"), "load_after": m.get("load_average_after")})
    return rows, parts


def plot(rows: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"no PNG: {exc}")
        return None
    main = [r for r in rows if r.get("part") != "scale" and r.get("target") not in (None, "", "-")]
    scale = [r for r in rows if r.get("part") == "scale" and r.get("ratio") is not None]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(16, max(5, 0.32 * len(main) + 1.5)),
                                  gridspec_kw={"width_ratios": [3, 2]})
    labels = [f"[{r['part']}] {r['name']}"[:80] for r in main]
    values = [r["ratio"] if r.get("ratio") is not None else 0.0 for r in main]
    colors = []
    for r in main:
        v = verdict(r)
        colors.append("#3a923a" if v == "met" else "#c0392b" if "MISSED" in v else "#999999")
    y = range(len(main))
    top = min(3.0, max(values, default=1.0) + 0.3)  # a 7x ratio would squash every other bar
    ax.set_xlim(0, top)
    ax.barh(list(y), [min(v, top) for v in values], color=colors)
    for i, r in enumerate(main):
        target = r.get("target")
        bound = float(str(target).split()[-1]) if target else None
        if bound is not None:
            ax.plot([bound, bound], [i - 0.4, i + 0.4], color="black", lw=1)
        label = "n/a" if r.get("ratio") is None else f"{values[i]:.2f}"
        ax.text(min(values[i], top - 0.25) + 0.01, i, label, va="center", fontsize=7)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (Orca / reference; start-up: reference time / Orca time). Black tick: target")
    ax.set_title("Orca against its peers (green met, red missed, grey n/a)")
    for name in dict.fromkeys(r["name"] for r in scale):
        pts = sorted((int(r["scale"]), r["ratio"]) for r in scale if r["name"] == name)
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name[:60])
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("data scale (rows x)")
    ax2.set_ylabel("ratio")
    ax2.set_title("Scale: ratio as the data grows")
    ax2.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_memory(doc_path: Path = RESULTS / "memory.json", png: Path = MEMORY_PNG) -> Path | None:
    """Two panels from ``memory.py``'s runs: the busiest worker's peak anonymous RSS, and rows/s of
    the second epoch, against the data size (log x); a line per system and mode. The data path's
    rows/s (Orca's load against the bare ``mapInArrow`` read) are dashed in the second panel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"no memory PNG: {exc}")
        return None
    import memory

    doc = json.loads(doc_path.read_text())
    res = doc.get("raw", doc)  # run.py's part record, or memory.py's own --out
    runs, disk_mb = res.get("runs", []), res.get("disk_mb", memory.DISK_MB)
    mb_per_row = (res.get("width", memory.WIDTH) * 4 + 8) / 1e6
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(15, 5.5))
    lines: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if r.get("system") != "datapath":
            lines.setdefault((r["system"], r["mode"]), []).append(r)
    colors = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(s for s, _ in lines))}
    for (system, mode), rs in lines.items():
        rs, name = sorted(rs, key=lambda r: r["scale"]), memory.label(system, mode, disk_mb)
        style = {"linestyle": ":" if mode == "memory" else "-", "marker": "o", "color": colors[system]}
        anon = [(r["rows"] * mb_per_row, r["anon_peak_mb"]) for r in rs if r.get("anon_peak_mb") is not None]
        rate = [(r["rows"] * mb_per_row, r["rows_per_s"]) for r in rs if r.get("rows_per_s") is not None]
        ax.plot([p[0] for p in anon], [p[1] for p in anon], label=name, **style)
        ax2.plot([p[0] for p in rate], [p[1] for p in rate], label=name, **style)
    data = sorted((r for r in runs if r.get("system") == "datapath" and r.get("rows_per_s")), key=lambda r: r["scale"])
    for key, name in (("bare", "data path: bare mapInArrow read"), ("orca-memory", "data path: Orca load, in memory"),
                      ("orca-disk", f"data path: Orca load, to disk ({disk_mb:g} MB)")):
        ax2.plot([r["rows"] * mb_per_row for r in data], [r["rows_per_s"][key] for r in data], linestyle="--",
                 marker="x", label=name, color=f"C{len(colors) + len(ax2.lines) - len(lines)}")
    sizes = sorted({r["rows"] * mb_per_row for r in runs if r.get("rows")})
    for a, ylabel, title in ((ax, "MB", "Busiest worker's peak anonymous RSS (RssAnon, sampled every 50 ms)"),
                             (ax2, "rows/s", "Throughput: epoch 2 of the fit; the data path, load only")):
        a.set_xscale("log", base=2)
        a.set_xticks(sizes, [f"{s:,.0f} MB" for s in sizes])
        a.minorticks_off()
        a.set_xlabel(f"data size (rows of {res.get('width', memory.WIDTH) * 4} B; x1 = {res.get('base_rows', 0):,} rows)")
        a.set_ylabel(ylabel)
        a.set_title(title, fontsize=10)
        a.grid(alpha=0.3)
    ax.set_ylim(bottom=0)
    ax2.set_yscale("log")
    ax.legend(fontsize=7)
    ax2.legend(fontsize=6)
    when = f" ({doc['created']}, {'quick' if doc.get('settings', {}).get('quick') else 'full'} run)" \
        if "created" in doc else ""
    fig.suptitle(f"Worker memory and throughput against data size{when}; dotted: share in memory", fontsize=11)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--png", default=str(PNG))
    a, _ = p.parse_known_args(argv)  # the suite's options (--quick, --parts) are not for the report
    rows, parts = load()
    if not rows:
        print(f"no results under {RESULTS}; run nox -s bench first")
        return 1
    md = markdown(rows)
    head = [f"Benchmark report, {time.strftime('%Y-%m-%d %H:%M')}", ""]
    for pt in parts:
        head.append(f"- {pt['part']}: {pt['created']}, {'quick' if pt['quick'] else 'full'} run, "
                    f"{fmt(pt['total_s'])} s, load average before {pt['load_before']} after {pt['load_after']}")
    text = "\n".join(head) + "\n\n" + md + "\n"
    phased = [r for r in rows if r.get("phases")]
    if phased:
        text += "\nStart-up, phase by phase (median seconds; benchmarks/startup.py)\n\n" + startup.table(phased) + "\n"
    (RESULTS / "report.md").write_text(text)
    (RESULTS / "report.json").write_text(json.dumps({"parts": parts, "rows": rows}, indent=1, default=str))
    print(text)
    png = plot(rows, Path(a.png))
    print(f"wrote {RESULTS / 'report.md'}" + (f" and {png}" if png else ""))
    if (RESULTS / "startup.json").exists():
        png = startup.plot(RESULTS / "startup.json", startup.PNG)
        print(f"wrote {png}" if png else "no start-up PNG")
    if (RESULTS / "memory.json").exists():
        png = plot_memory(RESULTS / "memory.json", MEMORY_PNG)
        print(f"wrote {png}" if png else "no memory PNG")
    return 0


if __name__ == "__main__":
    sys.exit(main())
