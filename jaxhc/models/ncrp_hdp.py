"""BHMC: nested CRP paths with mixture weights linked by a multilevel HDP (Huang et al.).

The generative process (Algorithm 1, with the truncated stick of section 4.1):

* ``beta_root = (beta_1, ..., beta_K, beta*)``: sticks of ``GEM(gamma0)`` broken until the
  remaining stick ``beta*`` is below ``epsilon`` (``epsilon = 1`` starts from no component at
  all, which is exact: components are then created on demand, below);
* every point ``n`` walks ``L`` levels down from the root by ``CRP(alpha)`` at each node
  (existing child with probability ``N_child / (N_node + alpha)``, a new one with ``alpha /
  (N_node + alpha)``); a new node ``z'`` under ``z`` draws ``beta_z' ~ DP(gamma, beta_z)``,
  i.e. ``Dir(gamma beta_z1, ..., gamma beta_zK, gamma beta*_z)`` on the instantiated atoms
  plus the rest;
* ``c_n ~ Cat(beta_leaf)``; choosing ``beta*`` means one of the atoms not yet instantiated:
  they are revealed one at a time, each with ``theta ~ N(mu0, diag(prior_var))`` and one more
  stick broken at every node (root: ``u ~ Beta(1, gamma0)``; child of ``z``: ``u ~ Beta(gamma
  beta_z,new, gamma beta*_z)``; ``beta_new = u beta*``, ``beta* <- (1 - u) beta*``), and the
  draw takes the revealed atom with probability ``u`` at the point's leaf (its share of the
  leaf's rest), else goes on to the next. This is exact; always taking the first revealed
  atom would undercount shared components (see `jaxhc.inference.bhmc.sampler._new_component`);
* ``x_n ~ N(theta_{c_n}, sigma2 I)``.

`ncrp_hdp` is that process as a NumPyro program (Python control flow, one site per random
choice; `ncrp_hdp_truncated`, its fixed-shape truncation, runs under ``jit`` and
`numpyro.infer.Predictive`), `ncrp_log_prob` is ``log p(V | alpha)`` of section 3.1 and `joint_log_density` the
log density of a whole state. The array primitives (`dirichlet_log`, `beta_log`,
`dp_child_log`) work in log space on ``[..., K + 1]`` weight vectors whose last entry is
``log beta*`` and whose ``-inf`` entries are components that do not exist (a ``Dir`` parameter
of 0); the sampler of `jaxhc.inference.bhmc.sampler` shares them.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from numpyro.contrib.control_flow import scan

from .._internal.deprecation import keyword_program

__all__ = [
    "NCRPHDPSample",
    "beta_log",
    "dirichlet_log",
    "dp_child_log",
    "joint_log_density",
    "loggamma",
    "ncrp_hdp",
    "ncrp_hdp_truncated",
    "ncrp_log_prob",
]

_NEG = -jnp.inf


_GAMMA_MAX_TRIES = 200

# capacities of the truncated program that `ncrp_hdp` runs when it is traced without them
# (``max_children`` also at most the number of points, where the paths are exact)
TRACED_MAX_CHILDREN = 10
TRACED_MAX_COMPONENTS = 50


def _concrete(v):
    """A draw of the exact (Python control flow) process, which needs concrete values."""
    if isinstance(v, jax.core.Tracer):
        raise ValueError(
            "ncrp_hdp: the exact process (max_children=None, max_components=None) needs concrete draws, "
            "but a value was traced (e.g. substituted inside jit); give max_children and max_components "
            "for the truncated program"
        )
    return v


# ---------------------------------------------------------------------------------------
# log-space primitives shared with the sampler
# ---------------------------------------------------------------------------------------
def loggamma(key, a, dtype=None):
    """``log g`` for ``g ~ Gamma(a, 1)`` elementwise (``a > 0``), exactly: Marsaglia-Tsang
    rejection for ``a + 1`` (repeated until every entry is accepted) and the boost
    ``log g(a) = log g(a + 1) + log(U) / a``, which keeps ``a`` far below 1 finite in log space.

    Same law as ``jax.random.loggamma``; a plain vectorised ``while_loop`` compiles in a
    fraction of the time, which matters because a sweep contains several of them."""
    a = jnp.asarray(a, dtype or jnp.result_type(a, float))
    f = a.dtype
    kb, kl = jax.random.split(key)
    d = a + 1.0 - 1.0 / 3.0
    cc = 1.0 / jnp.sqrt(9.0 * d)

    # Marsaglia-Tsang accepts with probability > 0.95 for every shape (d >= 2/3), so 200 tries
    # all fail with probability < 1e-250; the cap makes termination unconditional (a NaN
    # shape never accepts: its draw stays NaN)
    def cond(carry):
        return ~jnp.all(carry[1]) & (carry[0] < _GAMMA_MAX_TRIES)

    def body(carry):
        i, done, out = carry
        kn, ku = jax.random.split(jax.random.fold_in(kl, i))
        x = jax.random.normal(kn, a.shape, f)
        u = jax.random.uniform(ku, a.shape, f)
        v = 1.0 + cc * x
        ok = v > 0
        v3 = jnp.where(ok, v, 1.0) ** 3
        acc = ok & (jnp.log(u) < 0.5 * x * x + d - d * v3 + d * jnp.log(v3))
        take = acc & ~done
        return i + 1, done | acc, jnp.where(take, jnp.log(d) + jnp.log(v3), out)

    _, _, lg = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.zeros(a.shape, bool), jnp.full(a.shape, jnp.nan, f)))
    ub = jax.random.uniform(kb, a.shape, f)
    return lg + jnp.log(ub) / a


def dirichlet_log(key, log_conc):
    """``log w`` for ``w ~ Dir(exp(log_conc))`` along the last axis.

    Entries with ``log_conc = -inf`` (or a concentration that underflows to 0) are absent
    components: their ``log w`` is ``-inf``. Uses `loggamma`, so concentrations
    far below 1 (``gamma beta_k`` for tiny ``beta_k``) stay finite in log space."""
    a = jnp.exp(log_conc)
    live = a > 0
    g = jnp.where(live, loggamma(key, jnp.where(live, a, 1.0)), _NEG)
    return g - logsumexp(g, axis=-1, keepdims=True)


def beta_log(key, a, b):
    """``(log u, log(1 - u))`` for ``u ~ Beta(a, b)``. ``a = 0`` gives ``u = 0``, ``b = 0``
    gives ``u = 1``; both 0 gives ``u = 0`` (nothing to break).

    The pair ``(a, b)`` of an entry is stacked on a trailing axis, so an entry's draw does not
    depend on how many entries follow it (BHMC's node-slot capacity: padded slots leave the
    real ones' draws unchanged)."""
    dt = jnp.result_type(a, b, float)
    ab = jnp.stack(jnp.broadcast_arrays(jnp.asarray(a, dt), jnp.asarray(b, dt)), axis=-1)
    g = jnp.where(ab > 0, loggamma(key, jnp.where(ab > 0, ab, 1.0)), _NEG)  # one sampler for both
    ga, gb = g[..., 0], g[..., 1]
    tot = jnp.logaddexp(ga, gb)
    none = ~jnp.isfinite(tot)
    lu = jnp.where(none, _NEG, ga - tot)
    l1mu = jnp.where(none, 0.0, gb - tot)
    return lu, l1mu


def dp_child_log(key, log_beta_parent, gamma):
    """``log beta_child`` for ``beta_child ~ DP(gamma, beta_parent)`` on the instantiated
    atoms plus ``beta*``: ``Dir(gamma beta_parent)``."""
    return dirichlet_log(key, jnp.log(gamma) + log_beta_parent)


def normal_diag_logpdf(x, mean, var):
    return -0.5 * jnp.sum(jnp.log(2 * jnp.pi * var) + (x - mean) ** 2 / var, axis=-1)


# ---------------------------------------------------------------------------------------
# densities of a state
# ---------------------------------------------------------------------------------------
def ncrp_log_prob(parent, level, count, alpha, depth: int):
    """``log p(V | alpha)`` of section 3.1 (equal to the product of the sequential nCRP
    choices in any order of the points).

    Args:
      parent: int ``[M]`` parent slot of each node (``-1`` for the root and unused slots).
      level: int ``[M]`` depth of each node (root 0, leaves ``depth``).
      count: int ``[M]`` number of points through each node (0 = unused slot).
      alpha: nCRP concentration.
      depth: ``L``.
    """
    count = jnp.asarray(count)
    f = jnp.result_type(alpha, float)
    active = count > 0
    M = count.shape[0]
    nonroot = active & (jnp.asarray(parent) >= 0)
    m_children = jax.ops.segment_sum(nonroot.astype(f), jnp.where(nonroot, parent, M), num_segments=M + 1)[:M]
    internal = active & (jnp.asarray(level) < depth)
    nz = count.astype(f)
    la = jnp.log(alpha)
    t_int = jnp.where(internal, gammaln(alpha) + m_children * la - gammaln(nz + alpha), 0.0)
    t_edge = jnp.where(nonroot, gammaln(jnp.where(nonroot, nz, 1.0)), 0.0)
    return jnp.sum(t_int) + jnp.sum(t_edge)


def log_dirichlet_density(log_x, log_conc):
    """``log Dir(x; a)`` over the entries with ``a > 0`` (absent atoms are skipped)."""
    a = jnp.exp(log_conc)
    ok = (a > 0) & jnp.isfinite(log_x)
    return (
        gammaln(jnp.sum(jnp.where(ok, a, 0.0), -1))
        - jnp.sum(jnp.where(ok, gammaln(jnp.where(ok, a, 1.0)), 0.0), -1)
        + jnp.sum(jnp.where(ok, (a - 1.0) * jnp.where(ok, log_x, 0.0), 0.0), -1)
    )


def gem_log_density(log_beta_root, gamma0):
    """Log density of the root weights ``(beta_1..beta_K)`` under ``GEM(gamma0)`` with the
    live atoms taken in slot order: ``sum_k [log Beta(u_k; 1, gamma0) - log R_{k-1}]`` with
    ``u_k = beta_k / R_{k-1}`` and ``R_{k-1}`` the stick left before atom ``k``."""
    lb = log_beta_root[:-1]
    live = jnp.isfinite(lb)
    b = jnp.where(live, jnp.exp(lb), 0.0)
    rem_before = 1.0 - (jnp.cumsum(b) - b)
    log_r = jnp.log(jnp.maximum(rem_before, 1e-300))
    log1mu = jnp.log(jnp.maximum(rem_before - b, 1e-300)) - log_r
    term = jnp.log(gamma0) + (gamma0 - 1.0) * log1mu - log_r
    return jnp.sum(jnp.where(live, term, 0.0))


def joint_log_density(state, X, mu0, prior_var):
    """``log p(X, c, V, B, theta | alpha, gamma0, gamma, sigma2)`` of a BHMC state.

    The sum of: ``log p(V | alpha)`` (`ncrp_log_prob`); the root weights under ``GEM(gamma0)``
    (`gem_log_density`); every non-root node's ``log Dir(beta_z'; gamma beta_parent)``; the
    live components' ``log N(theta_k; mu0, diag(prior_var))``; and ``sum_n log beta_{leaf(n),
    c_n} + log N(x_n; theta_{c_n}, sigma2 I)``.

    Args:
      state: a `jaxhc.inference.bhmc.sampler.BHMCState` (or anything with its fields).
      X: float ``[N, D]``.
      mu0, prior_var: the base measure ``H`` (``[D]`` or scalars).
    """
    X = jnp.asarray(X)
    depth = state.path.shape[1] - 1
    active = state.count > 0
    nonroot = active & (state.parent >= 0)
    par = jnp.where(nonroot, state.parent, 0)
    lv = ncrp_log_prob(state.parent, state.level, state.count, state.alpha, depth)
    lroot = gem_log_density(state.logb[0], state.gamma0)
    ldir = jax.vmap(log_dirichlet_density)(state.logb, jnp.log(state.gamma) + state.logb[par])
    ledge = jnp.sum(jnp.where(nonroot, ldir, 0.0))
    live = jnp.isfinite(state.logb[0, :-1])
    D = X.shape[1]
    mu0 = jnp.broadcast_to(jnp.asarray(mu0, X.dtype), (D,))
    v0 = jnp.broadcast_to(jnp.asarray(prior_var, X.dtype), (D,))
    ltheta = jnp.sum(jnp.where(live, normal_diag_logpdf(state.theta, mu0, v0), 0.0))
    leaf = state.path[:, -1]
    lc = jnp.sum(state.logb[leaf, state.c])
    lx = jnp.sum(normal_diag_logpdf(X, state.theta[state.c], state.sigma2))
    return lv + lroot + ledge + ltheta + lc + lx


# ---------------------------------------------------------------------------------------
# the NumPyro program
# ---------------------------------------------------------------------------------------
class NCRPHDPSample(NamedTuple):
    """What `ncrp_hdp` returns (host arrays; node 0 is the root).

    Attributes:
      paths: int ``[N, L + 1]`` node of every point at every level (column 0: the root).
      c: int ``[N]`` component of every point.
      parent: int ``[M]`` parent node (``-1`` for the root).
      level: int ``[M]`` depth of each node.
      log_beta: float ``[M, K + 1]`` log mixture weights per node (last column ``beta*``).
      theta: float ``[K, D]`` component means.
      X: float ``[N, D]`` the data (the observed values when ``X`` was given).
    """

    paths: np.ndarray
    c: np.ndarray
    parent: np.ndarray
    level: np.ndarray
    log_beta: np.ndarray
    theta: np.ndarray
    X: np.ndarray


def _check_pos(v, name):
    v = float(v)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v}")
    return v


