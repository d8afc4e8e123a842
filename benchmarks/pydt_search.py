"""Does the greedy EM search find the paper's trees? Section 6.1 of Knowles & Ghahramani:
N = 100 points in D = 2 from four Gaussians at (+-1, +-1), variance 1/8 per dimension.

Usage::

    python benchmarks/pydt_search.py                      # full: 10 seeds x 100 iterations, writes JSON
    python benchmarks/pydt_search.py --quick              # 2 seeds x 5 iterations, no JSON
    python benchmarks/pydt_search.py --configs paper --out /tmp/baseline.json

Everything runs in one process, float64, on ``jax.devices()[0]``.

Method (also in the JSON under ``"method"``):

* **Data.** Seed ``s``: ``four_clusters(100, s)`` below (``numpy.default_rng(s)``, 25 points per
  cluster, shuffled), key ``jax.random.PRNGKey(s)``; seeds 0-9.
* **Fixed hyperparameters** (the paper's Figure 5b setting): ``pydt_em(key, X, alpha=1,
  beta=0.2, learn_alpha_beta=False, num_iters=100)`` (``q(c)`` and ``q(1/sigma2)`` learned,
  the defaults). Reported per seed: the bound (``log_evidence``), the number of root children,
  the ARI of the root's children partition (each point labelled by the root child above it)
  against the four clusters, wall time.
* **Configurations.** ``before`` = ``pydt_em`` of commit ``BEFORE_REF`` (the code before issue
  15 part 3: the paper's search, random detach / re-attach, EM on the 3 best, K-best list of
  10), loaded from git into the same process. ``paper`` = today's code with the paper's move
  only (``moves=("reattach",)``). ``default`` = ``pydt_em``'s defaults (the paper's move, best
  regraft and collapse in rotation). ``restarts`` = the defaults with ``num_restarts=4`` of
  ``num_iters / 4`` iterations each (the same iteration budget as one search).
  ``results/pydt_search_baseline.json`` is the first measurement of ``before``, made before
  the change (its own process, under other load), read back for the table.
* **Ceiling.** The ARI of labelling each point by its nearest true centre (what knowing the
  centres gives): below 1 where a point lies nearer another cluster's centre.
* **Time per iteration.** A warm-up call per configuration (seed 0, a few iterations) compiles
  the programs first; then, seed by seed, every configuration runs in turn (so they share the
  load of the shared 2-core VM, which varies; the 1-minute load average is recorded per row).
  Per seed the initial tree alone (``num_iters=0``) is timed, and per iteration = (total -
  restarts x initial tree) / (restarts x num_iters).
* **Learned hyperparameters.** ``pydt_em(key, X, alpha=1, beta=0.2, num_iters=100)`` with
  ``alpha, beta`` learned (the defaults): bound, ``alpha``, ``beta``, root children, whether
  every branch point is binary. Then the two trees compared under the same learned
  hyperparameters: the fixed-hyperparameter (4-way) tree refit with ``alpha, beta, c, sigma2``
  learned (``pydt_em(..., init=(parent, times), num_iters=0)``: EM on that structure alone)
  against the learned run's tree (the search's optimum under learning).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "pydt_search.json")
BASELINE = os.path.join(HERE, "results", "pydt_search_baseline.json")
CENTRES = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])


def four_clusters(N, seed):
    """Section 6.1: N points, four clusters at (+-1, +-1), variance 1/8; labels shuffled."""
    r = np.random.default_rng(seed)
    z = np.arange(N) % 4
    r.shuffle(z)
    return CENTRES[z] + r.normal(0.0, np.sqrt(1.0 / 8.0), (N, 2)), z


def root_partition(parent, N):
    """Label of each leaf = the root child above it."""
    par = np.asarray(parent)
    root = int(np.flatnonzero(par == -1)[0])
    part = np.empty(N, int)
    for k in range(N):
        p = k
        while par[p] != root:
            p = par[p]
        part[k] = p
    return part, int(np.sum(par == root))


def nearest_centre_ari(s):
    from jaxhc.metrics import adjusted_rand_index

    X, z = four_clusters(100, s)
    return float(adjusted_rand_index(z, np.argmin(((X[:, None] - CENTRES[None]) ** 2).sum(-1), 1)))


def tree_stats(res, z):
    from jaxhc.metrics import adjusted_rand_index

    N = z.size
    par = np.asarray(res.parent)
    part, kids = root_partition(par, N)
    nk = np.bincount(par[par >= 0], minlength=par.size)[N:]
    nk = nk[nk > 0]
    return dict(
        bound=float(res.log_evidence),
        root_children=kids,
        ari=float(adjusted_rand_index(z, part)),
        branch_points=int(nk.size),
        max_children=int(nk.max()),
        binary=bool(np.all(nk == 2)),
        alpha=float(res.alpha),
        beta=float(res.beta),
        c=float(res.c),
        sigma2=float(res.sigma2),
    )


def has_new_api():
    from jaxhc.inference.pydt import em as E

    return "num_restarts" in inspect.signature(E.pydt_em).parameters


BEFORE_REF = "03bcf32"  # the last commit before issue 15 part 3 (the search's moves and restarts)
CONFIGS = {
    "before": None,  # `pydt_em` of BEFORE_REF (its defaults: the paper's search), same process
    "paper": dict(moves=("reattach",), num_restarts=1),
    "default": dict(),
    "restarts": dict(num_restarts=4),  # with num_iters / 4 per restart: the same budget
}
_BEFORE = {}


def before_module(ref=BEFORE_REF):
    """``jaxhc/inference/pydt_em.py`` as of ``ref`` (``git show``), imported as a sibling module
    of the installed one, so today's and the old search run in one process on the same load."""
    if ref not in _BEFORE:
        import importlib.util
        import subprocess
        import tempfile

        src = subprocess.run(
            ["git", "show", f"{ref}:jaxhc/inference/pydt_em.py"],
            cwd=os.path.dirname(HERE),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        path = os.path.join(tempfile.mkdtemp(), "pydt_em_before.py")
        with open(path, "w") as fh:
            fh.write(src)
        name = "jaxhc.inference._pydt_em_before"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _BEFORE[ref] = mod
    return _BEFORE[ref]


def config_module(name):
    from jaxhc.inference.pydt import em as E

    if name == "before" and has_new_api():
        return before_module()
    return E


def config_kwargs(name):
    if not has_new_api():
        if name not in ("paper", "before"):
            raise SystemExit(f"configuration {name!r} needs the new pydt_em API")
        return {}  # the code before the change: its defaults are the paper's search
    return dict(CONFIGS[name] or {})


def config_iters(name, iters):
    """Search iterations per restart: ``restarts`` splits the budget of one search."""
    R = int(config_kwargs(name).get("num_restarts", 1))
    return max(iters // R, 1)


def _common(learn_ab):
    common = dict(alpha=1.0, beta=0.2, progress_bar=False)
    if not learn_ab:
        common["learn_alpha_beta"] = False
    return common


def warm_up(name, iters, learn_ab):
    """Compile the programs of a configuration (seed-0 data, a few iterations); returns seconds."""
    import jax

    E = config_module(name)
    X0, _ = four_clusters(100, 0)
    t0 = time.perf_counter()
    E.pydt_em(jax.random.PRNGKey(0), X0, num_iters=min(iters, 3), **_common(learn_ab), **config_kwargs(name))
    return time.perf_counter() - t0


def run_one(name, s, iters, learn_ab):
    import jax

    E = config_module(name)
    iters = config_iters(name, iters)
    kw = config_kwargs(name)
    R = int(kw.get("num_restarts", 1))
    common = _common(learn_ab)
    X, z = four_clusters(100, s)
    key = jax.random.PRNGKey(s)
    t0 = time.perf_counter()
    E.pydt_em(key, X, num_iters=0, **common, **{k: v for k, v in kw.items() if k != "num_restarts"})
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = E.pydt_em(key, X, num_iters=iters, **common, **kw)
    total = time.perf_counter() - t0
    row = dict(
        seed=s,
        **tree_stats(res, z),
        total_s=total,
        init_s=init_s,
        iters=iters,
        restarts=R,
        per_iter_s=max(total - R * init_s, 0.0) / max(R * iters, 1),
        loadavg=os.getloadavg()[0],
    )
    if getattr(res, "restart_bounds", None) is not None:
        row["restart_bounds"] = [float(b) for b in res.restart_bounds]
    if getattr(res, "move_trace", None) is not None:
        acc = {}
        for mv, before, after in res.move_trace:
            acc.setdefault(mv, [0, 0])
            acc[mv][0] += 1
            acc[mv][1] += int(after > before)
        row["moves_made_improved"] = acc
    print(
        f"  [{name}{' learned' if learn_ab else ''}] seed {s}: L = {row['bound']:.2f}, root children "
        f"{row['root_children']}, ARI {row['ari']:.3f}, alpha {row['alpha']:.3f}, beta {row['beta']:.3f}, "
        f"{total:.1f} s ({row['per_iter_s'] * 1e3:.0f} ms/iter, load {row['loadavg']:.1f})",
        flush=True,
    )
    row["_tree"] = (np.asarray(res.parent).tolist(), np.asarray(res.times).tolist())
    return row


def run_configs(names, seeds, iters, learn_ab):
    """All configurations, seeds outer and configurations inner (so they share the machine's
    load, which varies on a shared VM)."""
    blocks = {}
    for name in names:
        kw = config_kwargs(name)
        blocks[name] = dict(
            config=name,
            kwargs={k: list(v) if isinstance(v, tuple) else v for k, v in kw.items()},
            code=f"commit {BEFORE_REF}" if name == "before" else "working tree",
            learn_alpha_beta=learn_ab,
            iters=config_iters(name, iters),
            compile_s=warm_up(name, iters, learn_ab),
            rows=[],
        )
    for s in seeds:
        for name in names:
            blocks[name]["rows"].append(run_one(name, s, iters, learn_ab))
    return [blocks[n] for n in names]


def compare_4way_binary(fixed, learned, seeds):
    """Refit the fixed-hyperparameter tree with alpha, beta learned; compare with the learned run."""
    import jax

    from jaxhc.inference.pydt import em as E

    out = []
    byseed_f = {r["seed"]: r for r in fixed["rows"]}
    byseed_l = {r["seed"]: r for r in learned["rows"]}
    for s in seeds:
        X, z = four_clusters(100, s)
        par, tim = byseed_f[s]["_tree"]
        refit = E.pydt_em(
            jax.random.PRNGKey(s),
            X,
            alpha=1.0,
            beta=0.2,
            num_iters=0,
            progress_bar=False,
            init=(np.asarray(par), np.asarray(tim)),
        )
        st = tree_stats(refit, z)
        lr = byseed_l[s]
        out.append(
            dict(
                seed=s,
                fourway_refit=st,
                learned=dict(
                    (k, lr[k]) for k in ("bound", "alpha", "beta", "root_children", "ari", "binary", "max_children")
                ),
                learned_minus_fourway=lr["bound"] - st["bound"],
            )
        )
        print(
            f"  seed {s}: 4-way tree refit (alpha, beta learned): L = {st['bound']:.2f} (alpha {st['alpha']:.3f}, "
            f"beta {st['beta']:.3f}, root {st['root_children']}); learned search: L = {lr['bound']:.2f} "
            f"(alpha {lr['alpha']:.3f}, beta {lr['beta']:.3f}, root {lr['root_children']}, binary {lr['binary']})",
            flush=True,
        )
    return out


def outlier_check(s, iters, max_size=3):
    """The search's tree for seed ``s`` (``default`` configuration, alpha, beta fixed) against the
    same tree with every small root child (<= ``max_size`` points) regrafted into the root child
    that holds most of its points' cluster (at the best-scoring place there, then EM on the
    structure): is a root with more than four children the model's choice or the search's?"""
    import jax
    import jax.numpy as jnp

    from jaxhc.inference.pydt import em as E
    from jaxhc.inference.pydt import estep, moves
    from jaxhc.inference.pydt.mcmc import FREE

    X, z = four_clusters(100, s)
    N = z.size
    common = dict(alpha=1.0, beta=0.2, learn_alpha_beta=False, progress_bar=False)
    res = E.pydt_em(jax.random.PRNGKey(s), X, num_iters=iters, **common)
    refit = E.pydt_em(jax.random.PRNGKey(s), X, num_iters=0, init=(res.parent, res.times), **common)
    out = dict(seed=s, found=tree_stats(res, z), found_refit_bound=float(refit.log_evidence), moved=[])
    cur = refit
    while True:
        par = np.asarray(cur.parent)
        part, _ = root_partition(par, N)
        kids = np.unique(part)
        home = {g: np.bincount(part[z == g], minlength=par.size).argmax() for g in range(4)}
        small = [k for k in kids if np.sum(part == k) <= max_size and k not in home.values()]
        if not small:
            break
        c = int(small[0])
        g = int(np.bincount(z[part == c], minlength=4).argmax())
        tim = jnp.asarray(cur.times)
        parj = jnp.asarray(par)
        hyper = E.em_init_hyper(X, cur.c, 1.0, 0.2, cur.sigma2)
        act = parj != FREE
        cnt = estep.leaf_counts(parj, tim, act, N)
        mu, v = moves._subtree_message(parj, tim, act, jnp.asarray(X), hyper.sigma2, jnp.int32(c))
        par_r, act_r, insub, slot = moves._detach(parj, tim, jnp.int32(c))
        sc, build = moves._attach(
            par_r, tim, act_r, insub, jnp.where(insub, cnt, 0), jnp.int32(c), mu, v, slot, jnp.asarray(X), hyper, True
        )
        sc = np.asarray(sc)
        m = par.size
        pr = np.asarray(par_r)

        def inside(k, a=int(home[g])):
            while k >= 0:
                if k == a:
                    return True
                k = int(pr[k])
            return False

        cands = [j for j in np.argsort(-sc) if np.isfinite(sc[j]) and inside(j if j < m else j - m)][:3]
        best = None
        for j in cands:
            p2, t2 = build(int(j))
            r = E.pydt_em(jax.random.PRNGKey(s), X, num_iters=0, init=(np.asarray(p2), np.asarray(t2)), **common)
            if best is None or r.log_evidence > best.log_evidence:
                best = r
        if best is None:  # no place inside the cluster's subtree
            break
        out["moved"].append(dict(points=int(np.sum(part == c)), cluster=g, bound_after=float(best.log_evidence)))
        cur = best
    out["moved_tree"] = tree_stats(cur, z)
    print(
        f"  seed {s}: found L = {out['found']['bound']:.2f} (refit {out['found_refit_bound']:.2f}), root "
        f"{out['found']['root_children']}, ARI {out['found']['ari']:.3f}; small root children moved into their "
        f"clusters: L = {out['moved_tree']['bound']:.2f}, root {out['moved_tree']['root_children']}, "
        f"ARI {out['moved_tree']['ari']:.3f}",
        flush=True,
    )
    return out


def summary(block):
    rows = block["rows"]
    a = np.array([r["ari"] for r in rows])
    return dict(
        min_ari=float(a.min()),
        mean_ari=float(a.mean()),
        n_ari_ge_095=int(np.sum(a >= 0.95)),
        mean_bound=float(np.mean([r["bound"] for r in rows])),
        median_per_iter_s=float(np.median([r["per_iter_s"] for r in rows])),
        mean_total_s=float(np.mean([r["total_s"] for r in rows])),
    )


def print_table(blocks, baseline):
    print()
    print(
        "| configuration | hyper | min ARI | seeds ARI >= 0.95 | mean bound | ms / iteration (median) | s / seed | "
        "mean load |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for tag, b in [("first run, own process", x) for x in baseline] + [("", x) for x in blocks]:
        sm = summary(b)
        name = ("before" if tag else b["config"]) + (f" ({tag})" if tag else "")
        load = np.mean([r.get("loadavg", np.nan) for r in b["rows"]])
        print(
            f"| {name} | {'learned' if b['learn_alpha_beta'] else 'fixed'} | {sm['min_ari']:.3f} | "
            f"{sm['n_ari_ge_095']}/{len(b['rows'])} | {sm['mean_bound']:.2f} | {sm['median_per_iter_s'] * 1e3:.0f} | "
            f"{sm['mean_total_s']:.1f} | {load:.1f} |"
        )
    print()
    print("Per seed: root children / ARI / bound")
    print()
    shown = [b for b in blocks if not b["learn_alpha_beta"]] + [b for b in blocks if b["learn_alpha_beta"]]
    print(
        "| seed | nearest-centre ARI | "
        + " | ".join(f"{b['config']} ({'learned' if b['learn_alpha_beta'] else 'fixed'})" for b in shown)
        + " |"
    )
    print("|---:|---:|" + "---|" * len(shown))
    for i, r0 in enumerate(shown[0]["rows"]):
        s = r0["seed"]
        print(
            f"| {s} | {nearest_centre_ari(s):.3f} | "
            + " | ".join(
                f"{b['rows'][i]['root_children']} / {b['rows'][i]['ari']:.3f} / {b['rows'][i]['bound']:.2f}"
                for b in shown
            )
            + " |"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds x 5 iterations, no JSON")
    ap.add_argument("--seeds", type=str, default=None, help="comma list (default 0..9)")
    ap.add_argument("--iters", type=int, default=None, help="num_iters per search (default 100, the paper's)")
    ap.add_argument(
        "--configs",
        type=str,
        default=None,
        help="comma list of before, paper, default, restarts (default: all the installed code supports)",
    )
    ap.add_argument("--no-learned", action="store_true", help="skip the learned-hyperparameter runs")
    ap.add_argument(
        "--outliers",
        type=str,
        default=None,
        help="only the outlier check for these seeds (comma list; JSON: results/pydt_search_outliers.json)",
    )
    ap.add_argument("--out", type=str, default=None, help=f"JSON output (default {DEFAULT_OUT}; --quick: none)")
    args = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else ([0, 1] if args.quick else list(range(10)))
    iters = args.iters if args.iters is not None else (5 if args.quick else 100)
    new = has_new_api()
    if args.outliers:
        rows = [outlier_check(int(x), iters) for x in args.outliers.split(",")]
        out = args.out or os.path.join(HERE, "results", "pydt_search_outliers.json")
        with open(out, "w") as fh:
            json.dump(
                dict(
                    date=_dt.datetime.now().isoformat(timespec="seconds"),
                    iters=iters,
                    method=outlier_check.__doc__,
                    rows=rows,
                ),
                fh,
                indent=1,
            )
        print(f"wrote {out}")
        return
    configs = (
        args.configs.split(",") if args.configs else (["before", "paper", "default", "restarts"] if new else ["paper"])
    )
    t_start = time.perf_counter()
    info = machine()
    print(f"{', '.join(configs)}: fixed alpha = 1, beta = 0.2", flush=True)
    blocks = run_configs(configs, seeds, iters, learn_ab=False)
    learned, comparison = [], None
    if not args.no_learned:
        lname = "default" if new else "paper"
        print(f"{lname}: alpha, beta learned", flush=True)
        learned = run_configs([lname], seeds, iters, learn_ab=True)
        fixed = next((b for b in blocks if b["config"] == lname), None)
        if new and fixed is not None:
            print("4-way tree vs the learned search's tree, both with alpha, beta learned", flush=True)
            comparison = compare_4way_binary(fixed, learned[0], seeds)
    baseline = []
    if new and os.path.exists(BASELINE) and not args.quick:
        baseline = json.load(open(BASELINE))["blocks"]
    print_table(blocks + learned, baseline)
    if comparison:
        print()
        print(
            "| seed | 4-way tree refit: bound | alpha | beta | root children | learned search: bound | alpha | beta | "
            "root children | binary | learned - 4-way |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
        for c in comparison:
            f, lr = c["fourway_refit"], c["learned"]
            print(
                f"| {c['seed']} | {f['bound']:.2f} | {f['alpha']:.3f} | {f['beta']:.3f} | {f['root_children']} | "
                f"{lr['bound']:.2f} | {lr['alpha']:.3f} | {lr['beta']:.3f} | {lr['root_children']} | "
                f"{'yes' if lr['binary'] else 'no'} | {c['learned_minus_fourway']:.2f} |"
            )
    for b in blocks + learned:
        for r in b["rows"]:
            r.pop("_tree", None)
    out = None if args.quick and not args.out else (args.out or DEFAULT_OUT)
    if out:
        doc = dict(
            date=_dt.datetime.now().isoformat(timespec="seconds"),
            machine=info,
            wall_s=time.perf_counter() - t_start,
            seeds=seeds,
            iters=iters,
            method=__doc__,
            blocks=blocks + learned,
            comparison=comparison,
            summary={
                f"{b['config']}_{'learned' if b['learn_alpha_beta'] else 'fixed'}": summary(b) for b in blocks + learned
            },
        )
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as fh:
            json.dump(doc, fh, indent=1)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
