"""Randomized search suites (issue 44): problems drawn from each system's own generative
program, sizes and hyperparameters drawn at random from stated ranges, never looked at
before they are run; for each problem the regret ``criterion(found) - criterion(truth)``
under the system's own criterion, and recovery beside Ward and average linkage.

Systems, their draws and their criteria:

* ``bhc``: DPM draws (`jaxhc.models.dpm` for Beta-Bernoulli, Beta-Binomial and Normal with
  known covariance; the same CRP + conjugate draw in NumPy for Normal-inverse-Wishart,
  Normal-Gamma and Dirichlet-multinomial, which the program does not cover), BHC run with the
  true hyperparameters. Criterion: BHC's DPM lower bound ``log p(D|T) + log d_root + log
  Gamma(alpha) - log Gamma(n + alpha)`` of the found tree against that of the tree closest to
  it in which every true cluster is a subtree (`jaxhc.cli.bhc_cmd.class_respecting_tree`,
  the truth's best tree under the same bound). Also the DPM's collapsed joint ``log p(X, z)``
  of the cut at ``r < 0.5`` against the truth's. Recovery: ARI of the cut at ``r < 0.5``;
  Ward's and average linkage's trees cut to the TRUE number of clusters (an oracle the
  model does not get).
* ``bhcc`` / ``rbhcc``: CDPM draws (`jaxhc.models.cdpm`, Beta-Bernoulli cells), run with the
  true hyperparameters. Criterion: `BHCCResult.views_log_joint` (CRP of the column
  partition + each view's row-BHC DPM bound) of the found column partition against the true
  one, and of the CDPM Gibbs baseline's last state (`jaxhc.cdpm_mcmc`, the paper's
  settings). Recovery: column ARI; Ward / average linkage on the columns cut to the true
  number of views.
* ``pydt``: PYDT prior draws (`jaxhc.models.pydt.sample_prior`), `jaxhc.pydt_em` with its
  defaults. Criterion: the EM bound of the found tree against the bound EM reaches on the
  true structure (``init=`` truth, ``num_iters=0``). Recovery: ARI of the partition at the
  truth's divergence time 0.5 against the found tree cut to as many clusters (and Ward /
  average linkage cut to as many).
* ``bhmc``: nCRP + HDP draws (`jaxhc.models.ncrp_hdp`, true depth 2 or 3), `jaxhc.bhmc`
  with its defaults (posterior summary, one chain) at depth = truth - 1, truth, truth + 1 and
  truth + 2, concentrations as drawn. Criterion (true depth only): the paper's complete-data
  log likelihood of the sampler's best state against the true state's. Recovery: level NMI
  at the true levels (the first ``L_true`` levels of the answer) of the reported answer, of
  its start (Ward's tree at its gaps) and of Ward's tree cut to the same depth.

Every miss is named: ``search`` when ``criterion(found) < criterion(truth) - 0.1`` (the
search stopped short of an answer its model prefers), ``model`` when the found answer scores
above the truth (``> + 0.1``) while recovering it imperfectly (the model prefers a wrong
answer), ``ok`` otherwise.

Run: ``python benchmarks/search_regret.py --systems bhc bhcc rbhcc pydt --problems 100``;
prints one table per system and writes ``benchmarks/results/search_regret.json``. A run
of other seeds of a system already there (``--first-seed 15 --problems 85 --merge``) keeps
the records of the seeds it does not run; ``--resume`` also skips those the file holds (a run
cut short goes on where it stopped).
``tests/test_search_regret.py`` runs a fixed CI slice of the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

import numpy as np

TOL = 0.1  # nats: regret within this is a tie

# ------------------------------------------------------------------------------------------
# shared pieces
# ------------------------------------------------------------------------------------------


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _ari(a, b) -> float:
    from jaxhc.metrics import adjusted_rand_index

    return float(adjusted_rand_index(np.asarray(a), np.asarray(b)))


def _linkage_cuts(Y, k: int) -> dict:
    """Ward's and average linkage's trees over the rows of ``Y`` cut to ``k`` clusters."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if len(Y) < 2:
        return {"ward": np.zeros(len(Y), int), "average": np.zeros(len(Y), int)}
    out = {}
    for m in ("ward", "average"):
        out[m] = fcluster(linkage(np.asarray(Y, float), method=m), t=k, criterion="maxclust")
    return out


