"""Built-in recall tasks (installed as ``recallbench.tasks``).

Importing this package registers them; each module is one task.
"""
from . import ar, mqar, repeated_keys  # noqa: F401  (registration side effects)
