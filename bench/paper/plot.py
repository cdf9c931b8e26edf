"""Plots and summary of one bench/paper/run.sh group.

    python3 bench/paper/plot.py [--no-plot] LOGDIR

Reads LOGDIR/runs.jsonl (one record per run: group, panel, series, x,
engine flags, the engine counters' change, pagedllm-load's line under
"load"), prints the summary and, unless --no-plot, draws PNGs into LOGDIR
with matplotlib:

  rate groups (basic, h200, llama3, sampling, prefix, chat):
    latency.png  mean normalized latency (s/token) against the offered
                 rate, one panel per workload or variant, one line per
                 policy;
    batch.png    (basic, h200, llama3) mean running requests from
                 /metrics against the rate;
  memsave        saving.png: KV blocks saved by sharing, in %, against the
                 width, parallel sampling and beam search;
  blocksize      latency.png against the block size;
  preempt        latency.png against the block size, one line per mode.

The summary's "rate at L*" is where a policy's latency curve first passes
L* = LSTAR_X x the lowest latency of the panel (linear interpolation
between the rates around the crossing; ">= R" when it never passes it up
to the last rate R measured), and its ratio to paged's is the paper's "n x
the request rate at the same latency".
"""
import json
import os
import sys

LSTAR_X = 2.0
TITLES = {
    ("basic", "latency"): "Figs. 14-15: Llama-2-7B shape, KV held at 15,728 tokens",
    ("basic", "batch"): "Figs. 16-17: Llama-2-7B shape, KV held at 15,728 tokens",
    ("h200", "latency"): "Figs. 14-15 on the unconstrained H200",
    ("h200", "batch"): "Figs. 16-17 on the unconstrained H200",
    ("llama3", "latency"): "Figs. 14-15: Llama-3-8B shape, KV held at 15,728 tokens",
    ("llama3", "batch"): "Figs. 16-17: Llama-3-8B shape, KV held at 15,728 tokens",
    ("engines", "latency"): "One engine at 0.90 against two at 0.45 on one H200, Llama-3-8B shape",
    ("engines", "throughput"): "One engine at 0.90 against two at 0.45 on one H200, Llama-3-8B shape",
    ("sampling", "latency"): "Figs. 18-19: parallel sampling and beam search, Alpaca",
    ("memsave", "saving"): "Figs. 20-21: KV blocks saved by sharing, Alpaca lengths",
    ("prefix", "latency"): "Figs. 22-23: shared prefix",
    ("chat", "latency"): "Fig. 24: chatbot, 4 turns",
    ("blocksize", "latency"): "Figs. 25-26: block size, KV held at 15,728 tokens",
    ("preempt", "latency"): "Fig. 27: recompute, swap and auto preemption",
}
RATE_GROUPS = ("basic", "h200", "llama3", "sampling", "prefix", "chat",
               "engines")
BATCH_GROUPS = ("basic", "h200", "llama3")


def load_runs(path):
    runs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("load"):
                    runs.append(r)
    return runs


def by_panel(runs):
    panels = {}
    for r in runs:
        panels.setdefault(r["panel"], {}).setdefault(r["series"], []).append(r)
    for series in panels.values():
        for rs in series.values():
            rs.sort(key=lambda r: r["x"])
    return panels


def fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


def tokens_per_iteration(r):
    d = r["delta"]
    return d["generation_tokens"] / d["iterations"] if d["iterations"] else None


def table(panels):
    cols = ("x", "req/s", "ok", "fail", "norm s/tok", "p50", "p99",
            "ttft p50 ms", "ttft p99 ms", "running", "tok/iter", "kv use", "preempt",
            "out tok/s")
    for panel, series in panels.items():
        print(f"\n== {panel}")
        print(" ".join(f"{c:>11}" for c in ("series",) + cols))
        for name, rs in series.items():
            for r in rs:
                ld = r["load"]
                row = (name, fmt(r["x"]), fmt(ld.get("request_rate")),
                       fmt(ld.get("ok")), fmt(ld.get("failed")),
                       fmt(ld.get("norm_latency_mean_s")),
                       fmt(ld.get("norm_latency_p50_s")),
                       fmt(ld.get("norm_latency_p99_s")),
                       fmt(ld.get("ttft_p50_ms")),
                       fmt(ld.get("ttft_p99_ms")),
                       fmt(ld.get("running_mean")),
                       fmt(tokens_per_iteration(r)),
                       fmt(ld.get("kv_usage_mean")),
                       fmt(r["delta"]["preemptions"]),
                       fmt(ld.get("output_tokens_per_s")))
                print(" ".join(f"{c:>11}" for c in row))


def crossing(rs, lstar):
    """The rate where the latency curve first passes lstar, and whether it
    did (False: the last rate measured, the curve never passed)."""
    prev = None
    for r in rs:
        lat = r["load"].get("norm_latency_mean_s")
        if lat is None:
            continue
        if lat > lstar:
            if prev is None:
                return r["x"], True
            x0, l0 = prev
            return x0 + (r["x"] - x0) * (lstar - l0) / (lat - l0), True
        prev = (r["x"], lat)
    return (prev[0] if prev else None), False