def _verdict(regret: float, recovery: float) -> str:
    if regret < -TOL:
        return "search"
    if regret > TOL and recovery < 1.0 - 1e-9:
        return "model"
    return "ok"


def _crp(rng, n: int, alpha: float) -> np.ndarray:
    z = np.zeros(n, int)
    counts = []
    for i in range(n):
        p = np.array(counts + [alpha], float)
        k = rng.choice(len(p), p=p / p.sum())
        if k == len(counts):
            counts.append(0)
        counts[k] += 1
        z[i] = k
    return z


# ------------------------------------------------------------------------------------------
# BHC: DPM draws over every component family
# ------------------------------------------------------------------------------------------
BHC_FAMILIES = ("beta_bernoulli", "beta_binomial", "normal_known_cov", "niw", "normal_gamma", "dirichlet_multinomial")
#: ranges every BHC problem's settings are drawn from (uniform; integers inclusive)
BHC_RANGES = {"n": (20, 60), "d": (2, 8), "alpha": (0.3, 3.0), "beta_ab": (0.2, 2.0), "trials": (3, 12)}


def draw_bhc(seed: int, family=None) -> dict:
    """One DPM problem: ``X``, true labels ``z``, the component and ``alpha``."""
    jax = _jax()
    import numpyro

    import jaxhc
    from jaxhc.models import dpm

    rng = np.random.default_rng(seed)
    fam = family or BHC_FAMILIES[seed % len(BHC_FAMILIES)]
    n = int(rng.integers(BHC_RANGES["n"][0], BHC_RANGES["n"][1] + 1))
    d = int(rng.integers(BHC_RANGES["d"][0], BHC_RANGES["d"][1] + 1))
    alpha = float(rng.uniform(*BHC_RANGES["alpha"]))
    if fam in ("beta_bernoulli", "beta_binomial", "normal_known_cov"):
        if fam == "beta_bernoulli":
            d = 2 * d + 4  # binary columns carry little each
            comp = jaxhc.BetaBernoulli(rng.uniform(*BHC_RANGES["beta_ab"], d), rng.uniform(*BHC_RANGES["beta_ab"], d))
        elif fam == "beta_binomial":
            t = int(rng.integers(*BHC_RANGES["trials"]))
            comp = jaxhc.BetaBinomial(rng.uniform(*BHC_RANGES["beta_ab"], d), rng.uniform(*BHC_RANGES["beta_ab"], d), t)
        else:
            scale = float(rng.uniform(1.0, 4.0))
            comp = jaxhc.NormalKnownCov(np.zeros(d), scale**2 * np.eye(d), np.eye(d))
        with numpyro.handlers.seed(rng_seed=int(seed)):
            s = dpm.dpm(component=comp, alpha=alpha, num_points=n, dim=d)
        X, z = np.asarray(s.X, float), np.asarray(s.labels)
    else:  # the DPM with this base measure, drawn in NumPy (the program covers the three above)
        z = _crp(rng, n, alpha)
        K = int(z.max()) + 1
        if fam == "niw":
            kappa, dof = float(rng.uniform(0.05, 0.5)), d + 2.0
            S = np.eye(d) * float(rng.uniform(0.5, 2.0))
            comp = jaxhc.NormalInverseWishart(np.zeros(d), kappa, dof, S)
            X = np.zeros((n, d))
            for k in range(K):
                W = rng.standard_normal((int(dof), d)) @ np.linalg.cholesky(np.linalg.inv(S)).T
                cov = np.linalg.inv(W.T @ W)
                mu = rng.multivariate_normal(np.zeros(d), cov / kappa)
                rows = z == k
                X[rows] = rng.multivariate_normal(mu, cov, size=int(rows.sum()))
        elif fam == "normal_gamma":
            kappa, a = float(rng.uniform(0.05, 0.5)), float(rng.uniform(2.0, 5.0))
            b = rng.uniform(0.5, 2.0, d)
            comp = jaxhc.NormalGamma(np.zeros(d), kappa, a, b)
            X = np.zeros((n, d))
            for k in range(K):
                tau = rng.gamma(a, 1.0 / b)
                mu = rng.normal(0.0, 1.0 / np.sqrt(kappa * tau))
                rows = z == k
                X[rows] = rng.normal(mu, 1.0 / np.sqrt(tau), size=(int(rows.sum()), d))
        else:
            conc = rng.uniform(0.3, 2.0, d)
            comp = jaxhc.DirichletMultinomial(conc)
            m = int(rng.integers(10, 40))
            X = np.zeros((n, d))
            for k in range(K):
                p = rng.dirichlet(conc)
                rows = z == k
                X[rows] = rng.multinomial(m, p, size=int(rows.sum()))
    del jax
    return {
        "system": "bhc",
        "seed": int(seed),
        "family": fam,
        "n": n,
        "d": X.shape[1],
        "alpha": alpha,
        "X": X,
        "z": z,
        "component": comp,
    }


