"""The commands of ``runstore`` that the package does in Python (``cli/commands.tsv`` names each
one's function): the exports, ``import tar`` and ``plan`` (:mod:`.exports`), ``status``,
``watch`` and ``report`` (one module each), and what they share (:mod:`._common`: the exit
codes, the global flags, opening a store, printing what a store holds). A front end: nothing
else in the package imports it.
"""
