"""Figures of result files: bandwidth over time and latency CDF per mount; scaling and AU of a sweep.

matplotlib is imported only here and only when a plot is asked for (the `plot` extra). Figures are
built on matplotlib.figure.Figure with the Agg canvas, never through pyplot: no GUI backend, no
global state, so a test can build one and look at its axes.
"""
from __future__ import annotations

import html
import io
import os

import numpy as np

from .errors import IodlError, UsageError
from .result import kind, workload_name

FORMATS = (".png", ".html")
MISSING = "plotting needs matplotlib: pip install matplotlib"


def check_path(path: str) -> str:
    """The output format ('.png' or '.html'), or a UsageError before any work is done."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise UsageError(f"--plot {path}: unknown format {ext or '(no extension)'}; use .png or .html")
    return ext


def require_matplotlib() -> None:
    """Fail with the install hint (before anything is printed), not with an ImportError later."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise IodlError(MISSING) from None


def _figure(width: float, height: float):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(docs: list[dict], what: str) -> str:
    names = dict.fromkeys(f"{d.get('pattern', '?')} · {workload_name(d)}" for d in docs)
    return f"{what}: {', '.join(names)}"


def _short(path: str, width: int = 40) -> str:
    """Mount paths can be long; the tail says which one it is."""
    return path if len(path) <= width else "…" + path[-(width - 1):]


def figure(docs: list[tuple[str, dict]]):
    """The figure for (file name, document) pairs, all of one kind."""
    kinds = {kind(d) for _n, d in docs}
    if len(kinds) != 1:
        raise UsageError("--plot overlays files of one kind: give read results or sweeps, not both")
    return sweep_figure(docs) if kinds == {"sweep"} else read_figure(docs)


def read_figure(docs: list[tuple[str, dict]]):
    """Left: MB/s over time, one line per mount (per file and mount when several files). Right: latency CDF."""
    fig = _figure(12, 4.8)
    from matplotlib import rcParams

    ax_bw, ax_lat = fig.subplots(1, 2)
    several = len(docs) > 1
    colors = [c["color"] for c in rcParams["axes.prop_cycle"]]
    # a mount keeps its colour in both panels; overlaid files differ by line style, or by colour
    # when each file has one mount
    per_file = several and all(len((d.get("series") or {}).get("mounts") or d.get("mounts") or []) <= 1
                               for _n, d in docs)

    def style(f: int, m: int | None) -> dict:
        color = "0.2" if m is None else colors[(f if per_file else m) % len(colors)]
        dash = "-" if per_file or not several else ("-", "--", ":", "-.")[f % 4]
        return {"color": color, "linestyle": dash, "linewidth": 1.6}

    drawn_bw = drawn_lat = 0
    for f, (name, doc) in enumerate(docs):
        base = os.path.basename(name)
        series = doc.get("series") or {}
        bucket_s = float(series.get("bucket_s") or 1.0)
        mounts = doc.get("mounts") or []
        for m, entry in enumerate(series.get("mounts") or []):
            label = _label(base, entry.get("path", f"mount {m}"), several, len(series["mounts"]))
            t = np.asarray(entry.get("t_s") or [], dtype=float)
            b = np.asarray(entry.get("bytes") or [], dtype=float)[:len(t)]
            if not len(b):
                continue
            t = t[:len(b)]
            # each value holds for its whole bucket: a step, closed at the end of the last bucket
            ax_bw.step(np.append(t, t[-1] + bucket_s), np.append(b, b[-1]) / bucket_s / 1e6, where="post",
                       label=label, **style(f, m))
            drawn_bw += 1
        hists = [(i, m.get("path", f"mount {i}"), m.get("latency_hist")) for i, m in enumerate(mounts)]
        if not any(h for _i, _p, h in hists) and (doc.get("total") or {}).get("latency_hist"):
            hists = [(None, "total", doc["total"]["latency_hist"])]
        for m, path, hist in hists:
            x, y = _cdf(hist)
            if not len(x):   # a mount without requests (fewer ranks than mounts) has no distribution
                continue
            ax_lat.step(x, y, where="post", label=_label(base, path, several, len(hists)), **style(f, m))
            drawn_lat += 1
        ramp = doc.get("ramp_s")
        if not several and isinstance(ramp, (int, float)) and ramp > 0 and drawn_bw:
            ax_bw.axvspan(0, ramp, color="0.9", zorder=0, label="ramp (not measured)")
    if not drawn_bw and not drawn_lat:
        raise UsageError("nothing to plot: no time series or latency histogram in "
                         + ", ".join(os.path.basename(n) for n, _d in docs) + " (written by an older iodl?)")

    ax_bw.set(xlabel="time since start (s)", ylabel="bandwidth (MB/s)", title="bandwidth per mount")
    ax_bw.set_xlim(left=0)
    ax_bw.set_ylim(bottom=0)
    ax_bw.yaxis.set_major_formatter(_thousands())
    ax_lat.set(xlabel="read latency (µs, log scale)", ylabel="fraction of requests", title="latency CDF per mount")
    ax_lat.set_ylim(0, 1.02)
    for ax, drawn in ((ax_bw, drawn_bw), (ax_lat, drawn_lat)):
        ax.grid(True, which="major", alpha=0.35)
        if drawn:
            ax.legend(fontsize="small", loc="best")
        else:
            ax.text(0.5, 0.5, "not in these files", transform=ax.transAxes, ha="center", color="0.5")
    if drawn_lat:
        _log_us_axis(ax_lat)
    title = _title([d for _n, d in docs], "iodl read")
    if not several:
        d = docs[0][1]
        mode = "" if "direct" not in d else (", O_DIRECT" if d["direct"] else ", buffered")
        title += f" — {d.get('ranks', '?')} rank(s), engine {d.get('engine', '?')}{mode}, iodepth {d.get('iodepth', '?')}"
    fig.suptitle(title)
    return fig


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:g}")


