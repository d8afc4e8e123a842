"""Test set-up: float64 everywhere, tests/ on sys.path so `import reference` works, and a
bound on the compiled programs one test worker keeps alive.

Every program XLA:CPU compiles (each jitted function, and each primitive run eagerly, per
shape) stays loaded in JAX's caches, and each loaded program holds a few memory mappings.
A pytest-xdist worker running half the suite compiles tens of thousands of programs; once
its mappings reach the kernel's ``vm.max_map_count`` (65530 by default), LLVM cannot map
the next program ("LLVM compilation error: Cannot allocate memory") and the worker dies of a
segmentation fault inside ``backend_compile``. So after each test, when the process holds
more than half that many mappings, the caches are cleared (programs are recompiled on
demand; results do not change).
"""

import gc
import os
import shutil
import sys
import tempfile
import warnings


def _session_compilation_cache():
    """A JAX persistent compilation cache shared by the whole test session and kept between
    sessions.

    XLA:CPU compilation is about half of the suite's time on 2 cores. Before JAX is imported,
    the controller of a session (or a plain `pytest` run) exports the cache folder in the
    environment, so the pytest-xdist workers, the notebooks run in them and the `python`
    subprocesses the tests start (CLI, hang reproducer) all read and write the same cache: a
    program compiled once in any of them is loaded, not recompiled, by the others. The folder
    is `$XDG_CACHE_HOME/jaxhc/test-xla` (default `~/.cache/jaxhc/test-xla`), the test-suite
    twin of the CLI's `~/.cache/jaxhc/xla`, so a second run of the suite on the same machine
    skips most compilation too; JAX keys each entry by the program, the JAX/XLA versions and
    the flags. Results do
    not change: the cache stores the executables XLA would have built.
    JAX_COMPILATION_CACHE_DIR set by you wins; JAXHC_TEST_FRESH_CACHE=1 uses a fresh
    temporary folder removed at the end (a cold run); JAXHC_TEST_NO_COMPILATION_CACHE=1 turns
    the cache off."""
    if os.environ.get("JAXHC_TEST_NO_COMPILATION_CACHE") == "1":
        os.environ["JAXHC_NO_COMPILATION_CACHE"] = "1"  # jaxhc.enable_compilation_cache (notebooks, CLI) too
        return None
    created = None
    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        if os.environ.get("JAXHC_TEST_FRESH_CACHE") == "1":
            created = tempfile.mkdtemp(prefix="jaxhc-test-jax-cache-")
            folder = created
        else:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            folder = os.path.join(base, "jaxhc", "test-xla")
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError:  # read-only home: a session-only folder
                created = tempfile.mkdtemp(prefix="jaxhc-test-jax-cache-")
                folder = created
        os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    # No size cap: JAX's cap (jax_compilation_cache_max_size) takes a file lock around every
    # cache read and write, which two workers compiling thousands of small programs contend
    # for. `rm -rf ~/.cache/jaxhc/test-xla` empties the folder; JAX drops nothing by itself.
    return created


_CREATED_CACHE = _session_compilation_cache()
# the trellis programs are traced in every test (tests patch module settings a traced
# program reads; tests/test_trellis_exported.py turns the exported modules on where it checks them)
os.environ.setdefault("JAXHC_NO_EXPORTED_PROGRAMS", "1")

import jax  # noqa: E402  (after the cache variables above)
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
if os.environ.get("JAX_COMPILATION_CACHE_DIR") and os.environ.get("JAXHC_TEST_NO_COMPILATION_CACHE") != "1":
    # in case a plugin imported jax before this file set the variables
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update(
        "jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
    )
    jax.config.update(
        "jax_persistent_cache_min_entry_size_bytes", int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"])
    )
    if "JAX_COMPILATION_CACHE_MAX_SIZE" in os.environ:
        jax.config.update("jax_compilation_cache_max_size", int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))
    # no XLA C++ log line per cached executable (a false SIGILL error on AMD Zen 4, openxla/xla
    # issue 44565) when the folder was filled on this CPU, as jaxhc.enable_compilation_cache does
    from jaxhc._internal.cache import quiet_cache_loads

    quiet_cache_loads(os.environ["JAX_COMPILATION_CACHE_DIR"])


