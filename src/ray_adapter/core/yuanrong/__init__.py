"""The yuanrong backend: the runtime core on openYuanrong's SDK (``yr``).

``backend`` runs in the driver; ``shell`` is what runs inside Yuanrong (task runner, actor shell).
"""
