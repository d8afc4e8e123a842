"""A cached run prints no C++ log lines of XLA (issue 42, item 6): loading an executable from
JAX's persistent cache logs a warning per executable, and on AMD Zen 4 hosts a false
``cpu_aot_loader`` error (openxla/xla issue 44565); `jaxhc.enable_compilation_cache` silences
them when the folder's executables were compiled on this machine's CPU."""

import os
import re
import subprocess
import sys

import numpy as np

from jaxhc._internal.cache import HOST_MARKER, host_cpu_signature, quiet_cache_loads

# absl's C++ log prefix: severity letter, MMDD, time, thread id, file:line]
CPP_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.]+:\d+\]", re.M)


def _env():
    env = dict(os.environ)
    for k in ("TF_CPP_MIN_LOG_LEVEL", "JAX_COMPILATION_CACHE_DIR", "JAXHC_NO_COMPILATION_CACHE"):
        env.pop(k, None)
    return env


def test_second_cli_run_prints_no_xla_log_lines(tmp_path):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(6, 2)), rng.normal(5.0, 1.0, size=(6, 2))])
    csv = tmp_path / "two.csv"
    np.savetxt(csv, X, delimiter=",")
    cache = tmp_path / "cache"
    argv = [sys.executable, "-m", "jaxhc", "bhc", str(csv), "--component", "niw", "--fixed-prior"]
    argv += ["--cache-dir", str(cache), "--out", str(tmp_path / "out"), "--no-progress"]
    runs = [subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "cpu_aot_loader" not in r.stderr and not CPP_LOG.search(r.stderr), r.stderr[-2000:]
    assert runs[0].stdout.splitlines()[-1] == runs[1].stdout.splitlines()[-1]
    entries = [p for p in cache.iterdir() if p.name != HOST_MARKER]
    assert entries, "nothing was cached"
    assert (cache / HOST_MARKER).read_text().strip() == host_cpu_signature()


def test_a_folder_from_another_cpu_is_not_silenced(tmp_path):
    """The lines can be real when the folder was filled on a different CPU: then they stay."""
    (tmp_path / HOST_MARKER).write_text("0123456789abcdef\n")
    assert not quiet_cache_loads(str(tmp_path))
    assert (tmp_path / HOST_MARKER).read_text().strip() == "0123456789abcdef"