def _program_sizes(num_points, dim, depth, X):
    """``(X as float64 or None, N, D, L)`` of a program call, checked (``X`` gives ``N, D``)."""
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.size == 0:
            raise ValueError(f"X must be a non-empty 2-D array [N, D], got shape {X.shape}")
        num_points, dim = X.shape
    if num_points is None or dim is None:
        raise ValueError("give num_points and dim, or X")
    N, D, L = int(num_points), int(dim), int(depth)
    if N < 1 or D < 1 or L < 1:
        raise ValueError(f"num_points, dim and depth must be >= 1, got {N}, {D}, {L}")
    return X, N, D, L


@keyword_program("num_points", "dim", "depth")
def ncrp_hdp(
    *,
    X=None,
    num_points: Optional[int] = None,
    dim: Optional[int] = None,
    depth: int = 3,
    alpha=1.0,
    gamma0=1.0,
    gamma=1.0,
    sigma2=1.0,
    mu0=0.0,
    prior_var=1.0,
    epsilon=1e-3,
    max_children: Optional[int] = None,
    max_components: Optional[int] = None,
) -> NCRPHDPSample:
    """Algorithm 1 (with section 4.1's truncated stick) as a NumPyro program.

    Run it under ``numpyro.handlers.seed``; with ``X`` given, ``x`` is observed (so
    ``numpyro.infer.util.log_density`` scores a full trace). Sites: ``u_root_k`` (initial
    sticks, ``Beta(1, gamma0)``), ``path_n_l`` (the CRP choice at level ``l``: an existing
    child's index in creation order, or the number of children for a new one),
    ``beta_node_j`` (``Dir(gamma beta_parent)`` of a new node), ``c_n``, ``theta_k``,
    ``stick_k_node_j`` (the extra stick every node breaks when component ``k`` is created;
    ``Beta(1, gamma0)`` at the root, ``Beta(gamma beta_parent,k, gamma beta*_parent)`` below),
    ``take_k`` (whether the draw of ``c_n`` that revealed atom ``k`` takes it) and ``x_n``.

    Every argument is a keyword (``ncrp_hdp(X=X)`` conditions on data, ``ncrp_hdp(num_points=N,
    dim=D)`` samples it); the former positional order ``(num_points, dim, depth)`` still works
    for one release, with a ``DeprecationWarning``.

    Args:
      X: optional observed data ``[N, D]``.
      num_points, dim: ``N`` and ``D`` (required when ``X`` is None; else taken from ``X``).
      depth: ``L`` >= 1, the number of levels below the root.
      alpha, gamma0, gamma: nCRP and HDP concentrations (> 0).
      sigma2: observation variance (``Sigma = sigma2 I``).
      mu0, prior_var: ``H = N(mu0, diag(prior_var))``.
      epsilon: stop breaking the root stick once ``beta* < epsilon`` (``epsilon >= 1``
        starts with no component; every component is then made on demand).
      max_children, max_components: give both for the truncated program in JAX (see
        `ncrp_hdp_truncated`). Left None, the exact process above runs (Python control flow,
        one site per random choice) when the program is run with a concrete key
        (``handlers.seed``/``trace``); when the key is traced (``jit``, ``vmap`` over keys,
        `numpyro.infer.Predictive` with ``parallel=True`` or ``False``) the exact process
        cannot run, and the truncated program runs instead with ``max_children =
        min(TRACED_MAX_CHILDREN, N)`` (10) and ``max_components = TRACED_MAX_COMPONENTS``
        (50), its sites and return values being those of `ncrp_hdp_truncated`. A traced value
        met on the exact path (a substituted site inside ``jit``) raises a ``ValueError``
        naming these arguments.
    """
    if (max_children is None) != (max_components is None):
        raise ValueError("give both max_children and max_components (the truncated program), or neither")
    if max_children is None and isinstance(numpyro.prng_key(), jax.core.Tracer):
        # traced (jit, vmap, Predictive): the exact process's Python control flow cannot run on
        # traced draws, so the truncated program with its default capacities runs instead
        max_children = min(TRACED_MAX_CHILDREN, _program_sizes(num_points, dim, depth, X)[1])
        max_components = TRACED_MAX_COMPONENTS
    if max_children is not None:
        return ncrp_hdp_truncated(
            X=X,
            num_points=num_points,
            dim=dim,
            depth=depth,
            alpha=alpha,
            gamma0=gamma0,
            gamma=gamma,
            sigma2=sigma2,
            mu0=mu0,
            prior_var=prior_var,
            max_children=max_children,
            max_components=max_components,
        )
    X, N, D, L = _program_sizes(num_points, dim, depth, X)
    for v, name in ((alpha, "alpha"), (gamma0, "gamma0"), (gamma, "gamma"), (sigma2, "sigma2"), (epsilon, "epsilon")):
        _check_pos(v, name)
    mu0 = np.broadcast_to(np.asarray(mu0, float), (D,))
    sd0 = np.sqrt(np.broadcast_to(np.asarray(prior_var, float), (D,)))
    sd = float(np.sqrt(sigma2))

    # root sticks
    log_root = [0.0]  # only beta* so far
    theta = []
    k = 0
    while np.exp(log_root[-1]) >= epsilon:
        u = _concrete(numpyro.sample(f"u_root_{k}", dist.Beta(1.0, gamma0)))
        rest = log_root.pop()
        log_root += [rest + float(np.log(u)), rest + float(np.log1p(-u))]
        theta.append(np.asarray(numpyro.sample(f"theta_{k}", dist.Normal(mu0, sd0).to_event(1))))
        k += 1
    beta = [np.asarray(log_root)]  # per node, length K + 1
    parent, level, children, counts = [-1], [0], [[]], [0]
    paths = np.zeros((N, L + 1), int)
    cs = np.zeros(N, int)
    xs = np.zeros((N, D))

    def add_component():
        kk = len(theta)
        theta.append(np.asarray(numpyro.sample(f"theta_{kk}", dist.Normal(mu0, sd0).to_event(1))))
        for j in range(len(beta)):  # nodes were created parents-first
            lb = beta[j]
            if parent[j] < 0:
                a, b = 1.0, gamma0
            else:
                lp = beta[parent[j]]
                a, b = gamma * np.exp(lp[kk]), gamma * np.exp(lp[-1])
            u = float(numpyro.sample(f"stick_{kk}_node_{j}", dist.Beta(max(a, 1e-300), max(b, 1e-300))))
            star = lb[-1]
            beta[j] = np.concatenate([lb[:-1], [star + np.log(max(u, 1e-300)), star + np.log1p(-min(u, 1 - 1e-16))]])

    for n in range(N):
        z = 0
        counts[0] += 1
        for l in range(1, L + 1):
            ch = children[z]
            w = np.array([counts[c] for c in ch] + [alpha], float)
            pick = int(_concrete(numpyro.sample(f"path_{n}_{l}", dist.Categorical(probs=w / w.sum()))))
            if pick == len(ch):
                j = len(beta)
                conc = gamma * np.exp(beta[z])
                pos = conc > 0  # atoms with (numerically) zero weight in the parent stay at zero
                w = np.asarray(numpyro.sample(f"beta_node_{j}", dist.Dirichlet(conc[pos])))
                lb = np.full(conc.shape, -np.inf)
                with np.errstate(divide="ignore"):
                    lb[pos] = np.log(w)
                beta.append(lb)
                parent.append(z)
                level.append(l)
                children.append([])
                counts.append(0)
                children[z].append(j)
                z = j
            else:
                z = ch[pick]
            counts[z] += 1
            paths[n, l] = z
        p = np.exp(beta[z])
        cn = int(_concrete(numpyro.sample(f"c_{n}", dist.Categorical(probs=p / p.sum()))))
        while cn == len(theta):  # the rest was drawn: reveal its atoms until the drawn one
            star_before = beta[z][-1]
            add_component()
            share = float(np.exp(beta[z][-2] - star_before)) if np.isfinite(star_before) else 0.0
            if not int(numpyro.sample(f"take_{len(theta) - 1}", dist.Bernoulli(probs=min(max(share, 0.0), 1.0)))):
                cn += 1
        cs[n] = cn
        obs = None if X is None else X[n]
        xs[n] = np.asarray(numpyro.sample(f"x_{n}", dist.Normal(theta[cn], sd).to_event(1), obs=obs))
    K = len(theta)
    log_beta = np.full((len(beta), K + 1), -np.inf)
    for j, lb in enumerate(beta):
        log_beta[j, : len(lb) - 1] = lb[:-1]
        log_beta[j, K] = lb[-1]
    return NCRPHDPSample(
        paths, cs, np.asarray(parent), np.asarray(level), log_beta, np.asarray(theta).reshape(K, D), xs
    )


