"""Dendrogram figures (matplotlib, imported lazily; works under the headless Agg backend).

* `plot_dendrogram` - any `jaxhc.tree.Tree` drawn in the layout of
  ``scipy.cluster.hierarchy.dendrogram`` on ``tree.to_linkage()`` (computed here without
  scipy's recursion, so trees of any depth draw); leaves optionally named and coloured by
  class.
* `plot_bhc` - a `jaxhc.BHCResult`: merges with ``r_k < 0.5`` are dashed, the others solid;
  links inside one flat cluster of ``result.cut(0.5)`` take that cluster's colour, links
  joining clusters are grey; the title gives the number of clusters.

Both return the ``matplotlib.axes.Axes`` they drew on (its figure is ``ax.figure``). Without
``ax`` a new figure is made with ``pyplot.subplots`` (whatever backend is active; scripts
without a display get Agg, and the ``jaxhc`` CLI selects Agg itself).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["plot_dendrogram", "plot_bhc"]

_MAX_TICK_LABELS = 80  # above this many leaves, leaf names are not drawn


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib; install it with `pip install jaxhc[plot]`") from e
    return plt


def _dendrogram_coords(tree):
    """The layout of ``scipy.cluster.hierarchy.dendrogram(tree.to_linkage())`` (no
    truncation), without its recursion (a tree deeper than ~1000 levels overflows it):
    ``(icoord [n-1, 4], dcoord [n-1, 4], nodes [n-1], leaves [n])``, one row per link in
    scipy's order (post-order, left child first), ``nodes`` the inner node of each link.

    Leaf ``i`` at position ``p`` of the depth-first order is at ``x = 5 + 10 p``; an inner
    node at the mean of its children's ``x`` (as scipy computes it, children first), at the
    height of ``to_linkage``. ``O(n)`` memory.
    """
    n = tree.n_leaves
    order, start, end = tree.leaf_ranges()
    h = np.zeros(2 * n - 1)
    h[n:] = tree.to_linkage()[:, 2]
    x = np.empty(2 * n - 1)
    x[order] = 5.0 + 10.0 * np.arange(n)
    ch = np.asarray(tree.children, np.int64)
    xs = x.tolist()
    for t0 in range(0, n - 1, 1 << 16):  # merges in order: children before parents
        for t, (a, b) in enumerate(ch[t0 : t0 + (1 << 16)].tolist(), start=n + t0):
            xs[t] = (xs[a] + xs[b]) / 2
    x = np.asarray(xs)
    inner = np.arange(n, 2 * n - 1)
    nodes = inner[np.lexsort((end[inner] - start[inner], end[inner]))]  # post-order
    a, b = ch[nodes - n, 0], ch[nodes - n, 1]
    icoord = np.column_stack([x[a], x[a], x[b], x[b]])
    dcoord = np.column_stack([h[a], h[nodes], h[nodes], h[b]])
    return icoord, dcoord, nodes, order


def _top_clusters(tree, p: int):
    """The ``p`` largest clusters reached by undoing merges from the root, the largest
    cluster first (ties: the later merge first): ``(inner [p-1], clusters [p])`` node ids,
    the undone merges and the clusters left."""
    import heapq

    n = tree.n_leaves
    sizes = tree.sizes()
    ch = np.asarray(tree.children, np.int64)
    root = 2 * n - 2
    heap = [(-int(sizes[root]), -root)]
    inner: list = []
    while heap and len(inner) < p - 1:
        _, neg = heapq.heappop(heap)
        node = -neg
        if node < n:  # a single point: nothing to undo (only when p > the leaves left)
            heapq.heappush(heap, (0, neg))
            break
        inner.append(node)
        for c in ch[node - n].tolist():
            heapq.heappush(heap, (-int(sizes[c]), -c))
    return np.asarray(inner, np.int64), np.asarray(sorted(-h[1] for h in heap), np.int64)


def _dendrogram_coords_top(tree, p: int):
    """`_dendrogram_coords` of the tree cut to its top ``p`` clusters (`_top_clusters`),
    as scipy's ``truncate_mode="lastp"`` draws a linkage: the clusters are the leaves of the
    drawing at height 0, in depth-first order, the merges above them at their heights.
    ``leaves`` holds the clusters' node ids. ``O(n)`` memory (the sizes), ``O(p log p)``
    more."""
    n = tree.n_leaves
    inner, _ = _top_clusters(tree, p)
    shown = np.zeros(2 * n - 1, bool)
    shown[inner] = True
    ch = np.asarray(tree.children, np.int64)
    h = np.zeros(2 * n - 1)
    h[n:] = tree.to_linkage()[:, 2]
    x: dict = {}
    y: dict = {}
    leaves: list = []
    links: list = []
    stack = [(2 * n - 2, False)]
    while stack:  # post-order, left child first
        node, expanded = stack.pop()
        if not shown[node]:
            x[node], y[node] = 5.0 + 10.0 * len(leaves), 0.0
            leaves.append(node)
            continue
        a, b = ch[node - n].tolist()
        if not expanded:
            stack += [(node, True), (b, False), (a, False)]
            continue
        x[node], y[node] = (x[a] + x[b]) / 2, float(h[node])
        links.append((node, a, b))
    icoord = np.asarray([[x[a], x[a], x[b], x[b]] for _, a, b in links]).reshape(-1, 4)
    dcoord = np.asarray([[y[a], y[v], y[v], y[b]] for v, a, b in links]).reshape(-1, 4)
    return icoord, dcoord, np.asarray([v for v, _, _ in links], np.int64), np.asarray(leaves, np.int64)


def _check_truncate(truncate, n: int):
    if truncate is None:
        return None
    if isinstance(truncate, bool) or not isinstance(truncate, (int, np.integer)) or truncate < 2:
        raise ValueError(f"truncate must be None or an integer >= 2 (the clusters shown), got {truncate!r}")
    return None if truncate >= n else int(truncate)


def _cluster_leaves(tree, clusters, labels, classes):
    """Tick labels ``"(size)"`` of the shown clusters (or the leaf's own name) and the most
    frequent class of each (for the class strip; None without ``classes``)."""
    n = tree.n_leaves
    order, start, end = tree.leaf_ranges()
    ticks, major = [], []
    for c in clusters.tolist():
        size = int(end[c] - start[c])
        ticks.append(str(labels[c]) if c < n and labels is not None else f"({size})")
        if classes is not None:
            vals, counts = np.unique(np.asarray(classes)[order[start[c] : end[c]]], return_counts=True)
            major.append(vals[np.argmax(counts)])
    return np.asarray(ticks, dtype=object), (None if classes is None else np.asarray(major))


def _new_ax(ax, n_leaves: int):
    if ax is not None:
        return ax
    plt = _pyplot()
    width = float(np.clip(4 + 0.12 * n_leaves, 6, 16))
    _, ax = plt.subplots(figsize=(width, 4.5))
    return ax


def _class_colors(classes):
    """Colour per leaf ``[n]`` and the (class, colour) legend pairs."""
    from matplotlib import colormaps

    values = np.asarray(classes)
    uniq, codes = np.unique(values, return_inverse=True)
    cmap = colormaps["tab10" if uniq.size <= 10 else "tab20"]
    palette = [cmap(i % cmap.N) for i in range(uniq.size)]
    return [palette[c] for c in codes.ravel()], list(zip(uniq.tolist(), palette))


def _check_tree(tree):
    from .tree import Tree

    if not isinstance(tree, Tree):
        raise TypeError(f"tree must be a jaxhc.tree.Tree, got {type(tree).__name__}")
    tree.validate()
    return tree


def _check_leaf_array(x, n: int, name: str):
    if x is None:
        return None
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have one entry per leaf ({n}), got shape {arr.shape}")
    return arr


def _node_clusters(tree, flat) -> np.ndarray:
    """``[2n-1]``: the flat cluster of every node whose leaves all share one (``-1`` for the
    others and for the leaves), from the depth-first leaf ranges in ``O(n)`` memory: the
    labels along the leaf order do not change inside such a node's range."""
    n = tree.n_leaves
    order, start, end = tree.leaf_ranges()
    lab = np.asarray(flat)[order]
    changes = np.zeros(n, np.int64)
    changes[1:] = np.cumsum(lab[1:] != lab[:-1])  # label changes up to each position
    inner = slice(n, 2 * n - 1)
    uniform = changes[end[inner] - 1] == changes[start[inner]]
    out = np.full(2 * n - 1, -1)
    out[inner] = np.where(uniform, lab[start[inner]], -1)
    return out


def _decorate_leaves(ax, order, labels, colors_by, orientation_bottom: bool = True):
    """Leaf tick labels (small trees) and a coloured class strip under the leaves."""
    n = len(order)
    xs = 5.0 + 10.0 * np.arange(n)  # scipy's leaf positions
    if labels is not None and n <= _MAX_TICK_LABELS:
        ax.set_xticks(xs)
        ax.set_xticklabels([str(labels[i]) for i in order], rotation=90, fontsize=7)
    else:
        ax.set_xticks([])
    if colors_by is not None:
        cols, legend = _class_colors(colors_by)
        y0, y1 = ax.get_ylim()
        pad = 0.04 * (y1 - y0)
        ax.scatter(
            xs,
            np.full(n, y0 - pad),
            c=[cols[i] for i in order],
            marker="s",
            s=max(4.0, min(30.0, 2000.0 / n)),
            clip_on=False,
            zorder=3,
            linewidths=0,
        )
        ax.set_ylim(y0 - 2 * pad, y1)
        if labels is not None and n <= _MAX_TICK_LABELS:
            for tick, i in zip(ax.get_xticklabels(), order):
                tick.set_color(cols[i])
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], marker="s", linestyle="", color=c, label=str(v)) for v, c in legend]
        if len(handles) <= 20:
            ax.legend(
                handles=handles,
                title="class",
                fontsize=7,
                title_fontsize=8,
                loc="upper left",
                bbox_to_anchor=(1.005, 1.0),
                frameon=False,
                borderaxespad=0.0,
            )


