"""``ray.scripts``: the package of Ray's command-line tool; only :mod:`.scripts` names that
programs import are served (see the compat matrix)."""
