"""`jaxhc.enable_compilation_cache`: the default folder, bad paths, and (in one fresh
process, since the cache is process-wide JAX configuration) that importing jaxhc changes no
JAX setting, that an existing configuration is kept, and that an explicit folder is created
and filled by a jitted call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import jaxhc
from jaxhc._internal.cache import default_cache_dir

_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import jax
    before = {k: repr(v) for k, v in jax.config.values.items()}
    import jaxhc
    after = {k: repr(v) for k, v in jax.config.values.items()}
    changed = sorted(k for k in before if before[k] != after.get(k))
    unset = jax.config.jax_compilation_cache_dir
    pre, new = sys.argv[1], sys.argv[2]
    jax.config.update("jax_compilation_cache_dir", pre)  # as a user or tests/conftest.py does
    kept = jaxhc.enable_compilation_cache()
    kept_cfg = jax.config.jax_compilation_cache_dir
    used = jaxhc.enable_compilation_cache(new)
    cfg = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
        jax.config.jax_persistent_cache_min_entry_size_bytes,
    )
    jax.block_until_ready(jax.jit(lambda x: x * 3.0 + 1.0)(jax.numpy.arange(4.0)))
    print("RESULT " + json.dumps(dict(changed=changed, unset=unset, kept=kept, kept_cfg=kept_cfg,
                                      used=used, cfg=cfg, entries=sorted(os.listdir(new)))))
    """
)


def test_import_changes_nothing_and_the_cache_fills_in_a_fresh_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "JAXHC_"))}
    pre, new = tmp_path / "pre", tmp_path / "made" / "here" / "xla"
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(pre), str(new)], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert res["changed"] == [], f"import jaxhc changed JAX settings: {res['changed']}"
    assert res["unset"] is None
    # path=None keeps the folder JAX was configured with
    assert res["kept"] == str(pre) and res["kept_cfg"] == str(pre)
    # an explicit path wins: created, configured with thresholds 0, and filled by a jitted call
    assert res["used"] == str(new) and new.is_dir()
    assert res["cfg"] == [str(new), 0.0, 0]
    assert res["entries"], "nothing was written to the compilation cache"
    assert not pre.exists()


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXHC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert default_cache_dir() == str(tmp_path / "xdg" / "jaxhc" / "xla")
    assert default_cache_dir().endswith(os.path.join("jaxhc", "xla"))
    monkeypatch.setenv("JAXHC_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == str(tmp_path / "mine")


def test_switched_off_by_the_environment(monkeypatch, tmp_path):
    import jax

    monkeypatch.setenv("JAXHC_NO_COMPILATION_CACHE", "1")
    before = jax.config.jax_compilation_cache_dir
    assert jaxhc.enable_compilation_cache(tmp_path / "x") is None
    assert jax.config.jax_compilation_cache_dir == before and not (tmp_path / "x").exists()


def test_bad_paths(tmp_path, monkeypatch):
    import jax

    monkeypatch.delenv("JAXHC_NO_COMPILATION_CACHE", raising=False)  # checked before the folder
    before = jax.config.jax_compilation_cache_dir
    for bad in (3, b"/tmp/x", ["a"]):
        with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
            jaxhc.enable_compilation_cache(bad)
    with pytest.raises(ValueError, match="path must name a folder"):
        jaxhc.enable_compilation_cache("")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ValueError, match="path: cannot create the compilation cache folder"):
        jaxhc.enable_compilation_cache(blocker / "xla")
    with pytest.raises(ValueError, match="path: cannot create"):
        jaxhc.enable_compilation_cache(str(blocker))
    assert jax.config.jax_compilation_cache_dir == before