def run_bhc(p: dict) -> dict:
    import jaxhc
    from jaxhc.cli.bhc_cmd import class_respecting_tree
    from jaxhc.models.dpm import dpm_log_joint

    X, z, comp, alpha = p["X"], p["z"], p["component"], p["alpha"]
    t0 = time.perf_counter()
    res = jaxhc.bhc(X, comp, alpha)
    secs = time.perf_counter() - t0
    score = lambda t: float(jaxhc.tree_log_evidence(X, t, comp, alpha).dpm_lower_bound)  # noqa: E731
    found = float(res.dpm_lower_bound)
    truth_tree = class_respecting_tree(res.tree, z, score) if len(np.unique(z)) > 1 else res.tree
    truth = score(truth_tree)
    cut = np.asarray(res.cut(0.5))
    K = int(len(np.unique(z)))
    ari = _ari(z, cut)
    base = _linkage_cuts(X, K)
    regret = found - truth
    return {
        "criterion_found": found,
        "criterion_truth": truth,
        "regret": regret,
        "joint_found": float(dpm_log_joint(X, cut, comp, alpha)),
        "joint_truth": float(dpm_log_joint(X, z, comp, alpha)),
        "recovery": ari,
        "ward": _ari(z, base["ward"]),
        "average": _ari(z, base["average"]),
        "k_true": K,
        "k_found": int(len(np.unique(cut))),
        "seconds": secs,
        "verdict": _verdict(regret, ari),
    }


# ------------------------------------------------------------------------------------------
# BHCC / RBHCC: CDPM draws
# ------------------------------------------------------------------------------------------
BHCC_RANGES = {"n": (30, 80), "j": (12, 40), "alpha": (0.5, 2.0), "beta_ab": (0.2, 1.0)}


def draw_bhcc(seed: int) -> dict:
    _jax()
    import numpyro

    import jaxhc
    from jaxhc.models import cdpm

    rng = np.random.default_rng(10_000 + seed)
    n = int(rng.integers(BHCC_RANGES["n"][0], BHCC_RANGES["n"][1] + 1))
    J = int(rng.integers(BHCC_RANGES["j"][0], BHCC_RANGES["j"][1] + 1))
    alpha = float(rng.uniform(*BHCC_RANGES["alpha"]))
    a, b = rng.uniform(*BHCC_RANGES["beta_ab"], J), rng.uniform(*BHCC_RANGES["beta_ab"], J)
    comp = jaxhc.BetaBernoulli(a, b)
    with numpyro.handlers.seed(rng_seed=int(10_000 + seed)):
        s = cdpm.cdpm(component=comp, alpha=alpha, num_points=n, dim=J)
    return {
        "system": "bhcc",
        "seed": int(seed),
        "n": n,
        "J": J,
        "alpha": alpha,
        "X": np.asarray(s.X, float),
        "u": np.asarray(s.column_views),
        "component": comp,
    }


def partition_criterion(X, comp, alpha, labels) -> float:
    """`BHCCResult.views_log_joint` of the column partition ``labels`` (any integers)."""
    from jaxhc.inference.bhcc.columns import column_model, validate_inputs
    from jaxhc.inference.bhcc.hostmath import host_gammaln
    from jaxhc.inference.bhcc.refine import Partition, SetEvidence

    Xh = validate_inputs(X, comp)
    cd = column_model(comp, Xh)
    labels = np.asarray(labels)
    views = [tuple(np.flatnonzero(labels == g).tolist()) for g in np.unique(labels)]
    J = len(labels)
    return float(
        Partition(SetEvidence(cd, alpha), alpha, views).score() + host_gammaln(alpha) - host_gammaln(J + alpha)
    )


