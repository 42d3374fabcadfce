"""The script a worker started with a runtime env's ``py_executable`` runs
(:mod:`.default_worker`, given by path after the command, as Ray gives its ``default_worker.py``).
"""