# Tests over ~10 s on 2 cores in the last full CI run (--durations; notes in the commit log):
# marked `slow` here, in one place, so `pytest -m "not slow"` is a quick check. CI and the
# README's command run everything. A test function listed here marks all its parameter cases.
SLOW_TESTS = {
    "test_bhc.py": {
        "test_chunked_search_equals_the_one_call_search",
        "test_learn_hyperparameters_on_bundled_data",
        "test_learning_improves_evidence_on_dpm_data",
        "test_padding_does_not_change_result",
        "test_rbhc_equals_bhc_when_one_leaf_block",
        "test_rbhc_filtering_builds_valid_tree",
        "test_rbhc_one_cluster_with_outliers",
    },
    "test_bhcc.py": {
        "test_cdpm_lower_bound_below_exact_evidence",
        "test_four_views_recovered",
        "test_normal_known_cov_and_independent_normal_agree",
        "test_one_column_is_bhc",
        "test_rbhcc_bounds_and_theorem",
        "test_rbhcc_recovers_views_and_is_reproducible",
        "test_rbhcc_screened_refinement",
        "test_refine_false_is_algorithm_1",
        "test_refinement_raises_the_criterion_and_the_result_is_consistent",
        "test_view_evidence_matches_bhc_on_the_view",
    },
    "test_bhmc.py": {
        "test_bhmc_bad_input_and_capacity_errors",
        "test_bhmc_end_to_end_recovers_components_and_is_reproducible",
        "test_chains_and_tree_starts",
        "test_default_capacities_grow_instead_of_failing",
        "test_defaults_recover_a_two_level_hierarchy_and_are_scale_invariant",
        "test_gibbs_path_conditional_matches_brute_force",
        "test_gibbs_sweeps_leave_the_prior_invariant",
        "test_hyperparameter_conditionals_agree_with_the_joint_density",
        "test_hyperparameter_mh_samples_its_conditional",
        "test_new_components_are_shared_as_in_the_hdp",
        "test_numpyro_program_scores_observed_data",
        "test_prior_sampler_and_numpyro_program_match_the_crp",
        "test_weight_update_matches_dirichlet_conditionals",
    },
    "test_cdpm_model.py": {
        "test_cdpm_program_and_column_partition_prior",
        "test_dpm_program_determinism_shapes_sites_and_crp_density",
    },
    "test_cli.py": {
        "test_demo_quick",
    },
    "test_components.py": {
        "test_normal_gamma_in_bhc_equals_niw_per_feature",
    },
    "test_float32.py": {
        "test_float32_agrees_with_float64_to_1e_5",
    },
    "test_gibbs.py": {
        "test_cdpm_mcmc_posterior_determinism_and_steps",
        "test_dpm_gibbs_beta_bernoulli_posterior_determinism_and_steps",
        "test_dpm_gibbs_gaussian_posterior",
        "test_numpyro_cdpm_kernel_recovers_views_normal_known_cov",
    },
    "test_ginkgo_fit.py": {
        "test_log_partition_batch_gradient_in_lam",
        "test_nuts_posterior_covers_truth_and_matches_the_likelihood",
        "test_sample_lambda_same_key_same_samples",
    },
    "test_ginkgo_model.py": {
        "test_exact_log_z_equals_brute_force_over_trees",
        "test_lam_root_in_padded_batches_equals_single_solves",
        "test_paper_likelihood_of_true_trees_matches_reference_data",
        "test_score_in_lam_changes_sign_around_the_generating_value",
        "test_unordered_likelihood_sums_over_drawing_orders",
    },
    "test_hangs.py": {
        "test_reproducer_never_hangs_in_fresh_processes",
    },
    "test_jets.py": {
        "test_cli_jets_compilation_cache",
    },
    "test_jets_sparse.py": {
        "test_all_trees_as_seeds_is_the_exact_trellis",
    },
    "test_notebooks.py": {
        "test_notebook_runs",
    },
    "test_properties.py": {
        "test_trellis_samples_follow_exact_tree_probabilities",
    },
    "test_pydt_em.py": {
        "test_attach_scores_are_exact_log_joints",
        "test_bound_never_decreases",
        "test_four_clusters_pydt_multifurcates_ddt_binary",
        "test_regraft_and_collapse_propose_valid_trees_scored_by_their_bound",
    },
    "test_pydt_em_probit.py": {
        "test_m_step_does_not_lower_ep_surrogate_bound",
        "test_probit_em_recovers_two_binary_clusters",
    },
    "test_pydt_mcmc.py": {
        "test_driver_runs_samples_hyperparameters_and_validates",
        "test_gibbs_c_and_precision_match_their_conditionals",
        "test_moves_sample_the_exact_posterior_over_structures_of_three_points",
        "test_predictive_over_mcmc_samples_integrates_to_one",
        "test_probit_model_chains_and_numpyro_kernel",
    },
    "test_pydt_mcmc_chains.py": {
        "test_chain_methods_agree",
    },
    "test_pydt_mcmc_four.py": {
        "test_moves_sample_the_posterior_over_structures_of_four_points",
    },
    "test_sklearn.py": {
        "test_defaults_are_fit_bhc",
    },
    "test_sklearn_cross.py": {
        "test_levels_are_nested_and_labels_are_the_deepest",
    },
    "test_trellis.py": {
        "test_solve_batch_dasgupta_equals_individual",
    },
    "test_trellis_flat.py": {
        "test_flat_equals_grouped_dasgupta",
        "test_flat_equals_grouped_ginkgo",
    },
    "test_trellis_sharding.py": {
        "test_solve_batch_sharded_over_four_devices_equals_one_device",
    },
}