def run_bhcc(p: dict, randomized: bool = False, gibbs: bool = True, search: Optional[str] = None) -> dict:
    jax = _jax()
    import jaxhc

    X, u, comp, alpha = p["X"], p["u"], p["component"], p["alpha"]
    kw = {} if search is None else {"search": search}  # None: the library's default
    t0 = time.perf_counter()
    if randomized:
        res = jaxhc.rbhcc(jax.random.PRNGKey(p["seed"]), X, comp, alpha=alpha, progress_bar=False, **kw)
    else:
        res = jaxhc.bhcc(X, comp, alpha=alpha, progress_bar=False, **kw)
    secs = time.perf_counter() - t0
    found = float(res.views_log_joint())
    labels = np.asarray(res.cut(0.5))
    truth = partition_criterion(X, comp, alpha, u)
    V = int(len(np.unique(u)))
    cols = X.T - X.T.mean(axis=1, keepdims=True)
    base = _linkage_cuts(cols, V)
    ari = _ari(u, labels)
    out = {
        "criterion_found": found,
        "criterion_truth": truth,
        "regret": found - truth,
        "recovery": ari,
        "ward": _ari(u, base["ward"]),
        "average": _ari(u, base["average"]),
        "v_true": V,
        "v_found": int(len(np.unique(labels))),
        "seconds": secs,
        "verdict": _verdict(found - truth, ari),
        "search": res.search.method,
        "search_restarts": int(res.search.restarts),
        "search_out_of_budget": bool(res.search.out_of_budget),
    }
    if gibbs:
        t0 = time.perf_counter()
        s = jaxhc.cdpm_mcmc(
            jax.random.PRNGKey(p["seed"]), X, comp, alpha, num_samples=10, num_warmup=50, thin=5, progress_bar=False
        )
        g = np.asarray(s.column_views)[-1]
        out.update(
            gibbs=_ari(u, g),
            gibbs_criterion=partition_criterion(X, comp, alpha, g),
            gibbs_seconds=time.perf_counter() - t0,
        )
    return out


# ------------------------------------------------------------------------------------------
# PYDT greedy EM: PYDT prior draws
# ------------------------------------------------------------------------------------------
PYDT_RANGES = {
    "n": (10, 30),
    "d": (2, 5),
    "c": (0.5, 2.0),
    "alpha": (0.0, 0.6),
    "beta": (0.0, 0.3),
    "sigma2": (0.5, 2.0),
}


def draw_pydt(seed: int) -> dict:
    jax = _jax()
    from jaxhc.models import pydt

    rng = np.random.default_rng(20_000 + seed)
    n = int(rng.integers(PYDT_RANGES["n"][0], PYDT_RANGES["n"][1] + 1))
    d = int(rng.integers(PYDT_RANGES["d"][0], PYDT_RANGES["d"][1] + 1))
    alpha = float(rng.uniform(*PYDT_RANGES["alpha"]))
    beta = float(rng.uniform(0.0, min(PYDT_RANGES["beta"][1], alpha)))  # 0 <= beta <= alpha
    c, s2 = float(rng.uniform(*PYDT_RANGES["c"])), float(rng.uniform(*PYDT_RANGES["sigma2"]))
    s = pydt.sample_prior(jax.random.PRNGKey(20_000 + seed), n, d, c=c, alpha=alpha, beta=beta, sigma2=s2)
    return {
        "system": "pydt",
        "seed": int(seed),
        "n": n,
        "d": d,
        "c": c,
        "alpha": alpha,
        "beta": beta,
        "sigma2": s2,
        "X": np.asarray(s.X, float),
        "parent": np.asarray(s.tree.parent),
        "times": np.asarray(s.tree.heights),
    }


def _time_cut(parent, times, n: int, t: float) -> np.ndarray:
    """Leaves grouped by their highest ancestor... the ancestor at divergence time ``t``: two
    leaves share a cluster when their lowest common ancestor diverges after ``t``."""
    parent, times = np.asarray(parent), np.asarray(times)
    labels = np.zeros(n, int)
    for i in range(n):
        k = i
        while parent[k] >= 0 and times[parent[k]] > t:
            k = parent[k]
        labels[i] = k
    return np.unique(labels, return_inverse=True)[1]


