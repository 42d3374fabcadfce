"""What RL frameworks import from Ray's implementation modules and internals is either served or a
gap whose error says what to do; the scan of such code leaves nothing `unknown`."""
import re
import textwrap

from ray_adapter.scan import scan_file

from conftest import REPO, run_code

#: Ray's INFO line of ray.init on stderr.
_INIT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\tINFO worker\.py:\d+ -- Started a local Ray instance\.")

FIXTURE = REPO / "tests" / "scan_fixtures" / "frameworks.py"


def test_scan_of_framework_shapes_has_no_unknown():
    findings, errors = scan_file(str(FIXTURE))
    assert not errors
    unknown = [(f.line, f.symbol + f.detail) for f in findings if f.status == "unknown"]
    assert not unknown, unknown
    by_symbol = {f.symbol: f for f in findings}
    for served in ("ray.util.state.api", "ray.util.collective.collective", "ray._private.services.get_node_ip_address",
                   "ray._private.runtime_env.constants.RAY_JOB_CONFIG_JSON_ENV_VAR"):
        assert by_symbol[served].status == "supported", served
    # A dict literal passed as **opts to an actor class defined elsewhere: its keys are actor
    # options (max_restarts is not a task option).
    assert by_symbol["actor.max_restarts"].status == "supported"
    for gap in ("ray._private.accelerators", "ray._private.runtime_env.nsight"):
        assert by_symbol[gap].status == "gap" and "instead" in by_symbol[gap].reason, gap


def test_a_non_literal_runtime_env_field_is_judged_by_its_name(tmp_path):
    source = tmp_path / "envs.py"
    source.write_text(textwrap.dedent("""\
        import ray

        @ray.remote(runtime_env={"conda": ENV_NAME, "env_vars": ENV, "pip": None})
        def f():
            pass
        """))
    findings, _ = scan_file(str(source))
    status = {f.detail: f.status for f in findings if f.symbol == "task.runtime_env"}
    # conda set to an expression is a gap (was: read as None, "supported").
    assert status == {'["conda"]': "gap", '["env_vars"]': "supported", '["pip"]': "supported"}


def test_the_modules_frameworks_import_work_in_workers():
    out = run_code(textwrap.dedent("""\
        import ray
        from ray.util.state import api
        from ray.util.collective import collective
        ray.init(num_cpus=2)

        @ray.remote
        class A:
            def nodes(self):
                return [n.state for n in api.list_nodes()]

        a = A.remote()
        print(ray.get(a.nodes.remote()), api.list_nodes is ray.util.state.list_nodes)
        print(len(api.list_actors(filters=[("state", "=", "ALIVE")])))
        print(collective.broadcast is ray.util.collective.broadcast)
        try:
            api.StateApiClient
        except AttributeError as e:
            print(type(e).__name__, "list_actors()" in str(e))
        for module in ("ray._private.accelerators", "ray._private.runtime_env.nsight"):
            try:
                __import__(module)
            except ImportError as e:
                print(isinstance(e, ModuleNotFoundError), "instead" in str(e))
        ray.shutdown()
        """))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [
        "['ALIVE'] True", "1", "True", "RayAdapterGapError True",
        "True True", "True True"]


PARTIAL_PROGRAM = textwrap.dedent("""\
    import ray
    ray.init(num_cpus=2, object_store_memory=10**8)

    @ray.remote
    class A:
        def ping(self):
            return 1

    a = A.options(lifetime="detached", name="a").remote()
    b = A.options(lifetime="detached", name="b").remote()
    print(ray.get([a.ping.remote(), b.ping.remote()]))
    ray.kill(a)
    ray.kill(b)
    ray.shutdown()
    """)


def test_partial_options_are_quiet_as_in_ray_unless_asked():
    # Ray prints nothing about these options; a correct program must not get a warning per
    # partial option on its stderr. RAY_ADAPTER_WARN_PARTIAL=1 says each once per process.
    quiet = run_code(PARTIAL_PROGRAM)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stdout == "[1, 1]\n"
    assert "ray-adapter" not in quiet.stderr and "partially supported" not in quiet.stderr, quiet.stderr
    loud = run_code(PARTIAL_PROGRAM, env={"RAY_ADAPTER_WARN_PARTIAL": "1"})
    assert loud.returncode == 0, loud.stderr[-3000:]
    for option in ("'lifetime'", "'object_store_memory'"):
        assert loud.stderr.count(f"option {option} is partially supported") == 1, (option, loud.stderr)


def test_worker_output_is_prefixed_and_coloured_as_by_ray():
    # Measured under Ray 2.60 (stdout and stderr redirected to files, not a terminal): each
    # forwarded line is "\x1b[36m(<task or actor> pid=N)\x1b[0m text", stdout to stdout and
    # stderr to stderr; RAY_COLOR_PREFIX=0 leaves the colour out.
    code = textwrap.dedent("""\
        import sys
        import ray
        ray.init(num_cpus=2)

        @ray.remote
        def f():
            print("task says")
            print("task err", file=sys.stderr)

        @ray.remote
        class Named:
            def __repr__(self):
                return "Named(7)"

            def hello(self):
                print("named hello")

        ray.get(f.remote())
        ray.get(Named.remote().hello.remote())
        ray.shutdown()
        """)
    pid = re.compile(r"pid=\d+")
    out = run_code(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert pid.sub("pid=N", out.stdout).splitlines() == [
        "\x1b[36m(f pid=N)\x1b[0m task says", "\x1b[36m(Named(7) pid=N)\x1b[0m named hello"]
    # (Ray's ray.init logs its INFO line there too: "... INFO worker.py:N -- Started a local Ray instance.")
    assert [line for line in pid.sub("pid=N", out.stderr).splitlines() if not _INIT_LINE.fullmatch(line)] == [
        "\x1b[36m(f pid=N)\x1b[0m task err"]
    plain = run_code(code, env={"RAY_COLOR_PREFIX": "0"})
    assert pid.sub("pid=N", plain.stdout).splitlines() == ["(f pid=N) task says", "(Named(7) pid=N) named hello"]
