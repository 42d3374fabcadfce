"""``ray.dag.compiled_dag_node``: :class:`CompiledDAG`, what ``dag.experimental_compile()``
gives (mirrors Ray's Compiled Graphs API).

The graph is checked as Ray checks it (actor methods on actors that already exist, an
InputNode), planned (:mod:`._compiled_plan`: which actor runs which nodes, the pipes between
them) and set up once: each actor starts a loop over its nodes (:mod:`._compiled_loop`) and
:meth:`CompiledDAG.execute` writes the input to the pipes of the actors that read it, the
results coming back on pipes read by the caller of ``ray.get`` (:mod:`._compiled_channels`) --
no scheduler, no object store, no runtime thread per step, as Ray's channels skip them. A
graph the pipes cannot carry (actors on another machine, async or generator methods,
ObjectRef arguments, method options; see the compat matrix) runs the same calls on the
classic path at each execution instead, with the same answers. Results come as
:class:`CompiledDAGRef` s: ``ray.get`` (or ``.get()``) once each, as in Ray; with
``enable_asyncio=True``, ``await dag.execute_async(...)`` gives a :class:`CompiledDAGFuture`.
"""
import asyncio
import functools
import itertools

from ray_adapter import gaps
from ray_adapter.ray._private.core_access import core as _ensure_core
from ray_adapter.ray._private import session
from ray_adapter.ray._private.core_access import translated
from ray_adapter.ray.dag._compiled_channels import GraphChannels
from ray_adapter.ray.dag._compiled_plan import plan_graph
from ray_adapter.ray.dag._graph_values import DAGInputData, is_node, walk
from ray_adapter.ray.dag.constants import PARENT_CLASS_NODE_KEY
from ray_adapter.ray.dag.context import DAGContext
from ray_adapter.ray.exceptions import GetTimeoutError, RayChannelError, RayChannelTimeoutError

_NO_INPUT = ("No InputNode found in the DAG: when traversing upwards, no upstream node was "
             "found for {node}.")


def build_compiled_dag(root, enable_asyncio=False, max_inflight_executions=None):
    """Check ``root``'s graph as Ray's compiler does; returns its :class:`CompiledDAG`, set up
    (``max_inflight_executions``: None, ``DAGContext``'s). Each node says what it is by its
    class's ``_compile_role`` (:class:`~.dag_node.DAGNode`), so this module needs none of the
    node modules."""
    nodes = _reachable([root])
    for node in nodes:  # Ray marks the graph's input before checking the rest
        if node._compile_role == "input":
            earlier = node.__dict__.setdefault("_compiled_root", root)
            if earlier is not root:
                raise ValueError("The DAG was compiled more than once. The following two nodes "
                                 f"call `experimental_compile`: (1) {earlier}, (2) {root}")
    for node in nodes:  # as Ray's traversal, before the rest of its checks
        _refuse_nested_nodes(node)
    direct, expected, keywords = _input_parts(nodes)
    has_input = False
    for node in nodes:
        role = node._compile_role
        if role == "function":
            raise NotImplementedError("Compiled DAGs currently only support actor method nodes")
        if role == "class" or (role == "method" and getattr(
                node.get_other_args_to_resolve().get(PARENT_CLASS_NODE_KEY), "_compile_role", None) == "class"):
            raise ValueError("Compiled DAGs can only bind methods to an actor that is already "
                             "created with Actor.remote()")
        if role == "method" and any(is_node(v) for v in node.get_kwargs().values()):
            raise ValueError("Compiled DAG currently does not support binding to other DAG nodes "
                             "as kwargs")
        if role in ("input", "input_attribute"):
            has_input = True
        elif role not in ("method", "outputs"):
            raise NotImplementedError(f"Compiled DAGs do not support {type(node).__name__} nodes")
    if not has_input:
        raise ValueError(_NO_INPUT.format(node=root))
    for node in nodes:
        if node._compile_role == "method" and not any(is_node(a) for a in node.get_args()):
            raise ValueError("Compiled DAGs require each task to take a ray.dag.InputNode or at "
                             f"least one other DAGNode as an input. Invalid task node:\n{node}\n"
                             "Please bind the task to proper DAG nodes.")
    outputs = root.get_args() if root._compile_role == "outputs" else [root]
    if any(getattr(out, "_compile_role", None) != "method" for out in outputs):
        raise AssertionError  # Ray's compiler asserts that every output is a task
    _refuse_what_the_output_does_not_need(nodes, outputs)
    return CompiledDAG(root, enable_asyncio, max_inflight_executions, inputs=(direct, expected, keywords))