def _cut_to_k(parent, times, n: int, k: int) -> np.ndarray:
    """The time cut of a tree with the number of clusters closest to ``k``."""
    ts = np.unique(np.asarray(times)[n:][np.asarray(times)[n:] < 1.0])
    best = None
    for t in np.concatenate([[0.0], ts]):
        lab = _time_cut(parent, times, n, float(t))
        g = abs(len(np.unique(lab)) - k)
        if best is None or g < best[0]:
            best = (g, lab)
    return best[1]


def run_pydt(p: dict, **em_kw) -> dict:
    jax = _jax()
    import jaxhc

    X, n = p["X"], p["n"]
    kw = dict(c=p["c"], alpha=p["alpha"], beta=p["beta"], sigma2=p["sigma2"], progress_bar=False)
    t0 = time.perf_counter()
    res = jaxhc.pydt_em(jax.random.PRNGKey(p["seed"]), X, **kw, **em_kw)
    secs = time.perf_counter() - t0
    tru = jaxhc.pydt_em(jax.random.PRNGKey(p["seed"]), X, init=(p["parent"], p["times"]), num_iters=0, **kw)
    found, truth = float(res.log_evidence), float(tru.log_evidence)
    z = _time_cut(p["parent"], p["times"], n, 0.5)
    K = int(len(np.unique(z)))
    pred = _cut_to_k(np.asarray(res.parent), np.asarray(res.times), n, K)
    base = _linkage_cuts(X, K)
    ari = _ari(z, pred) if K > 1 else 1.0
    return {
        "criterion_found": found,
        "criterion_truth": truth,
        "regret": found - truth,
        "recovery": ari,
        "ward": _ari(z, base["ward"]) if K > 1 else 1.0,
        "average": _ari(z, base["average"]) if K > 1 else 1.0,
        "k_true": K,
        "seconds": secs,
        "verdict": _verdict(found - truth, ari),
    }


# ------------------------------------------------------------------------------------------
# BHMC: nCRP + HDP draws, run at depth = truth - 1 .. truth + 2
# ------------------------------------------------------------------------------------------
BHMC_RANGES = {
    "n": (30, 70),
    "d": (2, 4),
    "depth": (2, 3),
    "alpha": (0.5, 1.5),
    "gamma0": (2.0, 5.0),
    "gamma": (0.5, 1.5),
    "sigma2": (0.1, 0.5),
    "prior_var": (9.0, 36.0),
}
#: depths every BHMC problem is run at, relative to the truth's
BHMC_OFFSETS = (-1, 0, 1, 2)


def draw_bhmc(seed: int) -> dict:
    """One nCRP + HDP problem drawn by `jaxhc.models.ncrp_hdp` (its true depth, paths and
    components)."""
    _jax()
    import numpyro

    from jaxhc.models.ncrp_hdp import ncrp_hdp

    rng = np.random.default_rng(30_000 + seed)
    r = BHMC_RANGES
    n = int(rng.integers(r["n"][0], r["n"][1] + 1))
    d = int(rng.integers(r["d"][0], r["d"][1] + 1))
    L = int(rng.integers(r["depth"][0], r["depth"][1] + 1))
    hyper = {k: float(rng.uniform(*r[k])) for k in ("alpha", "gamma0", "gamma", "sigma2", "prior_var")}
    with numpyro.handlers.seed(rng_seed=int(30_000 + seed)):
        s = ncrp_hdp(num_points=n, dim=d, depth=L, max_children=n, max_components=n, **hyper)
    return {
        "system": "bhmc",
        "seed": int(seed),
        "n": n,
        "d": d,
        "depth_true": L,
        **hyper,
        "X": np.asarray(s.X, float),
        "levels": np.asarray(s.paths)[:, 1:],
        "c": np.asarray(s.c),
    }


def _ward_levels(X, depth: int) -> np.ndarray:
    """Ward's tree cut to ``depth`` levels at its own gaps (what BHMC's Ward start uses)."""
    from jaxhc.inference.bhmc.init import start_level_labels

    return start_level_labels(X, depth, "ward")[0]