def rate_claims(panels):
    print(f"\n== rate at the same latency (L* = {LSTAR_X} x the panel's "
          "lowest) and batch")
    for panel, series in panels.items():
        lats = [r["load"]["norm_latency_mean_s"] for rs in series.values()
                for r in rs if r["load"].get("norm_latency_mean_s")]
        if not lats:
            continue
        lstar = LSTAR_X * min(lats)
        at = {name: crossing(rs, lstar) for name, rs in series.items()}
        print(f"{panel}: L* = {lstar:.4f} s/token")
        base = at.get("paged")
        for name, (x, passed) in at.items():
            if x is None:
                continue
            line = f"  {name:12} {'' if passed else '>= '}{x:.3g} req/s"
            if base and base[0] and name != "paged" and x:
                line += f"; paged / {name} = {'' if base[1] else '>= '}" \
                        f"{base[0] / x:.2f}{'' if passed else ' (upper bound)'}"
            print(line)
        if "paged" in series:
            paged = {r["x"]: r for r in series["paged"]}
            for name, rs in series.items():
                common = [r for r in rs if r["x"] in paged and name != "paged"]
                if not common:
                    continue
                r = common[-1]
                p = paged[r["x"]]
                a = p["load"].get("running_mean")
                b = r["load"].get("running_mean")
                ta, tb = tokens_per_iteration(p), tokens_per_iteration(r)
                if a and b:
                    print(f"  batch at {r['x']:g} req/s: paged {a:.1f} / "
                          f"{name} {b:.1f} running = {a / b:.2f}x; tokens "
                          f"per iteration {fmt(ta, '.1f')} / {fmt(tb, '.1f')}")


def used_blocks(d, panel, series, x):
    """Mean used KV blocks and running requests over run.sh's samples of
    /metrics (metrics/PANEL-SERIES-X.kv), None when there are none."""
    path = os.path.join(d, "metrics", f"{panel}-{series}-{x:g}.kv")
    try:
        with open(path) as f:
            rows = [tuple(map(float, line.split())) for line in f
                    if line.strip()]
    except OSError:
        return None
    if not rows:
        return None
    return (sum(r[0] for r in rows) / len(rows),
            sum(r[1] for r in rows) / len(rows), len(rows))


def savings(d, panels):
    out = {}
    print("\n== KV blocks saved by sharing (1 - used shared / used unshared)")
    for mode, series in panels.items():
        shared = {r["x"] for r in series.get("shared", [])}
        unshared = {r["x"] for r in series.get("unshared", [])}
        for w in sorted(shared & unshared):
            s = used_blocks(d, mode, "shared", w)
            u = used_blocks(d, mode, "unshared", w)
            if not s or not u or not u[0]:
                print(f"  {mode} width {w:g}: no samples")
                continue
            saved = 100 * (1 - s[0] / u[0])
            out.setdefault(mode, []).append((w, saved))
            print(f"  {mode} width {w:g}: {saved:.1f} % (used blocks "
                  f"{s[0]:.1f} against {u[0]:.1f}; running requests "
                  f"{s[1]:.1f} / {u[1]:.1f}; {s[2]} / {u[2]} samples)")
    return out


def plot_lines(plt, panels, key, ylabel, xlabel, path, title, logx=False):
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4.4), squeeze=False)
    fig.suptitle(title)
    for ax, (panel, series) in zip(axes[0], panels.items()):
        for name, rs in series.items():
            pts = [(r["x"], r["load"].get(key)) for r in rs
                   if r["load"].get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logx:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_savings(plt, sav, path, title):
    fig, ax = plt.subplots(figsize=(6, 4.4))
    fig.suptitle(title)
    width = 0.35
    for i, (mode, pts) in enumerate(sorted(sav.items())):
        xs = [j + i * width for j in range(len(pts))]
        ax.bar(xs, [p[1] for p in pts], width, label=mode)
        ax.set_xticks([j + width / 2 for j in range(len(pts))],
                      [f"{p[0]:g}" for p in pts])
    ax.set_xlabel("samples (parallel) / beam width")
    ax.set_ylabel("KV blocks saved (%)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    draw = "--no-plot" not in argv
    argv = [a for a in argv if a != "--no-plot"]
    if len(argv) != 1:
        sys.exit("usage: plot.py [--no-plot] LOGDIR")
    d = argv[0]
    runs = load_runs(os.path.join(d, "runs.jsonl"))
    if not runs:
        print("no runs")
        return
    group = runs[0]["group"]
    panels = by_panel(runs)
    print(f"group {group}: {len(runs)} runs")
    table(panels)
    sav = None
    if group in RATE_GROUPS:
        rate_claims(panels)
    elif group == "memsave":
        sav = savings(d, panels)
    if not draw:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if group in RATE_GROUPS:
        plot_lines(plt, panels, "norm_latency_mean_s",
                   "normalized latency (s/token)", "request rate (req/s)",
                   os.path.join(d, "latency.png"), TITLES[group, "latency"])
    if group == "engines":
        plot_lines(plt, panels, "output_tokens_per_s", "output tokens/s",
                   "request rate (req/s)", os.path.join(d, "throughput.png"),
                   TITLES[group, "throughput"])
    if group in BATCH_GROUPS:
        plot_lines(plt, panels, "running_mean", "mean running requests",
                   "request rate (req/s)", os.path.join(d, "batch.png"),
                   TITLES[group, "batch"])
    if group in ("blocksize", "preempt"):
        plot_lines(plt, panels if group == "blocksize" else
                   {"ShareGPT": {s: rs for p in panels.values()
                                 for s, rs in p.items()}},
                   "norm_latency_mean_s", "normalized latency (s/token)",
                   "block size (tokens)", os.path.join(d, "latency.png"),
                   TITLES[group, "latency"], logx=True)
    if sav:
        plot_savings(plt, sav, os.path.join(d, "saving.png"),
                     TITLES[group, "saving"])


if __name__ == "__main__":
    main(sys.argv[1:])
