"""Per-column data of BHCC: the statistics of every cell plus null columns, padded views of
column indices (`ColumnData`), and the checks of the data against the component."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._internal.buckets import bucket
from ..._internal.validation import real_array
from ...components import (
    ColumnSplitError,
    Component,
    CountStats,
    IndependentNormal,
    IndepNormalStats,
    betaln,
)
from .hostmath import host_gammaln as _sgammaln

LOG_2PI = float(np.log(2 * np.pi))

#: pad the rows and columns of the data to the library's bucket grid
#: (`jaxhc._internal.buckets.bucket`), so one compiled program serves every table size of a
#: bucket; the tests turn it off to compare the padded programs with exact-shape ones
PAD_TO_BUCKETS = True


def padded_sizes(I: int, J: int):
    """``(row slots, column slots)`` of an ``I x J`` table: ``bucket(I)`` and ``bucket(J + 1)``
    (at least one null column); ``(I, J + 1)`` with `PAD_TO_BUCKETS` off."""
    if PAD_TO_BUCKETS:
        return bucket(I), bucket(J + 1)
    return int(I), int(J) + 1


class _BetaView(Component):
    """The Beta-Binomial component of a padded view whose ``log Gamma`` terms are looked up
    in tables shared by all views (``[size]`` when the prior is shared by every column,
    else ``[size, J + 1]`` indexed by column), so no per-view tables are built."""

    a: jax.Array  # [W] or scalar
    b: jax.Array
    t: jax.Array  # trials per column [W]
    cols: jax.Array  # [W] column ids (for per-column tables)
    tables: Any  # (ga, gb, gab)
    dense: Any = None  # [(n_max + 1) * stride] full per-column term by (count, successes), or None
    stride: int = eqx.field(static=True, default=0)

    supports_missing = True

    @property
    def dim(self) -> int:
        return int(self.cols.shape[-1])

    def stats(self, X) -> CountStats:
        obs = ~jnp.isnan(X)
        x = jnp.where(obs, X, 0.0)
        tt = jnp.where(obs, self.t, 0.0)
        logc = gammaln(tt + 1) - gammaln(x + 1) - gammaln(tt - x + 1)
        return CountStats(
            jnp.sum(obs, -2).astype(x.dtype), jnp.sum(x, -2), jnp.sum(tt - x, -2), jnp.sum(logc, axis=(-2, -1))
        )

    def merge(self, s1, s2) -> CountStats:
        return CountStats(*(u + v for u, v in zip(s1, s2)))

    def _look(self, table, m):
        i = jnp.round(m).astype(jnp.int32)
        if table.ndim == 1:
            return jnp.take(table, i, mode="clip")
        ncol = table.shape[1]
        return jnp.take(table.reshape(-1), i * ncol + self.cols, mode="clip")

    def column_log_marginal(self, s):
        """Per-column log marginals ``[..., W]``; ``s.logc`` must then be per column too."""
        if self.dense is not None:
            i = (s.n + 0.5).astype(jnp.int32) * self.stride + (s.succ + 0.5).astype(jnp.int32)
            return s.logc + jnp.take(self.dense, i, mode="clip")
        ga, gb, gab = self.tables
        per = self._look(ga, s.succ) + self._look(gb, s.fail) - self._look(gab, s.succ + s.fail)
        return s.logc + per - betaln(self.a, self.b)

    def log_marginal(self, s, cache=None):
        if self.dense is not None:  # one lookup per column: shared prior and trials
            i = (s.n + 0.5).astype(jnp.int32) * self.stride + (s.succ + 0.5).astype(jnp.int32)
            return s.logc + jnp.sum(jnp.take(self.dense, i, mode="clip"), axis=-1)
        ga, gb, gab = self.tables
        per = self._look(ga, s.succ) + self._look(gb, s.fail) - self._look(gab, s.succ + s.fail)
        return s.logc + jnp.sum(per - betaln(self.a, self.b), axis=-1)

    def unconstrain(self):
        return {}

    def constrain(self, u):
        return self


class ColumnData(eqx.Module):
    """Per-row per-column statistics of ``X [I, J]``, padded to ``[n_slots, Jp]`` slots
    (`padded_sizes`): rows ``I..`` and columns ``J..`` are all-missing (NaN), so their
    statistics are zero and contribute exactly nothing; column ``J`` is the "null" column.

    ``view(cols)`` returns the component and the leaf statistics ``[n_slots, W]`` of the
    padded column index vector ``cols [W]`` (entries equal to ``J`` are padding). ``I`` and
    ``J`` are array leaves (host ints outside ``jit``, traced inside), so one compiled program
    serves every table of the same padded shape; row searches take ``I`` as their number of
    real rows (`jaxhc.inference.bhc.greedy.bhc_core`'s ``n_valid``)."""

    beta: bool = eqx.field(static=True)
    shared: bool = eqx.field(static=True)  # one Beta prior for every column (scalar tables)
    J: Any  # number of real columns (host int; traced under jit)
    p1: jax.Array  # a  | mean        [Jp]
    p2: jax.Array  # b  | prior_var   [Jp]
    p3: jax.Array  # trials per column | noise_var [Jp]
    s: Any  # CountStats fields (n, succ, fail, logc) or IndepNormalStats, each [n_slots, Jp]
    tables: Any  # (ga, gb, gab) log Gamma tables of the Beta families, or None
    dense: Any = None  # see _BetaView
    stride: int = eqx.field(static=True, default=0)
    I: Any = None  # number of real rows (host int; traced under jit)

    @property
    def n_rows(self) -> int:
        """Real rows ``I`` (a host int outside ``jit``)."""
        return self.I

    @property
    def n_slots(self) -> int:
        """Row slots of the padded arrays (static): ``bucket(I)``, or ``I`` unpadded."""
        return int(self.s[0].shape[0])

    @property
    def n_cols(self) -> int:
        """Real columns ``J``; arrays are padded to ``bucket(J + 1)`` columns with null
        columns (so tables of similar width share compiled programs); index ``J`` is a null
        column."""
        return self.J

    def comp(self, cols):
        if self.beta:
            a, b = (self.p1[0], self.p2[0]) if self.shared else (self.p1[cols], self.p2[cols])
            return _BetaView(a, b, self.p3[cols], cols, self.tables, self.dense, self.stride)
        return IndependentNormal(self.p1[cols], self.p2[cols], self.p3[cols])

    def stats_of(self, X, cols):
        """Statistics ``[..., W]`` of rows ``X [..., n, W]`` in the padded view ``cols [W]``
        (summed over the ``n`` axis; NaN entries skipped; per-column trials)."""
        return self.comp(cols).stats(X)

    def view(self, cols):
        comp = self.comp(cols)
        if self.beta:
            n, succ, fail, logc = self.s
            leaf = CountStats(n[:, cols], succ[:, cols], fail[:, cols], jnp.sum(logc[:, cols], axis=-1))
        else:
            leaf = IndepNormalStats(*(x[:, cols] for x in self.s))
        return comp, leaf

    def host_leaf(self, cols):
        """`view`'s leaf statistics ``[I, w]`` of the real columns ``cols [w]``, on the host
        (NumPy: eager gathers would compile a program per view width)."""
        cols = np.asarray(cols, np.int64)
        f = [np.asarray(x)[: self.I, cols] for x in self.s]
        if self.beta:
            return CountStats(f[0], f[1], f[2], np.sum(f[3], axis=-1))
        return IndepNormalStats(*f)

    def _gamma_table(self, k, m, col):
        """``log Gamma(p + m)`` of the Beta prior's ``p = a, b, a + b`` (``k = 0, 1, 2``) of
        column ``col`` at integer counts ``m`` (table lookups, broadcast)."""
        table = self.tables[k]
        i = jnp.round(m).astype(jnp.int32)
        if table.ndim == 1:
            return jnp.take(table, i, mode="clip")
        return jnp.take(table.reshape(-1), i * table.shape[1] + col, mode="clip")

    def cell_log_predictive(self, col, v, node_stats, pos):
        """``log p(X_ij = v | node data)`` of column ``col`` (position ``pos`` in the view's
        padded statistics ``node_stats``, leading axes broadcast)."""
        if self.beta:
            t = self.p3[col]
            sc = node_stats.succ[..., pos]
            fc = node_stats.fail[..., pos]
            logc = gammaln(t + 1) - gammaln(v + 1) - gammaln(t - v + 1)
            # integer counts: log Beta from the log Gamma tables (ga[m] = log Gamma(a + m), ...)
            g = lambda k, m: self._gamma_table(k, m, col)
            post = g(0, sc + v) + g(1, fc + t - v) - g(2, sc + fc + t)
            return logc + post - (g(0, sc) + g(1, fc) - g(2, sc + fc))
        m0, t2, s2 = self.p1[col], self.p2[col], self.p3[col]
        n, sx = node_stats.n[..., pos], node_stats.sx[..., pos]
        prec = 1.0 / t2 + n / s2
        mean = (m0 / t2 + sx / s2) / prec
        var = s2 + 1.0 / prec
        return -0.5 * (LOG_2PI + jnp.log(var) + (v - mean) ** 2 / var)


def column_model(component: Component, X: np.ndarray) -> ColumnData:
    """Builds `ColumnData` for a column-separable component (raises `ColumnSplitError`, a
    ``TypeError``, otherwise)."""
    I, J = X.shape
    fdt = jnp.result_type(float)
    Ip, Jp = padded_sizes(I, J)
    npad = Jp - J  # null columns J .. Jp-1
    # padding rows and columns are missing entries: zero statistics (host NumPy throughout,
    # so nothing here compiles a program per table size)
    Xj = np.full((Ip, Jp), np.nan)
    Xj[:I, :J] = X
    component.check_column_split("BHCC")
    par = component.column_parameters()
    kind = None if par is None else par.kind
    if kind not in ("beta", "normal"):
        raise ColumnSplitError(
            f"BHCC has no column model for {type(component).__name__} (its column_parameters() "
            f"kind is {kind!r}; BHCC knows 'beta' and 'normal')"
        )
    if kind == "beta":
        t = np.broadcast_to(np.asarray(par.p3, float), (J,))
        shared = np.ndim(par.p1) == 0 and np.ndim(par.p2) == 0
        a = np.broadcast_to(np.asarray(par.p1, float), (J,))
        b = np.broadcast_to(np.asarray(par.p2, float), (J,))
        tt = np.append(t, np.ones(npad))
        obs = ~np.isnan(Xj)
        x = np.where(obs, Xj, 0.0)
        tt_e = np.where(obs, tt[None, :], 0.0)
        logc = _sgammaln(tt_e + 1) - _sgammaln(x + 1) - _sgammaln(tt_e - x + 1)
        s = tuple(jnp.asarray(v, fdt) for v in (obs.astype(float), x, tt_e - x, logc))
        a1 = np.append(a, np.full(npad, a[0] if shared else 1.0))
        b1 = np.append(b, np.full(npad, b[0] if shared else 1.0))
        size = int((Ip + 1) * t.max()) + 1  # counts of Ip rows plus one predicted row
        m = np.arange(size, dtype=float)
        dense, stride = None, 0
        if shared:
            tables = tuple(jnp.asarray(_sgammaln(v + m), fdt) for v in (a1[0], b1[0], a1[0] + b1[0]))
            tmax = int(t.max())
            if np.all(t == tmax) and (Ip + 2) * size <= (1 << 23):
                # term of a column with n observed entries and s successes (fail = t n - s)
                nn = np.arange(Ip + 2, dtype=float)[:, None]
                ss = m[None, :]
                ff = tmax * nn - ss
                with np.errstate(invalid="ignore"):
                    g = (
                        _sgammaln(a1[0] + ss)
                        + _sgammaln(b1[0] + np.maximum(ff, 0))
                        - _sgammaln(a1[0] + b1[0] + tmax * nn)
                        - (_sgammaln(a1[0]) + _sgammaln(b1[0]) - _sgammaln(a1[0] + b1[0]))
                    )
                dense, stride = jnp.asarray(np.where(ff >= 0, g, 0.0).reshape(-1), fdt), size
        else:
            tables = tuple(jnp.asarray(_sgammaln(v[None, :] + m[:, None]), fdt) for v in (a1, b1, a1 + b1))
        return ColumnData(
            True,
            bool(shared),
            J,
            jnp.asarray(a1, fdt),
            jnp.asarray(b1, fdt),
            jnp.asarray(tt, fdt),
            s,
            tables,
            dense,
            stride,
            I,
        )
    mean, pv, nv = (np.broadcast_to(np.asarray(x, float), (J,)) for x in (par.p1, par.p2, par.p3))
    comp = IndependentNormal(
        np.append(mean, np.zeros(npad)), np.append(pv, np.ones(npad)), np.append(nv, np.ones(npad))
    )
    obs = ~np.isnan(Xj)
    x = np.where(obs, Xj, 0.0)
    s = tuple(jnp.asarray(v, fdt) for v in (obs.astype(float), x, x * x))  # IndependentNormal.stats per cell
    return ColumnData(False, False, J, comp.mean, comp.prior_var, comp.noise_var, s, None, None, 0, I)


def check_real_table(X, name: str) -> np.ndarray:
    """``X`` as a host float array after checking that it is real and numeric (strings,
    objects and complex numbers raise a ``TypeError`` naming ``name``; ragged rows a
    ``ValueError``). NaN entries are kept (they mark missing values)."""
    if isinstance(X, (list, tuple)):
        lens = {len(r) if hasattr(r, "__len__") else -1 for r in X}
        if len(lens) > 1:
            raise ValueError(f"{name} is ragged: every row must have the same number of columns")
    return real_array(X, name, "[rows, columns]").astype(float)


def _check_gaussian_scale(arr: np.ndarray, mean, prior_var, noise_var, name: str):
    """Raises a ``ValueError`` when the Normal column marginals of ``arr`` (all rows in one
    cluster: the largest sums the algorithms form) overflow float64, which would make every
    score NaN: values near 1e155 and above square to infinity."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        obs = ~np.isnan(arr)
        x = np.where(obs, arr, 0.0)
        n, sx, sxx = obs.sum(0), x.sum(0), (x * x).sum(0)
        m0, t2, s2 = (np.broadcast_to(np.asarray(v, float), (arr.shape[1],)) for v in (mean, prior_var, noise_var))
        prec = 1.0 / t2 + n / s2
        lin = m0 / t2 + sx / s2
        val = -0.5 * sxx / s2 - 0.5 * m0 * m0 / t2 + 0.5 * lin * lin / prec
    if not np.all(np.isfinite(val)):
        big = float(np.nanmax(np.abs(arr))) if np.any(obs) else float("nan")
        raise ValueError(
            f"{name}: entries up to {big:.3g} are too large for the Normal model's sums of squares in "
            f"float64 (they overflow, and every score would be NaN); rescale {name} (e.g. standardise its "
            f"columns) and the component's prior with it"
        )


def validate_inputs(X, component, name: str = "X") -> np.ndarray:
    """Host float array ``[I, J]`` after checking dtype, shape, domain and missing values."""
    arr = check_real_table(X, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [rows, columns], got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one row and one column, got shape {arr.shape}")
    par = component.column_parameters()
    if par is not None and par.kind == "normal":
        if np.ndim(par.p1) and np.shape(par.p1)[-1] != arr.shape[1]:
            raise ValueError(
                f"{name} has {arr.shape[1]} columns but the component was built for {np.shape(par.p1)[-1]}"
            )
        if np.any(np.isinf(arr)):
            raise ValueError(f"{name} must be finite (NaN marks a missing entry)")
        _check_gaussian_scale(arr, par.p1, par.p2, par.p3, name)
        return arr
    return component.validate_data(arr, name)