def _level_nmi(truth, pred) -> np.ndarray:
    from jaxhc.metrics import levelwise_scores

    return levelwise_scores(truth, pred, depth=truth.shape[1])["nmi"]


def run_bhmc(p: dict, offsets=BHMC_OFFSETS, **bhmc_kw) -> dict:
    """BHMC with its defaults at every depth in ``truth + offsets``: level NMI at the true
    levels of the reported (posterior) answer, of its start and of Ward's tree cut to the same
    depth; at the true depth, the paper's criterion (complete-data log likelihood) of the
    sampler's best state against the true state's (`state_from_level_labels` of the true paths
    and components, hyperparameters and weights as drawn there). ``bhmc_kw``: passed on to
    `jaxhc.bhmc` (the CI slice's shorter chains)."""
    jax = _jax()
    import jaxhc
    from jaxhc.inference.bhmc.init import auto_starts, state_from_level_labels
    from jaxhc.inference.bhmc.summary import level_expected_loss
    from jaxhc.inference.bhmc.updates import complete_data_log_likelihood

    X, truth, L = p["X"], p["levels"], p["depth_true"]
    hyper = {k: p[k] for k in ("alpha", "gamma0", "gamma")}
    out = {"depths": {}}
    secs = 0.0
    for off in offsets:
        depth = L + off
        if depth < 1:
            continue
        t0 = time.perf_counter()
        res = jaxhc.bhmc(jax.random.PRNGKey(p["seed"]), X, depth, progress_bar=False, **hyper, **bhmc_kw)
        secs += time.perf_counter() - t0
        start = auto_starts(X, depth, 1)[0][1]
        rec = {
            "nmi": _level_nmi(truth, np.asarray(res.level_labels)).tolist(),
            "start": _level_nmi(truth, start).tolist(),
            "ward": _level_nmi(truth, _ward_levels(X, depth)).tolist(),
            # the posterior's own ranking of the answer and the start: the expected loss the
            # summary minimises (per level, summed), so that an answer below its start is
            # named the model's miss (the posterior prefers the answer) or the summary's
            "posterior_loss": level_expected_loss(np.asarray(res.level_labels), res.posterior).tolist(),
            "posterior_loss_start": level_expected_loss(np.asarray(start), res.posterior).tolist(),
        }
        if off == 0:
            found = float(res.log_likelihood)
            st = state_from_level_labels(
                X, truth, res.config, key=jax.random.PRNGKey(p["seed"]), components=p["c"], sigma2=p["sigma2"], **hyper
            )
            rec["criterion_found"] = found
            # the true levels under the same posterior loss: lower than the answer's, the
            # summary missed a partition its posterior prefers; higher, the posterior itself
            # prefers the answer to the truth
            rec["posterior_loss_truth"] = level_expected_loss(np.asarray(truth), res.posterior).tolist()
            rec["criterion_truth"] = float(complete_data_log_likelihood(st, jax.numpy.asarray(X)))
        out["depths"][str(off)] = rec
    d0 = out["depths"]["0"]
    mean = lambda v: float(np.mean(v))  # noqa: E731
    regret = d0["criterion_found"] - d0["criterion_truth"]
    out.update(
        criterion_found=d0["criterion_found"],
        criterion_truth=d0["criterion_truth"],
        regret=regret,
        recovery=mean(d0["nmi"]),
        ward=mean(d0["ward"]),
        average=float("nan"),
        start=mean(d0["start"]),
        seconds=secs,
        verdict=_verdict(regret, mean(d0["nmi"])),
    )
    return out


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
DRAW = {"bhc": draw_bhc, "bhcc": draw_bhcc, "rbhcc": draw_bhcc, "pydt": draw_pydt, "bhmc": draw_bhmc}


def run_problem(system: str, seed: int, **kw) -> dict:
    p = DRAW[system](seed)
    if system == "bhc":
        out = run_bhc(p)
    elif system in ("bhcc", "rbhcc"):
        out = run_bhcc(p, randomized=system == "rbhcc", **kw)
    elif system == "bhmc":
        out = run_bhmc(p, **kw)
    else:
        out = run_pydt(p, **kw)
    meta = {k: v for k, v in p.items() if isinstance(v, (int, float, str)) and k != "system"}
    return dict(system=system, **meta, **out)


