"""Ray's auto-init APIs start Ray before looking at their arguments (a bad argument still
leaves Ray started; ray.wait([]) starts it too), and the calls that are no such API start
nothing. (Each start of Ray takes seconds: kept to three.)"""
import ray
from ray.util import remove_placement_group

CALLS = [
    ("ray.kill(None)", lambda: ray.kill(None)),
    ("ray.remote(f)", lambda: type(ray.remote(lambda: 1)).__name__),
    ("ray.wait([])", lambda: ray.wait([])),
    ("remove_placement_group(None)", lambda: remove_placement_group(None)),
    ("ray.util.get_node_ip_address()", lambda: type(ray.util.get_node_ip_address())),
]

for label, call in CALLS:
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - what each raises is the point
        outcome = f"{type(e).__name__}: {str(e)[:60]}"
    else:
        outcome = f"returned {result}"
    print(f"{label}: {outcome} | initialized: {ray.is_initialized()}")
    ray.shutdown()
