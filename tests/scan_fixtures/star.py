"""Star imports bind the matrix's names of the module."""
from ray.util.placement_group import *
from ray.exceptions import *

group = placement_group([{"CPU": 1}])
remove_placement_group(group)
try:
    pass
except RayTaskError:
    pass
