"""Built-in adapters (installed as ``recallbench.adapters``).

Importing this package registers them.  Modules that wrap optional libraries
(mamba-ssm, flash-linear-attention) import those libraries only when a model
is built, so a missing library shows up as "unavailable", never as an import error.
"""
from . import attention, designed, fla_layers, linear_mamba, mamba, mamba2, mamba_ladder  # noqa: F401
