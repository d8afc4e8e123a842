"""Ginkgo, the toy parton shower of Cranmer, Macaluso & Pappadopulo, as a NumPyro program.

The shower, exactly as the Ginkgo generator works (see the trellis paper, Sec. 4.2 and
App. A.8): a particle of four-momentum ``p_P`` and mass squared ``t_P > t_cut`` splits
``1 -> 2``. The first-drawn (left) child draws ``t_first ~ f(. | t_P)``, the second
``t_second ~ f(. | (sqrt t_P - sqrt t_first)^2)``, with ``f(t | s) = lam / (s (1 - e^-lam))
e^{-lam t / s}`` the exponential truncated to ``[0, s)``; a direction uniform on the sphere
in the parent's rest frame fixes the two-body decay, which is boosted back to the lab. A
child with ``t <= t_cut`` is a leaf and keeps its four-momentum (its small mass is
observed); one with ``t > t_cut`` splits again. The root split may use its own rate
``lam_root``.

`shower` is the generative program (fixed capacity ``max_nodes``, a `scan` over node slots,
so it jits and vmaps; sites ``t_first``, ``t_second``, ``cos_theta``, ``phi`` per slot,
masked where the slot is not a splitting particle). `simulate` draws many jets with an
optional selection on the number of leaves. `tree_log_likelihood` is the density of the
leaves' four-momenta given a tree (``likelihood="exact"``: the generator's own density;
``"paper"``: the trellis paper's likelihood). With the drawing order known (``ordered=True``)
and ``phase_space=False`` it equals the log density of the program's trace for the same draw.
`lambda_model` is the NumPyro model of ``lam`` given the
leaves of many jets with the trees summed out by the exact trellis (``numpyro.factor`` of
each jet's log Z), for NUTS (`jaxhc.inference.ginkgo_fit.sample_lambda`); `prepare_jets`
validates and lays out the jets once for it.
"""

from __future__ import annotations

import json
import math
from typing import Any, List, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.control_flow import scan
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes, validate_sample

from .._internal.deprecation import renamed_argument
from .._internal.dtypes import float_dtype as _float
from ..tree import Tree
from ..trellis.energies import GinkgoEnergy, kallen, log_phi_of_tree

__all__ = [
    "GinkgoParams",
    "TruncatedExponential",
    "ShowerState",
    "JetBatch",
    "shower",
    "decay",
    "simulate",
    "jets_from_states",
    "tree_log_likelihood",
    "energy",
    "load_jets",
    "save_jets",
    "mass2",
]

UNUSED, PENDING, LEAF, SPLIT = 0, 1, 2, 3


def mass2(p):
    """Mass squared ``E^2 - |p|^2`` of four-momenta ``[..., 4]`` (clamped at 0)."""
    p = jnp.asarray(p)
    return jnp.maximum(p[..., 0] ** 2 - jnp.sum(p[..., 1:] ** 2, axis=-1), 0.0)