def plot_dendrogram(
    tree,
    labels: Optional[Sequence] = None,
    ax=None,
    colors_by: Optional[Sequence] = None,
    title: Optional[str] = None,
    truncate: Optional[int] = None,
):
    """Draws ``tree`` as a dendrogram; returns the matplotlib ``Axes``.

    Args:
      tree: a `jaxhc.tree.Tree` (heights from ``tree.heights``, else the merge order).
      labels: optional leaf names ``[n]`` (drawn when ``n <= 80``).
      ax: axes to draw on (default: a new figure).
      colors_by: optional class of every leaf ``[n]``; leaves get a coloured marker (and
        coloured names) per class, with a legend.
      title: optional axes title.
      truncate: draw only the top ``truncate`` clusters (the largest first, undoing merges
        from the root), each as one leaf at height 0 named ``"(size)"`` and marked with its
        most frequent class, as scipy's ``truncate_mode="lastp"`` draws the last merges
        (trees of 10^6 leaves draw this way). None (default): every leaf.
    """
    tree = _check_tree(tree)
    n = tree.n_leaves
    labels = _check_leaf_array(labels, n, "labels")
    colors_by = _check_leaf_array(colors_by, n, "colors_by")
    p = _check_truncate(truncate, n)
    ax = _new_ax(ax, n if p is None else p)
    if n < 2:
        ax.set_title(title or "single leaf")
        return ax
    from matplotlib.collections import LineCollection

    if p is None:
        icoord, dcoord, _, leaves = _dendrogram_coords(tree)
    else:
        icoord, dcoord, _, clusters = _dendrogram_coords_top(tree, p)
        labels, colors_by = _cluster_leaves(tree, clusters, labels, colors_by)
        leaves, n = np.arange(p), p
    # drawn as scipy's dendrogram draws (one line collection, no tick marks), without its
    # recursion
    ax.add_collection(LineCollection(list(np.stack([icoord, dcoord], axis=-1)), colors=("0.25",)))
    top = float(dcoord.max())
    ax.set_xlim(0, 10 * n)
    ax.set_ylim(0, top * 1.05 if top > 0 else 1.0)
    ax.xaxis.set_ticks_position("bottom")
    for line in ax.get_xticklines():
        line.set_visible(False)
    _decorate_leaves(ax, leaves, labels, colors_by)
    ax.set_ylabel("height" if tree.heights is not None else "merge order")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title)
    return ax


