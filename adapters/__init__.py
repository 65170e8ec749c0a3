"""Built-in adapters (installed as ``recallbench.adapters``).

Importing this package registers them.  Modules that wrap optional libraries
(mamba-ssm, flash-linear-attention) import those libraries only when a model
is built, so a missing library shows up as "unavailable", never as an import error.
"""
from . import attention, designed, linear_mamba  # noqa: F401  (registration side effects)