# The files that take longest (sums of --durations in the last full CI run, heaviest first):
# they run first, so that with `--dist loadfile` no worker starts a long file while the
# other has nothing left to do (the tail of a run was one worker alone in a heavy file). A
# stable sort: every other file follows in name order, the tests of a file stay together and
# in their order.
HEAVY_FILES_FIRST = (
    "test_search_regret.py",
    "test_buckets_pydt.py",
    "test_notebooks.py",
    "test_bhmc.py",
    "test_sklearn_checks.py",
    "test_sklearn_cross.py",
    "test_bhmc_search.py",
    "test_trellis.py",
    "test_buckets_gibbs.py",
    "test_pydt_mcmc.py",
    "test_programs_defaults.py",
    "test_buckets_bhc.py",
    "test_posterior_predictive.py",
    "test_invalid_jets.py",
    "test_docs.py",
    "test_gibbs.py",
    "test_hangs.py",
    "test_buckets_bhmc.py",
    "test_pydt_em.py",
    "test_bhcc_exact.py",
    "test_bhcc.py",
    "test_bhcc_moves.py",
    "test_multiprocess.py",
    "test_ginkgo_fit.py",
    "test_jets_runs.py",
    "test_sklearn.py",
    "test_cli.py",
)


def _file_rank(item) -> int:
    name = os.path.basename(str(item.path))
    return HEAVY_FILES_FIRST.index(name) if name in HEAVY_FILES_FIRST else len(HEAVY_FILES_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_rank)  # stable: heavy files first (HEAVY_FILES_FIRST)
    seen = set()
    for item in items:
        fname = os.path.basename(str(item.path))
        func = getattr(item, "originalname", None) or item.name.split("[")[0]
        if func in SLOW_TESTS.get(fname, ()):
            item.add_marker(pytest.mark.slow)
            seen.add((fname, func))
    modules = {os.path.basename(str(item.path)): item.module for item in items if getattr(item, "module", None)}
    stale = sorted(f"{f}::{t}" for f, mod in modules.items() for t in SLOW_TESTS.get(f, ()) if not hasattr(mod, t))
    if stale:  # a renamed test: keep the list in step
        warnings.warn(pytest.PytestWarning(f"SLOW_TESTS in tests/conftest.py names tests that do not exist: {stale}"))


def pytest_unconfigure(config):
    # the process that made the session's cache folder removes it at the end (xdist workers
    # inherit the controller's folder, so they made none; the controller ends after them)
    if _CREATED_CACHE is not None:
        shutil.rmtree(_CREATED_CACHE, ignore_errors=True)


_HERE = os.path.dirname(os.path.abspath(__file__))
# tests/ for `reference`; the repository root for `jaxhc` when it is not pip-installed
for _p in (os.path.dirname(_HERE), _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


_MAP_LIMIT = _map_limit()


def _n_maps():
    try:
        with open("/proc/self/maps", "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:
        return 0


@pytest.fixture(autouse=True)
def _bounded_compiled_programs():
    yield
    if _MAP_LIMIT is not None and _n_maps() > _MAP_LIMIT // 2:
        jax.clear_caches()
        gc.collect()
