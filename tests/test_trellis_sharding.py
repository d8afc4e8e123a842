"""`trellis.solve_batch` sharded over several (forced host) devices equals one device.

The device count of XLA's CPU client is fixed when JAX starts, so the check runs in a fresh
interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""

import os
import subprocess
import sys
import textwrap

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = textwrap.dedent(
    """
    import jax
    import numpy as np

    from jaxhc import trellis

    devices = jax.devices()
    assert len(devices) == 4, devices
    assert jax.config.jax_enable_x64

    rng = np.random.default_rng(0)
    # 10 problems on 4 devices: the batch is padded to 12 inside; sizes 2..4 under N_max = 4
    # (padding inside a problem, three per-size groups; one size fewer than 2..5 to compile)
    B, n_max = 10, 4
    n_leaves = np.array([2, 3, 4, 4, 3, 2, 4, 3, 2, 4])
    W = rng.uniform(0.05, 1.0, (B, n_max, n_max))
    W = W + np.transpose(W, (0, 2, 1))
    jets = rng.uniform(-10.0, 10.0, (B, n_max, 4))
    jets[..., 0] = np.sqrt(np.sum(jets[..., 1:] ** 2, axis=-1) + 1.0) + rng.uniform(5.0, 15.0, (B, n_max))

    for energy, leaves in ((trellis.DasguptaEnergy(0.7), W), (trellis.GinkgoEnergy(2.0, 4.0), jets)):
        sharded = trellis.solve_batch(energy, leaves, n_leaves, group_by_size=False, tables=True)
        single = trellis.solve_batch(energy, leaves, n_leaves, devices=[devices[0]], group_by_size=False, tables=True)
        grouped = trellis.solve_batch(energy, leaves, n_leaves, tables=True)  # per-size groups, each sharded
        assert np.asarray(sharded.log_z).shape == (B,)
        assert len(sharded.log_z.sharding.device_set) == 4  # computed on the 4-device mesh
        assert len(single.log_z.sharding.device_set) == 1
        assert np.any(np.isfinite(np.asarray(single.log_z)))
        for field in ("log_z", "map_log_phi", "log_z_table", "map_table"):
            a, b = np.asarray(getattr(sharded, field)), np.asarray(getattr(single, field))
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=field)
            np.testing.assert_allclose(np.asarray(getattr(grouped, field)), b, rtol=1e-12, atol=1e-12, err_msg=field)
        ta, tb = trellis.map_trees(sharded), trellis.map_trees(single)
        assert all(x.same_hierarchy(y) for x, y in zip(ta, tb))
    print("SHARDING-OK")
    """
)


def test_solve_batch_sharded_over_four_devices_equals_one_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["JAX_ENABLE_X64"] = "1"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, cwd=_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "SHARDING-OK" in proc.stdout
