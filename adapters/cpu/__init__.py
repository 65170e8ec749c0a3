"""Pure-torch stand-ins for the GPU kernels of the libraries the adapters wrap.

One pair of modules per library: ``<library>_kernels`` (and ``fla_modules``) hold the torch
functions, ``<library>_swaps`` the table of which library name gets which of them, as a
:class:`recallbench.adapters.kernel_swap.SwapSet` (the one swap mechanism).
``mamba_ssm_import`` makes mamba-ssm importable where its CUDA extension was not built.
"""