def _nanmean(v) -> float:
    v = np.asarray(v, float)
    return float(np.mean(v[np.isfinite(v)])) if np.any(np.isfinite(v)) else float("nan")


def summarize(records: list) -> dict:
    r = np.array([x["regret"] for x in records], float)
    q = np.quantile(r, [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0]) if len(r) else np.full(7, np.nan)
    verdicts = [x["verdict"] for x in records]
    out = {
        "problems": len(records),
        "regret_quantiles": dict(zip(("min", "p5", "p25", "median", "p75", "p95", "max"), map(float, q))),
        "within_tol": float(np.mean(r >= -TOL)) if len(r) else float("nan"),
        "search_misses": verdicts.count("search"),
        "model_misses": verdicts.count("model"),
        "recovery_mean": float(np.mean([x["recovery"] for x in records])),
        "ward_mean": float(np.mean([x["ward"] for x in records])),
        "average_mean": _nanmean([x["average"] for x in records]),
        "recovery_ge_ward": float(np.mean([x["recovery"] >= x["ward"] - 1e-9 for x in records])),
        "seconds_total": float(np.sum([x["seconds"] for x in records])),
    }
    if records and "depths" in records[0]:  # BHMC: per depth offset, at the true levels
        per = {}
        for off in sorted({k for x in records for k in x["depths"]}, key=int):
            rs = [x["depths"][off] for x in records if off in x["depths"]]
            m = lambda key: np.array([np.mean(r[key]) for r in rs])  # noqa: E731
            nmi, ward, start = m("nmi"), m("ward"), m("start")
            per[off] = {
                "problems": len(rs),
                "nmi_mean": float(nmi.mean()),
                "ward_mean": float(ward.mean()),
                "start_mean": float(start.mean()),
                "ge_ward": float(np.mean(nmi >= ward - 1e-9)),
                "ge_start": float(np.mean(nmi >= start - 1e-9)),
            }
            if all("posterior_loss" in r for r in rs):
                # below the start: the posterior's expected loss prefers the answer (the
                # model's miss) or the start (a candidate the summary's search missed)
                below = nmi < start - 1e-9
                prefers = np.array([sum(r["posterior_loss"]) <= sum(r["posterior_loss_start"]) + 1e-12 for r in rs])
                per[off]["below_start_model"] = int(np.sum(below & prefers))
                per[off]["below_start_summary"] = int(np.sum(below & ~prefers))
                per[off]["posterior_prefers_answer"] = float(np.mean(prefers))
            tr = [r for r in rs if "posterior_loss_truth" in r]
            if tr:  # at the true depth: the posterior's ranking of the answer against the truth
                per[off]["truth_checked"] = len(tr)
                per[off]["posterior_prefers_answer_to_truth"] = float(
                    np.mean([sum(r["posterior_loss"]) <= sum(r["posterior_loss_truth"]) + 1e-12 for r in tr])
                )
        out["by_depth"] = per
    if records and "gibbs" in records[0]:
        out["gibbs_mean"] = float(np.mean([x["gibbs"] for x in records]))
        out["gibbs_regret_median"] = float(np.median([x["gibbs_criterion"] - x["criterion_truth"] for x in records]))
    return out


