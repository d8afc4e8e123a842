"""Greedy Bayesian EM for the Pitman-Yor diffusion tree (Knowles & Ghahramani, section 5.2).

Gaussian observation model: leaves ``X [N, D]`` at time 1, Brownian motion from the origin
(location 0 at time 0), ``x_b ~ N(x_a, sigma2 (t_b - t_a) I)`` along each edge (Eq. 12).
Trees are the fixed-capacity parent arrays of `pydt_mcmc` (``m = 2N - 1`` slots, leaves
``0..N-1`` at time 1, internal slots ``N..m-1``, ``-1`` root, ``-2`` free).

The variational family is ``q(x) q(c) q(1/sigma2)`` with the divergence times a point
estimate: ``q(x)`` the exact Gaussian posterior of the internal locations given
``<1/sigma2>`` (message passing, `e_step`), ``q(c)`` and ``q(1/sigma2)`` Gamma (the forms of
the Gibbs conditionals Eq. 15 / 16 with expectations). With ``q(x)`` optimal the bound has the
closed form

    L = log p(X | T, t, sigma2 = 1/<lam>) + (D |E| / 2) (<log lam> - log <lam>)
        + log P(T, t | <c>, alpha, beta) + |I| (<log c> - log <c>)
        - KL(q(c) || p(c)) - KL(q(lam) || p(lam))

(``|E|`` edges including origin -> root, ``|I|`` branch points, ``log P`` = Eq. 9 + 11, linear
in ``c`` apart from the ``log c`` terms). With ``learn_hyper=False`` the Gamma factors are point
masses and ``L = log p(X, T, t | c, sigma2, alpha, beta)``, the joint at the current times.

`m_step` raises ``L`` by coordinate ascent: the times jointly by L-BFGS (optax, zoom line
search) on Eq. 17 in ``s = logit t`` with ``q(x)`` held fixed; then ``q(1/sigma2)``,
``q(c)``; then ``alpha`` and ``beta`` by golden-section search on Eq. 9 + 11 (maximum
likelihood on bounded intervals, no hyper-priors; a step is kept only if it does not lower
the bound). Every piece is an exact coordinate maximum or is guarded, so the bound never
decreases.

Search over structures (section 5.2): the initial tree attaches the data points one by one
(random order), each at the best of all branch midpoints and branch points; then each
iteration makes one move and runs EM on the (three) best trees it proposes. The paper's move
takes a tree from the K-best list, detaches a random subtree, scores every re-attachment
point and inserts the EM results into the list. The score of a re-attachment is the exact log
joint of the candidate at its times: ``log p(X_rest) + log Z_s + log N(mu_s; E[x_new | X_rest],
(Var[x_new | X_rest] + v_s + sigma2 (t_s - t_new)) I)`` (``mu_s, v_s`` the subtree's upward
message, ``Z_s`` its own normaliser, ``x_new`` the attachment location, whose marginal follows
from the E-step of the remaining tree, a Brownian bridge on a segment) plus Eq. 9 + 11 of the
candidate, computed for all candidates at once from the changes along the root path. Two
greedy moves act on the best tree and are kept only if EM raises the best bound: *regraft*
(every subtree's best re-attachment elsewhere; EM on the subtrees whose regraft scores
highest) and *collapse* (a branch point folded into its parent, so sibling branch points merge
into one multifurcation; scored by the exact bound at the current times). Restarts repeat the
search from other initial trees and keep the highest bound.

Probit observations (section 5.4, ``likelihood="probit"``): bits ``Y [N, D]`` with ``P(y_nd = 1 |
x) = Phi(x_nd)`` at the leaf locations (as `pydt_mcmc`: a latent ``x + N(0, 1)`` thresholded at
0). The E-step runs expectation propagation (Minka, 2001) on the probit factors (`ep_e_step`):
each ``Phi(s_nd x_nd)`` (``s = 2 y - 1``) becomes a Gaussian site ``N(M_nd; x_nd, V_nd)`` in
natural parameters (`EPSites`), updated in parallel damped sweeps by moment matching against
the cavities, warm-started from the tree's previous sites. Given the sites the model is the
Gaussian one with pseudo-observations ``M`` and per-(leaf, dim) noise ``V``, so the message
passing runs per dimension (`marginals_diag`), leaves get posterior marginals, and the EM's
likelihood term is the EP evidence

    log Z_EP = log N(M; 0, K + diag V) + sum_nd [log Zhat_nd - log N(M_nd; mu_c, v_c + V_nd)]

(``K = sigma2 t_lca`` per dimension, ``mu_c, v_c`` the cavities, ``Zhat`` the tilted
normalisers), an approximation of ``log p(Y | T, t)``: ``L`` is then no longer a strict bound.
The M-step is unchanged (Eq. 17 with ``b`` from the surrogate posterior, leaf edges included):
with the sites fixed it is exact EM on the surrogate Gaussian model, so it does not lower the
surrogate bound, but re-running EP at the new times can move ``L`` either way; EM stops when
``|Delta L| < tol_em``. ``sigma2`` is fixed (the unit probit noise sets the scale; as in
`pydt_mcmc`); ``q(c)``, ``alpha``, ``beta`` are learned. The search scores re-attachments with
the site means / variances as the leaf data (per-dim variances), the initial tree with sites
matched to the prior leaf marginals ``N(0, sigma2)``; each tree in the K-best list keeps its
sites.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.buckets import pad_rows
from ..._internal.validation import check_key
from ...models.pydt_math import FREE, check_X
from .checks import check_count, check_hyperparameters, check_likelihood, check_priors
from .ep import EPConfig, EPSites, ep_e_step, prior_sites
from .estep import EMHyper, EStep, e_step, pydt_em_bound
from .moves import em_batch, initial_structure, propose_collapse, propose_reattach, propose_regraft
from .mstep import m_step
from .padding import leaf_capacity, pad_tree, unpad_tree
from .predictive import pydt_predictive_logpdf
from .state import PYDTEMResult, PYDTPriors, state_to_tree

# the EM's building blocks (`e_step`, `m_step`, `ep_e_step`, ...) live in `estep`, `mstep`, `ep`;
# they are re-exported here, where they were defined before
__all__ = [
    "EMHyper",
    "EStep",
    "PYDTEMResult",
    "e_step",
    "m_step",
    "em_init_hyper",
    "pydt_em",
    "pydt_predictive_logpdf",
    "pydt_em_bound",
    "EPSites",
    "EPConfig",
    "ep_e_step",
]


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def _signature(parent, N):
    """Hashable tree structure: the set of leaf sets of internal nodes."""
    parent = np.asarray(parent)
    m = parent.shape[0]
    masks = [0] * m
    for k in range(N):
        masks[k] = 1 << k
    # children before parents: repeat relaxation by depth (parents have larger ids? not
    # guaranteed), so push leaf bits up their root paths
    for k in range(N):
        if parent[k] == FREE:
            continue
        p = parent[k]
        while p >= 0:
            masks[p] |= 1 << k
            p = parent[p]
    return frozenset(masks[k] for k in range(N, m) if parent[k] != FREE)


def em_init_hyper(X, c=1.0, alpha=0.5, beta=0.2, sigma2=None) -> EMHyper:
    """Initial `EMHyper`: point values as ``(shape = value, rate = 1)`` (``c`` and ``1/sigma2``);
    ``sigma2=None`` takes the mean per-column variance of ``X``."""
    X = np.asarray(X)
    if sigma2 is None:
        sigma2 = float(np.mean(np.var(X, axis=0)))
        sigma2 = sigma2 if sigma2 > 0 else 1.0
    f = jnp.asarray(X).dtype
    a = lambda v: jnp.asarray(v, f)  # noqa: E731
    return EMHyper(a(c), a(1.0), a(1.0 / sigma2), a(1.0), a(alpha), a(beta))


MOVES = ("reattach", "regraft", "collapse")


def _check_init(init, N):
    """``init = (parent, times)`` as fixed-capacity ``[2N - 1]`` arrays (a `PYDTEMResult`'s
    ``parent, times``) or compact ones (leaves ``0..N-1`` first, e.g. a `ParentTree`'s ``parent``
    and ``heights``), checked to be a PYDT tree; returns the fixed-capacity arrays."""
    try:
        parent, times = init
    except (TypeError, ValueError):
        raise ValueError("init must be a pair (parent, times)") from None
    parent = np.asarray(parent)
    times = np.asarray(times, dtype=jnp.result_type(float))
    m = 2 * N - 1
    if parent.ndim != 1 or times.shape != parent.shape or not N < parent.size + 1 <= m + 1:
        raise ValueError(
            f"init: parent and times must be 1-D of equal length in [N + 1, 2N - 1] = [{N + 1}, {m}], "
            f"got shapes {parent.shape}, {times.shape}"
        )
    if not np.issubdtype(parent.dtype, np.integer):
        raise ValueError("init: parent must hold integers")
    parent = np.concatenate([parent.astype(np.int32), np.full(m - parent.size, FREE, np.int32)])
    times = np.concatenate([times, np.zeros(m - times.size, times.dtype)])
    act = parent != FREE
    if not np.all(act[:N]):
        raise ValueError("init: every leaf 0..N-1 needs a parent")
    if np.sum(parent[act] == -1) != 1:
        raise ValueError("init: the tree needs exactly one root (parent -1)")
    bad = act & (parent >= 0) & ((parent >= m) | ~act[np.clip(parent, 0, m - 1)] | (parent < N))
    if np.any(bad) or np.any(parent[act] < -1):
        raise ValueError("init: parents must be active internal nodes (indices N..2N-2) or -1")
    if not np.allclose(times[:N], 1.0):
        raise ValueError("init: leaf times must be 1")
    kids = np.bincount(parent[act & (parent >= 0)], minlength=m)
    internal = act & (np.arange(m) >= N)
    if np.any(kids[internal] < 2):
        raise ValueError("init: every internal node needs at least two children")
    if not np.all((times[internal] > 0) & (times[internal] < 1)):
        raise ValueError("init: internal times must lie in (0, 1)")
    tp = np.where(parent >= 0, times[np.clip(parent, 0, m - 1)], 0.0)
    if not np.all(times[act] > tp[act]):
        raise ValueError("init: times must increase from parent to child")
    return parent, times


def pydt_em(
    key,
    X,
    *,
    c=1.0,
    alpha=0.5,
    beta=0.2,
    sigma2=None,
    likelihood: str = "gaussian",
    num_iters: int = 100,
    k_best: int = 10,
    learn_hyper: bool = True,
    learn_alpha_beta: Optional[bool] = None,
    priors: PYDTPriors = PYDTPriors(),
    num_em_candidates: int = 3,
    max_em: int = 20,
    tol_em: float = 1e-4,
    max_lbfgs: int = 100,
    sigma2_max: Optional[float] = None,
    ep: EPConfig = EPConfig(),
    moves: Sequence[str] = MOVES,
    num_restarts: int = 1,
    init=None,
    progress_bar: bool = True,
    _bucket: bool = True,
) -> PYDTEMResult:
    """Greedy Bayesian EM search over PYDT trees (section 5.2), Gaussian or probit observations.

    Each search starts from a tree built by sequential attachment of the points (random order,
    each at its best-scoring place) and runs ``num_iters`` iterations; each iteration makes one
    move and runs EM on the ``num_em_candidates`` best trees it proposes:

    * ``"reattach"`` (the paper's move): detach a random subtree of a random tree of the
      K-best list, re-attach it at the best-scoring places; all candidates enter the K-best
      list (which keeps the ``k_best`` highest bounds).
    * ``"regraft"``: on the best tree, every subtree's best re-attachment elsewhere (scored by
      the exact bound at the current times); the subtrees whose regraft scores highest.
    * ``"collapse"``: on the best tree, fold a branch point into its parent (its children join
      the parent's: sibling branch points merge into one multifurcation), scored by the exact
      bound at the current times.

    ``"regraft"`` and ``"collapse"`` are accepted only when EM takes a candidate above the best
    bound (by more than ``tol_em``). They are deterministic, so each runs once per best tree:
    iteration ``i`` tries the moves in the order of ``moves`` rotated by ``i`` and makes the
    first that is ``"reattach"`` or has not yet been tried on the current best tree. With
    ``"reattach"`` left out the search stops early once neither greedy move improves.

    Args:
      key: ``jax.random`` key (subtree choices and the order of the initial attachments).
      X: ``[N, D]``, ``N >= 3``: real data (``likelihood="gaussian"``) or bits 0 / 1
        (``"probit"``).
      c, alpha, beta: initial hyperparameters; ``alpha = beta = 0`` is the Dirichlet diffusion
        tree (binary trees; ``alpha, beta`` then stay fixed).
      sigma2: initial (or fixed) diffusion variance; ``None``: the mean column variance of ``X``
        (Gaussian), 1 (probit).
      likelihood: ``"gaussian"`` (leaves observed) or ``"probit"`` (section 5.4: ``P(x_nd = 1) =
        Phi(leaf location_nd)``, as `pydt_mcmc`). Probit runs EP on the probit factors in each
        E-step (`ep_e_step`; sites warm-started, kept per tree) and uses ``log Z_EP`` in place of
        ``log p(X | T, t)``, so the "bound" is an EP approximation of the log evidence, not a
        strict bound, and it may move either way between EM iterations (the M-step is exact EM
        on the surrogate Gaussian model of the EP sites). ``sigma2`` stays fixed (the scale
        of the latent locations is set by the unit probit noise); ``q(c)``, ``alpha``, ``beta``
        are learned as in the Gaussian case. The search scores candidates with the site
        means / variances as the leaf data.
      num_iters: search iterations per restart (one move each).
      k_best: length of the K-best list.
      learn_hyper: learn ``q(c)``, ``q(1/sigma2)`` (variational Gamma; not under probit) and,
        unless DDT, ``alpha``, ``beta`` (golden-section search).
      learn_alpha_beta: override for ``alpha, beta`` alone (default: ``learn_hyper``; never
        for the DDT).
      priors: Gamma priors on ``c`` and ``1/sigma2``.
      num_em_candidates: candidate trees per iteration that get EM (the paper: 3).
      max_em, tol_em, max_lbfgs: EM iterations per tree, its stopping tolerance on the bound,
        L-BFGS iterations per M-step.
      sigma2_max: upper limit of the learned ``sigma2`` (Gaussian; default: the mean column
        variance of ``X``, the leaf variance the model implies for ``sigma2``). Without it the
        bound is unbounded when ``sigma2`` is learned: all times -> 1 with ``sigma2 (1 - t)``
        fixed gains ``sum_b (1 - <c> J_b) log(1/eps)`` from Eq. 14's singularity at ``t = 1``
        (``<c> J_b < 1``) and loses only ``D/2 log(1/eps)`` at the root edge, so MAP times
        collapse; the clip is the constrained coordinate maximum, so the bound stays monotone.
      ep: `EPConfig` (probit only): sweeps, tolerance, damping.
      moves: the moves the search makes, a non-empty subset of ``("reattach", "regraft",
        "collapse")`` (default: all; ``("reattach",)`` is the paper's search). The DDT never
        collapses (its trees are binary).
      num_restarts: independent searches, each from its own initial tree (restart 0 from
        ``key``, restart ``r`` from ``jax.random.fold_in(key, r)``), each of ``num_iters``
        iterations (the cost grows linearly); the result is the restart with the highest
        bound, its K-best list merged with the others'. Default 1: a single search, as in the
        paper.
      init: optional start tree ``(parent, times)`` for restart 0 instead of sequential
        attachment: fixed-capacity ``[2N - 1]`` arrays (a result's ``parent, times``) or compact
        ones with leaves ``0..N-1`` first (a `ParentTree`'s ``parent`` and ``heights``). EM runs
        on it first, so ``num_iters=0`` fits times and hyperparameters to a given structure.
      progress_bar: tqdm bar over iterations.

    Returns:
      `PYDTEMResult`. Arrays use fixed capacity ``2N - 1`` (see module docstring).

    Shape buckets: the compiled programs run on ``bucket(N)`` leaf slots (`jaxhc._internal.buckets`;
    zero data rows, padding leaves that never join a tree, internal slots shifted; see
    `jaxhc.inference.pydt.padding`), so every ``N`` of a bucket reuses them; the result is
    the exact-size one (same key, same search).
    """
    X = check_X(X)
    check_likelihood(X, likelihood)
    probit = likelihood == "probit"
    if probit and sigma2 is None:
        sigma2 = 1.0
    if sigma2 is not None:
        check_hyperparameters(c, alpha, beta, sigma2)
    c, alpha, beta, _ = check_hyperparameters(c, alpha, beta, 1.0)
    N, D = X.shape
    if N < 3:
        raise ValueError(f"pydt_em needs N >= 3 points, got {N}")
    num_iters = check_count(num_iters, "num_iters", 0)
    k_best = check_count(k_best, "k_best", 1)
    num_restarts = check_count(num_restarts, "num_restarts", 1)
    num_em_candidates = check_count(num_em_candidates, "num_em_candidates", 1)
    max_em = check_count(max_em, "max_em", 0)
    max_lbfgs = check_count(max_lbfgs, "max_lbfgs", 0)
    for name, v in (("tol_em", tol_em),) + ((("sigma2_max", sigma2_max),) if sigma2_max is not None else ()):
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a number, got {v!r}") from None
        if not np.isfinite(fv) or fv < 0 or (name == "sigma2_max" and fv == 0):
            raise ValueError(f"{name} must be a finite number {'> 0' if name == 'sigma2_max' else '>= 0'}, got {v!r}")
    check_key(key)
    if isinstance(moves, str):
        moves = (moves,)
    moves = tuple(moves)
    if not moves or any(mv not in MOVES for mv in moves) or len(set(moves)) != len(moves):
        raise ValueError(f"moves must be a non-empty subset of {MOVES}, got {moves}")
    Nb = leaf_capacity(N, _bucket)  # padded leaf slots (`padding`)
    init_tree = None if init is None else pad_tree(*_check_init(init, N), N, Nb)
    conf = None
    if probit:
        conf = EPConfig(int(ep.max_sweeps), float(ep.tol), float(ep.damping))
        if conf.max_sweeps < 1 or not conf.tol >= 0 or not 0.0 < conf.damping <= 1.0:
            raise ValueError(f"ep needs max_sweeps >= 1, tol >= 0 and damping in (0, 1], got {ep}")
    ddt = alpha == 0.0 and beta == 0.0
    if ddt:
        moves = tuple(mv for mv in moves if mv != "collapse") or ("reattach",)
    learn = bool(learn_hyper)
    learn_ab = (learn if learn_alpha_beta is None else bool(learn_alpha_beta)) and not ddt
    allow_bp = not ddt
    pri = check_priors(priors)
    Xj = jnp.asarray(pad_rows(2.0 * X - 1.0, Nb, fill=-1.0) if probit else pad_rows(X, Nb))  # probit: the signs
    hyper0 = em_init_hyper(X, c, alpha, beta, sigma2)
    if probit:
        s2max = float(hyper0.sigma2)  # unused: sigma2 is fixed
    else:
        s2max = (
            float(sigma2_max)
            if sigma2_max is not None
            else max(float(np.mean(np.var(X, axis=0))), float(hyper0.sigma2))
        )
    n_em = int(num_em_candidates)
    em_args = (pri, learn, learn_ab, int(max_em), float(tol_em), int(max_lbfgs), s2max, conf)
    n_arg = N if _bucket else None  # traced: the real rows of the padded data
    ctx = _SearchContext(Xj, N, n_em, k_best, float(tol_em), pri, learn, not probit, allow_bp, em_args, n_arg)

    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_iters * num_restarts, desc="pydt_em")
    runs = []
    try:
        for r in range(num_restarts):
            kr = key if r == 0 else jax.random.fold_in(key, r)
            runs.append(_search(kr, ctx, hyper0, probit, moves, num_iters, init_tree if r == 0 else None, bar))
    finally:
        if bar is not None:
            bar.close()
    restart_bounds = np.array([max(e[0] for e in run["entries"].values()) for run in runs])
    best_run = runs[int(np.argmax(restart_bounds))]
    merged = dict(best_run["entries"])
    for run in runs:  # the K-best list over all restarts (highest bounds, one entry per structure)
        for sig, e in run["entries"].items():
            if sig not in merged or merged[sig][0] < e[0]:
                merged[sig] = e
    items = sorted(merged.values(), key=lambda e: -e[0])[:k_best]
    items = [(e[0],) + unpad_tree(e[1], e[2], N, Nb) + (e[3], _unpad_sites(e[4], N)) for e in items]
    Lb, par, tim, hyp, _ = items[0]

    def hdict(h):
        return dict(
            c=float(h.c_shape / h.c_rate),
            alpha=float(h.alpha),
            beta=float(h.beta),
            sigma2=float(h.prec_rate / h.prec_shape),
        )

    best = hdict(hyp)
    return PYDTEMResult(
        tree=state_to_tree(par, tim),
        parent=par,
        times=tim,
        log_evidence=float(Lb),
        k_best=[(float(e[0]), e[1], e[2]) for e in items],
        k_best_hyper=[hdict(e[3]) for e in items],
        c=best["c"],
        alpha=best["alpha"],
        beta=best["beta"],
        sigma2=best["sigma2"],
        q_c=(float(hyp.c_shape), float(hyp.c_rate)) if learn else None,
        q_precision=(float(hyp.prec_shape), float(hyp.prec_rate)) if learn and not probit else None,
        trace=np.asarray(best_run["trace"]),
        X=np.asarray(X),
        likelihood=likelihood,
        k_best_sites=[e[4] for e in items] if probit else None,
        restart_bounds=restart_bounds,
        move_trace=best_run["move_trace"],
    )


def _unpad_sites(sites, n):
    """EP sites of the real rows (host arrays; `None` passes)."""
    return None if sites is None else EPSites(*(np.asarray(a)[:n] for a in sites))


class _SearchContext(NamedTuple):
    X: jax.Array  # the data (probit: the signs)
    N: int
    n_em: int
    k_best: int
    tol: float
    priors: PYDTPriors
    learn: bool
    learn_sigma2: bool
    allow_bp: bool
    em_args: tuple  # the static tail of `em_batch`'s arguments
    n: Optional[int] = None  # the real rows of the padded X (None: X unpadded)


def _search(key, ctx: _SearchContext, hyper, probit, moves, num_iters, init_tree, bar):
    """One restart: initial tree, EM, then ``num_iters`` moves. Returns the K-best entries
    (``signature -> (L, parent, times, hyper, sites)``), the best-bound trace and the moves."""
    N, n_em = ctx.N, ctx.n_em
    jt = lambda t: jax.tree_util.tree_map(jnp.asarray, t)  # noqa: E731
    k_init, k_search = jax.random.split(key)
    sites = prior_sites(ctx.X, hyper.sigma2) if probit else None
    if init_tree is None:
        parent, times = initial_structure(k_init, ctx.X, hyper, ctx.allow_bp, sites, ctx.n)
    else:
        parent, times = jnp.asarray(init_tree[0]), jnp.asarray(init_tree[1], ctx.X.dtype)
    # EM on the start tree: `em_batch` on n_em copies (one compiled EM program for the search)
    pars = jnp.broadcast_to(parent, (n_em,) + parent.shape)
    tims = jnp.broadcast_to(times, (n_em,) + times.shape)
    ok = jnp.arange(n_em) == 0
    tims, hyps, sits, Ls = jax.device_get(em_batch(pars, tims, ok, hyper, ctx.X, sites, *ctx.em_args))
    first = lambda a: a[0]  # noqa: E731
    entries = {}

    def insert(L, par, tim, hyp, sit):
        L = float(L)
        if not np.isfinite(L):
            return
        sig = _signature(par, N)
        if sig in entries and entries[sig][0] >= L:
            return
        entries[sig] = (L, np.asarray(par), np.asarray(tim), jax.device_get(hyp), jax.device_get(sit))
        if len(entries) > ctx.k_best:
            worst = min(entries, key=lambda k: entries[k][0])
            del entries[worst]

    def best_entry():
        return max(entries.values(), key=lambda e: e[0])

    insert(
        Ls[0],
        np.asarray(parent),
        tims[0],
        jax.tree_util.tree_map(first, hyps),
        None if sits is None else jax.tree_util.tree_map(first, sits),
    )
    if not entries:
        raise ValueError(
            f"pydt_em: the EM bound of the start tree is not finite; X's entries reach "
            f"{float(np.max(np.abs(np.asarray(ctx.X)))):.3g}: data far from unit scale (or a sigma2 / sigma2_max "
            f"far from the data's variance) overflow the EM's float64 arithmetic: standardise X's columns"
        )
    trace = [best_entry()[0]]
    move_trace = []
    k_search, k_pick = jax.random.split(k_search)
    rng = np.random.default_rng(int(jax.random.randint(k_pick, (), 0, 2**31 - 1)))
    tried = set()  # greedy moves already made on the current best tree (deterministic: no retry)
    best_id = (_signature(best_entry()[1], N), best_entry()[0])
    for it in range(num_iters):
        rot = it % len(moves)
        order = moves[rot:] + moves[:rot]
        move = next((mv for mv in order if mv == "reattach" or mv not in tried), None)
        if move is None:  # greedy moves only, and none improves the best tree: a local optimum
            break
        before = trace[-1]
        if move == "reattach":
            items = sorted(entries.values(), key=lambda e: -e[0])
            _, par, tim, hyp, sit = items[int(rng.integers(len(items)))]
            sit = None if sit is None else jt(sit)
            pars, tims, scores = propose_reattach(
                jax.random.fold_in(k_search, it),
                jnp.asarray(par),
                jnp.asarray(tim),
                jt(hyp),
                ctx.X,
                sit,
                ctx.allow_bp,
                n_em,
            )
        else:
            _, par, tim, hyp, sit = best_entry()
            sit = None if sit is None else jt(sit)
            if move == "regraft":
                pars, tims, scores = propose_regraft(
                    jnp.asarray(par),
                    jnp.asarray(tim),
                    jt(hyp),
                    ctx.X,
                    sit,
                    ctx.priors,
                    ctx.learn,
                    ctx.learn_sigma2,
                    ctx.allow_bp,
                    n_em,
                )
            else:
                pars, tims, scores = propose_collapse(
                    jnp.asarray(par),
                    jnp.asarray(tim),
                    jt(hyp),
                    ctx.X,
                    sit,
                    ctx.priors,
                    ctx.learn,
                    ctx.learn_sigma2,
                    n_em,
                )
        ok = jnp.isfinite(scores)
        if bool(jnp.any(ok)):
            tims, hyps, sits, Ls = jax.device_get(em_batch(pars, tims, ok, jt(hyp), ctx.X, sit, *ctx.em_args))
            pars = np.asarray(pars)
            pick = lambda j: lambda a: a[j]  # noqa: E731
            if move == "reattach":
                for j in range(len(Ls)):
                    insert(
                        Ls[j],
                        pars[j],
                        tims[j],
                        jax.tree_util.tree_map(pick(j), hyps),
                        None if sits is None else jax.tree_util.tree_map(pick(j), sits),
                    )
            else:
                j = int(np.argmax(Ls))
                if np.isfinite(Ls[j]) and Ls[j] > before + ctx.tol:
                    insert(
                        Ls[j],
                        pars[j],
                        tims[j],
                        jax.tree_util.tree_map(pick(j), hyps),
                        None if sits is None else jax.tree_util.tree_map(pick(j), sits),
                    )
        if move != "reattach":
            tried.add(move)
        trace.append(best_entry()[0])
        move_trace.append((move, float(before), float(trace[-1])))
        now = (_signature(best_entry()[1], N), best_entry()[0])
        if now != best_id:  # a new best tree: the greedy moves may improve it again
            best_id = now
            tried.clear()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(bound=f"{trace[-1]:.2f}")
    return dict(entries=entries, trace=trace, move_trace=move_trace)
