"""``ray.experimental.state``: Ray's deprecated alias package of ``ray.util.state``."""