def format_table(system: str, s: dict) -> str:
    q = s["regret_quantiles"]
    lines = [
        f"## {system}: {s['problems']} problems",
        "",
        "| regret (nats) min | 5% | 25% | median | 75% | 95% | max | >= -0.1 | search misses | model misses |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {q['min']:.2f} | {q['p5']:.2f} | {q['p25']:.2f} | {q['median']:.2f} | {q['p75']:.2f} | {q['p95']:.2f} | "
        f"{q['max']:.2f} | {100 * s['within_tol']:.0f}% | {s['search_misses']} | {s['model_misses']} |",
        "",
        # BHMC: level NMI at the true levels, Ward's tree cut at its own gaps (the start), no
        # average linkage
        (
            "| recovery (level NMI, true depth) | Ward (at its gaps) | average | >= Ward | "
            if "by_depth" in s
            else "| recovery (mean ARI) | Ward (true K) | average (true K) | >= Ward | "
        )
        + ("CDPM Gibbs |" if "gibbs_mean" in s else ""),
        "|---|---|---|---|" + ("---|" if "gibbs_mean" in s else ""),
        f"| {s['recovery_mean']:.3f} | {s['ward_mean']:.3f} | "
        + ("-" if np.isnan(s["average_mean"]) else f"{s['average_mean']:.3f}")
        + f" | {100 * s['recovery_ge_ward']:.0f}% | "
        + (f"{s['gibbs_mean']:.3f} |" if "gibbs_mean" in s else ""),
    ]
    if "by_depth" in s:
        lines += [
            "",
            "| depth | problems | level NMI (mean) | start | Ward | >= Ward | >= start | below start: model / summary |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for off, r in s["by_depth"].items():
            named = f"{r['below_start_model']} / {r['below_start_summary']}" if "below_start_model" in r else "-"
            lines.append(
                f"| truth {int(off):+d} | {r['problems']} | {r['nmi_mean']:.3f} | {r['start_mean']:.3f} | "
                f"{r['ward_mean']:.3f} | {100 * r['ge_ward']:.0f}% | {100 * r['ge_start']:.0f}% | {named} |"
            )
        d0 = s["by_depth"].get("0", {})
        if "truth_checked" in d0:
            lines += [
                "",
                f"At the true depth the posterior's expected loss prefers the answer to the true levels on "
                f"{100 * d0['posterior_prefers_answer_to_truth']:.0f}% of {d0['truth_checked']} problems.",
            ]
    lines += ["", f"run time {s['seconds_total']:.1f} s"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", nargs="+", default=["bhc", "bhcc", "rbhcc", "pydt", "bhmc"], choices=sorted(DRAW))
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--no-gibbs", action="store_true", help="skip the CDPM Gibbs baseline (bhcc, rbhcc)")
    ap.add_argument(
        "--search",
        choices=["local", "stochastic"],
        default=None,
        help="the column search of bhcc / rbhcc (default: the library's default)",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the records of --out for the seeds outside this run (the summary then covers all of them)",
    )
    ap.add_argument(
        "--resume", action="store_true", help="as --merge, and skip the seeds --out already holds (a run cut short)"
    )
    ap.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "search_regret.json")
    )
    args = ap.parse_args(argv)
    payload = {
        "tolerance": TOL,
        "ranges": {"bhc": BHC_RANGES, "bhcc": BHCC_RANGES, "pydt": PYDT_RANGES, "bhmc": BHMC_RANGES},
        "systems": {},
    }
    if os.path.exists(args.out):
        with open(args.out) as f:
            payload["systems"] = json.load(f).get("systems", {})
    for system in args.systems:
        recs = []
        seeds = range(args.first_seed, args.first_seed + args.problems)
        old = payload["systems"].get(system, {}).get("problems", []) if (args.merge or args.resume) else []
        done = {r["seed"] for r in old} if args.resume else set()
        kept = [r for r in old if r["seed"] in done or r["seed"] not in seeds]
        t0 = time.perf_counter()
        summ = summarize(kept) if kept else None
        for s in (s for s in seeds if s not in done):
            kw = {"gibbs": not args.no_gibbs, "search": args.search} if system in ("bhcc", "rbhcc") else {}
            recs.append(run_problem(system, s, **kw))
            # every problem compiles programs for its own shapes: without this a process holds
            # them all and, after ~90 problems, LLVM cannot allocate memory for the next ones
            _jax().clear_caches()
            print(
                f"{system} {s}: regret {recs[-1]['regret']:+.2f} recovery {recs[-1]['recovery']:.2f} "
                f"({recs[-1]['verdict']})",
                file=sys.stderr,
                flush=True,
            )
            # written after every problem: a run cut short keeps its records (--resume goes on)
            every = sorted(kept + recs, key=lambda r: r["seed"])
            summ = summarize(every)
            summ["wall_seconds"] = time.perf_counter() - t0  # this run's
            payload["systems"][system] = {"summary": summ, "problems": every}
            os.makedirs(os.path.dirname(args.out), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(payload, f, indent=1, default=float)
        if summ is not None:
            print(format_table(system, summ))
            print()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