# ------------------------------------------------------------------------------------------
# parameters
# ------------------------------------------------------------------------------------------
class GinkgoParams(NamedTuple):
    """Parameters of the shower.

    Fields:
      lam: rate of the splits (> 0).
      lam_root: rate of the root split (``None``: ``lam``).
      t_cut: mass-squared cut-off; a particle with ``t <= t_cut`` is a leaf.
      root_mass2: the root's mass squared ``t_root`` (> ``t_cut`` for a jet with a split).
      root_p3: the root's three-momentum ``(px, py, pz)``.

    The defaults are those of the Ginkgo data sets used in the trellis paper and in
    ``tests/data``: ``lam = 2``, ``t_cut = 16``, root mass 30, ``|p| = 400`` along
    ``(1, 1, 1) / sqrt 3``.
    """

    lam: Any = 2.0
    lam_root: Any = None
    t_cut: Any = 16.0
    root_mass2: Any = 900.0
    root_p3: Any = (400.0 / math.sqrt(3.0),) * 3

    def validate(self) -> "GinkgoParams":
        """Eager checks; returns self or raises ``ValueError`` naming the parameter."""
        for name in ("lam", "t_cut", "root_mass2") + (("lam_root",) if self.lam_root is not None else ()):
            v = getattr(self, name)
            if isinstance(v, jax.core.Tracer):
                continue
            a = np.asarray(v, dtype=np.float64)
            if a.ndim != 0 or not np.isfinite(a) or a <= 0:
                raise ValueError(f"{name} must be a positive finite scalar, got {v!r}")
        p3 = np.asarray(self.root_p3, dtype=np.float64)
        if p3.shape != (3,) or not np.all(np.isfinite(p3)):
            raise ValueError(f"root_p3 must be a finite three-momentum (px, py, pz), got {self.root_p3!r}")
        return self

    @property
    def rate_root(self):
        return self.lam if self.lam_root is None else self.lam_root

    def root_momentum(self) -> jax.Array:
        """The root four-momentum ``(E, px, py, pz)`` with ``E = sqrt(t_root + |p|^2)``."""
        p3 = jnp.asarray(self.root_p3, dtype=_float())
        e = jnp.sqrt(jnp.asarray(self.root_mass2, _float()) + jnp.sum(p3**2))
        return jnp.concatenate([e[None], p3])

    def energy(self, likelihood: str = "exact", **kw) -> GinkgoEnergy:
        """The matching trellis energy (`jaxhc.trellis.GinkgoEnergy`)."""
        return GinkgoEnergy(self.lam, self.t_cut, likelihood=likelihood, lam_root=self.lam_root, **kw)


def energy(params: GinkgoParams, likelihood: str = "exact", **kw) -> GinkgoEnergy:
    """``params.energy(likelihood)``: the trellis energy of the shower's split likelihood."""
    return params.energy(likelihood, **kw)


# ------------------------------------------------------------------------------------------
# distributions and kinematics
# ------------------------------------------------------------------------------------------
class TruncatedExponential(dist.Distribution):
    """``f(t | s) = lam / (s (1 - e^-lam)) e^{-lam t / s}`` on ``[0, s)``: the exponential of
    rate ``lam / s`` truncated to ``[0, high = s)`` (Ginkgo's mass draws, ``t = r s`` with
    ``r ~ Exp(lam)`` truncated to ``[0, 1)``)."""

    arg_constraints = {"lam": constraints.positive, "high": constraints.positive}
    reparametrized_params = ["lam", "high"]

    def __init__(self, lam, high, *, validate_args=None):
        self.lam, self.high = promote_shapes(lam, high)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(lam), jnp.shape(high))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(0.0, self.high)

    def sample(self, key, sample_shape=()):
        u = jax.random.uniform(key, sample_shape + self.batch_shape, dtype=jnp.result_type(self.high, float))
        return self.icdf(u)

    def icdf(self, u):
        # F(t) = (1 - e^{-lam t / s}) / (1 - e^-lam);  t < s for u < 1
        t = -self.high / self.lam * jnp.log1p(u * jnp.expm1(-self.lam))
        return jnp.minimum(t, self.high * (1.0 - 1e-15))

    def cdf(self, t):
        return jnp.expm1(-self.lam * t / self.high) / jnp.expm1(-self.lam)

    @validate_sample
    def log_prob(self, value):
        lp = jnp.log(self.lam) - jnp.log(self.high) - jnp.log(-jnp.expm1(-self.lam)) - self.lam * value / self.high
        return jnp.where((value >= 0) & (value < self.high), lp, -jnp.inf)

    @property
    def mean(self):
        e = jnp.exp(-self.lam)
        return self.high * (1.0 / self.lam - e / (1.0 - e))