def _reachable(starts, downstream=False):
    """The nodes ``starts`` take, at any depth, each once (``downstream``: and the nodes that
    take them: the whole graph they are part of)."""
    found, stack, seen = [], list(starts), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(node._children())
        if downstream:
            stack.extend(node._downstream_nodes)
    return found


def _refuse_what_the_output_does_not_need(needed, outputs):
    """Ray's checks of the whole graph the output is part of (``needed``: the nodes the output
    is computed from): an input attribute that no output needs, and a method node whose result
    nobody takes (a *leaf*: what it raised would never reach the driver), are refused."""
    graph = _reachable(needed, downstream=True)
    keys = sorted({str(n.get_other_args_to_resolve()["key"]) for n in graph
                   if n._compile_role == "input_attribute"})  # Ray's is a set: any order
    used = {str(n.get_other_args_to_resolve()["key"]) for n in needed if n._compile_role == "input_attribute"}
    unused = [key for key in keys if key not in used]
    if unused:
        raise ValueError(
            "Compiled Graph expects input to be accessed using all of attributes "
            f"{', '.join(keys)}, but "
            f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} unused. "
            "Ensure all input attributes are used and contribute to the computation of the "
            "Compiled Graph output.")
    output_ids = {id(node) for node in outputs}
    leaves = [n for n in graph if n._compile_role == "method" and not n._downstream_nodes
              and id(n) not in output_ids]
    if leaves:
        raise ValueError(
            "Compiled DAG doesn't support leaf nodes, i.e., nodes that don't have downstream "
            f"nodes and are not output nodes. There are {len(leaves)} leaf nodes in the DAG. "
            f"Please add the outputs of {[n.get_method_name() for n in leaves]} to the the "
            "MultiOutputNode.")


def _refuse_nested_nodes(node):
    """Ray's refusal of a DAG node inside an argument's container."""
    for arg in node.get_args():
        nested = []
        if not is_node(arg):
            walk(arg, nested)
        if nested:
            raise ValueError(
                f"Found {len(nested)} DAGNodes from the arg {arg} in {node}. Please ensure that "
                "the argument is a single DAGNode and that a DAGNode is not allowed to be placed "
                "inside any type of container.")


def _input_parts(nodes):
    """What ``execute`` must be given, as Ray's compiler reads it from the InputNode's uses:
    ``(InputNode used directly?, positional arguments, keyword names needed)``. Raises
    ValueError for a graph that uses it both directly and by parts."""
    direct, positional, keywords = None, set(), set()
    for node in nodes:
        for arg in list(node.get_args()) + list(node.get_kwargs().values()):
            role = arg._compile_role if is_node(arg) else None
            if role not in ("input", "input_attribute"):
                continue
            if direct is not None and direct != (role == "input"):
                raise ValueError("All tasks must either use InputNode() directly, or they must "
                                 "index to specific args or kwargs.")
            direct = role == "input"
            if not direct:
                key = arg.get_other_args_to_resolve()["key"]
                (positional if isinstance(key, int) else keywords).add(key)
    expected = 1 if direct else (max(positional) + 1 if positional else 0)
    return bool(direct), expected, tuple(sorted(keywords))


