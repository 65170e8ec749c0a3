"""Adapters around flash-linear-attention's real layer classes (``fla.layers``).

One module per architecture or close family, as fla's own layer files:
:mod:`.gla` (gla, simple-gla), :mod:`.retnet`, :mod:`.delta_net` (deltanet,
gated-deltanet), :mod:`.hgrn2`, :mod:`.rwkv6`, :mod:`.linear_attn` (linear-attention,
based), :mod:`.gsa`; :mod:`.base` holds the block, the options and the state counting
they share.  Importing this package registers them.

Config mapping, shared by all adapters (per-adapter exceptions in each class):

* ``d_model`` → ``hidden_size`` (D);  ``n_heads`` → ``num_heads`` (M)
* ``d_state`` → the key dimension per head, N (``head_k_dim``): passed as
  ``expand_k = M·N / D`` or ``head_dim = N``; HGRN2 ``expand_ratio``, Based
  ``feature_dim``, GSA ``num_slots``.
* ``expand`` → the value width: value dim per head P = expand·D / M (``expand_v``),
  so that a layer's state is M·N·P = expand·D·N, the same count as linear-mamba's
  D_in·N.  HGRN2, Based and GSA have no value expansion (P = D/M; GSA's output
  norm is d_model wide, so fla's GSA breaks with expand_v != 1).
* ``d_conv`` → ``use_short_conv = d_conv > 1``, ``conv_size = d_conv`` where the
  layer has a short convolution; ignored by RWKV6 (built-in token shift).  Based and
  LinearAttention have none: for them ``d_conv > 1`` puts a causal depthwise conv of that
  width in front of the layer (:class:`.linear_attn.ConvFront`), as for attention.
* ``options`` → other keyword arguments of the layer, plus the block options
  (:mod:`.base`).

fla is imported only when a model is built or a state size is asked for, so
``import recallbench`` works without it.
"""
from . import delta_net, gla, gsa, hgrn2, linear_attn, retnet, rwkv6  # noqa: F401