def plot_bhc(
    result,
    labels: Optional[Sequence] = None,
    ax=None,
    colors_by: Optional[Sequence] = None,
    title: Optional[str] = None,
    threshold: float = 0.5,
    truncate: Optional[int] = None,
):
    """Draws a BHC tree: merges with ``r_k < threshold`` dashed, flat clusters coloured.

    Args:
      result: a `jaxhc.BHCResult` (uses ``result.tree`` and ``result.log_r``).
      labels: optional leaf names ``[n]`` (drawn when ``n <= 80``).
      ax: axes to draw on (default: a new figure).
      colors_by: optional class of every leaf ``[n]`` (e.g. true labels) for a class strip.
      title: axes title; the default reports ``n``, the cut and ``log p(D|T)``.
      threshold: the cut on ``r_k`` (0.5 in the paper).
      truncate: draw only the top ``truncate`` clusters of the tree (as `plot_dendrogram`'s
        ``truncate``; the ``jaxhc bhc`` command draws 50 above 2000 points). None: every
        leaf.

    Returns:
      The ``Axes``; the links are ``Line2D`` objects in ``ax.lines`` (cut merges have
      linestyle ``"--"``).
    """
    tree = _check_tree(result.tree)
    n = tree.n_leaves
    labels = _check_leaf_array(labels, n, "labels")
    colors_by = _check_leaf_array(colors_by, n, "colors_by")
    p = _check_truncate(truncate, n)
    r = np.exp(np.asarray(result.log_r, dtype=np.float64))
    flat = result.cut(threshold)
    k = int(flat.max()) + 1
    ax = _new_ax(ax, n if p is None else p)
    if title is None:
        title = (
            f"BHC: {n} points, {k} cluster{'s' if k != 1 else ''} at r < {threshold:g}, "
            f"log p(D|T) = {float(result.log_evidence):.2f}" + ("" if p is None else f" (top {p} clusters drawn)")
        )
    if n < 2:
        ax.set_title(title)
        return ax

    # colour of every inner node: its flat cluster's colour if it lies inside one
    from matplotlib import colormaps

    cmap = colormaps["Dark2"]  # distinct from the tab10 class strip
    node_cluster = _node_clusters(tree, flat)

    if p is None:
        icoord, dcoord, nodes, leaves = _dendrogram_coords(tree)
    else:
        icoord, dcoord, nodes, clusters = _dendrogram_coords_top(tree, p)
        labels, colors_by = _cluster_leaves(tree, clusters, labels, colors_by)
        leaves = np.arange(p)
    for xs, ys, node in zip(icoord.tolist(), dcoord.tolist(), nodes.tolist()):
        c = node_cluster[node]
        color = cmap(c % cmap.N) if c >= 0 else "0.45"
        dashed = r[node - n] < threshold
        ax.plot(xs, ys, color=color, linestyle="--" if dashed else "-", linewidth=1.0 if dashed else 1.2)
    ax.set_xlim(0, 10 * len(leaves))
    top = float(dcoord.max())
    ax.set_ylim(0, top * 1.05 if top > 0 else 1.0)
    _decorate_leaves(ax, leaves, labels, colors_by)
    from matplotlib.lines import Line2D

    link_legend = [
        Line2D([], [], color="0.2", linestyle="-", label=f"r >= {threshold:g}"),
        Line2D([], [], color="0.2", linestyle="--", label=f"r < {threshold:g}"),
    ]
    existing = ax.get_legend()
    ax.legend(
        handles=link_legend, fontsize=7, loc="lower left", bbox_to_anchor=(1.005, 0.0), frameon=False, borderaxespad=0.0
    )
    if existing is not None:  # keep the class legend too
        ax.add_artist(existing)
    ax.set_ylabel("merge order")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, fontsize=10)
    return ax