class CompiledDAG:
    """A checked actor graph, set up once and run at each :meth:`execute` (mirrors
    ``ray.dag.compiled_dag_node.CompiledDAG``)."""

    _ids = itertools.count()
    _channels = None

    def __init__(self, root, enable_asyncio=False, max_inflight_executions=None, inputs=(True, 1, ())):
        context = DAGContext.get_current()
        # (InputNode used directly?, positional arguments execute takes, keywords it needs)
        self._direct_input, self._positional, self._keywords = inputs
        self._get_timeout = context.get_timeout
        self._teardown_timeout = context.teardown_timeout
        self._root = root
        self._multi = root._compile_role == "outputs"
        self._enable_asyncio = enable_asyncio
        self._executions = itertools.count()
        self._dag_id = f"{next(self._ids):032x}"
        self.is_teardown = False
        plan = plan_graph(root)
        if plan is not None:
            limit = max_inflight_executions or context.max_inflight_executions
            self._channels = GraphChannels.start(plan, limit, self._timeout_message())
            if self._channels is not None:
                session.tie_to_session(self)

    def _timeout_message(self):
        return ("If the execution is expected to take a long time, increase "
                f"RAY_CGRAPH_get_timeout which is currently {self._get_timeout} seconds. "
                "Otherwise, this may indicate that the execution is hanging.")

    def get_id(self):
        return self._dag_id

    def _check_open(self):
        if self.is_teardown:
            raise RayChannelError("Channel closed.")

    def execute(self, *args, **kwargs):
        """Run the graph with this input; a CompiledDAGRef, or a list of them for a
        MultiOutputNode. Raises ``RayChannelError`` after :meth:`teardown`; ``ValueError``
        with ``enable_asyncio=True`` (use :meth:`execute_async`)."""
        if self._enable_asyncio:
            raise ValueError("Use execute_async if enable_asyncio=True")
        return self._submit(args, kwargs, CompiledDAGRef)

    async def execute_async(self, *args, **kwargs):
        """``await dag.execute_async(x)``: a CompiledDAGFuture (a list of them for a
        MultiOutputNode) to await for the result. Needs ``enable_asyncio=True``."""
        if not self._enable_asyncio:
            raise ValueError("Use execute if enable_asyncio=False")
        return self._submit(args, kwargs, CompiledDAGFuture)

    def _check_inputs(self, args, kwargs):
        """Ray's check of ``execute``'s arguments against the InputNode parts the graph uses."""
        if len(args) != self._positional:
            raise ValueError("dag.execute() or dag.execute_async() must be called with "
                             f"{self._positional} positional args, got {len(args)}")
        for key in self._keywords:
            if key not in kwargs:
                raise ValueError(f"dag.execute() or dag.execute_async() must be called with kwarg `{key}`")

    def _submit(self, args, kwargs, kind):
        self._check_open()
        self._check_inputs(args, kwargs)
        if self._channels is not None:
            limit = self._get_timeout
            index = self._channels.submit(args, kwargs, None if limit is None or limit < 0 else limit)
            count = len(self._root.get_args()) if self._multi else 1
            result = [None] * count
        else:
            # The classic executor, given the input as compiled graphs read it: the InputNode is
            # the first positional argument, its parts the arguments by index or keyword.
            given = (args[0],) if self._direct_input else (DAGInputData(*args, **kwargs),)
            index, result = next(self._executions), self._root._run(given, {})
        if self._multi:
            return [kind(self, index, ref, channel) for channel, ref in enumerate(result)]
        return kind(self, index, result, None)

    def _fetch(self, index, channel_index, ref, timeout):
        """One output of execution ``index`` (``ref``: its ObjectRef on the classic path),
        waiting at most ``timeout`` seconds (None: forever); raises what ``ray.get`` raises,
        ``GetTimeoutError`` / ``RayChannelTimeoutError`` when the wait runs out."""
        if self._channels is not None:
            return self._channels.result(index, channel_index or 0, timeout)
        return _get_one(ref, timeout)

    def teardown(self, kill_actors=False):
        """End this compiled graph: later executions raise ``RayChannelError``. With
        ``kill_actors`` its actors are killed too."""
        if self.is_teardown:
            return
        self.is_teardown = True
        if self._channels is not None:
            self._channels.teardown(self._teardown_timeout)
        if kill_actors:
            # The graph's actors (each method node's parent is an actor handle: the compiler
            # refused any other), killed as ``ray.kill(handle)`` does, without restart.
            stack, seen, core = [self._root], set(), _ensure_core()
            while stack:
                node = stack.pop()
                actor_id = getattr(node.get_other_args_to_resolve().get(PARENT_CLASS_NODE_KEY),
                                   "_ray_actor_id", None)
                if actor_id is not None and actor_id not in seen:
                    seen.add(actor_id)
                    with translated:
                        core.kill_actor(actor_id, True)
                stack.extend(node._children())

    def _end_with_session(self):
        """``ray.shutdown()``: the actors' loops end; later executions raise RayChannelError."""
        if not self.is_teardown:
            self._channels.teardown(0)

    def __del__(self):
        channels = self._channels
        if channels is not None and not self.is_teardown:
            channels.close_now()  # the actors' loops see their pipes end

    def visualize(self, *args, **kwargs):
        raise gaps.attribute_gap_error("ray.dag", "CompiledDAG.visualize")

    def __repr__(self):
        return f"CompiledDAG({self._dag_id})"


