"""Plain NumPy/SciPy reference implementations that the JAX code is tested against.

Nothing here is clever or fast: log marginal likelihoods are computed from the raw rows of a
cluster (never from merged sufficient statistics), greedy BHC loops over all pairs at every
step, and the brute-force helpers enumerate trees and partitions explicitly. Everything is
float64. No JAX computation happens here; only the `Tree` container of jaxhc is used.

Contents
  Component log marginals (X is ``[n, d]``, an empty X has log marginal 0):
    niw_log_marginal(X, m0, kappa0, nu0, S0)
    normal_known_cov_log_marginal(X, m0, prior_cov, noise_cov)
    beta_bernoulli_log_marginal(X, a, b)                 NaN entries are missing
    beta_binomial_log_marginal(X, a, b, trials)          NaN entries are missing
    dirichlet_multinomial_log_marginal(X, alpha)         rows are count vectors
    *_log_predictive(x, X_cluster, ...)                  = lm(X_cluster + x) - lm(X_cluster)
    make_log_marginal(name, **hyper) -> f(X_subset)
    log_predictive(log_marginal, x, X_cluster)
  BHC:
    bhc_reference(X, log_marginal, alpha) -> dict
    tree_log_evidence(tree, X, log_marginal, alpha) -> dict   (recursion on a given tree)
  Brute force:
    tree_consistent_partitions(tree), tree_evidence_by_enumeration(tree, X, log_marginal, alpha)
    all_set_partitions(n), dpm_log_evidence(X, log_marginal, alpha)
    all_binary_trees(n)
    dendrogram_purity_bruteforce(tree, labels)
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import betaln, gammaln, logsumexp, multigammaln
from scipy.stats import multivariate_normal

from jaxhc.tree import Tree

__all__ = [
    "niw_log_marginal",
    "normal_known_cov_log_marginal",
    "beta_bernoulli_log_marginal",
    "beta_binomial_log_marginal",
    "dirichlet_multinomial_log_marginal",
    "niw_log_predictive",
    "normal_known_cov_log_predictive",
    "beta_bernoulli_log_predictive",
    "beta_binomial_log_predictive",
    "dirichlet_multinomial_log_predictive",
    "log_predictive",
    "make_log_marginal",
    "bhc_reference",
    "tree_log_evidence",
    "tree_consistent_partitions",
    "tree_evidence_by_enumeration",
    "all_set_partitions",
    "dpm_log_evidence",
    "all_binary_trees",
    "dendrogram_purity_bruteforce",
]


def _rows(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2:
        raise ValueError(f"X must be [n, d], got shape {X.shape}")
    return X


# ---------------------------------------------------------------------------------------
# Component log marginal likelihoods, straight from the data rows
# ---------------------------------------------------------------------------------------
def niw_log_marginal(X, m0, kappa0, nu0, S0) -> float:
    """log p(X) under x_i ~ N(mu, Sigma), (mu, Sigma) ~ NIW(m0, kappa0, nu0, S0).

    DESIGN.md formula: kappa_n = kappa0 + n, nu_n = nu0 + n,
    S_n = S0 + S + kappa0 n / kappa_n (xbar - m0)(xbar - m0)^T,
    log p = -nd/2 log pi + log Gamma_d(nu_n/2) - log Gamma_d(nu0/2) + nu0/2 log|S0|
            - nu_n/2 log|S_n| + d/2 (log kappa0 - log kappa_n).
    """
    X = _rows(X)
    n, d = X.shape
    if n == 0:
        return 0.0
    m0 = np.broadcast_to(np.asarray(m0, np.float64), (d,))
    S0 = np.asarray(S0, np.float64).reshape(d, d)
    kappa0 = float(kappa0)
    nu0 = float(nu0)
    xbar = X.mean(axis=0)
    S = np.zeros((d, d))
    for i in range(n):
        S += np.outer(X[i] - xbar, X[i] - xbar)
    kappa_n = kappa0 + n
    nu_n = nu0 + n
    S_n = S0 + S + kappa0 * n / kappa_n * np.outer(xbar - m0, xbar - m0)
    _, logdet_S0 = np.linalg.slogdet(S0)
    _, logdet_Sn = np.linalg.slogdet(S_n)
    return float(
        -n * d / 2.0 * np.log(np.pi)
        + multigammaln(nu_n / 2.0, d)
        - multigammaln(nu0 / 2.0, d)
        + nu0 / 2.0 * logdet_S0
        - nu_n / 2.0 * logdet_Sn
        + d / 2.0 * (np.log(kappa0) - np.log(kappa_n))
    )


def normal_known_cov_log_marginal(X, m0, prior_cov, noise_cov) -> float:
    """log p(X) under x_i ~ N(mu, noise_cov), mu ~ N(m0, prior_cov).

    Computed as one joint Gaussian: vec(X) (rows stacked) has mean tile(m0, n) and covariance
    kron(ones(n, n), prior_cov) + kron(eye(n), noise_cov).
    """
    X = _rows(X)
    n, d = X.shape
    if n == 0:
        return 0.0
    m0 = np.broadcast_to(np.asarray(m0, np.float64), (d,))
    P = np.asarray(prior_cov, np.float64)
    N = np.asarray(noise_cov, np.float64)
    P = np.diag(np.broadcast_to(P, (d,))) if P.ndim <= 1 else P
    N = np.diag(np.broadcast_to(N, (d,))) if N.ndim <= 1 else N
    mean = np.tile(m0, n)
    cov = np.kron(np.ones((n, n)), P) + np.kron(np.eye(n), N)
    return float(multivariate_normal.logpdf(X.reshape(-1), mean=mean, cov=cov))


def beta_bernoulli_log_marginal(X, a, b) -> float:
    """log p(X) for independent Beta(a_j, b_j)-Bernoulli columns; NaN entries are skipped.

    Per column: log B(a + m, b + c - m) - log B(a, b), m = ones, c = observed entries.
    """
    X = _rows(X)
    n, d = X.shape
    a = np.broadcast_to(np.asarray(a, np.float64), (d,))
    b = np.broadcast_to(np.asarray(b, np.float64), (d,))
    total = 0.0
    for j in range(d):
        col = X[:, j]
        obs = col[~np.isnan(col)]
        if not np.all((obs == 0) | (obs == 1)):
            raise ValueError("beta_bernoulli_log_marginal: entries must be 0, 1 or NaN")
        m = float(obs.sum())
        c = float(obs.size)
        total += betaln(a[j] + m, b[j] + c - m) - betaln(a[j], b[j])
    return float(total)


def beta_binomial_log_marginal(X, a, b, trials) -> float:
    """log p(X) for independent Beta(a_j, b_j)-Binomial(trials_j) columns; NaN skipped.

    Includes the binomial coefficients: sum_i log C(T_j, x_ij) + log B(a + sum x,
    b + sum (T - x)) - log B(a, b) per column.
    """
    X = _rows(X)
    n, d = X.shape
    a = np.broadcast_to(np.asarray(a, np.float64), (d,))
    b = np.broadcast_to(np.asarray(b, np.float64), (d,))
    T = np.broadcast_to(np.asarray(trials, np.float64), (d,))
    total = 0.0
    for j in range(d):
        col = X[:, j]
        obs = col[~np.isnan(col)]
        if np.any(obs < 0) or np.any(obs > T[j]) or np.any(obs != np.round(obs)):
            raise ValueError("beta_binomial_log_marginal: entries must be integers in [0, trials]")
        for x in obs:
            total += gammaln(T[j] + 1) - gammaln(x + 1) - gammaln(T[j] - x + 1)
        s = float(obs.sum())
        f = float(obs.size * T[j] - s)
        total += betaln(a[j] + s, b[j] + f) - betaln(a[j], b[j])
    return float(total)


def dirichlet_multinomial_log_marginal(X, alpha) -> float:
    """log p(X) for count-vector rows x_i ~ Multinomial(N_i, theta), theta ~ Dir(alpha).

    Includes the multinomial coefficients log(N_i!) - sum_j log(x_ij!).
    """
    X = _rows(X)
    n, K = X.shape
    if n == 0:
        return 0.0
    alpha = np.broadcast_to(np.asarray(alpha, np.float64), (K,))
    if np.any(X < 0) or np.any(X != np.round(X)):
        raise ValueError("dirichlet_multinomial_log_marginal: entries must be counts")
    total = 0.0
    for i in range(n):
        total += gammaln(X[i].sum() + 1) - np.sum(gammaln(X[i] + 1))
    c = X.sum(axis=0)
    A = alpha.sum()
    total += gammaln(A) - gammaln(A + c.sum())
    total += np.sum(gammaln(alpha + c) - gammaln(alpha))
    return float(total)


def log_predictive(log_marginal, x, X_cluster) -> float:
    """log p(x | X_cluster) = log_marginal(X_cluster with x appended) - log_marginal(X_cluster)."""
    x = np.asarray(x, np.float64).reshape(1, -1)
    Xc = np.asarray(X_cluster, np.float64).reshape(-1, x.shape[1])
    return float(log_marginal(np.vstack([Xc, x])) - log_marginal(Xc))


def niw_log_predictive(x, X_cluster, m0, kappa0, nu0, S0) -> float:
    return log_predictive(lambda Y: niw_log_marginal(Y, m0, kappa0, nu0, S0), x, X_cluster)


def normal_known_cov_log_predictive(x, X_cluster, m0, prior_cov, noise_cov) -> float:
    return log_predictive(lambda Y: normal_known_cov_log_marginal(Y, m0, prior_cov, noise_cov), x, X_cluster)


def beta_bernoulli_log_predictive(x, X_cluster, a, b) -> float:
    return log_predictive(lambda Y: beta_bernoulli_log_marginal(Y, a, b), x, X_cluster)


def beta_binomial_log_predictive(x, X_cluster, a, b, trials) -> float:
    return log_predictive(lambda Y: beta_binomial_log_marginal(Y, a, b, trials), x, X_cluster)


def dirichlet_multinomial_log_predictive(x, X_cluster, alpha) -> float:
    return log_predictive(lambda Y: dirichlet_multinomial_log_marginal(Y, alpha), x, X_cluster)


_MARGINALS = {
    "niw": niw_log_marginal,
    "normal_inverse_wishart": niw_log_marginal,
    "NormalInverseWishart": niw_log_marginal,
    "normal_known_cov": normal_known_cov_log_marginal,
    "NormalKnownCov": normal_known_cov_log_marginal,
    "beta_bernoulli": beta_bernoulli_log_marginal,
    "BetaBernoulli": beta_bernoulli_log_marginal,
    "beta_binomial": beta_binomial_log_marginal,
    "BetaBinomial": beta_binomial_log_marginal,
    "dirichlet_multinomial": dirichlet_multinomial_log_marginal,
    "DirichletMultinomial": dirichlet_multinomial_log_marginal,
}


def make_log_marginal(name: str, **hyper):
    """A function ``f(X_subset) -> float`` (log marginal of those rows) for a named family.

    Names: "niw" (m0, kappa0, nu0, S0), "normal_known_cov" (m0, prior_cov, noise_cov),
    "beta_bernoulli" (a, b), "beta_binomial" (a, b, trials), "dirichlet_multinomial" (alpha);
    the jaxhc class names (e.g. "NormalInverseWishart") are accepted too.
    """
    if name not in _MARGINALS:
        raise ValueError(f"unknown family {name!r}; choose from {sorted(_MARGINALS)}")
    fn = _MARGINALS[name]

    def log_marginal(X_subset):
        return fn(X_subset, **hyper)

    log_marginal.__name__ = f"{name}_log_marginal"
    return log_marginal


# ---------------------------------------------------------------------------------------
# BHC
# ---------------------------------------------------------------------------------------
def _merge_quantities(alpha, n_k, log_h1_k, log_d_i, log_d_j, log_pT_i, log_pT_j):
    """log d_k, log pi_k, log(1 - pi_k), log p(D_k|T_k), log r_k, log r/(1-r) of a merge."""
    log_a_gamma = np.log(alpha) + gammaln(n_k)
    log_d_k = np.logaddexp(log_a_gamma, log_d_i + log_d_j)
    log_pi = log_a_gamma - log_d_k
    log_1m_pi = log_d_i + log_d_j - log_d_k  # 1 - pi_k = d_i d_j / d_k exactly
    log_pT_k = np.logaddexp(log_pi + log_h1_k, log_1m_pi + log_pT_i + log_pT_j)
    log_r = log_pi + log_h1_k - log_pT_k
    log_odds = log_pi + log_h1_k - log_1m_pi - log_pT_i - log_pT_j
    return log_d_k, log_pi, log_1m_pi, log_pT_k, log_r, log_odds


def bhc_reference(X, log_marginal, alpha) -> dict:
    """Greedy Bayesian hierarchical clustering, looping over all pairs at every step.

    Clusters are kept in a list (initially leaves 0..n-1); each step scans all pairs of
    positions i < j in that list, merges the pair with the highest log-odds
    log r/(1-r) (first such pair on ties), removes both and appends the new node n + t.

    Returns a dict:
      children [n-1, 2] int (min id, max id), tree (jaxhc Tree), log_r [n-1] (merge order),
      log_odds [n-1], log_evidence (log p(D|T) at the root), log_d_root, dpm_lower_bound,
      and per-node arrays [2n-1]: log_pT, log_d, log_h1.
    """
    X = _rows(X)
    n = X.shape[0]
    alpha = float(alpha)
    log_pT = np.zeros(2 * n - 1)
    log_d = np.zeros(2 * n - 1)
    log_h1 = np.zeros(2 * n - 1)
    members = [[i] for i in range(n)] + [None] * (n - 1)
    for i in range(n):
        log_h1[i] = log_marginal(X[[i]])
        log_pT[i] = log_h1[i]
        log_d[i] = np.log(alpha)

    cache = {}

    def h1_of(idx):
        key = tuple(sorted(idx))
        if key not in cache:
            cache[key] = float(log_marginal(X[list(key)]))
        return cache[key]

    clusters = list(range(n))
    children = np.zeros((n - 1, 2), dtype=np.int64)
    log_r = np.zeros(n - 1)
    log_odds_out = np.zeros(n - 1)
    for t in range(n - 1):
        best = None
        for pi_ in range(len(clusters)):
            for pj_ in range(pi_ + 1, len(clusters)):
                ci, cj = clusters[pi_], clusters[pj_]
                idx = members[ci] + members[cj]
                lh = h1_of(idx)
                q = _merge_quantities(alpha, len(idx), lh, log_d[ci], log_d[cj], log_pT[ci], log_pT[cj])
                if best is None or q[5] > best[0]:
                    best = (q[5], pi_, pj_, lh, q)
        _, pi_, pj_, lh, q = best
        ci, cj = clusters[pi_], clusters[pj_]
        k = n + t
        members[k] = members[ci] + members[cj]
        log_h1[k] = lh
        log_d[k], _, _, log_pT[k], log_r[t], log_odds_out[t] = q
        children[t] = (min(ci, cj), max(ci, cj))
        clusters = [c for c in clusters if c not in (ci, cj)] + [k]

    root = 2 * n - 2
    return {
        "children": children,
        "tree": Tree(children),
        "log_r": log_r,
        "log_odds": log_odds_out,
        "log_evidence": float(log_pT[root]),
        "log_d_root": float(log_d[root]),
        "dpm_lower_bound": float(log_pT[root] + log_d[root] + gammaln(alpha) - gammaln(n + alpha)),
        "log_pT": log_pT,
        "log_d": log_d,
        "log_h1": log_h1,
    }


def _leaf_lists(tree: Tree) -> list:
    return [np.flatnonzero(row).tolist() for row in tree.leaf_sets()]


def tree_log_evidence(tree: Tree, X, log_marginal, alpha) -> dict:
    """The BHC recursion on a given tree: per-node log p(D_k|T_k), log d_k, log h1, log r.

    Returns a dict with log_pT, log_d, log_h1 [2n-1], log_r [n-1], log_evidence,
    log_d_root, dpm_lower_bound (same meaning as in `bhc_reference`).
    """
    X = _rows(X)
    n = tree.n_leaves
    alpha = float(alpha)
    ch = np.asarray(tree.children)
    leaves = _leaf_lists(tree)
    log_pT = np.zeros(2 * n - 1)
    log_d = np.zeros(2 * n - 1)
    log_h1 = np.array([float(log_marginal(X[idx])) for idx in leaves])
    log_r = np.zeros(n - 1)
    log_pT[:n] = log_h1[:n]
    log_d[:n] = np.log(alpha)
    for t in range(n - 1):
        i, j = ch[t]
        k = n + t
        q = _merge_quantities(alpha, len(leaves[k]), log_h1[k], log_d[i], log_d[j], log_pT[i], log_pT[j])
        log_d[k], _, _, log_pT[k], log_r[t], _ = q
    root = 2 * n - 2
    return {
        "log_pT": log_pT,
        "log_d": log_d,
        "log_h1": log_h1,
        "log_r": log_r,
        "log_evidence": float(log_pT[root]),
        "log_d_root": float(log_d[root]),
        "dpm_lower_bound": float(log_pT[root] + log_d[root] + gammaln(alpha) - gammaln(n + alpha)),
    }


# ---------------------------------------------------------------------------------------
# Brute force
# ---------------------------------------------------------------------------------------
def tree_consistent_partitions(tree: Tree) -> list:
    """All tree-consistent partitions of the leaves, each a list of frozensets.

    For node k: {leafset(k)} plus every union of a tree-consistent partition of its left
    child with one of its right child; the answer is the set for the root.
    """
    n = tree.n_leaves
    ch = np.asarray(tree.children)
    parts = [[[frozenset([i])]] for i in range(n)] + [None] * (n - 1)
    for t in range(n - 1):
        i, j = ch[t]
        k = n + t
        whole = frozenset().union(*parts[i][0], *parts[j][0])
        parts[k] = [[whole]] + [a + b for a in parts[i] for b in parts[j]]
    return parts[2 * n - 2]


def tree_evidence_by_enumeration(tree: Tree, X, log_marginal, alpha) -> float:
    """log p(D|T) as an explicit sum over tree-consistent partitions (Lemma of BHC).

    p(D|T) = sum_v [alpha^{m_v} prod_l Gamma(n_l) / d_root] prod_l p(D_l|H1), with d_root
    from d_k = alpha Gamma(n_k) + d_i d_j (leaves d = alpha).
    """
    X = _rows(X)
    n = tree.n_leaves
    alpha = float(alpha)
    ch = np.asarray(tree.children)
    sizes = tree.sizes()
    log_d = np.full(2 * n - 1, np.log(alpha))
    for t in range(n - 1):
        i, j = ch[t]
        log_d[n + t] = np.logaddexp(np.log(alpha) + gammaln(sizes[n + t]), log_d[i] + log_d[j])
    log_d_root = log_d[2 * n - 2]
    terms = []
    for part in tree_consistent_partitions(tree):
        term = -log_d_root
        for block in part:
            term += np.log(alpha) + gammaln(len(block)) + log_marginal(X[sorted(block)])
        terms.append(term)
    return float(logsumexp(terms))


def all_set_partitions(n: int):
    """Yields every set partition of range(n) as a list of lists (Bell(n) of them)."""
    if n == 0:
        yield []
        return
    for part in all_set_partitions(n - 1):
        for b in range(len(part)):
            yield [blk + [n - 1] if c == b else list(blk) for c, blk in enumerate(part)]
        yield [list(blk) for blk in part] + [[n - 1]]


def dpm_log_evidence(X, log_marginal, alpha) -> float:
    """Exact log p(D|DPM): logsumexp over all set partitions of CRP prior x likelihood.

    CRP prior of a partition with blocks of sizes n_l: alpha^m prod Gamma(n_l)
    Gamma(alpha) / Gamma(n + alpha).
    """
    X = _rows(X)
    n = X.shape[0]
    alpha = float(alpha)
    cache = {}
    terms = []
    for part in all_set_partitions(n):
        term = gammaln(alpha) - gammaln(n + alpha)
        for block in part:
            key = tuple(block)
            if key not in cache:
                cache[key] = float(log_marginal(X[list(block)]))
            term += np.log(alpha) + gammaln(len(block)) + cache[key]
        terms.append(term)
    return float(logsumexp(terms))


def _insert_leaf(nested, k):
    """All nested trees obtained by attaching leaf k on each edge of `nested` (and above it)."""
    yield (nested, k)
    if isinstance(nested, tuple):
        left, right = nested
        for new_left in _insert_leaf(left, k):
            yield (new_left, right)
        for new_right in _insert_leaf(right, k):
            yield (left, new_right)


def _all_nested(n):
    if n == 1:
        yield 0
        return
    for smaller in _all_nested(n - 1):
        yield from _insert_leaf(smaller, n - 1)


def all_binary_trees(n: int):
    """Yields every rooted binary hierarchy over leaves 0..n-1 as a `Tree` ((2n-3)!! of them)."""
    if n < 1:
        raise ValueError("all_binary_trees needs n >= 1")
    for nested in _all_nested(n):
        yield Tree.from_nested(nested)


def dendrogram_purity_bruteforce(tree: Tree, labels) -> float:
    """Dendrogram purity: mean over unordered same-class pairs {i, j}, i != j, of the fraction
    of leaves under their lowest common ancestor that share the pair's class.

    Returns NaN if no class has two leaves.
    """
    labels = np.asarray(labels)
    n = tree.n_leaves
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape [{n}], got {labels.shape}")
    sets = [frozenset(s) for s in _leaf_lists(tree)]
    vals = []
    for i, j in itertools.combinations(range(n), 2):
        if labels[i] != labels[j]:
            continue
        lca = min((s for s in sets if i in s and j in s), key=len)
        vals.append(np.mean([labels[l] == labels[i] for l in lca]))
    return float(np.mean(vals)) if vals else float("nan")
