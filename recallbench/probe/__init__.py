"""Mechanistic probes of a trained recall circuit (the paper's §3): invariant operators,
the conv's copy and shift, and the state read back as a key-value table."""