def decay(p_parent, t1, t2, cos_theta, phi):
    """Two-body decay of ``p_parent`` (four-momentum ``[..., 4]``) into children of mass
    squared ``t1`` and ``t2``, the first child flying along ``(theta, phi)`` in the parent's
    rest frame; both boosted back to the lab. Returns ``(p1, p2)``. Needs
    ``sqrt t1 + sqrt t2 < sqrt t_P``."""
    p_parent = jnp.asarray(p_parent)
    E, p3 = p_parent[..., 0], p_parent[..., 1:]
    tP = mass2(p_parent)
    M = jnp.sqrt(tP)
    K = jnp.maximum(kallen(tP, t1, t2), 0.0)
    q = jnp.sqrt(K) / (2.0 * M)
    sin_theta = jnp.sqrt(jnp.maximum(1.0 - cos_theta**2, 0.0))
    n = jnp.stack([sin_theta * jnp.cos(phi), sin_theta * jnp.sin(phi), cos_theta], axis=-1)
    qv = q[..., None] * n
    e1 = (tP + t1 - t2) / (2.0 * M)
    e2 = (tP + t2 - t1) / (2.0 * M)

    def boost(e, qv):
        pq = jnp.sum(p3 * qv, axis=-1)
        energy = (E * e + pq) / M
        mom = qv + p3 * (pq / (M * (E + M)) + e / M)[..., None]
        return jnp.concatenate([energy[..., None], mom], axis=-1)

    return boost(e1, qv), boost(e2, -qv)


# ------------------------------------------------------------------------------------------
# the NumPyro program
# ------------------------------------------------------------------------------------------
class ShowerState(NamedTuple):
    """One simulated shower in node slots (slot 0 the root; children get increasing slots).

    Fields: ``momenta [C, 4]``, ``t [C]`` (mass squared as drawn; the root's given),
    ``children [C, 2]`` (first-drawn child first; ``-1`` for leaves and unused slots),
    ``status [C]`` (0 unused, 2 leaf, 3 split; 1 a particle left unsplit because the capacity
    was exhausted), ``n_nodes``, ``n_leaves``, ``overflow`` (the capacity was exhausted: the
    jet is incomplete).
    """

    momenta: Any
    t: Any
    children: Any
    status: Any
    n_nodes: Any
    n_leaves: Any
    overflow: Any