# ---------------------------------------------------------------------------------------
# the truncated program (JAX control flow: jit, vmap, Predictive)
# ---------------------------------------------------------------------------------------
def _check_pos_traced(v, name):
    if isinstance(v, jax.core.Tracer):
        return v
    return _check_pos(v, name)


def _check_cap(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return int(v)


@keyword_program("num_points", "dim", "depth")
def ncrp_hdp_truncated(
    *,
    X=None,
    num_points: Optional[int] = None,
    dim: Optional[int] = None,
    depth: int = 3,
    alpha=1.0,
    gamma0=1.0,
    gamma=1.0,
    sigma2=1.0,
    mu0=0.0,
    prior_var=1.0,
    max_children: int = 10,
    max_components: int = 50,
) -> NCRPHDPSample:
    """The nCRP + HDP of `ncrp_hdp`, truncated to fixed shapes so it runs in JAX (``jit``,
    ``vmap`` over keys, `numpyro.infer.Predictive` with ``parallel=True``).

    The tree has at most ``max_children`` (``B``) children per node: node slots are those of
    the full ``B``-ary tree of depth ``L`` (``M = sum_l B^l``; level ``l`` holds slots
    ``sum_{l' < l} B^l'`` onwards, child ``j`` of the node at index ``i`` of its level at index
    ``i B + j`` of the next). Points choose their path by the CRP at each node exactly as in
    `ncrp_hdp` (children in creation order) while a node has fewer than ``B`` children; a
    node that has ``B`` offers no new child, and the deterministic site ``truncated`` is
    True once that happened (as `jaxhc.models.dpm.dpm` with ``max_clusters``). When it is
    False the paths have the exact nCRP law.

    The HDP weights use a ``K = max_components`` truncation of the root stick (section 4.1):
    ``beta_root ~ GEM(gamma0)`` with its last atom taking the rest, and every node below
    ``beta_z' ~ Dir(gamma beta_parent)`` over the ``K`` atoms (unused slots draw weights too;
    they explain no point). The rest of the root stick after ``K`` atoms has mean
    ``(gamma0 / (1 + gamma0))^K``.

    Sites: ``path_l`` (``[N]`` per level ``l = 1..L``: the child index chosen, under a
    ``scan`` over points), ``u_root`` (``[K - 1]`` sticks), ``beta_l`` (``[B^l, K]``
    weights of level ``l``'s slots), ``c`` (``[N]``), ``theta`` (``[K, D]``), ``X``
    (``[N, D]``, observed when given); deterministic ``counts`` (``[M]`` points through each
    slot) and ``truncated``.

    Returns:
      `NCRPHDPSample` of JAX arrays: ``paths [N, L + 1]`` slot ids, ``parent``/``level``
      ``[M]`` of every slot (unused slots have ``counts`` 0), ``log_beta [M, K + 1]`` (last
      column ``-inf``: no mass outside the ``K`` atoms), ``theta``, ``X``.
    """
    X, N, D, L = _program_sizes(num_points, dim, depth, X)
    X = None if X is None else jnp.asarray(X, dtype=jnp.result_type(float))
    B = _check_cap(max_children, "max_children")
    K = _check_cap(max_components, "max_components")
    for v, name in ((alpha, "alpha"), (gamma0, "gamma0"), (gamma, "gamma"), (sigma2, "sigma2")):
        _check_pos_traced(v, name)
    f = jnp.result_type(float)
    alpha, gamma0, gamma, sigma2 = (jnp.asarray(v, f) for v in (alpha, gamma0, gamma, sigma2))
    mu0 = jnp.broadcast_to(jnp.asarray(mu0, f), (D,))
    sd0 = jnp.sqrt(jnp.broadcast_to(jnp.asarray(prior_var, f), (D,)))
    offsets = np.concatenate([[0], np.cumsum([B**l for l in range(L + 1)])]).astype(np.int64)
    M = int(offsets[-1])
    level = np.concatenate([np.full(B**l, l, np.int32) for l in range(L + 1)])
    parent = np.concatenate(
        [np.array([-1], np.int32)] + [(offsets[l - 1] + np.arange(B**l) // B).astype(np.int32) for l in range(1, L + 1)]
    )

    def step(carry, _):
        counts, trunc = carry
        idx = jnp.int32(0)  # index of the current node within its level
        slots = [jnp.int32(0)]
        for l in range(1, L + 1):
            kids = offsets[l] + idx * B + jnp.arange(B)
            cc = counts[kids]
            occ = cc > 0
            num = jnp.sum(occ)
            w = jnp.where(occ, cc, jnp.where(jnp.arange(B) == num, alpha, 0.0))
            j = numpyro.sample(f"path_{l}", dist.Categorical(probs=w / jnp.sum(w)))
            trunc = trunc | (num >= B)
            idx = idx * B + j
            slots.append((offsets[l] + idx).astype(jnp.int32))
        slots = jnp.stack(slots)
        return (counts.at[slots].add(1.0), trunc), slots

    (counts, trunc), paths = scan(step, (jnp.zeros(M, f), jnp.asarray(False)), None, length=N)
    numpyro.deterministic("counts", counts)
    numpyro.deterministic("truncated", trunc)

    if K > 1:
        u = numpyro.sample("u_root", dist.Beta(jnp.ones(K - 1, f), gamma0).to_event(1))
        rest = jnp.concatenate([jnp.zeros(1, f), jnp.cumsum(jnp.log1p(-u))])  # log stick left before atom k
        log_root = jnp.concatenate([rest[:-1] + jnp.log(u), rest[-1:]])
    else:
        log_root = jnp.zeros(1, f)
    logb = [log_root[None]]
    tiny = jnp.finfo(f).tiny
    for l in range(1, L + 1):
        conc = gamma * jnp.exp(jnp.repeat(logb[-1], B, axis=0))  # slot i's parent is slot i // B above
        w = numpyro.sample(f"beta_{l}", dist.Dirichlet(jnp.maximum(conc, tiny)).to_event(1))
        logb.append(jnp.log(w))
    logb = jnp.concatenate(logb, axis=0)  # [M, K]
    with numpyro.plate("points", N):
        c = numpyro.sample("c", dist.Categorical(logits=logb[paths[:, L]]))
    with numpyro.plate("components", K):
        theta = numpyro.sample("theta", dist.Normal(mu0, sd0).to_event(1))
    with numpyro.plate("points", N):
        x = numpyro.sample("X", dist.Normal(theta[c], jnp.sqrt(sigma2)).to_event(1), obs=X)
    log_beta = jnp.concatenate([logb, jnp.full((M, 1), -jnp.inf, f)], axis=1)
    return NCRPHDPSample(paths, c, jnp.asarray(parent), jnp.asarray(level), log_beta, theta, x)
