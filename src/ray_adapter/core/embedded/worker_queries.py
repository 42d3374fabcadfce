"""The cluster-state half of :class:`~ray_adapter.core.embedded.worker_core.WorkerCore`: nodes,
resources, placement groups and State API records, each a query answered by the driver
(one ``protocol.QUERIES`` message each; see ``service.ANSWERS``). Mixed into WorkerCore, whose ``_query`` / ``_own`` /
``wait`` / ``get`` it uses; it keeps no state of its own, so it is safe from any thread."""
from ray_adapter.core import errors, serialization
from ray_adapter.core.embedded import protocol
from ray_adapter.core.embedded.protocol import to_payload


class ClusterQueriesMixin:
    # -- cluster state -----------------------------------------------------------------------
    def nodes(self):
        return self._query(protocol.NodesQuery)

    def cluster_resources(self):
        return self._query(protocol.ClusterResourcesQuery)

    def available_resources(self):
        return self._query(protocol.AvailableResourcesQuery)

    # -- placement groups, state -------------------------------------------------------------
    def create_placement_group(self, bundles, strategy, name, lifetime, label_selectors=None):
        return self._query(protocol.CreatePlacementGroupQuery, bundles=bundles, strategy=strategy,
                           name=name, lifetime=lifetime, label_selectors=label_selectors,
                           creator_actor=self._worker.actor_id)

    def remove_placement_group(self, placement_group_id):
        return self._query(protocol.RemovePlacementGroupQuery, placement_group_id=placement_group_id)

    def placement_group_table(self, placement_group_id):
        return self._query(protocol.PlacementGroupTableQuery, placement_group_id=placement_group_id)

    def placement_group_ready(self, placement_group_id, value):
        buffers = []
        payload = to_payload(serialization.dumps(value), buffers)
        return self._own([self._query(protocol.PlacementGroupReadyQuery, buffers,
                                      placement_group_id=placement_group_id, value=payload)])[0]

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
        return self._query(protocol.StateQuery, kind=kind)

    def resources_per_node(self, which):
        return self._query(protocol.ResourcesPerNodeQuery, which=which)

    def object_store_stats(self):
        return self._query(protocol.ObjectStoreStatsQuery)