def shower(lam=2.0, t_cut=16.0, root_momentum=None, lam_root=None, *, max_nodes: int = 63) -> ShowerState:
    """The Ginkgo shower as a NumPyro program (see the module docstring).

    Args:
      lam, t_cut, lam_root: as in `GinkgoParams` (arrays: ``jax.grad`` and NUTS reach them).
      root_momentum: the root four-momentum ``(E, px, py, pz)`` (default
        ``GinkgoParams().root_momentum()``); its mass squared must exceed ``t_cut`` for a
        split to happen.
      max_nodes: slots (static); a jet has ``2 L - 1`` nodes for ``L`` leaves, so jets with
        more than ``(max_nodes + 1) // 2`` leaves set ``overflow`` (their draw is incomplete;
        `simulate` rejects or refuses them, never truncates silently).

    Sample sites (each ``[max_nodes]``, masked to the slots that split): ``t_first`` and
    ``t_second`` (`TruncatedExponential`), ``cos_theta ~ U(-1, 1)``, ``phi ~ U(0, 2 pi)``.
    Returns a `ShowerState`.
    """
    f = _float()
    lam = jnp.asarray(lam, f)
    lam_root = lam if lam_root is None else jnp.asarray(lam_root, f)
    t_cut = jnp.asarray(t_cut, f)
    root = GinkgoParams().root_momentum() if root_momentum is None else jnp.asarray(root_momentum, f)
    C = int(max_nodes)
    t_root = mass2(root)
    momenta = jnp.zeros((C, 4), f).at[0].set(root)
    t = jnp.zeros((C,), f).at[0].set(t_root)
    children = jnp.full((C, 2), -1, jnp.int32)
    status = jnp.zeros((C,), jnp.int32).at[0].set(jnp.where(t_root > t_cut, PENDING, LEAF))
    init = (momenta, t, children, status, jnp.int32(1), jnp.bool_(False))

    def body(carry, k):
        momenta, t, children, status, next_free, overflow = carry
        pending = status[k] == PENDING
        room = next_free + 2 <= C
        split = pending & room
        tP = jnp.where(pending, t[k], 1.0)
        rate = jnp.where(k == 0, lam_root, lam)
        with numpyro.handlers.mask(mask=split):
            t1 = numpyro.sample("t_first", TruncatedExponential(rate, tP))
            s2 = jnp.maximum((jnp.sqrt(tP) - jnp.sqrt(t1)) ** 2, jnp.finfo(f).tiny)
            t2 = numpyro.sample("t_second", TruncatedExponential(rate, s2))
            cos_theta = numpyro.sample("cos_theta", dist.Uniform(jnp.asarray(-1.0, f), 1.0))
            phi = numpyro.sample("phi", dist.Uniform(jnp.asarray(0.0, f), 2.0 * jnp.pi))
        pP = jnp.where(pending, momenta[k], root)
        p1, p2 = decay(pP, t1, t2, cos_theta, phi)
        a = jnp.minimum(next_free, C - 2)
        b = a + 1
        upd = lambda arr, i, v: arr.at[i].set(jnp.where(split, v, arr[i]))
        momenta = upd(upd(momenta, a, p1), b, p2)
        t = upd(upd(t, a, t1), b, t2)
        st = lambda tc: jnp.where(tc > t_cut, PENDING, LEAF).astype(jnp.int32)
        status = upd(upd(status, a, st(t1)), b, st(t2))
        status = status.at[k].set(jnp.where(split, SPLIT, status[k]))
        children = children.at[k].set(jnp.where(split, jnp.stack([a, b]).astype(jnp.int32), children[k]))
        next_free = jnp.where(split, next_free + 2, next_free)
        overflow = overflow | (pending & ~room)
        return (momenta, t, children, status, next_free, overflow), None

    (momenta, t, children, status, next_free, overflow), _ = scan(body, init, jnp.arange(C, dtype=jnp.int32))
    state = ShowerState(momenta, t, children, status, next_free, jnp.sum(status == LEAF), overflow)
    numpyro.deterministic("n_leaves", state.n_leaves)
    numpyro.deterministic("overflow", state.overflow)
    return state