class CompiledDAGRef:
    """The result of one compiled execution (mirrors Ray's ``CompiledDAGRef``): ``ray.get``
    or :meth:`get` it once; it cannot be copied, pickled or passed to a task."""

    def __init__(self, dag, execution_index, ref, channel_index=None):
        self._dag = dag
        self._execution_index = execution_index
        self._channel_index = channel_index
        self._ref = ref
        self._ray_get_called = False

    def __str__(self):
        return (f"CompiledDAGRef({self._dag.get_id()}, execution_index={self._execution_index}, "
                f"channel_index={self._channel_index})")

    __repr__ = __str__

    def __copy__(self):
        raise ValueError("CompiledDAGRef cannot be copied.")

    def __deepcopy__(self, memo):
        raise ValueError("CompiledDAGRef cannot be deep copied.")

    def __reduce__(self):
        raise ValueError("CompiledDAGRef cannot be pickled.")

    def get(self, timeout=None):
        """The result, waiting at most ``timeout`` seconds (None: ``DAGContext.get_timeout``
        as the graph was compiled; -1: forever). Raises ``ValueError`` the second time,
        ``RayChannelTimeoutError`` when the wait runs out, else what ``ray.get`` raises."""
        if self._ray_get_called:
            raise ValueError("ray.get() can only be called once on a CompiledDAGRef, and it was "
                             "already called.")
        self._ray_get_called = True  # as Ray: a get that timed out counts too
        limit = self._dag._get_timeout if timeout is None else timeout
        try:
            value = self._dag._fetch(self._execution_index, self._channel_index, self._ref,
                                     None if limit is not None and limit < 0 else limit)
        except GetTimeoutError:
            raise RayChannelTimeoutError(self._dag._timeout_message()) from None
        self._ref = None
        return value

    def __del__(self):
        if not self._ray_get_called:
            _drop(self._dag, self._execution_index, self._channel_index)


def _drop(dag, execution_index, channel_index):
    """A result of ``dag`` dropped unread (a ref's ``__del__``): the graph lets it go, as Ray's
    does (``_delete_execution_results``), so that its place can be taken again."""
    channels = getattr(dag, "_channels", None)
    if channels is not None and not dag.is_teardown:
        channels.drop(execution_index, channel_index or 0)


def _get_one(ref, timeout):
    """``ray.get(ref, timeout=timeout)`` of one execution's ObjectRef (``timeout``: seconds,
    None: forever); raises what ``ray.get`` raises."""
    core = _ensure_core()
    with translated:
        return core.get([ref._id], timeout)[0]


class CompiledDAGFuture:
    """The awaitable result of one ``execute_async`` (mirrors Ray's ``CompiledDAGFuture``):
    await it once."""

    def __init__(self, dag, execution_index, ref, channel_index=None):
        self._dag = dag
        self._execution_index = execution_index
        self._channel_index = channel_index
        self._ref = ref
        self._awaited = False

    def __await__(self):
        if self._awaited:
            raise ValueError("CompiledDAGFuture can only be awaited upon once, and it has "
                             "already been awaited upon.")
        self._awaited = True
        ref, self._ref = self._ref, None
        if self._dag._channels is None:
            return asyncio.wrap_future(ref.future()).__await__()
        fetch = functools.partial(self._dag._fetch, self._execution_index, self._channel_index, None, None)
        return asyncio.get_running_loop().run_in_executor(None, fetch).__await__()

    def __del__(self):
        if not self._awaited:
            _drop(self._dag, self._execution_index, self._channel_index)


NOT_COMPILED = object()


def get_compiled_refs(object_refs, timeout):
    """``ray.get`` of a CompiledDAGRef or a list of them; :data:`NOT_COMPILED` when
    ``object_refs`` holds none (the caller reports its own type error then)."""
    if isinstance(object_refs, CompiledDAGRef):
        return object_refs.get(timeout=timeout)
    if isinstance(object_refs, list) and any(isinstance(r, CompiledDAGRef) for r in object_refs):
        if not all(isinstance(r, CompiledDAGRef) for r in object_refs):
            raise ValueError("Invalid type of object refs. 'object_refs' must be a list of "
                             "CompiledDAGRefs if there is any CompiledDAGRef within it. ")
        return [r.get(timeout=timeout) for r in object_refs]
    return NOT_COMPILED
