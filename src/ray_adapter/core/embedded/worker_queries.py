"""The cluster-state half of :class:`~ray_adapter.core.embedded.worker_core.WorkerCore`: nodes,
resources, placement groups and State API records, each a query answered by the driver
(``QueryReq``; see ``service.QUERIES``). Mixed into WorkerCore, whose ``_query`` / ``_own`` /
``wait`` / ``get`` it uses; it keeps no state of its own, so it is safe from any thread."""
from ray_adapter.core import errors


class ClusterQueriesMixin:
    # -- cluster state -----------------------------------------------------------------------
    def nodes(self):
        return self._query("nodes")

    def cluster_resources(self):
        return self._query("cluster_resources")

    def available_resources(self):
        return self._query("available_resources")

    # -- placement groups, state -------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None):
        return self._query("create_placement_group", bundles, strategy, name, lifetime,
                           label_selectors, self._worker.actor_id)

    def remove_placement_group(self, placement_group_id):
        return self._query("remove_placement_group", placement_group_id)

    def placement_group_table(self, placement_group_id):
        return self._query("placement_group_table", placement_group_id)

    def placement_group_ready(self, placement_group_id, value):
        return self._own([self._query("placement_group_ready", placement_group_id, value)])[0]

    def wait_placement_group(self, placement_group_id, timeout):
        # The driver never blocks a worker's reader: wait on a ready() object here instead.
        oid = self.placement_group_ready(placement_group_id, None)
        try:
            ready, _ = self.wait([oid], 1, timeout)
            if not ready:
                return False
            try:
                self.get([oid], 0)
            except errors.PlacementGroupRemoved:
                raise
            except errors.CoreError:
                return False
            return True
        finally:
            self.remove_local_reference(oid)

    def captured_placement_group(self):
        a = self._worker.assignment
        if a is not None and a.capture and a.group_id:
            return a.group_id, a.bundle_index
        return None

    def state(self, kind):
        return self._query("state", kind)

    def resources_per_node(self, which):
        return self._query("resources_per_node", which)

    def object_store_stats(self):
        return self._query("object_store_stats")
