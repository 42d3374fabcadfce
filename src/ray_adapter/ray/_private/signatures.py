"""Checking the arguments of ``.remote()`` calls against the target's signature."""


class ArgumentChecker:
    """Checks call arguments against a signature, as Ray does at ``.remote()`` (a wrong call
    raises TypeError there, not later in the worker). Calls with positional arguments only
    are checked by counting them; anything else binds the signature (which also writes
    Python's exact error)."""

    __slots__ = ("sig", "min_args", "max_args")

    def __init__(self, sig):
        import inspect

        self.sig = sig
        self.min_args = self.max_args = None  # None: no counting shortcut for this signature
        if sig is None:
            return
        params = list(sig.parameters.values())
        if any(p.kind is p.KEYWORD_ONLY and p.default is inspect.Parameter.empty for p in params):
            return  # a required keyword-only parameter: always bind
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.min_args = sum(1 for p in positional if p.default is inspect.Parameter.empty)
        has_var = any(p.kind is p.VAR_POSITIONAL for p in params)
        self.max_args = float("inf") if has_var else len(positional)

    def check(self, args, kwargs):
        if self.sig is None:
            return
        if not kwargs and self.min_args is not None and self.min_args <= len(args) <= self.max_args:
            return
        self.sig.bind(*args, **kwargs)


def checker_for(target, drop_self=False):
    """An :class:`ArgumentChecker` for ``target`` (one with nothing to check when it has no
    signature: builtins and some C callables)."""
    import inspect

    try:
        sig = inspect.signature(target)
        if drop_self:
            sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    except (TypeError, ValueError, AttributeError):
        sig = None
    return ArgumentChecker(sig)
