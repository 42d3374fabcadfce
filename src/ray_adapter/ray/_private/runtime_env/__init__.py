"""``ray._private.runtime_env``: what Ray's runtime-env internals expose that programs import
(:mod:`.constants`, :mod:`.packaging`), and the adapter's own checks of runtime envs
(:mod:`.validation`)."""
