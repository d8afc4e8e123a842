"""The ``jaxhc`` command line (also ``python -m jaxhc``).

Subcommands:

* ``jaxhc demo [--out DIR] [--quick] [--per-class N] [--fixed-prior] [--no-progress]
  [--cache-dir DIR] [--no-compilation-cache]`` - BHC on binarized digits (0, 2, 4;
  Beta-Bernoulli), iris and wine (standardized; Normal-inverse-Wishart or per-feature
  Normal-Gamma, whichever has the higher DPM evidence bound), compared by dendrogram purity
  with scipy's average / complete / single / Ward linkage.
* ``jaxhc bhc FILE [--component ...] [--alpha A] [--labels-column C] [--standardize]
  [--fixed-prior] [--randomized-above N] [--learn-subset M] [--seed S] [--out DIR]
  [--no-progress] [--cache-dir DIR] [--no-compilation-cache]`` - BHC on a CSV (header
  optional) or ``.npy`` file. Above ``N`` rows (default 4000, `jaxhc.fit_bhc`'s
  ``randomized_above``) the family and hyperparameters are learned on ``M`` random rows and
  randomized BHC builds the tree over all rows, with a progress bar; the summary line and
  the JSON say which ran (``method``), scipy's linkages are compared only up to 20 000 rows,
  and the dendrogram PNG shows the top 50 clusters only above 2000 rows.

``demo`` and ``bhc`` learn alpha and the component's hyperparameters by maximising BHC's lower
bound on the DPM marginal likelihood ``p(D | alpha, prior)`` (`jaxhc.learn_hyperparameters`
with ``objective="dpm_lower_bound"``, starting from the data-derived prior; ``--fixed-prior``
keeps that prior) and, without ``--component``, fit every candidate family and keep the one
of highest bound (`jaxhc.fit_bhc`, the same pipeline as a library call). The bound, not the tree evidence ``log p(D|T)``, is the objective because
alpha and the prior are hyperparameters of the DPM that BHC approximates, and the bound is a
lower bound on that model's evidence; ``log p(D|T)`` is the evidence of a tree-restricted
model, and maximised over alpha it drives alpha up (55 to 200 on the built-in sets) until
the merges above the clusters carry no weight, which leaves the upper hierarchy undecided.
The table reports the bound's gain over the starting prior. Where BHC's dendrogram purity is
below the best linkage's, a line under the table gives the model's own scores of the true
classes against BHC's answer: the bound of the class-respecting tree closest to BHC's
(`class_respecting_tree`) and the DPM joint ``log p(D, c)`` of the true classes against BHC's
clusters, so a reader sees whether the model or the greedy search is to blame.
* ``jaxhc jets [--num-jets B] [--quick] [--min-leaves N] [--max-leaves N] [--lam 2]
  [--t-cut 16] [--likelihood paper|exact] [--seed S] [--input FILE] [--field F] [--tree T]
  [--branch PREFIX] [--out DIR] [--partition-size K [--resume]] [--no-progress] [--cache-dir DIR] [--no-compilation-cache]
  [--no-fastjet]`` - Ginkgo jets (simulated by `jaxhc.models.ginkgo`, or read from a JSON list
  of objects with ``leaves``, a parquet file or a ROOT file of jagged four-vectors): the exact trellis MAP tree and log Z, greedy and beam search, and kt /
  Cambridge-Aachen / anti-kt (FastJet, or the NumPy twin with ``--no-fastjet``), compared by
  log likelihood (Table 1 of the trellis paper; see `jaxhc.jets`). Simulated jets have 5 to
  10 leaves by default (the paper's study); jets from a file are all taken, and solved from 1
  leaf up to `JETS_FILE_MAX_LEAVES` (16) by default. Every jet of the file has a row in the
  outputs, keyed by ``jet_id`` (its index in the file): solved, or the reason it was not
  (``status``: outside the leaf range, above the exact trellis limit, invalid four-momenta),
  and the last line counts them by reason.

``demo`` and ``bhc`` print a summary table and write, per data set, a dendrogram PNG
(`jaxhc.plot.plot_bhc`) and a Newick file; ``bhc`` also writes a JSON with the tree, the flat
labels at ``r_k < 0.5`` and the log evidence. ``jets`` prints Table 1 and timings and writes
``jets_results.json`` (per-jet log likelihoods and trees), ``jets_logz_vs_map.png`` (log Z
against the MAP log likelihood coloured by the number of leaves, Fig. 5 of the paper) and,
with the ``hep`` extra, ``jets_results.parquet`` (`jaxhc.jets.to_awkward`'s compact records
plus ``log_phi_<method>`` per method).
Every subcommand turns on JAX's persistent compilation cache
(`jaxhc.enable_compilation_cache`; ``--cache-dir DIR`` picks the folder,
``--no-compilation-cache`` (alias ``--no-cache``) or ``JAXHC_NO_COMPILATION_CACHE=1`` turns it
off), so a second run loads the compiled programs instead of compiling them again.
Problems with the input file end the command with exit code 2 and a one-line message on
stderr. The CLI enables float64 in JAX.

Modules: `jaxhc.cli.tables` (reading CSV / ``.npy``), `jaxhc.cli.bhc_cmd` (``demo``, ``bhc``),
`jaxhc.cli.jets_cmd` (``jets``), `jaxhc.cli.common` (input errors, messages, compilation cache).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

from .bhc_cmd import COMPONENTS, LEARN_SUBSET, RANDOMIZED_ABOVE, class_respecting_tree, cmd_bhc, cmd_demo
from .common import InputError
from .jets_cmd import JETS_DEFAULT, JETS_FILE_MAX_LEAVES, JETS_QUICK, cmd_jets, read_jets
from .tables import read_table

__all__ = ["main", "read_table", "read_jets", "class_respecting_tree", "InputError"]


# ---------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------
def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {s!r}")
    return v


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {s!r}")
    return v


def _nonnegative_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {s!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxhc",
        description="Bayesian hierarchical clustering (Heller & Ghahramani 2005) on JAX.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser(
        "demo",
        help="BHC vs linkage on digits (0,2,4), iris and wine",
        description="Run BHC on built-in data sets and compare dendrogram purity with "
        "scipy average / complete / single linkage.",
    )
    d.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    d.add_argument(
        "--quick",
        action="store_true",
        help="small subsets: 40 digits per class, 20 rows per class of iris and wine (wine on 4 of its 13 features)",
    )
    d.add_argument(
        "--per-class",
        type=_positive_int,
        default=None,
        help="digits per class (default: all ~180 of each of 0, 2, 4; 40 with --quick)",
    )
    d.add_argument(
        "--alpha",
        type=_positive_float,
        default=1.0,
        help="DP concentration (default 1; the start of learning unless --fixed-prior)",
    )
    d.add_argument("--no-progress", action="store_true", help="no progress messages on stderr")
    d.add_argument(
        "--fixed-prior",
        action="store_true",
        help="keep the data-derived prior and alpha fixed (default: learn them by maximising "
        "BHC's lower bound on the DPM evidence)",
    )
    d.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="persistent JAX compilation cache (default: JAX_COMPILATION_CACHE_DIR if set, else "
        "$JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla; see jaxhc.enable_compilation_cache)",
    )
    d.add_argument(
        "--no-compilation-cache",
        "--no-cache",
        dest="no_cache",
        action="store_true",
        help="do not use the compilation cache (also: JAXHC_NO_COMPILATION_CACHE=1)",
    )
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser(
        "bhc",
        help="cluster a CSV or .npy file",
        description="Run BHC on the rows of a CSV (header row optional) or .npy file; "
        "write a dendrogram PNG, a Newick tree and a JSON summary.",
    )
    b.add_argument("file", help="CSV (numeric columns, optional header) or .npy [n, d]")
    b.add_argument(
        "--component",
        choices=COMPONENTS,
        default=None,
        help="component family (default: bernoulli if all values are 0/1, else niw or normalgamma, "
        "whichever gives the higher DPM evidence bound)",
    )
    b.add_argument("--trials", type=_positive_int, default=None, help="trials per entry for binomial")
    b.add_argument(
        "--alpha",
        type=_positive_float,
        default=1.0,
        help="DP concentration (default 1; the start of learning unless --fixed-prior)",
    )
    b.add_argument(
        "--labels-column",
        default=None,
        metavar="NAME_OR_INDEX",
        help="column with class labels (not clustered; used for purity, leaf names, colours)",
    )
    b.add_argument("--standardize", action="store_true", help="z-score each column first (Gaussian components)")
    b.add_argument(
        "--randomized-above",
        type=_nonnegative_int,
        default=RANDOMIZED_ABOVE,
        metavar="N",
        help=f"above N rows (default {RANDOMIZED_ABOVE}): choose the family and learn the hyperparameters on "
        "--learn-subset random rows, then build the tree over all rows with randomized BHC (jaxhc.rbhc, O(n log n)); "
        "the summary says which ran (method greedy or rbhc)",
    )
    b.add_argument(
        "--learn-subset",
        type=_positive_int,
        default=LEARN_SUBSET,
        metavar="M",
        help=f"rows the hyperparameters are learned on above --randomized-above (default {LEARN_SUBSET})",
    )
    b.add_argument(
        "--seed", type=int, default=0, help="random seed of the learning subset and randomized BHC (default 0)"
    )
    b.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    b.add_argument("--no-progress", action="store_true", help="no progress messages or bars")
    b.add_argument(
        "--fixed-prior",
        action="store_true",
        help="keep the data-derived prior and alpha fixed (default: learn them by maximising "
        "BHC's lower bound on the DPM evidence)",
    )
    b.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="persistent JAX compilation cache (default: JAX_COMPILATION_CACHE_DIR if set, else "
        "$JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla; see jaxhc.enable_compilation_cache)",
    )
    b.add_argument(
        "--no-compilation-cache",
        "--no-cache",
        dest="no_cache",
        action="store_true",
        help="do not use the compilation cache (also: JAXHC_NO_COMPILATION_CACHE=1)",
    )
    b.set_defaults(func=cmd_bhc)

    j = sub.add_parser(
        "jets",
        help="trellis MAP vs greedy / beam / kt on Ginkgo jets (Table 1)",
        description="Exact trellis MAP tree and log Z, greedy and beam search, and kt / "
        "Cambridge-Aachen / anti-kt on Ginkgo jets, compared by log likelihood "
        "(Table 1 and Fig. 5 of the trellis paper).",
    )
    j.add_argument(
        "--num-jets",
        type=_positive_int,
        default=None,
        help=f"number of jets (default {JETS_DEFAULT['num_jets']}; {JETS_QUICK['num_jets']} with "
        "--quick; with --input, the first this many of the file's, default all)",
    )
    j.add_argument(
        "--quick",
        action="store_true",
        help=f"small run: {JETS_QUICK['num_jets']} jets of at most {JETS_QUICK['max_leaves']} leaves unless given",
    )
    j.add_argument(
        "--min-leaves",
        type=_positive_int,
        default=None,
        help=f"fewest leaves of a jet solved (default {JETS_DEFAULT['min_leaves']} for simulated jets, 1 with --input)",
    )
    j.add_argument(
        "--max-leaves",
        type=_positive_int,
        default=None,
        help=f"most leaves of a jet solved (default {JETS_DEFAULT['max_leaves']} for simulated jets; with --input "
        f"{JETS_FILE_MAX_LEAVES}: larger jets take long, the time is estimated before a long run; "
        f"{JETS_QUICK['max_leaves']} with --quick; at most 24, the exact trellis limit). With --input, every jet "
        "of the file has a row in the outputs: solved, or why not (outside the range, above the limit, invalid)",
    )
    j.add_argument("--lam", type=_positive_float, default=2.0, help="Ginkgo splitting rate lambda (default 2)")
    j.add_argument("--t-cut", type=_positive_float, default=16.0, help="mass-squared cut-off t_cut (default 16)")
    j.add_argument(
        "--likelihood",
        choices=("paper", "exact"),
        default="paper",
        help="Ginkgo split likelihood: the trellis paper's (default) or the generator's exact density",
    )
    j.add_argument("--seed", type=int, default=0, help="random seed of the simulated jets (default 0)")
    j.add_argument(
        "--input",
        default=None,
        metavar="FILE",
        help="read jets instead of simulating them: a JSON list of objects with 'leaves' ([n, 4] four-momenta "
        "E, px, py, pz), a parquet file of jagged four-vectors (records E, px, py, pz or pt, eta, phi, mass) or a "
        "ROOT file (jagged branches; see --tree, --branch); parquet and ROOT need pip install 'jaxhc[hep]'",
    )
    j.add_argument("--field", default=None, help="parquet: the column holding the jets (default: the top level)")
    j.add_argument("--tree", default=None, help="ROOT: the TTree of the jets (default: the file's only TTree)")
    j.add_argument(
        "--branch",
        default="",
        help="ROOT: common prefix of the jagged branches E, px, py, pz (or pt, eta, phi, mass), e.g. 'jet_'",
    )
    j.add_argument("--out", default="jaxhc_out", help="output folder (default: ./jaxhc_out)")
    j.add_argument(
        "--partition-size",
        type=_positive_int,
        default=None,
        metavar="K",
        help="instead of the comparison: solve every jet with the exact trellis and write one parquet file of "
        "compact results per K jets under --out, with a manifest (jaxhc.jets.runs; needs the hep extra)",
    )
    j.add_argument(
        "--resume",
        action="store_true",
        help="with --partition-size: continue the run in --out, skipping its finished partitions",
    )
    j.add_argument(
        "--on-invalid",
        choices=("skip", "raise"),
        default="skip",
        help="jets that fail the four-momentum checks (NaN, E <= 0, mass^2 below -2^-20 E E_jet): 'skip' "
        "(default) leaves them unsolved with a message naming each (their rows say status 'invalid' and why), "
        "'raise' stops with an error naming every one",
    )
    j.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress messages or bars (the last line still counts the jets solved and not solved, by reason)",
    )
    j.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="persistent JAX compilation cache (default: JAX_COMPILATION_CACHE_DIR if set, else "
        "$JAXHC_CACHE_DIR or ~/.cache/jaxhc/xla; see jaxhc.enable_compilation_cache)",
    )
    j.add_argument(
        "--no-compilation-cache",
        "--no-cache",
        dest="no_cache",
        action="store_true",
        help="do not use the compilation cache (also: JAXHC_NO_COMPILATION_CACHE=1)",
    )
    j.add_argument(
        "--no-fastjet",
        action="store_true",
        help="kt family by the NumPy implementation instead of FastJet (used anyway when fastjet is not installed)",
    )
    j.set_defaults(func=cmd_jets)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``jaxhc`` command; returns 0, or raises ``SystemExit(2)`` for bad input."""
    import jax

    jax.config.update("jax_enable_x64", True)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"jaxhc {args.command}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
