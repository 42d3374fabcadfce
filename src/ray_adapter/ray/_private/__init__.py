"""``ray._private``: the private names real workloads import (kept importable)."""
