"""MCMC baselines of the cross-clustering paper: DPM collapsed Gibbs with split-merge moves,
and CDPM (CrossCat) MCMC with Metropolis-coupled chains (Li & Shafto, Sec. 8.2).

**DPM** (`dpm_gibbs_init` / `dpm_gibbs_step` / `dpm_gibbs`): the state is the row labels
``z [N]`` with the statistics of every cluster slot (capacity ``K = N``, so it is exact; an
empty slot holds the statistics of the empty set). One step is

1. a collapsed Gibbs sweep (Neal 2000, Algorithm 3): for each row ``i`` in turn,
   ``p(z_i = k | z_-i, X) ∝ n_k^{-i} p(x_i | X_k^{-i})`` for an occupied cluster ``k`` and
   ``∝ alpha p(x_i)`` for a new one, with ``p(x | D) = exp(log_marginal(D + x) -
   log_marginal(D))`` from the component;
2. ``num_split_merge`` split-merge proposals (Jain & Neal 2004, restricted Gibbs sampling):
   pick two rows ``i != j``; the other rows ``S`` of their clusters are split at random
   between ``i``'s and ``j``'s side and ``num_restricted_scans`` restricted Gibbs scans over
   ``S`` give the launch state. If ``z_i = z_j`` a split is proposed by one more restricted
   scan (probability ``q``), accepted with ``alpha Gamma(n_A) Gamma(n_B) / Gamma(n_A + n_B)
   * p(X_A) p(X_B) / p(X_A+B) / q``; otherwise the merge is proposed and accepted with the
   inverse ratio, ``q`` being the probability of the current split from the launch state.

**CDPM** (`cdpm_mcmc_init` / `cdpm_mcmc_step` / `cdpm_mcmc`): the state is the view of
every column ``u [J]`` (capacity ``V = J``) and the row labels of every view slot
``Z [N, V]`` (capacity ``K = N`` clusters per view). Statistics are kept per column: entry
``[k, j]`` holds the statistics of column ``j`` over the rows of cluster ``k`` of ``j``'s own
view, so a column's likelihood ``sum_k G_j(stats[k, j])`` (Eq. 5) is a sum of per-column log
marginals of the component restricted to column ``j``. This needs a column-separable
component (`BetaBernoulli`, `BetaBinomial`, `NormalKnownCov` with diagonal covariances).
One step updates two chains, the cold one targeting ``p(u, Z | X)`` and a heated one
targeting ``p(u, Z | X)^heat`` (Geyer 1991; the paper uses ``heat = 0.8``):

a. every column's view by Gibbs with ``m`` auxiliary views (Neal 2000, Algorithm 8): the
   ``m`` auxiliary row partitions are drawn from ``CRP(alpha)`` (when the column is alone in
   its view, the first one is that view's partition), and ``u_j`` is drawn with weights
   ``[m_v^{-j} p(X_j | Z_v)]^beta`` for an occupied view and ``alpha^beta / m * CRP(Z_a)^(beta
   - 1) p(X_j | Z_a)^beta`` for an auxiliary one (``beta = 1`` for the cold chain: Algorithm 8
   exactly; the ``CRP^(beta-1)`` factor makes it exact for the tempered target too);
b. every row's cluster within every view by collapsed Gibbs (all views at once, since the
   row's labels in different views are conditionally independent), the conditionals raised to
   ``beta``;
c. a swap of the two chains' states, accepted with ``(1 - heat) (log p(X, s_hot) - log p(X,
   s_cold))``. The cold chain is the output.

Missing entries (NaN in ``X``) are supported where the component's statistics skip them
(`BetaBernoulli`, `BetaBinomial`): held-out cells are predicted by `dpm_predict_cells` and
`cdpm_predict_cells`. `DPMGibbs` and `CDPMGibbs` wrap the kernels as NumPyro ``MCMCKernel``s.

Compilation: the runs and the single steps go through one jitted chunk program per bucket of
data shapes (`jaxhc._internal.buckets`), component and static option (``num_split_merge``;
``num_aux``): chain lengths, ``thin``, ``num_restricted_scans``, ``gibbs_sweep``, ``heat`` and
the real sizes are traced, and kept samples go to buffers of a length fixed by the bucket
(`jaxhc._internal.chain.chunk_size`), longer runs taking several calls
(`jaxhc._internal.chain.run_chunks`; how many samples a call keeps depends on the real size
only, so the chunk boundaries and keys do not move with the padding). Rows (and the CDPM's
columns) are padded to the bucket's size: a padding row is in no cluster (labelled ``K``,
zero statistics, never visited by a sweep or a split-merge move), a padding column in no view
(zero statistics, no weight in any view's likelihood, never visited), so the samples equal
those of the exact-shape computation. The random draws do not depend on the padding: row
``i`` (column ``j``) draws with the ``i``-th (``j``-th) key of one ``split``, and every draw
is over ``[K]`` logits per key (``-inf`` beyond the candidates); DPM Gibbs draws what it drew
before padding, CDPM MCMC draws every view's row label (and auxiliary partitions) with keys of
their own. The NumPyro kernels `DPMGibbs` and `CDPMGibbs` run unpadded (NumPyro compiles its
own programs).

Modules: `dpm` (DPM Gibbs), `cdpm` (CDPM MCMC), `cells` (held-out cells), `common` (statistics
bookkeeping, CRP helpers, validation).
"""

from .cdpm import (
    CDPMGibbs,
    CDPMInfo,
    CDPMSamples,
    CDPMState,
    cdpm_mcmc,
    cdpm_mcmc_init,
    cdpm_mcmc_step,
)
from .cells import cdpm_predict_cells, dpm_predict_cells
from .dpm import (
    DPMGibbs,
    DPMGibbsInfo,
    DPMGibbsSamples,
    DPMGibbsState,
    dpm_gibbs,
    dpm_gibbs_init,
    dpm_gibbs_step,
)

__all__ = [
    "DPMGibbsState",
    "DPMGibbsInfo",
    "DPMGibbsSamples",
    "dpm_gibbs_init",
    "dpm_gibbs_step",
    "dpm_gibbs",
    "dpm_predict_cells",
    "CDPMState",
    "CDPMInfo",
    "CDPMSamples",
    "cdpm_mcmc_init",
    "cdpm_mcmc_step",
    "cdpm_mcmc",
    "cdpm_predict_cells",
    "DPMGibbs",
    "CDPMGibbs",
]