def _log_us_axis(ax) -> None:
    """Log scale labelled in plain µs (250, 1,000), not 10^n; 1-2-5 ticks when the range is narrow."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    if hi / max(lo, 1e-9) < 1e3:   # under three decades a decade-only axis has one or two labels
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="minor", alpha=0.12)


def _label(base: str, path: str, several_files: bool, n_mounts: int) -> str:
    if not several_files:
        return _short(path)
    return base if n_mounts == 1 else f"{base}: {_short(path, 28)}"


def _cdf(hist) -> tuple[np.ndarray, np.ndarray]:
    """(latency µs, fraction of requests at or below it), starting from 0 at the first bucket."""
    if not isinstance(hist, dict):
        return np.array([]), np.array([])
    ns = np.asarray(hist.get("ns") or [], dtype=float)
    count = np.asarray(hist.get("count") or [], dtype=float)[:len(ns)]
    ns = ns[:len(count)]
    keep = (count > 0) & (ns > 0)    # a log axis has no place for 0 ns
    ns, count = ns[keep], count[keep]
    if not len(ns) or count.sum() <= 0:
        return np.array([]), np.array([])
    order = np.argsort(ns)
    us, frac = ns[order] / 1e3, np.cumsum(count[order]) / count.sum()
    return np.append(us[:1], us), np.append(0.0, frac)


def linear_reference(points: list[dict]) -> dict[int, float]:
    """samples/s that perfect scaling from the smallest measured point would give at each rank count."""
    ok = sorted((p for p in points if _finite(p.get("samples_per_s")) and p.get("ranks")), key=lambda p: p["ranks"])
    if not ok:
        return {}
    per_rank = ok[0]["samples_per_s"] / ok[0]["ranks"]
    return {p["ranks"]: per_rank * p["ranks"] for p in points if p.get("ranks")}


def sweep_figure(docs: list[tuple[str, dict]]):
    """Left: samples/s vs ranks with the linear reference. Right: AU vs ranks, the threshold, the supported count."""
    fig = _figure(12, 4.8)
    from matplotlib import rcParams

    ax_sc, ax_au = fig.subplots(1, 2)
    several = len(docs) > 1
    colors = [c["color"] for c in rcParams["axes.prop_cycle"]]
    thresholds, all_ranks, partial_labelled, marks = set(), set(), False, []
    for i, (name, doc) in enumerate(docs):
        color = colors[i % len(colors)]
        base = os.path.basename(name)
        points = sorted((p for p in doc.get("points") or []
                         if isinstance(p, dict) and isinstance(p.get("ranks"), int)), key=lambda p: p["ranks"])
        all_ranks.update(p["ranks"] for p in points)
        sps = [(p["ranks"], p["samples_per_s"]) for p in points if _finite(p.get("samples_per_s"))]
        if sps:
            r, s = zip(*sps)
            ax_sc.plot(r, s, "o-", color=color, label=base if several else "measured", linewidth=1.8)
            lin = linear_reference(points)
            ax_sc.plot(r, [lin[x] for x in r], "--", color=color, alpha=0.7,
                       label=f"{base}: linear from {r[0]} rank(s)" if several else f"linear from {r[0]} rank(s)")
        aus = [(p["ranks"], 100 * p["au"]) for p in points if _finite(p.get("au"))]
        if aus:
            r, a = zip(*aus)
            ax_au.plot(r, a, "o-", color=color, label=base if several else "measured AU", linewidth=1.8)
        # a point stopped by a signal (iodl read exit 130) still has figures, over a shorter run: ring it
        partial = [(p["ranks"], 100 * p["au"]) for p in points if p.get("exit_code") and _finite(p.get("au"))]
        if partial:
            r, a = zip(*partial)
            ax_au.plot(r, a, "o", markersize=13, markerfacecolor="none", markeredgecolor="red",
                       label=None if partial_labelled else "partial run")
            partial_labelled = True
        thresholds.add(float(doc.get("au_threshold", 0.9)))
        supported = doc.get("accelerators_supported")
        if isinstance(supported, int) and supported > 0:
            marks.append((supported, color, f"supported: {supported}" + (f" ({base})" if several else ""), i))
    if not all_ranks:
        raise UsageError("nothing to plot: no points in " + ", ".join(os.path.basename(n) for n, _d in docs))
    for t in sorted(thresholds):
        ax_au.axhline(100 * t, color="0.35", linestyle=":", linewidth=1.4, label=f"threshold {100 * t:.0f}%")

    ax_sc.set(xlabel="ranks (emulated accelerators)", ylabel="throughput (samples/s)", title="scaling")
    ax_au.set(xlabel="ranks (emulated accelerators)", ylabel="accelerator utilisation AU (%)",
              title="AU and accelerators supported")
    ax_sc.set_ylim(bottom=0)
    ax_sc.yaxis.set_major_formatter(_thousands())
    ax_au.set_ylim(0, 105)
    lo, hi = min(all_ranks), max(all_ranks)
    wide = hi / lo >= 16    # 1..64 ranks on a linear axis crowd the small counts into one corner
    for ax in (ax_sc, ax_au):
        if wide:
            ax.set_xscale("log", base=2)
            ax.set_xlim(lo / 1.4, hi * 1.4)
        else:
            ax.set_xlim(0, hi * 1.05 + 0.5)
        if len(all_ranks) <= 12:
            ax.set_xticks(sorted(all_ranks))
            ax.set_xticklabels([str(r) for r in sorted(all_ranks)])
            ax.minorticks_off()
        ax.grid(True, alpha=0.35)
        ax.legend(fontsize="small", loc="best")
    x0, x1 = ax_au.get_xlim()
    for supported, color, text, i in marks:
        ax_au.axvline(supported, color=color, linestyle="-.", alpha=0.8, linewidth=1.2)
        # the label goes on the side of the line that has room
        frac = (np.log(supported / x0) / np.log(x1 / x0)) if wide else (supported - x0) / (x1 - x0)
        right = frac < 0.6
        ax_au.annotate(text, xy=(supported, 0.04 + 0.08 * i), xycoords=("data", "axes fraction"),
                       xytext=(4 if right else -4, 0), textcoords="offset points", ha="left" if right else "right",
                       color=color, fontsize="small")
    fig.suptitle(_title([d for _n, d in docs], "iodl sweep"))
    return fig


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))


def save(fig, path: str) -> None:
    """PNG, or one self-contained HTML page with the figure inline as SVG; written atomically."""
    ext = check_path(path)
    if ext == ".png":
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        data = buf.getvalue()
    else:
        data = _html(fig, os.path.basename(path)).encode("utf-8")
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _html(fig, name: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")   # text drawn as paths: the page needs no fonts and no other file
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]   # the XML prolog and DOCTYPE do not belong inside HTML
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(name)}</title>\n'
            "<style>body{margin:1em} svg{max-width:100%;height:auto}</style></head>\n"
            f"<body>\n{svg}\n</body></html>\n")


def plot(docs: list[tuple[str, dict]], path: str) -> None:
    """`iodl report --plot`: check the output format, draw, write."""
    check_path(path)
    save(figure(docs), path)