# ------------------------------------------------------------------------------------------
# jets as data
# ------------------------------------------------------------------------------------------
class JetBatch(NamedTuple):
    """Jets with their generating trees.

    Fields:
      leaves: ``[B, L_max, 4]`` float64 four-momenta, zero rows after each jet's leaves
        (the padding `jaxhc.trellis.solve_batch` expects).
      n_leaves: ``[B]`` number of leaves of each jet.
      trees: the true `Tree` of each jet (leaf ``i`` = row ``i``; ``children[:, 0]`` the
        first-drawn child; heights = the inner nodes' mass squared).
      content: per jet ``[2 n - 1, 4]`` every node's four-momentum in the `Tree`'s node
        order (leaves, then inner nodes by merge).
      t: per jet ``[2 n - 1]`` every node's mass squared as drawn (leaves' observed
        masses; the root's given).
      params: the `GinkgoParams` (or ``None`` for jets read from a file without them).
    """

    leaves: np.ndarray
    n_leaves: np.ndarray
    trees: List[Tree]
    content: List[np.ndarray]
    t: List[np.ndarray]
    params: Optional[GinkgoParams] = None

    def __len__(self):
        return len(self.trees)

    def jet(self, i: int) -> np.ndarray:
        """The leaves ``[n, 4]`` of jet ``i``."""
        return self.leaves[i, : int(self.n_leaves[i])]

    def select(self, idx) -> "JetBatch":
        """The jets at indices ``idx`` (padding cropped to their largest jet)."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        nl = self.n_leaves[idx]
        lmax = int(nl.max()) if len(idx) else 1
        return JetBatch(
            self.leaves[idx, :lmax],
            nl,
            [self.trees[i] for i in idx],
            [self.content[i] for i in idx],
            [self.t[i] for i in idx],
            self.params,
        )


def _jet_from_slots(momenta, t, children, status) -> tuple:
    """Leaves (DFS order, first-drawn child first), Tree, content and t of one shower."""
    leaves, rows = [], []

    def visit(k):
        if status[k] == LEAF:
            leaves.append(k)
            return ("leaf", len(leaves) - 1)
        a, b = int(children[k, 0]), int(children[k, 1])
        na, nb = visit(a), visit(b)
        rows.append((na, nb, k))
        return ("inner", len(rows) - 1)

    # iterative would be faster; jets are small (depth < max_nodes)
    visit(0)
    n = len(leaves)
    ident = lambda x: x[1] if x[0] == "leaf" else n + x[1]
    ch = np.array([(ident(a), ident(b)) for a, b, _ in rows], dtype=np.int64).reshape(-1, 2)
    inner_slots = [k for _, _, k in rows]
    heights = np.asarray(t[inner_slots], dtype=np.float64)
    tree = Tree(ch, heights=heights if n > 1 else None)
    slots = leaves + inner_slots
    return (
        np.asarray(momenta[leaves], np.float64),
        tree,
        np.asarray(momenta[slots], np.float64),
        np.asarray(t[slots], np.float64),
    )


def jets_from_states(
    states: ShowerState, params: Optional[GinkgoParams] = None, l_max: Optional[int] = None
) -> JetBatch:
    """Converts batched `ShowerState` s (leading axis ``B``; none overflowed) to a `JetBatch`."""
    m, tt, ch, st = (np.asarray(x) for x in (states.momenta, states.t, states.children, states.status))
    if np.any(np.asarray(states.overflow)):
        raise ValueError("some showers overflowed their capacity (max_nodes); raise max_nodes")
    out = [_jet_from_slots(m[b], tt[b], ch[b], st[b]) for b in range(m.shape[0])]
    nl = np.array([o[0].shape[0] for o in out], dtype=np.int64)
    L = int(nl.max()) if l_max is None else int(l_max)
    leaves = np.zeros((len(out), L, 4), np.float64)
    for b, o in enumerate(out):
        leaves[b, : nl[b]] = o[0]
    return JetBatch(leaves, nl, [o[1] for o in out], [o[2] for o in out], [o[3] for o in out], params)


def _simulate_chunk(keys, lam, lam_root, t_cut, root, max_nodes):
    def one(key):
        model = numpyro.handlers.seed(shower, key)
        return model(lam, t_cut, root, lam_root, max_nodes=max_nodes)

    return jax.vmap(one)(keys)


_simulate_chunk_jit = jax.jit(_simulate_chunk, static_argnames=("max_nodes",))


def simulate(
    key,
    params: GinkgoParams = GinkgoParams(),
    num_jets: int = 1,
    *,
    min_leaves: int = 1,
    max_leaves: Optional[int] = None,
    max_nodes: Optional[int] = None,
    chunk_size: int = 1024,
    max_draws: Optional[int] = None,
    progress_bar: bool = False,
    progress: Optional[bool] = None,
) -> JetBatch:
    """Draws ``num_jets`` jets from the shower, keeping those with ``min_leaves <= n <=
    max_leaves`` leaves (rejection: the kept jets are exact draws of the shower conditioned
    on that range, like the paper's Ginkgo510 selection of 5..10 leaves).

    Args:
      key: PRNG key (the same key gives the same jets).
      params: `GinkgoParams`.
      num_jets: how many jets to return.
      min_leaves, max_leaves: selection on the number of leaves (``max_leaves=None``: no
        upper bound; then a jet that needs more than ``max_nodes`` slots raises a
        ``ValueError`` instead of being dropped, since dropping it would bias the sample).
      max_nodes: slots per shower (default ``2 max_leaves + 1``, or 127 without
        ``max_leaves``).
      chunk_size: showers drawn per vmapped call.
      max_draws: give up (``ValueError``) after this many showers (default ``1000 num_jets +
        10 chunk_size``).
      progress_bar: tqdm bar over the jets kept.
      progress: deprecated spelling of ``progress_bar`` (DeprecationWarning).

    Returns:
      `JetBatch` with ``leaves`` padded to ``max_leaves`` (or the largest jet).
    """
    progress_bar = renamed_argument(progress_bar, progress, old="progress", new="progress_bar", where="simulate")
    params = GinkgoParams(*params).validate() if not isinstance(params, GinkgoParams) else params.validate()
    if not isinstance(num_jets, (int, np.integer)) or num_jets < 1:
        raise ValueError(f"num_jets must be a positive integer, got {num_jets!r}")
    if not isinstance(min_leaves, (int, np.integer)) or min_leaves < 1:
        raise ValueError(f"min_leaves must be a positive integer, got {min_leaves!r}")
    if max_leaves is not None and (not isinstance(max_leaves, (int, np.integer)) or max_leaves < min_leaves):
        raise ValueError(f"max_leaves must be an integer >= min_leaves={min_leaves}, got {max_leaves!r}")
    if max_nodes is None:
        max_nodes = 2 * max_leaves + 1 if max_leaves is not None else 127
    if not isinstance(max_nodes, (int, np.integer)) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive integer, got {max_nodes!r}")
    if max_leaves is not None and 2 * max_leaves - 1 > max_nodes:
        raise ValueError(
            f"max_nodes={max_nodes} cannot hold jets of max_leaves={max_leaves} "
            f"(needs 2 * max_leaves - 1 = {2 * max_leaves - 1})"
        )
    if float(params.root_mass2) <= float(params.t_cut) and min_leaves > 1:
        raise ValueError(f"root_mass2={params.root_mass2} <= t_cut={params.t_cut}: every jet is a single leaf")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if max_draws is not None and (
        isinstance(max_draws, bool) or not isinstance(max_draws, (int, np.integer)) or max_draws < 1
    ):
        raise ValueError(f"max_draws must be None or a positive integer, got {max_draws!r}")
    from .._internal.validation import check_key

    check_key(key, "key")
    chunk_size = int(chunk_size)
    max_draws = 1000 * num_jets + 10 * chunk_size if max_draws is None else int(max_draws)
    f = _float()
    lam = jnp.asarray(params.lam, f)
    lam_root = jnp.asarray(params.rate_root, f)
    t_cut = jnp.asarray(params.t_cut, f)
    root = params.root_momentum()
    kept: List[ShowerState] = []
    n_kept, drawn, rnd = 0, 0, 0
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_jets, desc="simulate jets", unit="jet")
    while n_kept < num_jets:
        if drawn >= max_draws:
            raise ValueError(
                f"simulate: only {n_kept} of {num_jets} jets with {min_leaves}..{max_leaves} leaves "
                f"after {drawn} showers; widen the leaf range or raise max_draws"
            )
        keys = jax.random.split(jax.random.fold_in(key, rnd), chunk_size)
        st = jax.device_get(_simulate_chunk_jit(keys, lam, lam_root, t_cut, root, int(max_nodes)))
        rnd += 1
        drawn += chunk_size
        nl = np.asarray(st.n_leaves)
        ov = np.asarray(st.overflow)
        if max_leaves is None and np.any(ov):
            raise ValueError(
                f"a shower needed more than max_nodes={max_nodes} slots; raise max_nodes or set max_leaves"
            )
        ok = (~ov) & (nl >= min_leaves) & (nl <= (max_leaves if max_leaves is not None else nl.max()))
        idx = np.flatnonzero(ok)[: num_jets - n_kept]
        if len(idx):
            kept.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[idx], st))
            n_kept += len(idx)
            if bar is not None:
                bar.update(len(idx))
    if bar is not None:
        bar.close()
    states = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *kept)
    return jets_from_states(states, params, l_max=max_leaves)


# ------------------------------------------------------------------------------------------
# likelihood of a tree
# ------------------------------------------------------------------------------------------
def tree_log_likelihood(
    tree: Tree,
    leaves,
    params: GinkgoParams = GinkgoParams(),
    *,
    likelihood: str = "exact",
    ordered: bool = False,
    phase_space: bool = True,
):
    """Log likelihood of the leaves' four-momenta given a binary `Tree` over them.

    Every node's momentum is the sum of its leaves' and its mass squared ``t = E^2 -
    |p|^2``; the log likelihood is the sum over inner nodes of the split potential of
    `jaxhc.trellis.GinkgoEnergy`:

    - ``likelihood="exact"`` (default): the generator's density of the children's
      four-momenta, summed over which child was drawn first (``ordered=False``), with the
      support conditions and, with ``phase_space=True``, the phase-space term, so it is a
      density of the leaves' four-momenta. With ``ordered=True`` the first child of every
      node is the first-drawn one (as in the trees `simulate` returns); with
      ``ordered=True, phase_space=False`` the result equals the log density of the
      `shower` trace that drew the jet.
    - ``likelihood="paper"``: the trellis paper's likelihood (leaves at ``t = 0``, the
      larger child first); it reproduces the ClusterTrellis reference values.

    Differentiable in ``params.lam`` / ``params.lam_root`` / ``params.t_cut``.
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be a jaxhc.Tree, got {type(tree).__name__}")
    params = params.validate()
    e = GinkgoEnergy(
        params.lam,
        params.t_cut,
        likelihood=likelihood,
        lam_root=params.lam_root,
        ordered=ordered,
        phase_space=phase_space,
    )
    arr = e.validate_leaves(leaves)
    if tree.n_leaves != arr.shape[0]:
        raise ValueError(f"tree has {tree.n_leaves} leaves but leaves has {arr.shape[0]} rows")
    return log_phi_of_tree(e, jnp.asarray(arr), tree)


