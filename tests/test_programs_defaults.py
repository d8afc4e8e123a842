import jax

jax.config.update("jax_enable_x64", True)

"""Every NumPyro program in `jaxhc.models`, found by walking the package (not listed by hand),
runs with its defaults under `numpyro.infer.Predictive` (``parallel=True`` and ``False``),
``jit`` and ``vmap`` over keys; the programs that observe data take it as the keyword ``X``
(all arguments keyword-only), and the former positional orders still work with a
``DeprecationWarning``."""

import importlib
import inspect
import pkgutil
import warnings

import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

import jaxhc
import jaxhc.models


def _programs() -> dict:
    """``{"module.name": function}`` for every public function of every `jaxhc.models` module
    whose body draws or scores with NumPyro primitives (``numpyro.sample`` / ``numpyro.factor``)."""
    out = {}
    for info in pkgutil.iter_modules(jaxhc.models.__path__):
        mod = importlib.import_module(f"jaxhc.models.{info.name}")
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if not inspect.isfunction(obj) or not obj.__module__.startswith("jaxhc.models"):
                continue
            src = inspect.getsource(inspect.unwrap(obj))
            if "numpyro.sample(" in src or "numpyro.factor(" in src:
                out[f"{obj.__module__.rpartition('.')[2]}.{obj.__name__}"] = obj
    return out


PROGRAMS = _programs()


def _jets():
    from jaxhc.models.ginkgo import GinkgoParams, simulate
    from jaxhc.models.ginkgo_lambda import prepare_jets

    jets = simulate(jax.random.key(0), GinkgoParams(), 2, min_leaves=3, max_leaves=4)
    return prepare_jets(jets.leaves, jets.n_leaves, GinkgoParams().t_cut)


# the required arguments (sizes, the component, the data of a conditioning-only model) of each
# program; everything else is left at its default
def _required(name):
    bern = jaxhc.BetaBernoulli(np.ones(2), np.ones(2))
    table = {
        "dpm.dpm": lambda: dict(component=bern, num_points=4),
        "cdpm.cdpm": lambda: dict(component=bern, num_points=4),
        "ncrp_hdp.ncrp_hdp": lambda: dict(num_points=5, dim=2),
        "ncrp_hdp.ncrp_hdp_truncated": lambda: dict(num_points=5, dim=2),
        "pydt.pydt": lambda: dict(num_points=4, dim=2),
        "ginkgo.shower": lambda: dict(),
        "ginkgo_lambda.lambda_model": lambda: dict(leaves_padded=_jets(), n_leaves=None, t_cut=16.0),
    }
    return table[name]()


def test_every_program_is_covered():
    """A new program in `jaxhc.models` must be added to `_required` (and so to every test here)."""
    assert set(PROGRAMS) >= {"dpm.dpm", "cdpm.cdpm", "ncrp_hdp.ncrp_hdp", "pydt.pydt", "ginkgo.shower"}
    for name in PROGRAMS:
        _required(name)  # KeyError: a program without an entry


def _observes_data(name) -> bool:
    """The program has an observed site (``obs=``); ``ncrp_hdp`` observes through the truncated
    program it calls."""
    return "obs=" in inspect.getsource(inspect.unwrap(PROGRAMS[name])) or name == "ncrp_hdp.ncrp_hdp"


OBSERVING = sorted(n for n in PROGRAMS if _observes_data(n))


def test_the_programs_without_an_observed_site_are_the_known_ones():
    """Generative only (``ginkgo.shower``) or a ``numpyro.factor`` of given data
    (``ginkgo_lambda.lambda_model``): they keep their signatures; any other program observes
    data and takes it as ``X``."""
    assert set(PROGRAMS) - set(OBSERVING) == {"ginkgo.shower", "ginkgo_lambda.lambda_model"}


@pytest.mark.parametrize("name", OBSERVING)
def test_programs_that_observe_data_take_it_as_the_keyword_X(name):
    params = inspect.signature(PROGRAMS[name]).parameters
    assert "X" in params and params["X"].default is None
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values()), params


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_under_predictive_with_its_defaults(name, parallel):
    kw = _required(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        out = Predictive(PROGRAMS[name], num_samples=3, parallel=parallel)(jax.random.key(1), **kw)
    assert out and all(np.asarray(v).shape[0] == 3 for v in out.values())
    for v in out.values():
        v = np.asarray(v)
        if np.issubdtype(v.dtype, np.floating):
            assert not np.any(np.isnan(v))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_under_jit_and_vmap_with_its_defaults(name):
    kw = _required(name)
    run = lambda key: handlers.trace(handlers.seed(PROGRAMS[name], key)).get_trace(**kw)  # noqa: E731
    sites = lambda tr: {k: s["value"] for k, s in tr.items() if s["type"] in ("sample", "deterministic")}  # noqa: E731
    one = jax.jit(lambda key: sites(run(key)))(jax.random.key(2))
    many = jax.vmap(lambda key: sites(run(key)))(jax.random.split(jax.random.key(3), 2))
    assert set(one) == set(many)
    for k in one:
        assert np.asarray(many[k]).shape == (2,) + np.asarray(one[k]).shape


def test_exact_ncrp_hdp_takes_the_truncated_program_when_traced():
    """Left without capacities, `ncrp_hdp` runs the exact process on a concrete key and the
    truncated program (``max_children = min(10, N)``, ``max_components = 50``) on a traced one;
    a traced value on the exact path is a ``ValueError`` naming the capacities."""
    from jaxhc.models import ncrp_hdp as NH

    exact = handlers.trace(handlers.seed(NH.ncrp_hdp, 0)).get_trace(num_points=4, dim=2, depth=2)
    assert "x_3" in exact and "u_root" not in exact
    out = Predictive(NH.ncrp_hdp, num_samples=2)(jax.random.key(0), num_points=4, dim=2, depth=2)
    assert out["counts"].shape == (2, 1 + 4 + 16) and out["theta"].shape == (2, NH.TRACED_MAX_COMPONENTS, 2)
    with pytest.raises(ValueError, match="max_children and max_components"):  # no seed: a key-less trace
        jax.jit(lambda u: handlers.substitute(NH.ncrp_hdp, data={"u_root_0": u})(num_points=3, dim=1, epsilon=0.9).X)(
            0.5
        )


def test_former_positional_orders_still_work_with_a_deprecation_warning():
    from jaxhc.models import cdpm, dpm, ncrp_hdp, pydt

    bern = jaxhc.BetaBernoulli(np.ones(2), np.ones(2))
    X = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    cases = [
        (dpm.dpm, (X, bern, 1.3), dict(X=X, component=bern, alpha=1.3)),
        (cdpm.cdpm, (None, bern, 1.3, 3, 2), dict(component=bern, alpha=1.3, num_points=3, dim=2)),
        (pydt.pydt, (3, 2), dict(num_points=3, dim=2)),
        (ncrp_hdp.ncrp_hdp, (3, 2, 2), dict(num_points=3, dim=2, depth=2)),
        (ncrp_hdp.ncrp_hdp_truncated, (3, 2, 2), dict(num_points=3, dim=2, depth=2)),
    ]
    for prog, args, kw in cases:
        with pytest.warns(DeprecationWarning, match="keywords"):
            old = handlers.seed(prog, 7)(*args)
        new = handlers.seed(prog, 7)(**kw)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), old, new)
    with pytest.warns(DeprecationWarning, match="num_rows= is deprecated, use num_points="):
        handlers.seed(dpm.dpm, 0)(component=bern, num_rows=3)
    with pytest.raises(TypeError, match="multiple values for argument 'X'"):
        dpm.dpm(X, X=X, component=bern)
