"""The data filter's per-row work on Ray Data (``DataFilterConfig.ray_workers`` > 0).

The input table is cut into pieces (a Parquet row group, or a slice of at most ``PIECE_ROWS``
rows of one), and ``map_batches`` runs ``RowWork`` on each piece in up to ``ray_workers``
concurrent tasks, returning its ``Features`` as Arrow columns (``row_work.to_arrow``). The
stage's process reads the same table batch by batch, exactly as the streaming path does, and
pairs each batch with the next rows of features, in order (``preserve_order``); the dedup
decisions are then made there, over the same batches, so the output is identical.

Ray: connects to ``$RAY_ADDRESS`` when set, else starts a loopback one with ``ray_workers`` CPUs
(``compass.rl.ray_cluster.ensure_ray``). The tasks read the table from the artifact's local
path (for a remote store, the stage's verified download): on a cluster of several machines that
path must be on a filesystem they all mount.
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from artifacts_schema import conform
from compass.store.layout import TABLE_FILE
from compass.store.store import Artifact
from stages.data_filter.config import DataFilterConfig
from stages.data_filter.row_work import Features, RowWork, from_arrow, to_arrow

PIECE_ROWS = 65_536   # rows a task reads and works on at a time (a piece of a larger row group)


def pieces(path: str, piece_rows: int = PIECE_ROWS) -> list[dict]:
    """(row group, start, stop) covering the table in order."""
    meta = pq.ParquetFile(path).metadata
    return [{"row_group": g, "start": lo, "stop": min(lo + piece_rows, meta.row_group(g).num_rows)}
            for g in range(meta.num_row_groups) for lo in range(0, meta.row_group(g).num_rows, piece_rows)]


def features_of_pieces(items: pa.Table, path: str, kind: str, uri: str, work: RowWork, batch_rows: int) -> pa.Table:
    """What a Ray task runs: read its pieces, conform them to the artifact's schema as the stage's
    reader does, and do the per-row work in batches of ``batch_rows``."""
    pf = pq.ParquetFile(path)
    out = []
    for g, lo, hi in zip(*(items.column(c).to_pylist() for c in ("row_group", "start", "stop"))):
        tbl = conform(pf.read_row_group(g).slice(lo, hi - lo), kind, uri)
        out.extend(to_arrow(work(b)) for b in tbl.to_batches(max_chunksize=batch_rows))
    return pa.concat_tables(out)


def ray_features(source: Artifact, work: RowWork, cfg: DataFilterConfig) -> Iterator[tuple[pa.RecordBatch, Features]]:
    """(batch, its features) for each batch of ``source.iter_batches(cfg.batch_rows)``."""
    from compass.rl.ray_cluster import ensure_ray   # sets Ray's environment before ``import ray``
    ensure_ray(num_cpus=cfg.ray_workers)
    import ray

    path = str(source.local_path(TABLE_FILE))
    items = pieces(path)
    ctx = ray.data.DataContext.get_current()
    before, ctx.execution_options.preserve_order = ctx.execution_options.preserve_order, True
    try:
        ds = ray.data.from_items(items, override_num_blocks=max(len(items), 1)).map_batches(
            features_of_pieces, batch_size=1, batch_format="pyarrow", concurrency=cfg.ray_workers, num_cpus=1,
            fn_kwargs={"path": path, "kind": source.kind, "uri": source.uri, "work": work,
                       "batch_rows": cfg.batch_rows})
        yield from _pair(source.iter_batches(batch_size=cfg.batch_rows),
                         ds.iter_batches(batch_size=None, batch_format="pyarrow"), cfg.minhash_num_perm, source.uri)
    finally:
        ctx.execution_options.preserve_order = before


def _pair(batches, feature_tables, num_perm: int, uri: str) -> Iterator[tuple[pa.RecordBatch, Features]]:
    """Cut the stream of feature rows to the batches' sizes; every row must have exactly one."""
    feature_tables = iter(feature_tables)
    buf: list[pa.Table] = []
    have = 0
    for batch in batches:
        while have < batch.num_rows:
            t = next(feature_tables, None)
            if t is None:
                raise RuntimeError(f"data_filter: Ray workers returned {have} rows of features short of the "
                                   f"rows of {uri}")
            buf.append(t)
            have += t.num_rows
        tbl = pa.concat_tables(buf)
        yield batch, from_arrow(tbl.slice(0, batch.num_rows), num_perm)
        buf, have = [tbl.slice(batch.num_rows)], have - batch.num_rows
    extra = have + sum(t.num_rows for t in feature_tables)
    if extra:
        raise RuntimeError(f"data_filter: Ray workers returned {extra} rows of features more than {uri} has")