# ------------------------------------------------------------------------------------------
# files (the JSON format of the Ginkgo data in tests/data)
# ------------------------------------------------------------------------------------------
def _tree_from_rows(rows, content, deltas=None):
    """Tree from Ginkgo rows ``[left, right]`` per node (``-1, -1`` leaf, node 0 the root)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    content = np.asarray(content, dtype=np.float64).reshape(-1, 4)
    m = rows.shape[0]
    status = np.where(rows[:, 0] < 0, LEAF, SPLIT)
    t = np.asarray(deltas, np.float64) if deltas is not None else np.asarray(mass2(content))
    if t.shape != (m,):
        t = np.asarray(mass2(content))
    return _jet_from_slots(content, t, rows, status)


def load_jets(path_or_list, max_leaves: Optional[int] = None) -> JetBatch:
    """Reads jets in the JSON format of ``tests/data/ginkgo_*.json``: a list (or an object
    with a ``jets`` list) of objects with ``leaves`` (``[n, 4]``) and optionally ``tree``
    (rows ``[left, right]``, node 0 the root, ``-1, -1`` leaves) with ``content`` (or
    ``truth_tree`` / ``truth_content`` as in ``ginkgo_jets_reference.json``).

    Leaves come back in the file's order; ``trees`` holds each jet's tree with leaf ``i`` =
    row ``i`` of its leaves (``None`` where the file has none). Raises ``ValueError`` for a
    malformed file (not a list of jets, leaves not numeric ``[n, 4]``). The values are not
    checked here: the trellis entry points check them once (NaN, ``E <= 0``, off-shell
    beyond float32 rounding), under their ``on_invalid`` policy."""
    if isinstance(path_or_list, (str, bytes)) or hasattr(path_or_list, "__fspath__"):
        with open(path_or_list) as fh:
            data = json.load(fh)
    else:
        data = path_or_list
    if isinstance(data, dict):
        data = data.get("jets")
    if not isinstance(data, list) or not data:
        raise ValueError("expected a non-empty JSON list of jets (objects with 'leaves')")
    leaves_list, trees, contents, ts = [], [], [], []
    for i, j in enumerate(data):
        if not isinstance(j, dict) or "leaves" not in j:
            raise ValueError(f"jet {i} is not an object with 'leaves'")
        try:
            lv = np.asarray(j["leaves"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"jet {i}: 'leaves' must be a numeric [n, 4] list of four-momenta") from None
        if lv.ndim != 2 or lv.shape[1] != 4 or lv.shape[0] == 0:
            raise ValueError(f"jet {i}: 'leaves' must be four-momenta [n, 4] (E, px, py, pz), got shape {lv.shape}")
        tree = cont = tt = None
        pre = "" if "tree" in j else "truth_"
        if pre + "tree" in j and pre + "content" in j:
            try:
                _, tr, cont, tt = _tree_from_rows(j[pre + "tree"], j[pre + "content"], j.get(pre + "deltas"))
            except (TypeError, ValueError, IndexError, KeyError, RecursionError):
                raise ValueError(
                    f"jet {i}: malformed '{pre}tree' / '{pre}content' (rows [left, right] per "
                    "node, node 0 the root, -1 -1 for a leaf; one four-momentum per node)"
                ) from None
            # the file's leaves follow its own order; map tree leaves (DFS order) onto them
            dfs = cont[: lv.shape[0]]
            perm = _match_rows(dfs, lv)
            if perm is None:
                tree = None
            else:
                tree = tr.relabel_leaves(perm)
                cont = np.concatenate([lv, cont[lv.shape[0] :]])
                tt = np.concatenate([tt[: lv.shape[0]][np.argsort(perm)], tt[lv.shape[0] :]])
        leaves_list.append(lv)
        trees.append(tree)
        contents.append(cont)
        ts.append(tt)
    nl = np.array([lv.shape[0] for lv in leaves_list], dtype=np.int64)
    L = int(nl.max()) if max_leaves is None else int(max_leaves)
    if np.any(nl > L):
        raise ValueError(f"a jet has {nl.max()} leaves, more than max_leaves={L}")
    leaves = np.zeros((len(data), L, 4), np.float64)
    for b, lv in enumerate(leaves_list):
        leaves[b, : nl[b]] = lv
    return JetBatch(leaves, nl, trees, contents, ts, None)


def _match_rows(a, b):
    """``perm`` with ``b[perm[i]] == a[i]`` (to rounding), or None."""
    if a.shape != b.shape:
        return None
    d = np.abs(a[:, None, :] - b[None, :, :]).max(-1)
    perm = np.argmin(d, axis=1)
    scale = 1e-6 * max(1.0, float(np.abs(b).max()))
    if len(set(perm.tolist())) != len(perm) or np.any(d[np.arange(len(perm)), perm] > scale):
        return None
    return perm


def save_jets(path, jets: JetBatch):
    """Writes jets in the JSON format `load_jets` reads (with trees, content and deltas)."""
    out = []
    for b in range(len(jets)):
        n = int(jets.n_leaves[b])
        item = {"leaves": jets.jet(b).tolist()}
        tree = jets.trees[b]
        if tree is not None:
            item.update(_rows_of(tree, jets.content[b], jets.t[b]))
        if jets.params is not None:
            p = jets.params
            item.update(lam=float(p.lam), lam_root=float(p.rate_root), t_cut=float(p.t_cut), root_t=float(p.root_mass2))
        out.append(item)
        del n
    with open(path, "w") as fh:
        json.dump(out, fh)


def _rows_of(tree: Tree, content, t) -> dict:
    """Ginkgo rows (node 0 the root, pre-order) of a Tree with per-node content."""
    n = tree.n_leaves
    ch = np.asarray(tree.children)
    rows, cont, deltas = [], [], []

    def visit(node):
        idx = len(rows)
        rows.append([-1, -1])
        cont.append(np.asarray(content[node]).tolist())
        deltas.append(0.0 if node < n else float(t[node]))
        if node >= n:
            a = visit(int(ch[node - n, 0]))
            b = visit(int(ch[node - n, 1]))
            rows[idx] = [a, b]
        return idx

    visit(2 * n - 2 if n > 1 else 0)
    return {"tree": rows, "content": cont, "deltas": deltas}
