"""MAP trees read from backpointer tables many problems at a time
(`jaxhc.trellis.compact.children_from_backpointers`) against the one-problem walk
(`tree_from_backpointers`), on random tables of every size up to 8 and on solved batches."""

from __future__ import annotations

import numpy as np
import pytest

from jaxhc import trellis
from jaxhc.trellis import batch as trellis_batch
from jaxhc.trellis.compact import children_from_backpointers, children_from_queue, compact_solution, map_queue_device
from jaxhc.trellis.exact import tree_from_backpointers


def _random_tables(rng, k, n):
    """``[k, 2^n]`` tables whose every subset of 2+ elements points at a random proper
    non-empty subset of itself (any such table is a valid backpointer table)."""
    bp = np.zeros((k, 1 << n), np.int64)
    for S in range(1, 1 << n):
        bits = [i for i in range(n) if S >> i & 1]
        if len(bits) < 2:
            continue
        for j in range(k):
            pick = rng.integers(0, 2, len(bits))
            if pick.all() or not pick.any():
                pick[rng.integers(len(bits))] ^= 1
            bp[j, S] = sum(1 << b for b, p in zip(bits, pick) if p)
    return bp


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_children_equal_the_one_problem_walk(n):
    rng = np.random.default_rng(n)
    bp = _random_tables(rng, 25, n)
    got = children_from_backpointers(bp, n)
    assert got.shape == (25, max(n - 1, 0), 2)
    for j in range(25):
        assert np.array_equal(got[j], tree_from_backpointers(bp[j], n).children), j


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_device_queue_reads_the_same_trees(n):
    """`map_queue_device` (the MAP trees read on an accelerator) gives the host walk's trees
    from random valid tables, flat or ``[k, 2^n]``, and flags a corrupt table's problem."""
    rng = np.random.default_rng(10 + n)
    bp = _random_tables(rng, 25, n).astype(np.int32)
    Q, child_at, bad = map_queue_device(bp.reshape(-1), n)
    assert not np.asarray(bad).any()
    assert np.array_equal(
        children_from_queue(np.asarray(Q), np.asarray(child_at), n), children_from_backpointers(bp, n)
    )
    bp[3, (1 << n) - 1] = 0  # problem 3's root splits into nothing
    bp[7, (1 << n) - 1] |= 1 << n  # problem 7's root has a child outside its set
    Q, child_at, bad = (np.asarray(x) for x in map_queue_device(bp, n))
    assert np.flatnonzero(bad).tolist() == [3, 7]
    with pytest.raises(ValueError, match="problem 13 has no valid split"):
        children_from_queue(Q, child_at, n, bad, np.arange(10, 35))


def test_batch_trees_read_on_the_device_equal_the_host_walk(monkeypatch):
    """The compact path with the trees read on the device (what an accelerator runs) returns
    the same trees as on the host."""
    rng = np.random.default_rng(4)
    n_leaves = rng.integers(1, 8, 40)
    leaves = np.zeros((40, 7, 7))
    for b, n in enumerate(n_leaves):
        a = rng.normal(size=(n, n))
        leaves[b, :n, :n] = (a + a.T) / 2
    e = trellis.DasguptaEnergy(1.0)
    host = trellis.solve_batch(e, leaves, n_leaves)
    monkeypatch.setattr(trellis_batch, "_TREES_ON_DEVICE", True)
    dev = trellis.solve_batch(e, leaves, n_leaves)
    np.testing.assert_array_equal(np.asarray(dev.map_children), np.asarray(host.map_children))
    np.testing.assert_allclose(np.asarray(dev.log_z), np.asarray(host.log_z), rtol=1e-12)


def test_corrupt_tables_raise():
    bp = _random_tables(np.random.default_rng(0), 3, 4)
    bp[1, 15] = 0  # the root of problem 1 splits into nothing
    with pytest.raises(ValueError, match="problem 1"):
        children_from_backpointers(bp, 4)
    bp[1, 15] = 16 | 1  # a child outside the set
    with pytest.raises(ValueError, match="problem 1"):
        children_from_backpointers(bp, 4)
    # rows of a larger batch: the problem named by its batch index
    with pytest.raises(ValueError, match="problem 17"):
        children_from_backpointers(bp, 4, problems=np.array([5, 17, 30]))
    with pytest.raises(ValueError, match="shape"):
        children_from_backpointers(bp[:, :8], 4)


def test_compact_solution_of_grouped_tables_with_marginals():
    """Compact answers (trees and their clusters' marginals) of a grouped solve with
    marginals, against each problem's single `solve`."""
    rng = np.random.default_rng(3)
    nl = np.array([1, 2, 5, 4, 5, 3])
    P = rng.normal(size=(len(nl), 5, 2))
    X = np.exp(-((P[:, :, None] - P[:, None, :]) ** 2).sum(-1))  # symmetric affinities
    e = trellis.DasguptaEnergy()
    sol = trellis.solve_batch(e, X, nl, marginals=True, tables=True)
    c = compact_solution(sol)
    for b, n in enumerate(nl):
        single = trellis.solve(e, X[b, :n, :n], marginals=True)
        if n < 2:
            continue
        assert np.array_equal(c.map_children[b, : n - 1], single.map_tree.children)
        masks = single.map_tree.leaf_sets()[n:].astype(np.int64) @ (1 << np.arange(n))
        np.testing.assert_allclose(c.map_log_marginals[b, : n - 1], np.asarray(single.log_marginals)[masks], rtol=1e-10)
