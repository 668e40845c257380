"""runstore inside other tools: Dask (:mod:`runstore.dask`, with the partition planner of
``runstore plan``), Spark (:mod:`runstore.spark`), Ray (:mod:`runstore.ray`), the EMA workbench
(:mod:`runstore.ema`) and ml-instrumentation's collector (:mod:`runstore.mlinstrument`). Each is
importable under its old name too (``runstore.dask`` is ``runstore.integrations.dask``, the same
module object). Above :class:`runstore.Store`: they open stores; nothing below them imports them.
"""
