"""What a compiled graph runs where: :func:`plan_graph` turns a checked actor graph into one
:class:`ActorPlan` per actor (its method nodes in graph order, where each argument comes
from, where each result goes) and the pipes between them (:mod:`ray_adapter.core.pipes`).

Pipes: ``("in", actor)`` carries each execution's input to an actor that reads it;
``(producer, consumer)`` carries the results of the producer actor's nodes that the consumer
actor's nodes take (one pipe per pair of actors, each frame tagged with its node's index, so
a consumer never waits on one pipe while the frame it needs sits behind another);
``(producer, "out")`` carries the graph's outputs to the driver. Each pipe has one writer.

A graph this plan cannot carry -- an ObjectRef bound as an argument, a method node with
``.options(...)`` -- gives None: the graph runs on the classic path instead, with the same
results (the compat matrix says so). Nested nodes and outputs that are not actor methods the
compiler has refused before (as Ray's does).
"""
from ray_adapter.ray._private.object_refs import ObjectRef
from ray_adapter.ray.dag.constants import PARENT_CLASS_NODE_KEY
from ray_adapter.ray.dag._graph_values import is_node, topological, walk

#: Argument sources: ``(CONST, value)``, ``(INPUT,)``, ``(ATTRIBUTE, key, accessor)``,
#: ``(NODE, index)``.
CONST, INPUT, ATTRIBUTE, NODE = range(4)
DRIVER = "out"


class ActorPlan:
    """What one actor runs per execution (pickled to it once, at compile time).

    ``steps``: ``(index, method name, arg sources, kwarg sources, pipe names its result goes
    to)`` in graph order; ``input_pipe``: the name of its input pipe or None; ``sources``:
    node index -> the pipe its result comes on, for the nodes of other actors it takes;
    ``paths``: pipe name -> FIFO path, and ``proof`` the driver's
    :meth:`~ray_adapter.core.pipes.PipeDir.proof`, both set by the driver before sending."""

    def __init__(self, actor_id, class_name):
        self.actor_id = actor_id
        self.class_name = class_name
        self.steps = []
        self.input_pipe = None
        self.sources = {}
        self.paths = {}
        self.proof = None

    def pipes(self):
        """``(names read, names written)``."""
        reads = set(self.sources.values())
        if self.input_pipe is not None:
            reads.add(self.input_pipe)
        writes = {name for step in self.steps for name in step[4]}
        return sorted(reads, key=repr), sorted(writes, key=repr)


class GraphPlan:
    """The plans of a graph: ``actors`` (actor id -> :class:`ActorPlan`), ``handles`` (actor
    id -> handle), ``outputs`` (the output node indexes, in the graph's output order),
    ``output_pipes`` (node index -> its pipe) and ``input_pipes`` (pipe names the driver
    writes each execution's input to)."""

    def __init__(self):
        self.actors = {}
        self.handles = {}
        self.outputs = []
        self.output_pipes = {}
        self.input_pipes = []

    def pipe_names(self):
        names = set(self.input_pipes) | set(self.output_pipes.values())
        for plan in self.actors.values():
            names.update(plan.pipes()[1])
        return sorted(names, key=repr)


def _source(value, index_of):
    """The source of one bound argument, or None when the plan cannot carry it."""
    if is_node(value):
        role = value._compile_role
        if role == "input":
            return (INPUT,)
        if role == "input_attribute":
            other = value.get_other_args_to_resolve()
            return (ATTRIBUTE, other["key"], other["accessor_method"])
        if role == "method":
            return (NODE, index_of[id(value)])
        return None
    found = []
    walk(value, found)
    if found or isinstance(value, ObjectRef):
        return None  # a ref to resolve: the classic path does that
    return (CONST, value)


def plan_graph(root):
    """The :class:`GraphPlan` of a graph that ``build_compiled_dag`` checked, or None when
    the channel path cannot carry it (see the module's docstring)."""
    order = topological(root)
    methods = [node for node in order if node._compile_role == "method"]
    index_of = {id(node): i for i, node in enumerate(methods)}
    owner = {}
    graph = GraphPlan()
    for i, node in enumerate(methods):
        if node.get_options():
            return None
        handle = node.get_other_args_to_resolve()[PARENT_CLASS_NODE_KEY]
        actor_id = handle._ray_actor_id
        owner[i] = actor_id
        graph.handles[actor_id] = handle
        plan = graph.actors.get(actor_id)
        if plan is None:
            plan = graph.actors[actor_id] = ActorPlan(actor_id, handle._ray_class_name)
        args = [_source(v, index_of) for v in node.get_args()]
        kwargs = {k: _source(v, index_of) for k, v in node.get_kwargs().items()}
        if None in args or None in kwargs.values():
            return None
        for src in args + list(kwargs.values()):
            if src[0] in (INPUT, ATTRIBUTE) and plan.input_pipe is None:
                plan.input_pipe = ("in", actor_id)
                graph.input_pipes.append(plan.input_pipe)
            elif src[0] == NODE and owner[src[1]] != actor_id:
                plan.sources[src[1]] = (owner[src[1]], actor_id)
        plan.steps.append((i, node._method_name, args, kwargs, []))
    outputs = root.get_args() if root._compile_role == "outputs" else [root]
    if not outputs or any(not is_node(n) or n._compile_role != "method" for n in outputs):
        return None
    graph.outputs = [index_of[id(n)] for n in outputs]
    sends = {}  # node index -> the pipes its result goes to
    for plan in graph.actors.values():
        for index, pipe in plan.sources.items():
            sends.setdefault(index, set()).add(pipe)
    for index in graph.outputs:
        graph.output_pipes[index] = (owner[index], DRIVER)
        sends.setdefault(index, set()).add(graph.output_pipes[index])
    for plan in graph.actors.values():
        for step in plan.steps:
            step[4].extend(sorted(sends.get(step[0], ()), key=repr))
    return graph
